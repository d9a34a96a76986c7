// plan_format.h — the plan format the plan kernel reads: flat POD ops (a
// lowered SNAC plan: csrc/lowering/device_plan.h makes it) and how a launch
// splits an op's elements among its blocks. Shared by the host code that
// uploads and launches plans and by the kernels; no SNAC header.
//
// NOTE [block partition] Every Copy/Reduce op's n elements are split among
//   the G blocks of the launch: block b takes [b*per, min(n, (b+1)*per)) with
//   per = part_size(n, G, esize) (a multiple of kPartBytes, so 16-byte
//   alignment of an op's pointers carries over to every block's share).
//   Wait/Signal are per block: block b raises its own slot of a flag, and a
//   waiter waits for the slots of ALL G blocks of the peer, because the
//   partitions of the producer's ops and the consumer's ops may differ;
//   where the plan shows that they do not (a Wait SNAC marked `matched`,
//   NOTE [matched waits] in snac/plan.h), block b waits for slot b only.
//   A call-tag check (NOTE [call tags]) waits for all slots: the tag is
//   published by block 0's release.
//   Wide-line plans split by whole lines instead (wide_part_size(), NOTE
//   [wide lines]); lower_plan() is told which, for the local barriers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "atom/cuda/purlin_hd.h"

namespace purlin::atom::cuda {

enum DevCode : uint8_t { kWait = 0, kSignal = 1, kCopy = 2, kReduce = 3, kLocalSync = 4 };
enum DevBuf : uint8_t { kInput = 0, kOutput = 1, kWorkspace = 2 };

struct DevRef {
  int64_t offset;  // elements
  int32_t rank;    // Workspace owner
  uint8_t buf;     // DevBuf
  uint8_t reserved_;
  int16_t origin;  // whose contribution it holds (snac::Ref::origin, else rank): error records
};

struct DevOp {
  uint8_t code;      // DevCode
  uint8_t flag;      // Wait / Signal: FlagKind (kStaged / kConsumed)
  uint16_t phase;    // interned phase name, for timeout records
  int32_t peer;      // Wait / Signal
  uint64_t value;    // Wait / Signal: relative step; LocalSync: its 1-based index
  int64_t n;         // Copy / Reduce: elements
  DevRef dst;        // Copy / Reduce
  int32_t src_begin; // Copy / Reduce: srcs[src_begin, src_begin + src_count)
  int16_t src_count; // (<= kMaxWorld)
  uint8_t check_tag; // Wait: 1 on the first Staged wait for each peer (NOTE [call tags])
  uint8_t own_slot;  // Wait: block b waits for the peer's slot b only (NOTE [matched waits] in snac/plan.h)
};

constexpr int64_t kPartBytes = 512;

// Elements per block of an n-element op (NOTE [block partition]).
PURLIN_HD int64_t part_size(int64_t n, int blocks, int64_t esize) {
  const int64_t align = kPartBytes / esize;
  const int64_t per = (n + blocks - 1) / blocks;
  return (per + align - 1) / align * align;
}

// NOTE [wide lines] (wide_line.cuh): bytes of one wide line in memory, its
// payload bytes, and the planner's alignment of wide-line pieces: one line
// (120 bytes is a multiple of every element size, so each piece starts on a line).
constexpr int64_t kWideLineBytes = 128;
constexpr int64_t kWidePayload = 120;
constexpr int64_t kWideAlignBytes = kWidePayload;

// Elements per block of an n-element op of a wide-line plan: whole lines.
PURLIN_HD int64_t wide_part_size(int64_t n, int blocks, int64_t esize) {
  const int64_t per_line = kWidePayload / esize;
  const int64_t lines = (n + per_line - 1) / per_line;
  return (lines + blocks - 1) / blocks * per_line;
}

// How a launch splits an op's elements among its blocks: part_size(), or
// wide_part_size() for wide-line plans.
enum class Partition : uint8_t { Parts = 0, WideLines = 1 };

// How this rank's Input and Output relate; decides which local accesses can
// conflict (NOTE [local barriers]).
enum class IoAlias : uint8_t {
  Disjoint = 0,  // separate memory
  Same = 1,      // same start address: offsets are comparable
  Overlap = 2,   // overlapping otherwise: every Input/Output pair may conflict
  Shifted = 3,   // Input = Output + shift elements: offsets are comparable after the shift
};

struct DevicePlan {
  std::vector<DevOp> ops;
  std::vector<DevRef> srcs;
  int rounds = 0;
  uint64_t steps = 0;          // snac::Plan::steps
  uint32_t local_syncs = 0;    // LocalSync ops inserted
  int max_srcs = 0;            // largest src_count of a Reduce
};

}  // namespace purlin::atom::cuda
