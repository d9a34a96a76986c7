// signal_pad.h — the signal pad: the first bytes of every rank's symmetric
// buffer, and the error record the kernels fill in on a timeout.
//
// Layout, in uint64 words (W = world, G = the group's block capacity, agreed
// at setup; a launch uses g <= G blocks, slots g..G-1 are then idle):
//   flag[kind][from][block]   3*W*G  written by rank `from`'s block `block`,
//                                    read here (kind: Done, Staged, Consumed)
//   local[block]              G      this rank's block-to-block barrier
//   base                      1      Staged/Consumed/Done epoch of this rank
//   lbase                     1      local-barrier epoch of this rank
//   finished                  1      blocks of the running launch that ended
//   scale                     1      PREMUL_SUM factor of the running collective
//   broken                    1      set once by the first timed-out block
//   peer_table[W]             W      every rank's buffer, as mapped here
//   ce_flag[kind][from]       4*W    copy-engine Atom flags (CeFlag), written
//                                    by rank `from` with stream memory ops
//   call_tag[from]            W      what rank `from` called this collective
//                                    (NOTE [call tags], plan_kernel.cuh)
//   pool_table[W]             W      every rank's symmetric pool (symmetric_pool.h)
//                                    as mapped here; 0 while there is none
//   pbase                     1      base of the previous collective (NOTE [flagged lines])
//   lseq                      1      region collectives (line and parity plans) this group ran
//   ptag[parity][from]        2*W    call tags of parity plans (NOTE [parity plans], plan_kernel.cuh)
//   stamp[slot][from]         3*W    call stamps next to the call tags (slot 0: call_tag's, 1 + parity:
//                                    ptag[parity]'s), watched by tagged waits (NOTE [tagged waits])
// The workspace (SNAC's two slots) follows at pad_bytes(), then the line
// region (two parities of line_half bytes, flagged_line.cuh) at line_offset,
// the wide-line region (two parities of wide_half bytes, wide_line.cuh) at
// wide_offset, then the parity region (two halves of parity_half bytes) at
// parity_offset. Narrow and wide lines never share memory: a stale line of
// one format could otherwise pass for a fresh one of the other.
//
// NOTE [device epochs] Flag values are epochs: base + plan step, never reset
//   (NOTE [epochs] in snac/plan.h). Every block of a launch reads `base` at
//   its start; the last block to finish (counted in `finished`) writes
//   base + steps + 1 (the +1 is Done's own step) and lbase + local barriers,
//   so CUDA-graph replays advance the epochs without a host write, and the
//   next launch (stream-ordered after this one) reads the new values
//   whatever its block count. All ranks advance base by the same amount
//   (plan.steps depends only on the Spec), so their epochs stay equal; lbase
//   never leaves the rank.
#pragma once

#include <cstdint>

#include "atom/cuda/purlin_hd.h"

namespace purlin::atom::cuda {

// Flag kinds on the GPU. Staged and Consumed keep snac::Flag's numbers; Done
// closes a collective (NOTE [device reuse] in plan_kernel.cuh). kLocal names
// the local barrier in error records only;
// kLine names a flagged line (NOTE [flagged lines]) in error records.
enum FlagKind : int { kDone = 0, kStaged = 1, kConsumed = 2, kFlagKinds = 3, kLocal = 3, kCallTag = 4, kLine = 5 };

// Copy-engine Atom flags (atom/cuda/ce_*): Arrive opens a CE collective,
// Staged / Consumed carry its plan's steps, Leave closes it.
enum CeFlag : int { kCeArrive = 0, kCeStaged = 1, kCeConsumed = 2, kCeLeave = 3, kCeFlags = 4 };

constexpr int kMaxBlocks = 128;   // G never exceeds this (launch_config)
constexpr int kMaxWorld = 128;    // kernels keep per-source arrays of this size

struct PadLayout {
  int world = 1;
  int blocks = 1;
  int64_t line_offset = 0;  // bytes from the buffer start to the line region; 0: none
  int64_t line_half = 0;    // bytes of one parity of the line region
  int64_t wide_offset = 0;  // bytes from the buffer start to the wide-line region (NOTE [wide lines]); 0: none
  int64_t wide_half = 0;    // bytes of one parity of the wide-line region
  int64_t parity_offset = 0;  // bytes from the buffer start to the parity region; 0: none
  int64_t parity_half = 0;    // bytes of one half of the parity region

