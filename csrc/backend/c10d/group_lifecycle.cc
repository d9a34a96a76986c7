// group_lifecycle.cc — the end of a purlin group: shutdown() and abort().
//
// NOTE [shutdown and abort]
// torch ends a group through Backend::shutdown() (destroy_process_group) and
// Backend::abort() (_abort_process_group, from any thread, possibly while an op
// waits); c10d's defaults do nothing, which left the NCCL fallback un-shut-down
// and let a still-referenced group run collectives after its destroy.
//   shutdown()  refuses every later op, forwards shutdown() to each fallback,
//               and releases the engines (the CUDA group first waits for this
//               rank's last native collective); peers learn this rank left
//               (NOTE [group health]). Idempotent; must not race an op.
//   abort()     never blocks and frees nothing (an op may be inside the engines):
//               refuses every later op, ends every host wait within about a
//               millisecond and every queued device wait within milliseconds
//               (NOTE [device abort]), forwards abort(); peers learn it within
//               about a second. The engines go with the backend.
// A group that broke without abort() stays open: its collectives raise why it
// broke, and shutdown() releases it. Both forward to every fallback even when
// one throws, then rethrow the first error.
// Details: docs/DESIGN.md, "Shutdown and abort".
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
