// symmetric_pool.cc — the symmetric pool's setup, agreement and bookkeeping.
#include "atom/cuda/host/symmetric_pool.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include <cuda_runtime.h>

#include "atom/cuda/host/cuda_check.h"
#include "atom/cuda/host/ipc_peers.h"

namespace purlin::atom::cuda {

namespace {

int64_t round_up(int64_t v) { return (v + SymmetricPool::kAlign - 1) / SymmetricPool::kAlign * SymmetricPool::kAlign; }

}  // namespace

std::shared_ptr<SymmetricPool> SymmetricPool::create(int rank, int world, int device, int64_t bytes,
                                                     uint64_t* pad_table, const AllGather& exchange,
                                                     std::string* why) {
  std::shared_ptr<SymmetricPool> pool(new SymmetricPool());
  pool->rank_ = rank;
  pool->device_ = device;
  pool->bytes_ = round_up(bytes);
  pool->blocks_ = PoolBlocks(pool->bytes_, kAlign);
  DeviceScope scope(device);
  std::string local;
  cudaIpcMemHandle_t handle;
  if (pool->bytes_ <= 0) local = "TORCH_PURLIN_CUDA_POOL_BYTES is 0";
  if (local.empty()) {
    const cudaError_t e = cudaMalloc(&pool->self_, static_cast<size_t>(pool->bytes_));
    if (e != cudaSuccess) local = cuda_error_text(e, "cudaMalloc of the symmetric pool (TORCH_PURLIN_CUDA_POOL_BYTES)");
    else if (cudaIpcGetMemHandle(&handle, pool->self_) != cudaSuccess) local = "cudaIpcGetMemHandle of the symmetric pool failed";
    cudaGetLastError();
  }
  const std::vector<std::string> handles =
      exchange("pool/handle", local.empty() ? handle_answer(handle) : failure_answer(local));
  *why = first_failure(handles, 'H');
  if (why->empty()) {
    std::vector<uint64_t> table;
    local = open_ipc_peers(handles, rank, pool->self_, "pool", &pool->peers_, &table);
    if (local.empty()) local = write_device_table(pad_table, table, "pool table");
    *why = first_failure(exchange("pool/opened", local.empty() ? "O" : failure_answer(local)), 'O');
  }
  if (!why->empty()) {
    pool->release();
    return nullptr;
  }
  return pool;
}

namespace {

// The caching allocator's guard: event calls made here while another thread
// captures a CUDA graph in global mode must not invalidate that capture.
class RelaxedCapture {
 public:
  RelaxedCapture() { cudaThreadExchangeStreamCaptureMode(&mode_); }
  ~RelaxedCapture() { cudaThreadExchangeStreamCaptureMode(&mode_); }
  RelaxedCapture(const RelaxedCapture&) = delete;
  RelaxedCapture& operator=(const RelaxedCapture&) = delete;

