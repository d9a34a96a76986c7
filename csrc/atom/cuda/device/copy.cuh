// copy.cuh — block-wide copy of a byte range (Atom copy on the GPU).
//
// The widest access both pointers allow: when dst and src agree modulo 16 a
// scalar head brings dst to 16-byte alignment and the body moves int4
// vectors, kUnroll of them in flight per thread; otherwise the largest of
// 8/4/2/1 bytes they agree on. Loads use ld.global.cg (L2, not L1): sources
// may be a peer's workspace, rewritten between rounds. Ranges must not overlap.
#pragma once

#include <cstdint>

#include "atom/cuda/device/ptx.cuh"

namespace purlin::atom::cuda {

namespace detail {

constexpr int kUnroll = 4;

// Copies `bytes` bytes with V-sized accesses after a byte-wise head that
// aligns dst to sizeof(V) (src must agree with dst modulo sizeof(V)).
template <class V>
__device__ __forceinline__ void copy_with(char* dst, const char* src, int64_t bytes) {
  constexpr int64_t kW = sizeof(V);
  const int64_t tid = threadIdx.x, nt = blockDim.x;
  int64_t head = static_cast<int64_t>((kW - (reinterpret_cast<uintptr_t>(dst) & (kW - 1))) & (kW - 1));
  if (head > bytes) head = bytes;
  for (int64_t i = tid; i < head; i += nt) dst[i] = ptx::ld_cg(src + i);
  dst += head;
  src += head;
  bytes -= head;
  const int64_t nv = bytes / kW;
  V* dv = reinterpret_cast<V*>(dst);
  const V* sv = reinterpret_cast<const V*>(src);
  int64_t i = tid;
  for (; i + (kUnroll - 1) * nt < nv; i += kUnroll * nt) {
    V r[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) r[u] = ptx::ld_cg(sv + i + u * nt);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) dv[i + u * nt] = r[u];
  }
  for (; i < nv; i += nt) dv[i] = ptx::ld_cg(sv + i);
  for (int64_t j = nv * kW + tid; j < bytes; j += nt) dst[j] = ptx::ld_cg(src + j);
}

}  // namespace detail

__device__ __forceinline__ void block_copy(void* dst_, const void* src_, int64_t bytes) {
  char* dst = static_cast<char*>(dst_);
  const char* src = static_cast<const char*>(src_);
  if (bytes <= 0 || dst == src) return;
  const uintptr_t agree = reinterpret_cast<uintptr_t>(dst) ^ reinterpret_cast<uintptr_t>(src);
  if ((agree & 15) == 0) return detail::copy_with<int4>(dst, src, bytes);
  if ((agree & 7) == 0) return detail::copy_with<int2>(dst, src, bytes);
  if ((agree & 3) == 0) return detail::copy_with<int>(dst, src, bytes);
  if ((agree & 1) == 0) return detail::copy_with<short>(dst, src, bytes);
  return detail::copy_with<char>(dst, src, bytes);
}

}  // namespace purlin::atom::cuda
