// reduce.cuh — block-wide elementwise reduction (Atom reduce on the GPU).
//
//   dst[i] = fold over k = 0..nsrc-1, in that order, of (scale[k] *) srcs[k][i]
//
// The same arithmetic as atom/cpu/reduce_cpu.h, operation by operation, so a
// GPU rank and the CPU executor produce identical bits: float16 / bfloat16
// accumulate in float32 and round once (round-to-nearest-even); every float
// operation is an explicitly rounded intrinsic (__fadd_rn, __fmul_rn, ...),
// which the compiler never contracts into an FMA; integers wrap; MIN/MAX
// propagate NaN; AVG is SUM then one division by nsrc; PREMUL_SUM scales
// every source, the first included. bool and complex are not reduced here
// (the backend serves them through NCCL).
//
// 16-byte vectors when dst and every source share their address modulo 16
// (after a scalar head), scalar otherwise. dst may alias srcs[0] exactly.
#pragma once

#include <cstdint>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "atom/cuda/device/ptx.cuh"

namespace purlin::atom::cuda {

// ---- element <-> accumulator ------------------------------------------------
template <class T>
struct Elem {  // integers and float / double: accumulate in the type itself
  using Acc = T;
  __device__ static Acc load(T x) { return x; }
  __device__ static T store(Acc a) { return a; }
};
template <>
struct Elem<__half> {
  using Acc = float;
  __device__ static float load(__half x) { return __half2float(x); }
  __device__ static __half store(float a) { return __float2half_rn(a); }
};
template <>
struct Elem<__nv_bfloat16> {
  using Acc = float;
  __device__ static float load(__nv_bfloat16 x) { return __bfloat162float(x); }
  __device__ static __nv_bfloat16 store(float a) { return __float2bfloat16_rn(a); }
};

// Whether the plan kernel reduces T at all (copy-only types: see plan_kernel.cuh).
template <class T>
constexpr bool kReducible = std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, __half> ||
                            std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, int8_t> ||
                            std::is_same_v<T, int16_t> || std::is_same_v<T, int32_t> ||
                            std::is_same_v<T, int64_t> || std::is_same_v<T, uint8_t>;

// ---- arithmetic on the accumulator, never contracted ------------------------
template <class A>
using WrapT = std::conditional_t<(sizeof(A) < sizeof(unsigned)), unsigned, std::make_unsigned_t<A>>;

template <class A>
__device__ __forceinline__ A add(A a, A x) {
  if constexpr (std::is_same_v<A, float>) return __fadd_rn(a, x);
  else if constexpr (std::is_same_v<A, double>) return __dadd_rn(a, x);
  else return static_cast<A>(static_cast<WrapT<A>>(a) + static_cast<WrapT<A>>(x));
}
template <class A>
__device__ __forceinline__ A mul(A a, A x) {
  if constexpr (std::is_same_v<A, float>) return __fmul_rn(a, x);
  else if constexpr (std::is_same_v<A, double>) return __dmul_rn(a, x);
  else return static_cast<A>(static_cast<WrapT<A>>(a) * static_cast<WrapT<A>>(x));
}
template <class A>
__device__ __forceinline__ A div(A a, A q) {
  if constexpr (std::is_same_v<A, float>) return __fdiv_rn(a, q);
  else if constexpr (std::is_same_v<A, double>) return __ddiv_rn(a, q);
  else return a / q;  // not reached: AVG needs a floating dtype
}

struct OpSum {
  template <class A> __device__ static A step(A a, A x) { return add(a, x); }
};
struct OpProd {
  template <class A> __device__ static A step(A a, A x) { return mul(a, x); }
};
struct OpMin {  // NaN propagates: x wins when it is NaN, a stays when a is NaN
  template <class A> __device__ static A step(A a, A x) { return (x < a || x != x) ? x : a; }
};
struct OpMax {
  template <class A> __device__ static A step(A a, A x) { return (x > a || x != x) ? x : a; }
};

// ---- the block fold ----------------------------------------------------------
namespace detail {

template <class T, class Op, bool kScaled, bool kAvg>
__device__ __forceinline__ void reduce_one(T* dst, const T* const* srcs, const typename Elem<T>::Acc* scales,
                                           int nsrc, int64_t i) {
  using A = typename Elem<T>::Acc;
  A acc = Elem<T>::load(ptx::ld_cg(srcs[0] + i));
  if (kScaled) acc = mul(scales[0], acc);
  for (int k = 1; k < nsrc; ++k) {
    A x = Elem<T>::load(ptx::ld_cg(srcs[k] + i));
    if (kScaled) x = mul(scales[k], x);
    acc = Op::step(acc, x);
  }
  if (kAvg) acc = div(acc, static_cast<A>(nsrc));
  dst[i] = Elem<T>::store(acc);
}

// Vector v of the aligned body that starts `head` elements in.
template <class T, class Op, bool kScaled, bool kAvg>
__device__ __forceinline__ void reduce_vec(T* dst, const T* const* srcs, const typename Elem<T>::Acc* scales,
                                           int nsrc, int64_t head, int64_t v) {
  using A = typename Elem<T>::Acc;
  constexpr int kV = 16 / sizeof(T);
  alignas(16) T e[kV];
  A acc[kV];
  *reinterpret_cast<int4*>(e) = ptx::ld_cg(reinterpret_cast<const int4*>(srcs[0] + head) + v);
#pragma unroll
  for (int j = 0; j < kV; ++j) acc[j] = kScaled ? mul(scales[0], Elem<T>::load(e[j])) : Elem<T>::load(e[j]);
  for (int k = 1; k < nsrc; ++k) {
    *reinterpret_cast<int4*>(e) = ptx::ld_cg(reinterpret_cast<const int4*>(srcs[k] + head) + v);
#pragma unroll
    for (int j = 0; j < kV; ++j)
      acc[j] = Op::step(acc[j], kScaled ? mul(scales[k], Elem<T>::load(e[j])) : Elem<T>::load(e[j]));
  }
#pragma unroll
  for (int j = 0; j < kV; ++j) e[j] = Elem<T>::store(kAvg ? div(acc[j], static_cast<A>(nsrc)) : acc[j]);
  reinterpret_cast<int4*>(dst + head)[v] = *reinterpret_cast<const int4*>(e);
}

}  // namespace detail

// Reduces n elements: srcs (nsrc pointers, e.g. in shared memory) into dst,
// by all threads of the block. scales: nsrc factors, read only if kScaled.
template <class T, class Op, bool kScaled, bool kAvg>
__device__ void block_reduce(T* dst, const T* const* srcs, const typename Elem<T>::Acc* scales, int nsrc, int64_t n) {
  constexpr int64_t kV = 16 / sizeof(T);
  const int64_t tid = threadIdx.x, nt = blockDim.x;
  if (n <= 0) return;
  // Vectors need every pointer to share dst's address modulo 16.
  const uintptr_t mis = reinterpret_cast<uintptr_t>(dst) & 15;
  bool agree = mis % sizeof(T) == 0;
  for (int k = 0; k < nsrc && agree; ++k) agree = (reinterpret_cast<uintptr_t>(srcs[k]) & 15) == mis;
  if (!agree) {
    for (int64_t i = tid; i < n; i += nt) detail::reduce_one<T, Op, kScaled, kAvg>(dst, srcs, scales, nsrc, i);
    return;
  }
  int64_t head = static_cast<int64_t>(((16 - mis) & 15) / sizeof(T));
  if (head > n) head = n;
  for (int64_t i = tid; i < head; i += nt) detail::reduce_one<T, Op, kScaled, kAvg>(dst, srcs, scales, nsrc, i);
  const int64_t nv = (n - head) / kV;
  for (int64_t v = tid; v < nv; v += nt) detail::reduce_vec<T, Op, kScaled, kAvg>(dst, srcs, scales, nsrc, head, v);
  for (int64_t i = head + nv * kV + tid; i < n; i += nt)
    detail::reduce_one<T, Op, kScaled, kAvg>(dst, srcs, scales, nsrc, i);
}

}  // namespace purlin::atom::cuda
