// line_kernel.cuh — the plan kernel over flagged lines: a small collective in
// one NVLink trip (NOTE [flagged lines] in flagged_line.cuh).
//
// NOTE [line plans] The same SNAC push plan, another Atom underneath: every
//   Workspace access goes to the line region (two parities) instead of the
//   workspace. A write to Workspace(q) is a flagged-line store into q's region
//   (Stage and Notify in one remote store), a read of Workspace(self) polls
//   those lines (the Staged Wait and the call-tag check, per line); Wait and
//   Signal do nothing (one round, nothing to ack).
//   Reuse across collectives: line collective m writes parity m % 2 of its
//   readers' regions, after waiting until each peer raised Done for the
//   collective before last (pbase): that peer no longer reads that parity. A
//   line launch raises Done and advances the epochs like any launch, so plan
//   kernels around it keep NOTE [device reuse].
//   Plans qualify on the host, identically on every rank (CudaGroup::plan_for):
//   one round, push, one-shot, not PREMUL_SUM (peers would read the scale word
//   without a barrier), elements of at most 8 bytes, contiguous source regions
//   (every line holds bytes of one op). The line format is the group's: narrow
//   16-byte lines (flagged_line.cuh) or wide 128-byte ones (NOTE [wide lines]),
//   which also need contiguous destinations.
//   Details: docs/CUDA_DATAPATH.md, "Line plans".
#pragma once

#include <cstdint>
#include <cstring>

#include "atom/cuda/device/flagged_line.cuh"
#include "atom/cuda/device/plan_kernel.cuh"
#include "atom/cuda/device/wide_line_op.cuh"

