// half_convert.h — bit-level float32 <-> float16 / bfloat16 conversions.
//
// Narrowing rounds to nearest, ties to even, exactly as torch converts
// (`tensor.to(torch.float16 / torch.bfloat16)`): subnormals are produced,
// overflow gives +-inf, NaN stays NaN (sign and top payload bits kept, quiet
// bit set — the x86 F16C behaviour; torch's own bf16 NaN bits vary by code
// path, so only NaN-ness is part of the contract). Widening is exact.
//
// Written branch-free: every candidate result is computed, then one is picked
// with bit masks (not ?:, which GCC may turn back into branches around the
// float adds, which -ftrapping-math then refuses to if-convert), so the loops
// in reduce_cpu.cc vectorize. No intrinsics, no target flags needed.
#pragma once

#include <cstdint>
#include <cstring>

namespace purlin::atom::cpu {

inline uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// All ones when a >= b, else zero. Callers pass magnitudes (< 2^31), so the
// compare is done on int32: SSE2 has signed vector compares only.
inline uint32_t mask_ge(uint32_t a, int32_t b) { return 0u - static_cast<uint32_t>(static_cast<int32_t>(a) >= b); }
// pick(m, a, b) == (m ? a : b) for a mask m from mask_ge, without a branch.
inline uint32_t pick(uint32_t m, uint32_t a, uint32_t b) { return (m & a) | (~m & b); }

inline float f32_from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// float16 bits -> float32 (exact).
inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t mag = h & 0x7fffu;
  // Normal: rebias the exponent by 127-15 = 112.
  const uint32_t normal = (mag << 13) + 0x38000000u;
  // Inf/NaN: exponent field all ones in float32 too.
  const uint32_t infnan = (mag << 13) | 0x7f800000u;
  // Subnormal (and zero): value is mag * 2^-24; build 0.5 + mag*2^-24, subtract 0.5.
  const uint32_t sub = f32_bits(f32_from_bits(0x3f000000u | mag) - 0.5f);
  const uint32_t out = pick(mask_ge(mag, 0x7c00), infnan, pick(mask_ge(mag, 0x0400), normal, sub));
  return f32_from_bits(sign | out);
}

// float32 -> float16 bits, round to nearest even.
inline uint16_t f32_to_f16(float f) {
  const uint32_t u = f32_bits(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t mag = u & 0x7fffffffu;
  // NaN: keep the top 10 payload bits and force the quiet bit.
  const uint32_t nan = 0x7e00u | ((mag >> 13) & 0x03ffu);
  // Normal range (|f| >= 2^-14): add half an ulp (minus one unless the kept
  // lsb is odd -> ties to even), rebias, shift; anything that lands at or
  // beyond the inf encoding saturates to inf (covers f = +-inf too).
  const uint32_t rounded = (mag + 0x0fffu + ((mag >> 13) & 1u) - 0x38000000u) >> 13;
  const uint32_t normal = pick(mask_ge(rounded, 0x7c00), 0x7c00u, rounded);
  // Subnormal range: adding 0.5f aligns the float32 ulp to 2^-24, so the
  // FPU's own round-to-nearest-even does the rounding; the mantissa bits
  // are then the float16 encoding (2^-14 exactly gives 0x0400, the first normal).
  const uint32_t sub = f32_bits(f32_from_bits(mag) + 0.5f) - 0x3f000000u;
  const uint32_t out = pick(mask_ge(mag, 0x7f800001), nan, pick(mask_ge(mag, 0x38800000), normal, sub));
  return static_cast<uint16_t>(sign | out);
}

// bfloat16 bits -> float32 (exact).
inline float bf16_to_f32(uint16_t b) { return f32_from_bits(static_cast<uint32_t>(b) << 16); }

// float32 -> bfloat16 bits, round to nearest even (overflow carries into inf).
inline uint16_t f32_to_bf16(float f) {
  const uint32_t u = f32_bits(f);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t nan = (u >> 16) | 0x0040u;
  return static_cast<uint16_t>(pick(mask_ge(u & 0x7fffffffu, 0x7f800001), nan, rounded));
}

}  // namespace purlin::atom::cpu
