// signal.cuh — device half of the signal pad: release/acquire flag access,
// bounded waits and the timeout record. (Host half: symmetric_workspace.h.)
//
// A block signals with one thread after a __syncthreads, through
// ptx::st_release_sys, so all of the block's earlier writes are visible to a
// peer GPU that acquires the value (ptx::ld_acquire_sys); a rank's own blocks
// meet at GPU scope (the _gpu variants).
// Every wait is bounded by %globaltimer against the group timeout, and by
// the host's abort request (NOTE [device abort] in signal_pad.h); on either
// it fills the ErrorRecord (first block only), marks the pad broken, and
// returns false so the kernel can return early: no __trap, the process and
// its CUDA context stay usable.
#pragma once

#include <cstdint>

#include "atom/cuda/device/ptx.cuh"
#include "atom/cuda/signal_pad.h"

namespace purlin::atom::cuda {

// What a wait is for, for the error record.
struct WaitSite {
  ErrorRecord* err;      // host-mapped
  uint64_t* broken;      // this rank's pad word
  uint64_t timeout_ns;
  uint64_t base;         // the collective's base epoch
  int32_t rank;
  uint32_t op_name;
};

// NOTE [device abort]: whether the host asked the group to abort (a volatile
// load of host-mapped memory).
static __device__ __forceinline__ bool abort_requested(const WaitSite& s) { return s.err->abort_requested != 0; }

// Inlined (rarely run, but a call's ABI costs the line kernel a stack and
// spills on its fast path: NOTE [register units] in line_kernel.cuh).
static __device__ __forceinline__ void record_timeout(const WaitSite& s, int peer, int from_block, int kind, uint64_t target,
                                            uint64_t seen, uint32_t phase, uint64_t waited,
                                            uint32_t status = kRecordTimedOut) {
  if (atomicCAS(reinterpret_cast<unsigned long long*>(s.broken), 0ull, 1ull) != 0ull) return;
  ErrorRecord* e = s.err;
  e->rank = s.rank;
  e->peer = peer;
  e->block = static_cast<int32_t>(blockIdx.x);
  e->from_block = from_block;
  e->kind = kind;
  e->op_name = s.op_name;
  e->phase = phase;
  e->expected = target - s.base;
  e->seen = seen > s.base ? seen - s.base : 0;
  e->base = s.base;
  e->waited_ns = waited;
  __threadfence_system();
  e->status = status;
  __threadfence_system();
}

// One thread's wait until *f >= target, after a first load that saw `seen`
// (callers issue it together with their other loads). Returns false, with
// the record filled, when the group timeout expires or the host asks to
// abort.
template <bool kSys>
__device__ __forceinline__ bool wait_flag(const uint64_t* f, uint64_t target, uint64_t seen, const WaitSite& s, int peer,
                                          int from_block, int kind, uint32_t phase) {
  if (seen >= target) return true;
  const uint64_t t0 = ptx::globaltimer_ns();
  while (seen < target) {
    const uint64_t waited = ptx::globaltimer_ns() - t0;
    const bool aborted = abort_look_due(waited) && abort_requested(s);
    if (waited > s.timeout_ns || aborted) {
      record_timeout(s, peer, from_block, kind, target, seen, phase, waited, aborted ? kRecordAborted : kRecordTimedOut);
      return false;
    }
    seen = kSys ? ptx::ld_acquire_sys(f) : ptx::ld_acquire_gpu(f);
  }
  return true;
}

// Block-wide wait until flags[i * stride] >= target for every i < count
// except i == skip (threads i, i + blockDim, ... poll slot i). Returns
// false, identically in every thread, if any slot timed out. Ends with a
// barrier, so every thread's later reads are ordered after the acquires.
// `first`: the block slot flags[0] is (error records name first + i).
template <bool kSys>
__device__ __forceinline__ bool wait_all(const uint64_t* flags, int count, uint64_t target, const WaitSite& s,
                                         int peer, int kind, uint32_t phase, int stride = 1, int skip = -1,
                                         int first = 0) {
  bool ok = true;
  for (int i = threadIdx.x; i < count && ok; i += blockDim.x) {
    if (i == skip) continue;
    const uint64_t* f = flags + static_cast<int64_t>(i) * stride;
    const uint64_t seen = kSys ? ptx::ld_acquire_sys(f) : ptx::ld_acquire_gpu(f);
    ok = wait_flag<kSys>(f, target, seen, s, stride == 1 ? peer : i, stride == 1 ? first + i : 0, kind, phase);
  }
  return __syncthreads_and(ok) != 0;
}

}  // namespace purlin::atom::cuda
