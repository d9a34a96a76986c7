// reduce_cpu.cc — the reduction kernels behind reduce_cpu.h.
//
// Shape: one generic block fold, instantiated per (element, accumulator,
// conversion, operator) by templates, so there is no per-element dispatch.
// Each block of kBlock elements is folded into a local accumulator array:
// the array never aliases the sources or dst, which lets the compiler
// vectorize every loop and makes dst == srcs[0] safe (a block is read fully
// before it is written).
#include "atom/cpu/reduce_cpu.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "atom/cpu/half_convert.h"

// Runtime ISA dispatch, the one place it is chosen: on x86-64 with GCC and
// glibc, reduce_cpu is built twice — baseline (SSE2) and AVX2 — with the whole
// kernel tree flattened into each, and the loader picks one by CPUID (ifunc).
// AVX2 doubles bf16 throughput. -DPURLIN_CPU_NO_CLONES builds the baseline only
// (test/cpp/test_atom_cpu_native.py runs the kernel tests both ways).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__GLIBC__) && \
    !defined(PURLIN_CPU_NO_CLONES)
#define PURLIN_REDUCE_DISPATCH __attribute__((target_clones("default", "avx2"), flatten))
#else
#define PURLIN_REDUCE_DISPATCH
#endif

// PREMUL_SUM must round the product before the add on every build: never
// contract scale*x + acc into an FMA, whatever -march the includer uses.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace purlin::atom::cpu {
namespace {

constexpr int64_t kBlock = 2048;

// ---- conversions: storage element <-> accumulator --------------------------
template <class E, class A>
struct Plain {
  static A load(E x) { return static_cast<A>(x); }
  static E store(A a) { return static_cast<E>(a); }
};
struct Half {
  static float load(uint16_t x) { return f16_to_f32(x); }
  static uint16_t store(float a) { return f32_to_f16(a); }
};
struct BHalf {
  static float load(uint16_t x) { return bf16_to_f32(x); }
  static uint16_t store(float a) { return f32_to_bf16(a); }
};
struct Bool01 {
  static uint8_t load(uint8_t x) { return x != 0; }
  static uint8_t store(uint8_t a) { return a != 0; }
};

// ---- operators on the accumulator ------------------------------------------
struct Add {
  template <class A> static A step(A a, A x) { return a + x; }
};
struct Mul {
  template <class A> static A step(A a, A x) { return a * x; }
};
struct Min {  // NaN propagates: x wins when it is NaN, a stays when a is NaN
  template <class A> static A step(A a, A x) { return (x < a || x != x) ? x : a; }
};
struct Max {
  template <class A> static A step(A a, A x) { return (x > a || x != x) ? x : a; }
};
// Integer +/* in unsigned arithmetic of at least int width: wraps, no UB.
template <class T>
using Wide = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;
struct WrapAdd {
  template <class A> static A step(A a, A x) { return static_cast<A>(Wide<A>(a) + Wide<A>(x)); }
};
struct WrapMul {
  template <class A> static A step(A a, A x) { return static_cast<A>(Wide<A>(a) * Wide<A>(x)); }
};
struct Or {
  static uint8_t step(uint8_t a, uint8_t x) { return a | x; }
};
struct And {
  static uint8_t step(uint8_t a, uint8_t x) { return a & x; }
};

// ---- the block fold ---------------------------------------------------------
// Each pass is its own loop. The first pass folds two sources into acc (a
// local array, so it never aliases a source or dst); the middle passes fold
// two more each; the last pass folds the last one or two sources and stores
// into dst. With two sources the one pass reads both and stores dst. dst may
// equal a source exactly: a pass that stores dst[i] reads only index i of
// every source it reads, and earlier passes read their sources' block whole
// (hence `ivdep` on the passes that store dst: no dependence spans
// iterations). The block is called with len == kBlock, a constant after
// inlining, so even -O2's cheap vectorizer accepts every pass; the tail takes
// the same code with a variable len. The arithmetic and its order are those
// of a left fold in the accumulator: ((x0 op x1) op x2) ..., then / nsrc for
// AVG, then one conversion to the element type.
#define PURLIN_INLINE inline __attribute__((always_inline))
#if defined(__clang__)
#define PURLIN_IVDEP _Pragma("clang loop vectorize(assume_safety)")
#elif defined(__GNUC__)
#define PURLIN_IVDEP _Pragma("GCC ivdep")
#else
#define PURLIN_IVDEP
#endif

template <class E, class A, class Cv, bool kScaled>
struct Load {
  static PURLIN_INLINE A at(const E* s, A c, int64_t i) {
    return kScaled ? static_cast<A>(c * Cv::load(s[i])) : Cv::load(s[i]);
  }
};

template <class E, class A, class Cv, bool kAvg>
PURLIN_INLINE E finish(A acc, A q) {
  return Cv::store(kAvg ? acc / q : acc);
}

template <class E, class A, class Cv, class Op, bool kScaled, bool kAvg>
PURLIN_INLINE void fold_block(E* d, const void* const* srcs, const double* scales, int nsrc, int64_t base,
                              int64_t len, A* __restrict acc) {
  using L = Load<E, A, Cv, kScaled>;
  auto scale = [&](int k) { return kScaled ? static_cast<A>(scales[k]) : A(1); };
  auto src = [&](int k) { return static_cast<const E*>(srcs[k]) + base; };
  const A q = static_cast<A>(nsrc);
  E* out = d + base;
  if (nsrc == 1) {
    const E* s = src(0);
    const A c = scale(0);
    PURLIN_IVDEP
    for (int64_t i = 0; i < len; ++i) out[i] = finish<E, A, Cv, kAvg>(L::at(s, c, i), q);
    return;
  }
  const E* s0 = src(0);
  const E* s1 = src(1);
  const A c0 = scale(0), c1 = scale(1);
  if (nsrc == 2) {
    PURLIN_IVDEP
    for (int64_t i = 0; i < len; ++i)
      out[i] = finish<E, A, Cv, kAvg>(Op::step(L::at(s0, c0, i), L::at(s1, c1, i)), q);
    return;
  }
  for (int64_t i = 0; i < len; ++i) acc[i] = Op::step(L::at(s0, c0, i), L::at(s1, c1, i));
  int k = 2;
  for (; nsrc - k > 2; k += 2) {  // middle passes: leave one or two sources for the last
    const E* s = src(k);
    const E* t = src(k + 1);
    const A c = scale(k), ct = scale(k + 1);
    for (int64_t i = 0; i < len; ++i) acc[i] = Op::step(Op::step(acc[i], L::at(s, c, i)), L::at(t, ct, i));
  }
  const E* s = src(k);
  const A c = scale(k);
  if (nsrc - k == 2) {
    const E* t = src(k + 1);
    const A ct = scale(k + 1);
    PURLIN_IVDEP
    for (int64_t i = 0; i < len; ++i)
      out[i] = finish<E, A, Cv, kAvg>(Op::step(Op::step(acc[i], L::at(s, c, i)), L::at(t, ct, i)), q);
  } else {
    PURLIN_IVDEP
    for (int64_t i = 0; i < len; ++i) out[i] = finish<E, A, Cv, kAvg>(Op::step(acc[i], L::at(s, c, i)), q);
  }
}

template <class E, class A, class Cv, class Op, bool kScaled = false, bool kAvg = false>
void fold(void* dst, const void* const* srcs, const double* scales, int nsrc, int64_t n) {
  alignas(64) A acc[kBlock];
  E* d = static_cast<E*>(dst);
  int64_t base = 0;
  for (; base + kBlock <= n; base += kBlock)
    fold_block<E, A, Cv, Op, kScaled, kAvg>(d, srcs, scales, nsrc, base, kBlock, acc);
  if (base < n) fold_block<E, A, Cv, Op, kScaled, kAvg>(d, srcs, scales, nsrc, base, n - base, acc);
}

// Complex product over interleaved (re, im) pairs of R.
template <class R>
void complex_product(void* dst, const void* const* srcs, int nsrc, int64_t n) {
  alignas(64) R re[kBlock];
  alignas(64) R im[kBlock];
  R* d = static_cast<R*>(dst);
  for (int64_t base = 0; base < n; base += kBlock) {
    const int64_t len = std::min(kBlock, n - base);
    const R* s0 = static_cast<const R*>(srcs[0]) + 2 * base;
    for (int64_t i = 0; i < len; ++i) re[i] = s0[2 * i], im[i] = s0[2 * i + 1];
    for (int k = 1; k < nsrc; ++k) {
      const R* s = static_cast<const R*>(srcs[k]) + 2 * base;
      for (int64_t i = 0; i < len; ++i) {
        const R xr = s[2 * i], xi = s[2 * i + 1];
        const R r = re[i] * xr - im[i] * xi;
        im[i] = re[i] * xi + im[i] * xr;
        re[i] = r;
      }
    }
    for (int64_t i = 0; i < len; ++i) d[2 * (base + i)] = re[i], d[2 * (base + i) + 1] = im[i];
  }
}

// ---- dispatch: one switch per call, per dtype family -----------------------
struct Args {
  void* dst;
  const void* const* srcs;
  const double* scales;
  int nsrc;
  int64_t n;
};

template <class E, class A, class Cv>
void floating(RedOp op, const Args& a) {
  switch (op) {
    case RedOp::Sum: return fold<E, A, Cv, Add>(a.dst, a.srcs, a.scales, a.nsrc, a.n);
    case RedOp::Avg: return fold<E, A, Cv, Add, false, true>(a.dst, a.srcs, a.scales, a.nsrc, a.n);
    case RedOp::Product: return fold<E, A, Cv, Mul>(a.dst, a.srcs, a.scales, a.nsrc, a.n);
    case RedOp::Min: return fold<E, A, Cv, Min>(a.dst, a.srcs, a.scales, a.nsrc, a.n);
    case RedOp::Max: return fold<E, A, Cv, Max>(a.dst, a.srcs, a.scales, a.nsrc, a.n);
    case RedOp::PremulSum: return fold<E, A, Cv, Add, true>(a.dst, a.srcs, a.scales, a.nsrc, a.n);
  }
}

template <class T>
void integer(RedOp op, const Args& a) {
  using Cv = Plain<T, T>;
  switch (op) {
    case RedOp::Sum: return fold<T, T, Cv, WrapAdd>(a.dst, a.srcs, a.scales, a.nsrc, a.n);
    case RedOp::Product: return fold<T, T, Cv, WrapMul>(a.dst, a.srcs, a.scales, a.nsrc, a.n);
    case RedOp::Min: return fold<T, T, Cv, Min>(a.dst, a.srcs, a.scales, a.nsrc, a.n);
    case RedOp::Max: return fold<T, T, Cv, Max>(a.dst, a.srcs, a.scales, a.nsrc, a.n);
    default: return;  // excluded by reduction_supported
  }
}

void boolean(RedOp op, const Args& a) {
  if (op == RedOp::Sum || op == RedOp::Max)
    fold<uint8_t, uint8_t, Bool01, Or>(a.dst, a.srcs, a.scales, a.nsrc, a.n);
  else
    fold<uint8_t, uint8_t, Bool01, And>(a.dst, a.srcs, a.scales, a.nsrc, a.n);
}

template <class R>
void complex(RedOp op, const Args& a) {
  if (op == RedOp::Product) return complex_product<R>(a.dst, a.srcs, a.nsrc, a.n);
  // SUM / AVG / PREMUL_SUM act on real and imaginary parts independently.
  floating<R, R, Plain<R, R>>(op, Args{a.dst, a.srcs, a.scales, a.nsrc, 2 * a.n});
}

[[noreturn]] void bad_args(DType dtype, RedOp op, const char* why) {
  throw std::invalid_argument(std::string("purlin reduce_cpu(") + dtype_name(dtype) + ", " + redop_name(op) +
                              "): " + why);
}

}  // namespace

