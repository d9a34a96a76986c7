// ce_atom.h — the copy-engine Atom: a HostAtom (atom/atom.h) whose copy,
// signal and wait are ENQUEUED on a CUDA stream — cudaMemcpyAsync and stream
// memory operations (stream_memops.h) — so the CUDA engine runs a pure-copy
// SNAC plan on the GPUs' copy engines with the unchanged snac::execute(), as
// the CPU engine runs the CPU Atom: no kernel and no SM. Same plans as the
// plan kernel, another Atom. The engine checks that a plan suits this Atom
// (lowering/copy_engine_plan.h) and passes the verdict with the call.
//
//   copy      cudaMemcpyAsync device-to-device (a peer's workspace is its
//             CUDA-IPC mapping; unified addressing resolves it)
//   signal    RELEASE write of the value into the PEER's pad word
//             ce_flag(kind, this rank)       (NOTE [stream memop ordering])
//   wait      ACQUIRE wait of the stream until this rank's pad word
//             ce_flag(kind, peer) >= value; bounded by the watchdog
//             (NOTE [copy-engine watchdog], ce_watchdog.h)
//   reduce    not supported: throws std::logic_error (copy engines do not
//             compute; the engine sends only copy specs here)
//   meta      unused (no host arrival handshake): nullptr / 0 bytes
//
// NOTE [copy-engine epochs] The Staged/Consumed values of the plan are
//   host-held epochs: step_base advances by plan.steps per collective, and
//   Arrive/Leave carry the number of copy-engine collectives of the group.
//   All ranks run the same copy-engine collectives in the same order, so the
//   values agree. They live in their own pad words (ce_flag), apart from the
//   kernel's device-held epochs, so neither path disturbs the other's flags.
// NOTE [copy-engine barriers] One copy-engine collective on `stream` is
//     Arrive(n)  write ce_flag(Arrive, me) = n at every peer, wait until
//                every peer's ce_flag(Arrive, peer) here >= n
//     plan       the engine's snac::execute(plan) with step_base = the epoch
//     Leave(n)   the same with Leave
//   The workspace is shared with the plan kernel, whose reuse handshake
//   (Done, NOTE [device reuse]) uses device epochs this path does not touch.
//   Arrive is stream-ordered after each peer's previous work on the group
//   (kernel or copy engine), so when it passes, every peer has finished
//   reading this rank's workspace and it may be overwritten. Leave makes
//   the collective end only once every peer finished reading this rank's
//   workspace, so the next collective of either kind (a kernel does not
//   wait for copy-engine work of its peers) may write it at once.
// NOTE [copy-engine zero-copy] With peer_inputs (every rank's input in the
//   symmetric pool: NOTE [zero-copy]), the plan is a read_peer_inputs plan:
//   each rank copies straight from the peers' inputs (their pool blocks as
//   mapped here) into its output, a pull, so the waits need no flush of
//   remote writes (NOTE [stream memop ordering]); nothing is staged. The
//   engine checks every copy-engine call on the host first (NOTE
//   [copy-engine call check] in cuda_group_host_checks.cc), pool offsets included, so
//   ranks whose blocks lie at other offsets get an error, not wrong bytes.
// NOTE [copy-engine graphs] Host-held epochs cannot work in a CUDA graph: a
//   replay would repeat the captured values. refusal() declines a capturing
//   stream; the engine then runs the plan kernel instead.
//
// Torch-free. The caller (the CUDA engine) must take the same path (copy
// engine or kernel) for a collective on every rank.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <cuda_runtime.h>

#include "atom/atom.h"
#include "atom/cuda/host/ce_watchdog.h"
#include "atom/cuda/host/stream_memops.h"
#include "atom/cuda/host/symmetric_workspace.h"
#include "common/types.h"

namespace purlin::atom::cuda {

// One copy-engine collective.
struct CeCall {
  // Why the engine's plan does not suit this Atom ("" if it does: copies and
  // pulls only, NOTE [stream memop ordering]; lowering/copy_engine_plan.h).
  std::string plan_refusal;
  bool moves = true;                 // the plan has rounds (false: nothing to do on any rank)
  uint64_t steps = 0;                // the plan's steps: the epoch advances by them
  const char* op_name = "?";         // static string, e.g. "all_gather_into_tensor"
  uint64_t timeout_ns = 0;           // the group timeout (> 0)
  cudaStream_t stream = nullptr;     // where everything is enqueued
};

class CopyEngineAtom final : public HostAtom {
 public:
  // Never throws for lack of support: unavailable() then says why.
  explicit CopyEngineAtom(std::shared_ptr<SymmetricWorkspace> ws);
  ~CopyEngineAtom() override;  // drains the watchdog (bounded by the timeout)
  CopyEngineAtom(const CopyEngineAtom&) = delete;
  CopyEngineAtom& operator=(const CopyEngineAtom&) = delete;

  // "" when the driver and GPU support the path at all.
  const std::string& unavailable() const { return unavailable_; }
  // "" if enqueue() may take a collective on `stream` now, else why not
  // (unavailable, or the stream is capturing a CUDA graph). Not an error:
  // the engine runs the plan kernel instead.
  std::string refusal(cudaStream_t stream) const;
  // Enqueues one collective (NOTE [copy-engine barriers]): Arrive,
  // run_plan(step_base) — the engine's snac::execute of the plan on this
  // Atom, which enqueues its copies, signals and waits — and Leave; returns
  // "". The host never waits. Otherwise returns the error; after an error
  // the group is unusable (a collective may be half enqueued; peers time out).
  std::string enqueue(const CeCall& call, const std::function<void(uint64_t step_base)>& run_plan);

  // HostAtom: only valid inside enqueue()'s run_plan, which has the stream.
  int rank() const override { return ws_->rank(); }
  int world() const override { return ws_->world(); }
  std::byte* workspace(int rank) override;
  size_t workspace_bytes() const override { return static_cast<size_t>(ws_->workspace_bytes()); }
  std::byte* meta(int, int) override { return nullptr; }
  size_t meta_bytes() const override { return 0; }
  void copy(void* dst, const void* src, size_t bytes) override;
  void reduce(void* dst, const void* const* srcs, const double* scales, int nsrc, int64_t n, DType dtype,
              RedOp op) override;
  void signal(int peer, atom::FlagKind kind, uint64_t value) override;
  void wait(int peer, atom::FlagKind kind, uint64_t value, const WaitSite& site) override;

 private:
  uint64_t* pad_word(int owner, int kind, int from) const;
  void signal_flag(int peer, int kind, uint64_t value);
  void wait_flag(int peer, int kind, uint64_t value, uint64_t base, const char* phase);
  void barrier(int kind, uint64_t n, const char* phase);

  std::shared_ptr<SymmetricWorkspace> ws_;
  const StreamMemOps* mem_ = nullptr;
  std::unique_ptr<CeWatchdog> watchdog_;
  std::string unavailable_;
  std::string broken_;             // set by a failed enqueue()
  uint64_t collectives_ = 0;       // Arrive/Leave value of the last collective
  uint64_t epoch_ = 0;             // step_base of the next plan
  uint64_t wait_id_ = 0;           // progress id of the last enqueued wait
  // The collective being enqueued.
  bool in_call_ = false;
  cudaStream_t stream_ = nullptr;  // may be the legacy default stream (0)
  uint64_t base_ = 0;              // epoch of the values now passed to wait()
  CeWatch watch_;
};

}  // namespace purlin::atom::cuda