  PURLIN_HD int64_t flag(int kind, int from, int block) const {
    return (static_cast<int64_t>(kind) * world + from) * blocks + block;
  }
  PURLIN_HD int64_t local(int block) const { return static_cast<int64_t>(kFlagKinds) * world * blocks + block; }
  PURLIN_HD int64_t base() const { return local(0) + blocks; }
  PURLIN_HD int64_t lbase() const { return base() + 1; }
  PURLIN_HD int64_t finished() const { return lbase() + 1; }
  PURLIN_HD int64_t scale() const { return finished() + 1; }
  PURLIN_HD int64_t broken() const { return scale() + 1; }
  PURLIN_HD int64_t peer_table(int rank) const { return broken() + 1 + rank; }
  PURLIN_HD int64_t ce_flag(int kind, int from) const { return peer_table(0) + world + kind * world + from; }
  PURLIN_HD int64_t call_tag(int from) const { return ce_flag(0, 0) + kCeFlags * world + from; }
  PURLIN_HD int64_t pool_table(int rank) const { return call_tag(0) + world + rank; }
  PURLIN_HD int64_t pbase() const { return pool_table(0) + world; }
  PURLIN_HD int64_t lseq() const { return pbase() + 1; }
  PURLIN_HD int64_t ptag(int parity, int from) const { return lseq() + 1 + static_cast<int64_t>(parity) * world + from; }
  // NOTE [tagged waits]: slot 0 stamps the call_tag word's call, slot 1 + parity ptag[parity]'s.
  PURLIN_HD int64_t stamp(int slot, int from) const { return ptag(0, 0) + 2 * world + static_cast<int64_t>(slot) * world + from; }
  PURLIN_HD int64_t words() const { return stamp(0, 0) + 3 * world; }
  // The workspace starts at this byte offset (4 KiB aligned).
  PURLIN_HD int64_t pad_bytes() const { return (words() * 8 + 4095) / 4096 * 4096; }
};

// ErrorRecord::status.
enum RecordStatus : uint32_t { kRecordNone = 0, kRecordTimedOut = 1, kRecordAborted = 2 };

// How often a wait reads the abort request (NOTE [device abort]). The line
// waits count polls: once per kAbortLookSpins + 1 (a mask; a poll is a
// system-scope load, so about a millisecond). wait_flag and the tagged waits
// use the clock they read anyway, adding no register to the plan kernel (a
// spin counter gave plan_kernel<float> a stack): they look while the time
// waited is in the last kAbortWindowNs of each 2^20 ns (~1 ms), never in a
// wait's first millisecond, so a wait that ends sooner never pays the PCIe
// read. A window that a slow poll steps over is caught a period later
// (test/cpp/test_abort_signal.cc).
constexpr uint32_t kAbortLookSpins = 1023;
constexpr uint32_t kAbortPeriodMask = (1u << 20) - 1;
constexpr uint32_t kAbortWindowNs = 4096;
PURLIN_HD bool abort_look_due(uint64_t waited) {
  return (static_cast<uint32_t>(waited) & kAbortPeriodMask) > kAbortPeriodMask - kAbortWindowNs;
}

// Filled by the first block that times out or sees the abort request
// (host-mapped memory, so the host reads it without a CUDA call). `status`
// is written last.
// NOTE [device abort] `abort_requested` is the one word the host writes: the
// group's abort() sets it (backend/group/abort_signal.h) with a plain store, no CUDA
// call, so it works while the process is stuck in CUDA calls on other
// threads. Every device wait reads it (a volatile load over PCIe) on its slow
// path (abort_look_due, kAbortLookSpins: about once a millisecond),
// and ends like a timeout but records kRecordAborted; the copy-engine
// watchdog reads it at its 2 ms poll and releases the streams at once. The
// fast path of a wait that succeeds never reads it.
struct ErrorRecord {
  volatile uint32_t status;  // RecordStatus
  int32_t rank;              // this rank
  int32_t peer;              // whose flag never came (== rank for kLocal)
  int32_t block;             // the waiting block
  int32_t from_block;        // the flag slot that was short
  int32_t kind;              // FlagKind
  uint32_t op_name;          // interned collective name (interned_names.h)
  uint32_t phase;            // interned SNAC phase
  uint64_t expected;         // relative to the collective's base epoch
  uint64_t seen;             // relative to the collective's base epoch (0 if below it)
  uint64_t base;             // the collective's base epoch
  uint64_t waited_ns;
  volatile uint32_t abort_requested;  // NOTE [device abort]: written by the host only
};

}  // namespace purlin::atom::cuda