namespace purlin::atom::cuda {

namespace detail {

// NOTE [register units] A unit is one line's payload: kK = 8 / sizeof(T)
//   elements, k <= kK of them the op's. Units live in registers: every loop
//   over a unit runs to the constant kK (unrolled) and tests j < k, and bytes
//   move between a unit and a 64-bit word by shifts, never by a runtime
//   index (an array indexed at run time goes to local memory, a round trip
//   to L2 or HBM on its first touch). The kernel makes no calls (a call's
//   ABI keeps a stack and spills the op loop's counter). The narrow line
//   kernel says __launch_bounds__(1024, 1) (a launch has at most one block
//   per SM; without the 1 ptxas may aim at two and spill); the wide kernel
//   keeps (1024). Every line wait is inlined, so its slow path shares the
//   timeout's record. .ci/check_kernel_stack.py fails a plan or line kernel
//   that keeps a stack frame on sm_90 beyond its list. Measurements behind
//   each rule: docs/PERFORMANCE.md, "Register units".
template <class T>
constexpr int kUnit = static_cast<int>(kLinePayload / sizeof(T));

// The first k elements of x packed into a word, zeros after them.
template <class T>
__device__ __forceinline__ uint64_t pack_unit(const T (&x)[kUnit<T>], int k) {
  uint64_t v = 0;
#pragma unroll
  for (int j = 0; j < kUnit<T>; ++j) {
    const uint64_t w = elem_bits<T>(x[j], sizeof(T) * j);
    if (j < k) v |= w;
  }
  return v;
}

// k elements e0.. of ref r into x.
template <class T>
__device__ __forceinline__ bool load_unit(const KernelParams& p, char* const* lines, const DevRef& r, int64_t e0,
                                          int k, T (&x)[kUnit<T>], LineFlags flag, const WaitSite& site) {
  constexpr int kE = sizeof(T), kK = kUnit<T>;
  if (r.buf == kWorkspace) {
    const int64_t byte = (r.offset + e0) * kE;
    const char* line = lines[r.rank] + (byte >> 3) * kLineBytes;
    const int b0 = static_cast<int>(byte & 7);  // an unaligned read (e.g. into a strided output) spans two lines
    uint64_t v = 0, v2 = 0;
    if (!line_wait(line, flag, &v, site, r.origin, p.line_phase)) return false;
    if (b0 + k * kE > 8 && !line_wait(line + kLineBytes, flag, &v2, site, r.origin, p.line_phase)) return false;
#pragma unroll
    for (int j = 0; j < kK; ++j) {
      const int b = b0 + j * kE;
      x[j] = elem_of<T>(b < 8 ? v : v2, b & 7);
    }
    return true;
  }
  const T* src = reinterpret_cast<const T*>(r.buf == kInput ? p.input : p.output) + r.offset + e0;
  if (k == kK && (reinterpret_cast<uintptr_t>(src) & 7) == 0) {  // a whole line's worth: one 8-byte load
    const uint64_t v = *reinterpret_cast<const uint64_t*>(src);
#pragma unroll
    for (int j = 0; j < kK; ++j) x[j] = elem_of<T>(v, j * kE);
    return true;
  }
#pragma unroll
  for (int j = 0; j < kK; ++j)
    if (j < k) x[j] = src[j];
  return true;
}

template <class T>
__device__ __forceinline__ void store_unit(const KernelParams& p, char* const* lines, const DevRef& d, int64_t e0, int k,
                                           const T (&x)[kUnit<T>], LineFlags flag) {
  constexpr int kE = sizeof(T), kK = kUnit<T>;
  if (d.buf == kWorkspace) {  // starts on a line (NOTE [line plans]); zeros after the op's end
    line_store(lines[d.rank] + ((d.offset + e0) * kE >> 3) * kLineBytes, pack_unit<T>(x, k), flag);
    return;
  }
  T* dst = reinterpret_cast<T*>(d.buf == kInput ? p.input : p.output) + d.offset + e0;
  if (k == kK && (reinterpret_cast<uintptr_t>(dst) & 7) == 0) {  // one 8-byte store
    *reinterpret_cast<uint64_t*>(dst) = pack_unit<T>(x, kK);
    return;
  }
#pragma unroll
  for (int j = 0; j < kK; ++j)
    if (j < k) dst[j] = x[j];
}

// The arithmetic of reduce.cuh's reduce_one, on k elements per source.
template <class T, class Op, bool kAvg>
__device__ __forceinline__ bool reduce_unit(const KernelParams& p, char* const* lines, const DevOp& op,
                                            const DevRef* srcs, int64_t e0, int k, LineFlags flag, const WaitSite& site) {
  using A = typename Elem<T>::Acc;
  constexpr int kK = kUnit<T>;
  T x[kK] = {};
  A acc[kK];
  if (!load_unit<T>(p, lines, srcs[op.src_begin], e0, k, x, flag, site)) return false;
#pragma unroll
  for (int j = 0; j < kK; ++j) acc[j] = Elem<T>::load(x[j]);
  for (int s = 1; s < op.src_count; ++s) {
    if (!load_unit<T>(p, lines, srcs[op.src_begin + s], e0, k, x, flag, site)) return false;
#pragma unroll
    for (int j = 0; j < kK; ++j) acc[j] = Op::step(acc[j], Elem<T>::load(x[j]));
  }
#pragma unroll
  for (int j = 0; j < kK; ++j) x[j] = Elem<T>::store(kAvg ? div(acc[j], static_cast<A>(op.src_count)) : acc[j]);
  store_unit<T>(p, lines, op.dst, e0, k, x, flag);
  return true;
}

// One Copy / Reduce op, this block's share (NOTE [block partition]).
// Inlined into the kernel: a call would read the kernel parameters through
// a generic pointer (a global load each) instead of the constant bank.
template <class T>
__device__ __forceinline__ bool line_op(const KernelParams& p, char* const* lines, const DevOp& op, const DevRef* srcs,
                                        LineFlags flag, const WaitSite& site) {
  constexpr int64_t kE = sizeof(T), kK = kUnit<T>;
  const int G = static_cast<int>(gridDim.x);
  const int64_t per = G == 1 ? op.n : part_size(op.n, G, kE), lo = blockIdx.x * per;
  const int64_t hi = op.n < lo + per ? op.n : lo + per;
  for (int64_t e0 = lo + threadIdx.x * kK; e0 < hi; e0 += static_cast<int64_t>(blockDim.x) * kK) {
    const int k = static_cast<int>(hi - e0 < kK ? hi - e0 : kK);
    if (op.code == kCopy) {
      T x[kK] = {};
      if (!load_unit<T>(p, lines, srcs[op.src_begin], e0, k, x, flag, site)) return false;
      store_unit<T>(p, lines, op.dst, e0, k, x, flag);
      continue;
    }
    if constexpr (kReducible<T>) {
      bool ok = true;
      switch (static_cast<RedOp>(p.redop)) {
        case RedOp::Sum: ok = reduce_unit<T, OpSum, false>(p, lines, op, srcs, e0, k, flag, site); break;
        case RedOp::Product: ok = reduce_unit<T, OpProd, false>(p, lines, op, srcs, e0, k, flag, site); break;
        case RedOp::Min: ok = reduce_unit<T, OpMin, false>(p, lines, op, srcs, e0, k, flag, site); break;
        case RedOp::Max: ok = reduce_unit<T, OpMax, false>(p, lines, op, srcs, e0, k, flag, site); break;
        case RedOp::Avg:
          if constexpr (std::is_floating_point_v<typename Elem<T>::Acc>)
            ok = reduce_unit<T, OpSum, true>(p, lines, op, srcs, e0, k, flag, site);
          break;
        default: break;  // PREMUL_SUM never runs on lines (NOTE [line plans])
      }
      if (!ok) return false;
    }
  }
  return true;
}

}  // namespace detail

template <class T, bool kWide>
__global__ void __launch_bounds__(1024, kWide ? 0 : 1) line_kernel(const __grid_constant__ KernelParams p) {
  __shared__ uint64_t s_state[4];
  __shared__ char* s_lines[kMaxWorld];
  __shared__ uint64_t* s_pads[kMaxWorld];  // peer q's pad, for end_launch's Done stores
  __shared__ DevOp s_ops[detail::kStagedOps];
  __shared__ DevRef s_srcs[detail::kStagedSrcs];
  const int tid = threadIdx.x, G = static_cast<int>(gridDim.x);
  const PadLayout& L = p.layout;
  const uint64_t* broken = p.pad + L.broken();
  // NOTE [staged plan]: the host's plan, so before the wait; published by the __syncthreads_and below.
  const bool staged = p.n_ops <= detail::kStagedOps && p.n_srcs >= 0 && p.n_srcs <= detail::kStagedSrcs;
  if (staged) detail::stage_plan(p, s_ops, s_srcs);
  ptx::griddep_wait();  // NOTE [overlapped launch]: before any global memory access the previous kernel may write
  ptx::griddep_launch_dependents();
  // One memory latency before the first store, not three: thread 0 reads the
  // launch state while thread q (< world) reads what it needs itself, the
  // line parity and peer q's region, and polls peer q's Done word for the
  // reuse wait of NOTE [line plans] (every peer finished the collective
  // before last: Done >= pbase). All these loads are independent.
  if (tid == 0) {
    s_state[0] = p.pad[L.base()];
    s_state[1] = p.pad[L.lbase()];
    s_state[2] = *reinterpret_cast<const volatile uint64_t*>(broken);
    s_state[3] = p.pad[L.lseq()];
  }
  WaitSite site{p.err, p.pad + L.broken(), p.timeout_ns, 0, p.rank, p.op_name};
  bool ok = true;
  for (int q = tid; q < L.world; q += blockDim.x) {  // one q per thread: prepare_plan checks threads >= world
    const uint64_t lseq = p.pad[L.lseq()], region = p.pad[L.peer_table(q)];
    if (q != p.rank) {
      const uint64_t pbase = p.pad[L.pbase()];
      const uint64_t* done = p.pad + L.flag(kDone, 0, 0) + static_cast<int64_t>(q) * L.blocks;
      const uint64_t seen = ptx::ld_acquire_sys(done);
      // A broken group (an earlier collective failed) returns below instead.
      if (seen < pbase && *reinterpret_cast<const volatile uint64_t*>(broken) == 0)
        ok = wait_flag<true>(done, pbase, seen, site, q, 0, kDone, p.reuse_phase);
    }
    s_pads[q] = reinterpret_cast<uint64_t*>(region);
    s_lines[q] = reinterpret_cast<char*>(region) + (kWide ? L.wide_offset + static_cast<int64_t>(lseq & 1) * L.wide_half
                                                          : L.line_offset + static_cast<int64_t>(lseq & 1) * L.line_half);
  }
  if (!__syncthreads_and(ok) || s_state[2] != 0) return;
  const uint64_t base = s_state[0], lbase = s_state[1], lseq = s_state[3];
  const LineFlags flag = line_flags(lseq, p.call_sig);
  site.base = base;
  // The op loop, instantiated for the staged plan (shared memory) and for a
  // plan read in place: one pointer for both would make every op and source
  // read of a staged plan a generic load (NOTE [staged plan]).
  auto run_ops = [&](const DevOp* ops, const DevRef* srcs) -> bool {
    for (int i = 0; i < p.n_ops; ++i) {
      const DevOp& op = ops[i];
      switch (op.code) {
        case kLocalSync:
          if (!detail::local_sync(p, op, lbase, site, G)) return false;
          break;
        case kCopy:
        case kReduce: {
          bool ok;
          if constexpr (kWide) ok = detail::wide_op<T>(p, s_lines, op, srcs, wide_flag(flag), site);
          else ok = detail::line_op<T>(p, s_lines, op, srcs, flag, site);
          if (__syncthreads_or(!ok)) return false;
          break;
        }
        default: break;  // Wait / Signal: carried by the lines
      }
    }
    return true;
  };
  if (!(staged ? run_ops(s_ops, s_srcs) : run_ops(p.ops ? p.ops : p.inl.ops, p.ops ? p.srcs : p.inl.srcs))) return;
  detail::end_launch(p, base, lbase, lseq, G, true, true, s_pads);
}

}  // namespace purlin::atom::cuda
