// reduce_cpu.h — typed elementwise reduction of n elements over nsrc sources.
//
//   dst[i] = fold over k = 0..nsrc-1, in that order, of srcs[k][i]
//
//   SUM, PRODUCT, MIN, MAX  left fold ((s0 op s1) op s2) ...
//   AVG                     SUM, then divided by nsrc (in the accumulator type)
//   PREMUL_SUM              sum_k scales[k] * srcs[k][i]; the scale is converted
//                           to the accumulator type (a real scale for complex)
//
// Accumulator per dtype: float32 in float32, float64 in float64, float16 and
// bfloat16 in float32 with ONE round-to-nearest-even at the end (bit-exact with
// torch's float32 -> half conversion); integers wrap like two's complement of
// their width; bool: SUM/MAX = logical or, PRODUCT/MIN = logical and, stored
// as 0/1; complex64/128 support SUM, AVG, PREMUL_SUM and PRODUCT (complex
// multiply (a+bi)(c+di) = (ac-bd) + (ad+bc)i, no C99 Annex G inf/nan fix-ups).
// Floating MIN/MAX propagate NaN. Results are deterministic for a given
// source order; they are bit-exact as stated only when the build does not
// contract a*b+c into FMA (default x86-64 flags; -march=native may).
//
// dst may be any one source exactly (same address: the pass that stores a
// block reads only the same index of each source it reads, and every earlier
// pass has read its sources' block whole); no other overlap is allowed.
// Throws std::invalid_argument when reduction_supported(dtype, op) is false,
// nsrc < 1, n < 0, or PREMUL_SUM is given no scales. scales may be null for
// every other op. Single-threaded; the caller splits work across ranks.
#pragma once

#include <cstdint>

#include "common/types.h"

namespace purlin::atom::cpu {

void reduce_cpu(void* dst, const void* const* srcs, const double* scales, int nsrc, int64_t n,
                DType dtype, RedOp op);

}  // namespace purlin::atom::cpu
