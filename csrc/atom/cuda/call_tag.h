// call_tag.h — the call tags of NOTE [call tags] and the call stamps of NOTE
// [tagged waits] (plan_kernel.cuh): their encodings and the test a waiter
// applies to a peer's stamp word while it waits. Shared by the plan kernel
// and the CPU emulation of its protocol (test/cpp/test_cuda_plan_emulation.cc).
// Host and device code alike (PURLIN_HD), no CUDA or torch headers.
#pragma once

#include <cstdint>

#include "atom/cuda/purlin_hd.h"

namespace purlin::atom::cuda {

// The call tag: a hash of the launch's signature and its base epoch, never 0
// (the pad's initial value). Compared whole after a check-tag Wait (NOTE
// [call tags]); its encoding is what the plan kernel's registers are tuned
// to (NOTE [tagged waits]: do not fold the base into it).
PURLIN_HD uint64_t call_tag(uint64_t sig, uint64_t base) {
  uint64_t x = sig ^ (base * 0x9E3779B97F4A7C15ull);
  x ^= x >> 31;
  return x * 0xBF58476D1CE4E5B9ull + 1;
}

// The call stamp (NOTE [tagged waits]): the base epoch's low 32 bits in the
// high half, the call tag's low 32 bits in the low half, its bit 0 set, so a
// stamp is never 0 (a slot never written), also for base 0. One word, so a
// racy read sees one whole stamp, never a base of one call with the tag of
// another.
PURLIN_HD uint64_t stamp_of_tag(uint64_t tag, uint64_t base) { return (base << 32) | (tag & 0xffffffffull) | 1ull; }
PURLIN_HD uint64_t call_stamp(uint64_t sig, uint64_t base) { return stamp_of_tag(call_tag(sig, base), base); }

// Whether a peer's stamp word `seen`, read (relaxed) while waiting, stamps
// another call of this collective than `mine`: written (0 is a slot never
// written; its high half is base 0's, a group's first collective), of this
// collective (same base in the high half; an older collective's stamp has
// another one), and another call's (the low half differs).
PURLIN_HD bool stamp_of_other_call(uint64_t seen, uint64_t mine) {
  return seen != 0 && (seen >> 32) == (mine >> 32) && seen != mine;
}

}  // namespace purlin::atom::cuda
