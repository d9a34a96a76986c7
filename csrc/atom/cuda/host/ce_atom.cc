// ce_atom.cc — CopyEngineAtom: checks, the Arrive/plan/Leave sequence, and
// the HostAtom operations as stream work (NOTEs in ce_atom.h).
#include "atom/cuda/host/ce_atom.h"

#include <stdexcept>
#include <utility>

#include "atom/cuda/host/cuda_check.h"

namespace purlin::atom::cuda {

namespace {

static_assert(static_cast<int>(atom::FlagKind::Arrive) == kCeArrive &&
                  static_cast<int>(atom::FlagKind::Staged) == kCeStaged &&
                  static_cast<int>(atom::FlagKind::Consumed) == kCeConsumed,
              "snac/atom flag kinds map onto CeFlag by number");

const char* const kArrivePhase = "copy-engine arrive: wait for the peer to finish its previous collective";
const char* const kLeavePhase = "copy-engine leave: wait for the peer to finish reading this rank's workspace";

// "" if `c` is a call this Atom can run; checked before anything is queued.
std::string check_call(const CeCall& c) {
  if (c.timeout_ns == 0) return "no timeout";
  return c.plan_refusal;
}

}  // namespace

CopyEngineAtom::CopyEngineAtom(std::shared_ptr<SymmetricWorkspace> ws) : ws_(std::move(ws)) {
  if (!ws_) {
    unavailable_ = "no CUDA-IPC workspace";
    return;
  }
  std::string why;
  mem_ = StreamMemOps::get(ws_->device(), &why);
  if (!mem_) {
    unavailable_ = "no stream memory operations: " + why;
    return;
  }
  try {
    watchdog_ = std::make_unique<CeWatchdog>(ws_->device(), ws_->rank(), ws_->self(), ws_->layout(), ws_->error_host());
  } catch (const std::exception& e) {
    unavailable_ = e.what();
    mem_ = nullptr;
  }
}

CopyEngineAtom::~CopyEngineAtom() { watchdog_.reset(); }

std::string CopyEngineAtom::refusal(cudaStream_t stream) const {
  if (!unavailable_.empty()) return "the copy-engine path is unavailable: " + unavailable_;
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  const cudaError_t e = cudaStreamIsCapturing(stream, &st);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return cuda_error_text(e, "cudaStreamIsCapturing");
  }
  if (st != cudaStreamCaptureStatusNone)
    return "the stream is capturing a CUDA graph (copy-engine epochs live on the host)";
  return "";
}

std::string CopyEngineAtom::enqueue(const CeCall& c, const std::function<void(uint64_t step_base)>& run_plan) {
  const std::string prefix = std::string("purlin ") + c.op_name + " on rank " + std::to_string(rank()) + ": ";
  if (!broken_.empty()) return broken_;
  std::string why = refusal(c.stream);
  if (why.empty() && (watchdog_->fired() || ws_->error_host()->status != 0))
    why = "the group is unusable after a timeout";
  if (why.empty()) why = check_call(c);
  if (!why.empty()) return prefix + "copy-engine path: " + why;
  if (!c.moves) return "";  // nothing moves on any rank (the Spec decides)

  DeviceScope scope(ws_->device());
  stream_ = c.stream;
  in_call_ = true;
  watch_ = CeWatch{};
  watch_.op_name = c.op_name;
  watch_.timeout_ns = c.timeout_ns;
  watch_.first_wait = wait_id_ + 1;
  const uint64_t n = collectives_ + 1;
  try {
    barrier(kCeArrive, n, kArrivePhase);
    base_ = epoch_;
    run_plan(epoch_);  // the plan's copies, signals and waits, through this Atom
    base_ = 0;
    barrier(kCeLeave, n, kLeavePhase);
    collectives_ = n;
    epoch_ += c.steps;
    watchdog_->watch(stream_, std::move(watch_));
  } catch (const std::exception& e) {
    broken_ = prefix + "copy-engine path failed while enqueuing; the group is unusable: " + e.what();
    try {  // whatever was queued must still be bounded
      if (!watch_.waits.empty()) watchdog_->watch(stream_, std::move(watch_));
    } catch (const std::exception&) {
    }
    in_call_ = false;
    return broken_;
  }
  in_call_ = false;
  return "";
}

// ---- HostAtom, as stream work ---------------------------------------------------

std::byte* CopyEngineAtom::workspace(int rank) {
  return static_cast<std::byte*>(ws_->buffer(rank)) + ws_->layout().pad_bytes();
}

void CopyEngineAtom::copy(void* dst, const void* src, size_t bytes) {
  if (!in_call_) throw std::logic_error("purlin: CopyEngineAtom::copy outside enqueue()");
  if (bytes == 0) return;
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_), "cudaMemcpyAsync (copy-engine Atom)");
}

void CopyEngineAtom::reduce(void*, const void* const*, const double*, int, int64_t, DType, RedOp) {
  throw std::logic_error("purlin: the copy-engine Atom does not reduce (copy specs only)");
}

void CopyEngineAtom::signal(int peer, atom::FlagKind kind, uint64_t value) {
  signal_flag(peer, static_cast<int>(kind), value);
}

void CopyEngineAtom::wait(int peer, atom::FlagKind kind, uint64_t value, const WaitSite& site) {
  wait_flag(peer, static_cast<int>(kind), value, base_, site.phase);
}

uint64_t* CopyEngineAtom::pad_word(int owner, int kind, int from) const {
  return static_cast<uint64_t*>(ws_->buffer(owner)) + ws_->layout().ce_flag(kind, from);
}

void CopyEngineAtom::signal_flag(int peer, int kind, uint64_t value) {
  if (!in_call_) throw std::logic_error("purlin: CopyEngineAtom::signal outside enqueue()");
  mem_->write_release(stream_, pad_word(peer, kind, rank()), value, "copy-engine signal");
}

// The progress write goes first (NOTE [copy-engine watchdog]): once the
// stream executes it, the watchdog knows the stream is at this wait.
void CopyEngineAtom::wait_flag(int peer, int kind, uint64_t value, uint64_t base, const char* phase) {
  if (!in_call_) throw std::logic_error("purlin: CopyEngineAtom::wait outside enqueue()");
  const uint64_t id = ++wait_id_;
  watch_.waits.push_back(CeWait{peer, kind, value, base, phase});
  mem_->write_release(stream_, watchdog_->progress_device(), id, "copy-engine progress");
  mem_->wait_acquire(stream_, pad_word(rank(), kind, peer), value, "copy-engine wait");
}

void CopyEngineAtom::barrier(int kind, uint64_t n, const char* phase) {
  for (int p = 0; p < world(); ++p)
    if (p != rank()) signal_flag(p, kind, n);
  for (int p = 0; p < world(); ++p)
    if (p != rank()) wait_flag(p, kind, n, 0, phase);
}

}  // namespace purlin::atom::cuda