 private:
  cudaStreamCaptureMode mode_ = cudaStreamCaptureModeRelaxed;
};

// PoolBlocks::Done for tokens that hold a cudaEvent_t. An error other than
// "not ready" (a context being torn down) ends the wait too.
bool event_done(const PoolBlocks::Token& token, bool wait) {
  const cudaEvent_t e = static_cast<cudaEvent_t>(token.get());
  const cudaError_t st = wait ? cudaEventSynchronize(e) : cudaEventQuery(e);
  cudaGetLastError();
  return st != cudaErrorNotReady;
}

}  // namespace

int64_t SymmetricPool::allocate(int64_t nbytes, const AllGather& exchange, cudaStream_t stream) {
  nbytes = std::max<int64_t>(kAlign, round_up(nbytes));
  const uint64_t call = ++seq_;
  int64_t floor = 0;
  for (int attempt = 0; attempt < 64; ++attempt) {
    int64_t mine;
    {
      std::lock_guard<std::mutex> g(mu_);
      RelaxedCapture relaxed;
      blocks_.reap(false, event_done);
      mine = blocks_.first_fit(floor, nbytes, stream);
      if (mine < 0 && blocks_.any_freed()) {  // NOTE [pool streams]: wait for freed blocks before saying "full"
        blocks_.reap(true, event_done);
        mine = blocks_.first_fit(floor, nbytes, stream);
      }
    }
    const std::vector<std::string> all =
        exchange("pool/alloc/" + std::to_string(call) + "/" + std::to_string(attempt) + "/" + std::to_string(nbytes) + "B",
                 std::to_string(mine));
    int64_t lo = INT64_MAX, hi = -1;
    bool full = false;
    for (const std::string& s : all) {
      const int64_t v = std::stoll(s);
      full |= v < 0;
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
    if (full)
      throw PoolFull("purlin: the symmetric pool (" + std::to_string(bytes_) + " bytes, TORCH_PURLIN_CUDA_POOL_BYTES) has no room for " +
                               std::to_string(nbytes) + " more bytes on some rank");
    if (lo == hi) {  // free on every rank (a local free() since only widened it)
      std::lock_guard<std::mutex> g(mu_);
      blocks_.take(lo, nbytes, stream);
      return lo;
    }
    floor = hi;
  }
  throw std::runtime_error("purlin: ranks could not agree on a place in the symmetric pool (blocks freed in different orders)");
}

int64_t SymmetricPool::allocate_local(int64_t nbytes, cudaStream_t stream) {
  nbytes = std::max<int64_t>(kAlign, round_up(nbytes));
  std::lock_guard<std::mutex> g(mu_);
  DeviceScope scope(device_);
  RelaxedCapture relaxed;
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &capturing) != cudaSuccess) capturing = cudaStreamCaptureStatusNone;
  cudaGetLastError();
  // NOTE [local placement]: no reap (whether an event completed is timing); a capture borrows no other stream's block.
  const int64_t at = blocks_.local_fit(nbytes, stream, capturing == cudaStreamCaptureStatusNone);
  if (at < 0)
    throw PoolFull("purlin: the symmetric pool (" + std::to_string(bytes_) + " bytes, TORCH_PURLIN_CUDA_POOL_BYTES) has no room for " +
                   std::to_string(nbytes) + " more bytes on this rank");
  for (const PoolBlocks::Token& t : blocks_.waits_for(at, nbytes, stream)) {
    const cudaEvent_t e = static_cast<cudaEvent_t>(t.get());
    if (cudaStreamWaitEvent(stream, e, 0) != cudaSuccess) {  // not expected; the host wait orders it too
      cudaGetLastError();
      cudaEventSynchronize(e);
      cudaGetLastError();
    }
  }
  blocks_.take(at, nbytes, stream);
  return at;
}

void SymmetricPool::free(int64_t offset) {
  std::lock_guard<std::mutex> g(mu_);
  PoolBlocks::Stream stream = nullptr;
  if (!blocks_.stream_of(offset, &stream)) return;
  const cudaStream_t st = const_cast<cudaStream_t>(static_cast<const CUstream_st*>(stream));
  DeviceScope scope(device_);
  RelaxedCapture relaxed;
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(st, &capturing) != cudaSuccess) capturing = cudaStreamCaptureStatusNone;
  cudaGetLastError();
  if (capturing != cudaStreamCaptureStatusNone) {  // NOTE [pool streams]: back for its own stream only
    blocks_.retire(offset, nullptr);
    return;
  }
  cudaEvent_t e = nullptr;
  if (cudaEventCreateWithFlags(&e, cudaEventDisableTiming) != cudaSuccess) {
    cudaGetLastError();
    blocks_.retire(offset, nullptr);
    return;
  }
  PoolBlocks::Token token(e, [](void* ev) {
    cudaEventDestroy(static_cast<cudaEvent_t>(ev));
    cudaGetLastError();
  });
  if (cudaEventRecord(e, st) != cudaSuccess) {
    // The stream (or the context) is gone: nothing of it to wait for but the device.
    cudaGetLastError();
    cudaDeviceSynchronize();
    cudaGetLastError();
    blocks_.drop(offset);
    return;
  }
  blocks_.retire(offset, std::move(token));
}

int64_t SymmetricPool::offset_of(const void* p, int64_t n) const {
  const char* c = static_cast<const char*>(p);
  if (!self_ || c < base() || c + n > base() + bytes_) return -1;
  std::lock_guard<std::mutex> g(mu_);
  return blocks_.live_offset(c - base(), n);
}

void SymmetricPool::release() {
  DeviceScope scope(device_);
  blocks_.clear();  // the freed blocks' events
  close_ipc_peers(&peers_);
  if (self_) cudaFree(self_);
  self_ = nullptr;
  cudaGetLastError();
}

// NOTE: like the workspace, peers must be done with this rank's pool before
// it is freed (destroy the group after the last collective completed).
SymmetricPool::~SymmetricPool() { release(); }

}  // namespace purlin::atom::cuda
