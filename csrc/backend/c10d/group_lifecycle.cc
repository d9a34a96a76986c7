// group_lifecycle.cc — the end of a purlin group: shutdown() and abort().
//
// NOTE [shutdown and abort]
// torch ends a group through its backend: dist.destroy_process_group() calls
// Backend::shutdown() on every group it destroys, and torch's
// _abort_process_group() (how fault-tolerance code unblocks a stuck job) calls
// Backend::abort(), from any thread, possibly while the group's op waits.
// c10d's defaults do nothing, which left two faults: the NCCL fallback a group
// made was never shut down (ProcessGroupNCCL's destructor then warns that
// destroy_process_group() "was not called" and aborts its communicators), and
// a group kept alive by a reference ran collectives after it was destroyed.
//   shutdown()  The group refuses every later op (check_open: "the group was
//               shut down"), forwards shutdown() to each fallback backend it
//               made (NCCL finishes its work and frees its communicators), and
//               releases its own state: the CPU engine's shared-memory
//               mappings and the CUDA group, whose destructor first waits for
//               the stream of this rank's last native collective. That is the
//               teardown the backend's destructor ran at destroy_process_group
//               before (torch drops its last reference there), now also when
//               user code still holds the group. Releasing an engine ends its
//               health watch, and its peers learn that this rank shut the
//               group down (NOTE [group health]). Idempotent. Like
//               destroy_process_group, it must not race an op of the group on
//               another thread.
//   abort()     Never blocks on purlin's side and frees nothing (an op may be
//               inside the engines on another thread): the group refuses every
//               later op ("the group was aborted"), the abort request
//               (abort_signal.h) ends every host wait of its shared-memory
//               Atoms within about a millisecond (CPU collectives, the CUDA
//               all_to_all split exchange and pool agreement: AbortedError
//               names the op, rank, phase and the rank waited for) and every
//               device wait already queued, a kernel's or a copy-engine
//               stream's, within a few milliseconds (NOTE [device abort] in
//               atom/cuda/signal_pad.h: the work's error names the abort and
//               the rank waited for; its outputs are undefined), and abort() is
//               forwarded to each fallback backend (NCCL aborts its
//               communicators). The peers learn it within about a second and
//               their waits end too, naming this rank (NOTE [group health]: a
//               short lock, after the waits here were told). The engines are
//               released when the backend is destroyed; a shutdown() after
//               abort() only forwards.
// A group that broke without abort() (a rank found it unusable, a peer is
// gone: NOTE [group health]) stays open: its collectives raise why it broke,
// and shutdown() releases it as usual.
// Both forward to every fallback even when one throws, then rethrow the first
// error.
#include <exception>

#include "backend/c10d/group_hosts.h"
#include "backend/c10d/purlin_backend.h"
#include "backend/cpu/cpu_engine.h"
#include "backend/cuda/cuda_engine.h"

namespace purlin::backend {

void PurlinBackend::shutdown() {
  int was = kOpen;
  const bool first = closed_.compare_exchange_strong(was, kShutDown);
  if (!first && was == kShutDown) return;
  std::exception_ptr err;
  try {
    fallback_.shutdown_all();
  } catch (...) {
    err = std::current_exception();
  }
  try {
    hosts_->shutdown();  // NOTE [hierarchical collectives]: the subgroups within and across hosts
  } catch (...) {
    if (!err) err = std::current_exception();
  }
  if (first) {  // not after abort(): an aborted op may still be inside an engine
    cpu_.reset();
    cuda_.reset();  // PURLIN-CUDA hook: waits for this rank's last native stream
  }
  if (err) std::rethrow_exception(err);
}

void PurlinBackend::abort() {
  health_.abort();  // host waits re-check its flag, device waits read its words (NOTE [device abort]); then the peers learn it
  closed_.store(kAborted, std::memory_order_relaxed);
  std::exception_ptr err;
  try {
    hosts_->abort();  // NOTE [hierarchical collectives]: ends the waits of the subgroups too
  } catch (...) {
    err = std::current_exception();
  }
  fallback_.abort_all();
  if (err) std::rethrow_exception(err);
}

void PurlinBackend::throw_closed(const char* op) const {
  const bool aborted = closed_.load(std::memory_order_relaxed) == kAborted;
  TORCH_CHECK(false, error_prefix(op, getRank()), "the group was ",
              aborted ? "aborted (abort(), e.g. torch's _abort_process_group)"
                      : "shut down (dist.destroy_process_group or shutdown())",
              "; its collectives cannot run any more: make a new group");
}

}  // namespace purlin::backend
