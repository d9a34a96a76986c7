// wide_line_op.cuh — one Copy / Reduce op of a line plan on wide lines
// (NOTE [wide lines] in wide_line.cuh): the line kernel's (line_kernel.cuh)
// per-op work when the group's line format is wide.
//
// A block takes whole lines of the op (wide_part_size()); a warp takes four
// consecutive lines per step, one per line group of eight lanes; lane j of
// a group holds payload bytes [16j, 16j + 16) of its line (lane 7: [112,
// 120), then the flag word). Line `l` of an op holds its elements
// [l * P, (l + 1) * P), P = kWidePayload / sizeof(T); a Workspace ref's
// offset is a piece start, so on a line (NOTE [wide lines]).
#pragma once

#include <cstdint>
#include <cstring>

#include "atom/cuda/device/plan_kernel.cuh"
#include "atom/cuda/device/wide_line.cuh"

namespace purlin::atom::cuda::detail {

// Where this lane's 16 bytes of line `line` of Workspace ref r are.
template <class T>
__device__ __forceinline__ char* wide_part(char* const* lines, const DevRef& r, int64_t line) {
  const int64_t first = r.offset * static_cast<int64_t>(sizeof(T)) / kWidePayload;
  return lines[r.rank] + (first + line) * kWideLineBytes + (threadIdx.x & (kWideGroup - 1)) * 16;
}

// Element j (< 16 / sizeof(T), a constant once unrolled) of a lane's 16
// bytes, and its bits set into zeroed ones: shifts on one of the two words
// (NOTE [register units] in line_kernel.cuh). wide_set spells out elem_bits:
// calling it gave ptxas another schedule (same instructions, reordered),
// and this is the code the GPU suite ran.
template <class T>
__device__ __forceinline__ T wide_elem(const WideWords& w, int j) {
  constexpr int kH = 8 / sizeof(T);
  return elem_of<T>(j < kH ? w.lo : w.hi, sizeof(T) * (j % kH));
}

template <class T>
__device__ __forceinline__ void wide_set(WideWords& w, int j, T x) {
  constexpr int kH = 8 / sizeof(T);
  uint64_t v = 0;
  memcpy(&v, &x, sizeof(T));
  v <<= 8 * sizeof(T) * (j % kH);
  if (j < kH) w.lo |= v;
  else w.hi |= v;
}

// k elements of plain memory (Input / Output) to / from a lane's words: one
// 16-byte access where the memory is 16-byte aligned, 8-byte accesses where
// it is 8-byte aligned (a lane's bytes start at 120 l + 16 j, so every odd
// line, and lane 7 always holds 8 bytes), elements otherwise. Words past k
// load as zeros.
template <class T>
__device__ __forceinline__ WideWords load_plain(const T* src, int k) {
  constexpr int kU = 16 / sizeof(T), kH = kU / 2;
  const uintptr_t a = reinterpret_cast<uintptr_t>(src);
  if (k == kU && (a & 15) == 0) {
    const ulonglong2 v = *reinterpret_cast<const ulonglong2*>(src);
    return WideWords{v.x, v.y};
  }
  WideWords w{0, 0};
  int j0 = 0;
  if ((a & 7) == 0 && k >= kH) {
    w.lo = *reinterpret_cast<const uint64_t*>(src);
    if (k == kU) {
      w.hi = reinterpret_cast<const uint64_t*>(src)[1];
      return w;
    }
    j0 = kH;
  }
#pragma unroll
  for (int j = 0; j < kU; ++j)
    if (j >= j0 && j < k) wide_set<T>(w, j, src[j]);
  return w;
}

template <class T>
__device__ __forceinline__ void store_plain(T* dst, const WideWords& w, int k) {
  constexpr int kU = 16 / sizeof(T), kH = kU / 2;
  const uintptr_t a = reinterpret_cast<uintptr_t>(dst);
  if (k == kU && (a & 15) == 0) {
    *reinterpret_cast<ulonglong2*>(dst) = ulonglong2{w.lo, w.hi};
    return;
  }
  int j0 = 0;
  if ((a & 7) == 0 && k >= kH) {
    *reinterpret_cast<uint64_t*>(dst) = w.lo;
    if (k == kU) {
      reinterpret_cast<uint64_t*>(dst)[1] = w.hi;
      return;
    }
    j0 = kH;
  }
#pragma unroll
  for (int j = 0; j < kU; ++j)
    if (j >= j0 && j < k) dst[j] = wide_elem<T>(w, j);
}

// This lane's k elements (from op element e0) of ref r into *x. Called by
// the whole warp: a Workspace read polls the line with the group.
template <class T>
__device__ __forceinline__ bool wide_load_ref(const KernelParams& p, char* const* lines, const DevRef& r, int64_t line,
                                              int64_t e0, int k, bool active, WideWords* x, uint64_t flag,
                                              const WaitSite& site) {
  if (r.buf == kWorkspace)  // lane 7: the flag word lies beyond its k
    return wide_wait(wide_part<T>(lines, r, line), active, flag, x, site, r.origin, p.line_phase);
  *x = active ? load_plain<T>(reinterpret_cast<const T*>(r.buf == kInput ? p.input : p.output) + r.offset + e0, k)
              : WideWords{0, 0};
  return true;
}

// This lane's k elements in x to ref d; a Workspace write stores the whole
// line with the group, zeros past the op's end and the flag word in lane 7.
template <class T>
__device__ __forceinline__ void wide_store_ref(const KernelParams& p, char* const* lines, const DevRef& d, int64_t line,
                                               int64_t e0, int k, bool active, WideWords w, uint64_t flag) {
  if (d.buf == kWorkspace) {
    const int bytes = k * static_cast<int>(sizeof(T));  // zeros past the op's end (registers)
    if (bytes < 16) {
      w.hi = bytes <= 8 ? 0 : w.hi & ((1ull << (8 * (bytes - 8))) - 1);
      w.lo = bytes >= 8 ? w.lo : bytes == 0 ? 0 : w.lo & ((1ull << (8 * bytes)) - 1);
    }
    if ((threadIdx.x & (kWideGroup - 1)) == kWideGroup - 1) w.hi = flag;
    __syncwarp();  // the group's eight stores in one instruction
    if (active) wide_store(wide_part<T>(lines, d, line), w);
    return;
  }
  if (active) store_plain<T>(reinterpret_cast<T*>(d.buf == kInput ? p.input : p.output) + d.offset + e0, w, k);
}

// The arithmetic of reduce.cuh's reduce_one (sources in plan order).
template <class T, class Op, bool kAvg>
__device__ __forceinline__ bool wide_reduce(const KernelParams& p, char* const* lines, const DevOp& op,
                                            const DevRef* srcs, int64_t line, int64_t e0, int k, bool active,
                                            uint64_t flag, const WaitSite& site) {
  using A = typename Elem<T>::Acc;
  constexpr int kU = 16 / sizeof(T);
  WideWords w;
  A acc[kU];
  if (!wide_load_ref<T>(p, lines, srcs[op.src_begin], line, e0, k, active, &w, flag, site)) return false;
#pragma unroll
  for (int j = 0; j < kU; ++j) acc[j] = Elem<T>::load(wide_elem<T>(w, j));
  for (int s = 1; s < op.src_count; ++s) {
    if (!wide_load_ref<T>(p, lines, srcs[op.src_begin + s], line, e0, k, active, &w, flag, site)) return false;
#pragma unroll
    for (int j = 0; j < kU; ++j) acc[j] = Op::step(acc[j], Elem<T>::load(wide_elem<T>(w, j)));
  }
  WideWords out{0, 0};
#pragma unroll
  for (int j = 0; j < kU; ++j)
    wide_set<T>(out, j, Elem<T>::store(kAvg ? div(acc[j], static_cast<A>(op.src_count)) : acc[j]));
  wide_store_ref<T>(p, lines, op.dst, line, e0, k, active, out, flag);
  return true;
}

// One Copy / Reduce op, this block's lines. Returns false (in every thread
// of a warp alike) when a wait failed.
template <class T>
__device__ __forceinline__ bool wide_op(const KernelParams& p, char* const* lines, const DevOp& op, const DevRef* srcs, uint64_t flag,
                        const WaitSite& site) {
  constexpr int64_t kE = sizeof(T), kP = kWidePayload / kE;
  constexpr int kU = 16 / kE;
  const int64_t per = wide_part_size(op.n, static_cast<int>(gridDim.x), kE) / kP;  // lines per block
  const int64_t n_lines = (op.n + kP - 1) / kP;
  const int64_t lo = blockIdx.x * per, hi = n_lines < lo + per ? n_lines : lo + per;
  const int lane = static_cast<int>(threadIdx.x & 31), j = lane & (kWideGroup - 1);
  const int64_t step = static_cast<int64_t>(blockDim.x >> 5) * (32 / kWideGroup);
  // l0 is the warp's first line: the loop is uniform in the warp.
  for (int64_t l0 = lo + static_cast<int64_t>(threadIdx.x >> 5) * (32 / kWideGroup); l0 < hi; l0 += step) {
    const int64_t line = l0 + lane / kWideGroup;
    const bool active = line < hi;
    const int64_t e0 = line * kP + j * kU;
    const int64_t cap = j == kWideGroup - 1 ? kU / 2 : kU, left = op.n - e0;
    const int k = static_cast<int>(left <= 0 ? 0 : left < cap ? left : cap);
    if (op.code == kCopy) {
      WideWords w;
      if (!wide_load_ref<T>(p, lines, srcs[op.src_begin], line, e0, k, active, &w, flag, site)) return false;
      wide_store_ref<T>(p, lines, op.dst, line, e0, k, active, w, flag);
      continue;
    }
    if constexpr (kReducible<T>) {
      bool ok = true;
      switch (static_cast<RedOp>(p.redop)) {
        case RedOp::Sum: ok = wide_reduce<T, OpSum, false>(p, lines, op, srcs, line, e0, k, active, flag, site); break;
        case RedOp::Product: ok = wide_reduce<T, OpProd, false>(p, lines, op, srcs, line, e0, k, active, flag, site); break;
        case RedOp::Min: ok = wide_reduce<T, OpMin, false>(p, lines, op, srcs, line, e0, k, active, flag, site); break;
        case RedOp::Max: ok = wide_reduce<T, OpMax, false>(p, lines, op, srcs, line, e0, k, active, flag, site); break;
        case RedOp::Avg:
          if constexpr (std::is_floating_point_v<typename Elem<T>::Acc>)
            ok = wide_reduce<T, OpSum, true>(p, lines, op, srcs, line, e0, k, active, flag, site);
          break;
        default: break;  // PREMUL_SUM never runs on lines (NOTE [line plans])
      }
      if (!ok) return false;
    }
  }
  return true;
}

}  // namespace purlin::atom::cuda::detail
