// call_tag.h — the call tags of NOTE [call tags] (plan_kernel.cuh): their
// encoding and the test a waiter applies to a peer's tag word while it waits
// (NOTE [tagged waits]). Shared by the plan kernel and the CPU emulation of
// its protocol (test/cpp/test_cuda_plan_emulation.cc).
#pragma once

#include <cstdint>

#include "atom/cuda/host_device.h"

namespace purlin::atom::cuda {

// The high half is the collective's base epoch (its low 32 bits), the low
// half a hash of the signature and the base, never 0 (so no tag is the pad's
// initial 0). A waiter tells this collective's tag from an older one by the
// high half.
PURLIN_HD uint64_t call_tag(uint64_t sig, uint64_t base) {
  uint64_t x = sig ^ (base * 0x9E3779B97F4A7C15ull);
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  return (base << 32) | (((x >> 32) ^ x) & 0xffffffffull) | 1ull;
}

// Whether a peer's tag word `seen`, read while waiting, is this collective's
// tag of another call: written (a slot never written reads 0, whose high half
// is base 0's), of this collective (same high half), and not ours.
PURLIN_HD bool tag_of_other_call(uint64_t seen, uint64_t mine) {
  return seen != 0 && (seen >> 32) == (mine >> 32) && seen != mine;
}

}  // namespace purlin::atom::cuda
