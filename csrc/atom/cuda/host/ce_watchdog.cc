// ce_watchdog.cc — the watchdog thread of the copy-engine Atom
// (NOTE [copy-engine watchdog] in the header).
#include "atom/cuda/host/ce_watchdog.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <sstream>
#include <stdexcept>

#include "atom/cuda/host/cuda_check.h"
#include "atom/cuda/interned_names.h"

namespace purlin::atom::cuda {

namespace {
constexpr auto kPoll = std::chrono::milliseconds(2);  // while collectives are in flight
// A released stream still in flight is released again this often: a slow
// (not dead) peer may have overwritten a released word with a smaller value.
constexpr auto kRerelease = std::chrono::milliseconds(100);
}  // namespace

const char* ce_flag_name(int kind) {
  switch (kind) {
    case kCeArrive: return "Arrive";
    case kCeStaged: return "Staged";
    case kCeConsumed: return "Consumed";
    case kCeLeave: return "Leave";
    default: return "?";
  }
}

std::string describe_copy_engine_timeout(const ErrorRecord& e, int64_t timeout_ms) {
  std::ostringstream os;
  os << "purlin " << interned_name(e.op_name) << " on rank " << e.rank << ": ";
  if (e.status == kRecordAborted)
    os << "the group was aborted (abort(), e.g. torch's _abort_process_group) " << (e.peer < 0 ? "" : "while ");
  else
    os << "timed out after " << timeout_ms << " ms ";
  if (e.peer < 0)  // e.g. an abort before the stream reached the collective's first wait
    os << "with the stream in none of the collective's waits (copy engine)";
  else
    os << "waiting for rank " << e.peer << " (copy engine: the stream waited for its " << ce_flag_name(e.kind)
       << " flag to reach step " << e.expected << ")";
  os << "; phase '" << interned_name(e.phase) << "'. The group is unusable: destroy it and create a new one.";
  return os.str();
}

CeWatchdog::CeWatchdog(int device, int rank, void* self, const PadLayout& layout, ErrorRecord* err_host)
    : device_(device), rank_(rank), pad_(static_cast<uint64_t*>(self)), layout_(layout), err_(err_host) {
  DeviceScope scope(device_);
  const size_t words = 2 + static_cast<size_t>(kCeFlags) * layout_.world;
  check(cudaHostAlloc(reinterpret_cast<void**>(&host_), words * sizeof(uint64_t),
                      cudaHostAllocMapped | cudaHostAllocPortable),
        "cudaHostAlloc of the copy-engine watchdog words");
  host_[0] = 0;
  host_[1] = 1;
  for (size_t i = 2; i < words; ++i) host_[i] = kReleased;
  try {
    check(cudaHostGetDevicePointer(reinterpret_cast<void**>(&progress_dev_), host_, 0), "cudaHostGetDevicePointer");
    int least = 0, greatest = 0;
    check(cudaDeviceGetStreamPriorityRange(&least, &greatest), "cudaDeviceGetStreamPriorityRange");
    check(cudaStreamCreateWithPriority(&release_, cudaStreamNonBlocking, greatest), "cudaStreamCreate");
  } catch (...) {
    cudaFreeHost(host_);
    throw;
  }
  thread_ = std::thread([this] { run(); });
}

CeWatchdog::~CeWatchdog() {
  {
    std::lock_guard<std::mutex> g(mu_);
    stop_ = true;
    stop_at_ = Clock::now();
  }
  cv_.notify_all();
  thread_.join();
  DeviceScope scope(device_);
  for (Entry& e : queue_) cudaEventDestroy(e.done);  // released once its work is done
  for (cudaEvent_t ev : free_events_) cudaEventDestroy(ev);
  const bool in_use = abandoned_ || (fired_ && cudaStreamQuery(release_) != cudaSuccess);
  cudaStreamDestroy(release_);
  if (!in_use) cudaFreeHost(host_);  // else a stuck stream may still write it: leaked on purpose
  cudaGetLastError();
}

bool CeWatchdog::fired() const {
  std::lock_guard<std::mutex> g(mu_);
  return fired_;
}

void CeWatchdog::watch(cudaStream_t stream, CeWatch w) {
  cudaEvent_t ev = nullptr;
  {
    std::lock_guard<std::mutex> g(mu_);
    if (!free_events_.empty()) {
      ev = free_events_.back();
      free_events_.pop_back();
    }
  }
  if (!ev) check(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cudaEventCreate");
  const cudaError_t e = cudaEventRecord(ev, stream);
  if (e != cudaSuccess) {
    cudaEventDestroy(ev);
    check(e, "cudaEventRecord after a copy-engine collective");
  }
  {
    std::lock_guard<std::mutex> g(mu_);
    Entry entry;
    entry.w = std::move(w);
    entry.done = ev;
    queue_.push_back(std::move(entry));
  }
  cv_.notify_all();
}

void CeWatchdog::run() {
  cudaSetDevice(device_);
  // Relaxed: another thread capturing a CUDA graph in global mode (torch's
  // default) must not make this thread's event queries fail (and break it).
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  cudaThreadExchangeStreamCaptureMode(&mode);
  const volatile uint64_t* progress = host_;
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    cv_.wait(lk, [this] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, nothing in flight
    Entry& e = queue_.front();
    const cudaError_t q = cudaEventQuery(e.done);
    if (q != cudaErrorNotReady) {  // done (or the context is gone: nothing left to watch)
      if (q != cudaSuccess) cudaGetLastError();
      free_events_.push_back(e.done);
      queue_.pop_front();
      continue;
    }
    const Clock::time_point now = Clock::now();
    const uint64_t p = *progress;
    if (p != e.seen) {  // the stream moved on to another wait
      e.seen = p;
      e.since = now;
      e.started = e.started || p >= e.w.first_wait;
    }
    if (!e.started && stop_) {
      e.started = true;  // draining: a collective that never started gets one timeout
      e.since = std::max(e.since, stop_at_);
    }
    const auto timeout = std::chrono::nanoseconds(e.w.timeout_ns);
    const bool aborted = err_->abort_requested != 0;  // NOTE [device abort]: at once, started or not
    if (!fired_ && (aborted || (e.started && e.w.timeout_ns > 0 && now - e.since > timeout))) {
      fire(e, p, now, aborted ? kRecordAborted : kRecordTimedOut);
    } else if (fired_ && now - released_at_ > kRerelease) {
      release();
      released_at_ = now;
    }
    if (fired_ && stop_ && now - std::max(fired_at_, stop_at_) > timeout) {
      abandoned_ = true;  // released but still stuck (e.g. behind work this rank never finishes)
      return;
    }
    cv_.wait_for(lk, kPoll);
  }
}

void CeWatchdog::fire(const Entry& e, uint64_t progress, Clock::time_point now, uint32_t status) {
  fired_ = true;
  fired_at_ = released_at_ = now;
  if (err_->status == 0) {
    CeWait pending;
    pending.phase = "copy-engine: between waits";
    if (progress >= e.w.first_wait && progress - e.w.first_wait < e.w.waits.size())
      pending = e.w.waits[progress - e.w.first_wait];
    err_->rank = rank_;
    err_->peer = pending.peer;
    err_->block = kCopyEngineBlock;
    err_->from_block = -1;
    err_->kind = pending.kind;
    err_->op_name = intern_name(e.w.op_name);
    err_->phase = intern_name(pending.phase);
    err_->expected = pending.value - pending.base;
    err_->seen = 0;  // not read back: the word lives in device memory the stuck stream is waiting on
    err_->base = pending.base;
    err_->waited_ns = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(now - e.since).count());
    std::atomic_thread_fence(std::memory_order_release);
    err_->status = status;  // written last (signal_pad.h)
  }
  release();
}

// Marks the pad broken (later kernels exit at once), then releases this
// rank's copy-engine waits. No synchronisation: the copies run on their own
// stream while the watchdog goes on polling.
void CeWatchdog::release() {
  cudaMemcpyAsync(pad_ + layout_.broken(), host_ + 1, sizeof(uint64_t), cudaMemcpyHostToDevice, release_);
  cudaMemcpyAsync(pad_ + layout_.ce_flag(0, 0), host_ + 2, sizeof(uint64_t) * kCeFlags * layout_.world,
                  cudaMemcpyHostToDevice, release_);
  cudaGetLastError();
}

}  // namespace purlin::atom::cuda
