// wide_line.cuh — the wide flagged line: 120 payload bytes in 128.
//
// NOTE [wide lines] A wide line is 128 aligned bytes: 15 payload words of 8
//   bytes and, in word 15, the flag word f0 | f1 << 32 (line_flags() of
//   flagged_line.cuh). Eight consecutive lanes of a warp write one line with one
//   16-byte volatile store each in the same instruction, and read it the same
//   way; the group takes the line only when its flag word matches.
//   This relies on what the PTX memory model does not state: that 128 bytes a
//   warp stores into one aligned line with one instruction become visible to a
//   peer's one-instruction load as a unit (NCCL's LL128 relies on the same
//   property of NVLink-connected GPUs). So the format is agreed at setup
//   (TORCH_PURLIN_CUDA_LINE_FORMAT; ranks that disagree make the group narrow),
//   and `auto` takes wide lines only where it is known to hold: one
//   architecture among sm_80 / sm_90 / sm_100 and NVLink between every pair
//   (nvlink_probe.h). Narrow lines rely only on 8-byte units and cost 2x the
//   payload in NVLink bytes; wide lines 128/120.
//   Layout rules, so that one line never mixes two writers' data: every piece
//   starts on a line (kWideAlignBytes), every op touching the region covers
//   whole pieces (contiguous sources and destinations), and a block's share of
//   an op is whole lines (wide_part_size()).
#pragma once

#include <cstdint>

#include "atom/cuda/device/plan_format.h"
#include "atom/cuda/device/flagged_line.cuh"

namespace purlin::atom::cuda {

constexpr int kWideGroup = 8;            // lanes per line, 16 bytes each
static_assert(kWidePayload + 8 == kWideLineBytes, "a wide line is 15 payload words and a flag word");

__host__ __device__ constexpr uint64_t wide_flag(LineFlags f) {
  return static_cast<uint64_t>(f.f0) | static_cast<uint64_t>(f.f1) << 32;
}

struct WideWords {
  uint64_t lo, hi;  // this lane's 16 bytes of the line
};

// This lane's 16 bytes of a line; the eight lanes of the group store theirs
// in the same instruction (NOTE [wide lines]). Relaxed, system scope.
__device__ __forceinline__ void wide_store(void* part, WideWords w) {
  asm volatile("st.volatile.global.v2.u64 [%0], {%1, %2};" ::"l"(part), "l"(w.lo), "l"(w.hi) : "memory");
}

__device__ __forceinline__ WideWords wide_load(const void* part) {
  WideWords w;
  asm volatile("ld.volatile.global.v2.u64 {%0, %1}, [%2];" : "=l"(w.lo), "=l"(w.hi) : "l"(part) : "memory");
  return w;
}

// The poll after a first miss, inlined, its words returned in registers
// (NOTE [register units] in line_kernel.cuh).
struct WideWaited {
  WideWords w;
  bool ok;
};

static __device__ __forceinline__ WideWaited wide_wait_slow(const void* part, bool active, uint64_t flag,
                                                         const WaitSite& site, int origin, uint32_t phase) {
  constexpr unsigned kAll = 0xffffffffu;
  const bool flag_lane = (threadIdx.x & (kWideGroup - 1)) == kWideGroup - 1;
  const uint64_t t0 = ptx::globaltimer_ns();
  uint64_t foreign_since = 0;  // when a fresh f0 with another call's f1 was first seen
  for (uint32_t spins = 0;; ++spins) {
    WideWords w{0, 0};
    __syncwarp();
    if (active) w = wide_load(part);
    const bool ready = !active || !flag_lane || w.hi == flag;
    if (__all_sync(kAll, ready)) return WideWaited{w, true};
    // This sequence, another call's hash in f1 (NOTE [flagged lines]).
    const bool foreign = !ready && static_cast<uint32_t>(w.hi) == static_cast<uint32_t>(flag) &&
                         ((w.hi >> 32) & 0xFFFFu) == ((flag >> 32) & 0xFFFFu);
    const unsigned foreign_lanes = __ballot_sync(kAll, foreign);
    if ((spins & 63u) != 63u && !foreign_lanes) continue;
    // Decisions are lane 0's, shared with the warp, so every lane returns alike.
    const uint64_t now = ptx::globaltimer_ns();
    const bool broken = *reinterpret_cast<volatile uint64_t*>(site.broken) != 0;
    if (!foreign_lanes) foreign_since = 0;
    else if (!foreign_since) foreign_since = now;
    const bool mismatch = foreign_lanes && now - foreign_since > kLineMismatchNs;
    const bool late = now - t0 > site.timeout_ns;
    // NOTE [device abort]: lane 0 reads the request (its verdict is the warp's), at every 16th check
    const bool aborted = (threadIdx.x & 31) == 0 && ((spins >> 6) & (kAbortLookSpins >> 6)) == 0 && abort_requested(site);
    const int verdict = __shfl_sync(kAll, broken ? 1 : mismatch ? 2 : late ? 3 : aborted ? 4 : 0, 0);
    if (verdict == 0) continue;
    const unsigned waiting = __ballot_sync(kAll, !ready);
    const int who = waiting ? __ffs(static_cast<int>(waiting)) - 1 : 0;
    const uint64_t seen = __shfl_sync(kAll, w.hi, who);
    if ((threadIdx.x & 31) == 0 && verdict > 1) {
      WaitSite raw = site;
      raw.base = 0;
      if (verdict == 2) record_timeout(raw, origin, 0, kCallTag, flag >> 32, seen >> 32, phase, 0);
      else
        record_timeout(raw, origin, 0, kLine, static_cast<uint32_t>(flag), static_cast<uint32_t>(seen), phase, now - t0,
                       verdict == 4 ? kRecordAborted : kRecordTimedOut);
    }
    return WideWaited{w, false};
  }
}

// Polls this lane's 16 bytes `part` of a wide line until the line's flag
// word (lane 7 of the group) is `flag`. Called by all 32 lanes of a warp
// together; `active` false for lanes of a group without a line (they only
// vote). Returns false in every lane (after one lane recorded why, unless the
// group was already broken) on a call-tag mismatch, a timeout, or a group
// broken elsewhere. `origin` is the rank whose data the line holds.
__device__ __forceinline__ bool wide_wait(const void* part, bool active, uint64_t flag, WideWords* out,
                                          const WaitSite& site, int origin, uint32_t phase) {
  WideWords w{0, 0};
  __syncwarp();  // the group's eight loads in one instruction
  if (active) w = wide_load(part);
  const bool flag_lane = (threadIdx.x & (kWideGroup - 1)) == kWideGroup - 1;
  if (__all_sync(0xffffffffu, !active || !flag_lane || w.hi == flag)) {
    *out = w;
    return true;
  }
  const WideWaited r = wide_wait_slow(part, active, flag, site, origin, phase);
  *out = r.w;
  return r.ok;
}

}  // namespace purlin::atom::cuda