PURLIN_REDUCE_DISPATCH
void reduce_cpu(void* dst, const void* const* srcs, const double* scales, int nsrc, int64_t n,
                DType dtype, RedOp op) {
  const char* why = nullptr;
  if (!reduction_supported(dtype, op, &why)) bad_args(dtype, op, why);
  if (nsrc < 1 || n < 0) bad_args(dtype, op, "need nsrc >= 1 and n >= 0");
  if (op == RedOp::PremulSum && scales == nullptr) bad_args(dtype, op, "PREMUL_SUM needs scales");
  if (n == 0) return;
  const Args a{dst, srcs, scales, nsrc, n};
  switch (dtype) {
    case DType::Float32: return floating<float, float, Plain<float, float>>(op, a);
    case DType::Float64: return floating<double, double, Plain<double, double>>(op, a);
    case DType::Float16: return floating<uint16_t, float, Half>(op, a);
    case DType::BFloat16: return floating<uint16_t, float, BHalf>(op, a);
    case DType::Int8: return integer<int8_t>(op, a);
    case DType::Int16: return integer<int16_t>(op, a);
    case DType::Int32: return integer<int32_t>(op, a);
    case DType::Int64: return integer<int64_t>(op, a);
    case DType::UInt8: return integer<uint8_t>(op, a);
    case DType::Bool: return boolean(op, a);
    case DType::Complex64: return complex<float>(op, a);
    case DType::Complex128: return complex<double>(op, a);
    default: bad_args(dtype, op, "unknown dtype");
  }
}

}  // namespace purlin::atom::cpu
