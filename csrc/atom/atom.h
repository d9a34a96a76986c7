// atom.h — the Datapath contract: what SNAC needs from hardware.
//
// An Atom moves and combines bytes between the symmetric workspaces of the
// ranks of one group, and carries Notify signals between them:
//   copy    — dst <- src, `bytes` bytes (non-overlapping).
//   reduce  — dst[i] <- op over k of (scale[k] *) srcs[k][i], sources combined
//             in the order given; f16/bf16 accumulate in float32 and round once.
//             dst may alias any one source exactly (same address), never
//             partially: every source element is read before dst[i] is stored.
//   signal  — publish `value` into the flag (kind, from = this rank) of `peer`,
//             with RELEASE semantics: every write this rank made before the
//             signal is visible to `peer` once it observes the value.
//   wait    — block until the flag (kind, from = peer) of this rank is >= value,
//             with ACQUIRE semantics; bounded by the group timeout, after which
//             it throws purlin::TimeoutError naming rank, peer, op and phase
//             (AbortedError, a TimeoutError, when the group is aborted first).
// Flag values only grow (monotonic epochs), so a flag never needs resetting.
//
// This header is torch-free. Implementations of HostAtom, the contract as the
// host-side executor (snac/executor.h) drives it: atom/cpu/cpu_atom.h (POSIX
// shared memory, CPU tensors) and atom/cuda/host/ce_atom.h (the copy-engine
// Atom: copy, signal and wait enqueued on a CUDA stream, no SMs). The CUDA plan
// kernel (atom/cuda/device/plan_kernel.cuh) is the same contract on the device:
// it interprets lowered plans itself, so it implements no C++ interface.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "common/types.h"

namespace purlin::atom {

// Flag kinds of the signal pad. Arrive carries the collective's sequence
// number (handshake); Staged and Consumed carry SNAC step counters.
enum class FlagKind : uint8_t { Arrive = 0, Staged = 1, Consumed = 2, kCount = 3 };

const char* flag_kind_name(FlagKind k);

// Where a wait happens, for the timeout message.
struct WaitSite {
  const char* op = "?";     // collective name, e.g. "all_reduce"
  const char* phase = "?";  // SNAC phase, e.g. "consume: wait for staged chunk"
  uint64_t seq = 0;         // the group's collective sequence number
};

// A wait that ended without its flag: the group timeout passed (or, as
// AbortedError below, the group was aborted). Either way the group cannot
// continue (its ranks' steps no longer match).
class TimeoutError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A wait ended by the group's abort() (NOTE [shutdown and abort] in
// backend/c10d/group_lifecycle.cc) before the timeout.
class AbortedError : public TimeoutError {
 public:
  using TimeoutError::TimeoutError;
};

class HostAtom {
 public:
  virtual ~HostAtom() = default;

  virtual int rank() const = 0;
  virtual int world() const = 0;

  // Workspace of `rank` as mapped in this process, and its size (same on all ranks).
  virtual std::byte* workspace(int rank) = 0;
  virtual size_t workspace_bytes() const = 0;

  // Per-collective metadata blobs used by the arrival handshake: each rank
  // writes its own blob (parity = seq % 2) and reads peers' after their Arrive.
  virtual std::byte* meta(int rank, int parity) = 0;
  virtual size_t meta_bytes() const = 0;

  virtual void copy(void* dst, const void* src, size_t bytes) = 0;
  virtual void reduce(void* dst, const void* const* srcs, const double* scales, int nsrc, int64_t n,
                      DType dtype, RedOp op) = 0;
  virtual void signal(int peer, FlagKind kind, uint64_t value) = 0;
  virtual void wait(int peer, FlagKind kind, uint64_t value, const WaitSite& site) = 0;
};

}  // namespace purlin::atom
