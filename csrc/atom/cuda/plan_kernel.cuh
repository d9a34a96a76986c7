// plan_kernel.cuh — the plan kernel: the device interpreter of SNAC plans.
//
// Same semantics as snac::execute (executor.cc) with an Atom made of the
// pieces next to this file: signal.cuh (Wait/Signal), copy.cuh (Copy),
// reduce.cuh (Reduce). Shape: KernelParams (the memory it touches), the
// kernel, launch_typed (the host side, instantiated per element type in
// plan_kernel_<family>.cu; the checked entry point is launch_plan).
//
// NOTE [device reuse] A GPU collective has no host arrival handshake, so
//   what NOTE [epochs] gets from it is rebuilt on the device: every block
//   ends a collective by raising its Done slot at every peer to the next base
//   epoch, and every block begins one by waiting until all G Done slots of
//   every peer reached its own base, i.e. every peer finished reading this
//   rank's workspace (and scale word) in the previous collective. Only then
//   does it write either. One extra flag round trip per collective, and a
//   device-side barrier for free; the Staged/Consumed protocol inside the
//   plan is unchanged. Launches of one group are serialised on each rank
//   (the engine orders its streams), so kernels of one rank never overlap.
#pragma once

#include <cstdint>
#include <type_traits>

#include "atom/cuda/copy.cuh"
#include "atom/cuda/plan_kernel.h"
#include "atom/cuda/reduce.cuh"
#include "atom/cuda/signal.cuh"

namespace purlin::atom::cuda {

// 16-byte elements (complex128) are only ever copied.
struct alignas(16) Pod16 {
  uint64_t lo, hi;
};

struct KernelParams {
  InlinePlan inl;
  const DevOp* ops;      // nullptr: use inl
  const DevRef* srcs;
  char* input;
  char* output;
  uint64_t* pad;         // this rank's signal pad (= its buffer)
  ErrorRecord* err;
  uint64_t steps;
  uint64_t timeout_ns;
  double scale;
  PadLayout layout;
  int n_ops;
  uint32_t local_syncs;
  int rank;
  int redop;
  uint32_t op_name;
  uint32_t reuse_phase;  // interned phase name of the Done wait
};

namespace detail {

__device__ __forceinline__ char* buffer_of(const KernelParams& p, const DevRef& r, int64_t esize) {
  switch (r.buf) {
    case kInput: return p.input + r.offset * esize;
    case kOutput: return p.output + r.offset * esize;
    default:
      return reinterpret_cast<char*>(p.pad[p.layout.peer_table(r.rank)]) + p.layout.pad_bytes() + r.offset * esize;
  }
}

__device__ __forceinline__ uint64_t* peer_pad(const KernelParams& p, int rank) {
  return reinterpret_cast<uint64_t*>(p.pad[p.layout.peer_table(rank)]);
}

template <class T, class Acc>
__device__ void reduce_by_op(int redop, T* dst, const T* const* srcs, const Acc* scales, int nsrc, int64_t n) {
  switch (static_cast<RedOp>(redop)) {
    case RedOp::Sum: return block_reduce<T, OpSum, false, false>(dst, srcs, scales, nsrc, n);
    case RedOp::Product: return block_reduce<T, OpProd, false, false>(dst, srcs, scales, nsrc, n);
    case RedOp::Min: return block_reduce<T, OpMin, false, false>(dst, srcs, scales, nsrc, n);
    case RedOp::Max: return block_reduce<T, OpMax, false, false>(dst, srcs, scales, nsrc, n);
    case RedOp::Avg:
    case RedOp::PremulSum:
      if constexpr (std::is_floating_point_v<Acc>) {
        if (static_cast<RedOp>(redop) == RedOp::Avg) return block_reduce<T, OpSum, false, true>(dst, srcs, scales, nsrc, n);
        return block_reduce<T, OpSum, true, false>(dst, srcs, scales, nsrc, n);
      }
      return;  // excluded by reduction_supported()
  }
}

}  // namespace detail

template <class T>
__global__ void __launch_bounds__(1024) plan_kernel(const __grid_constant__ KernelParams p) {
  constexpr int64_t kE = sizeof(T);
  using Acc = std::conditional_t<kReducible<T>, typename Elem<T>::Acc, double>;
  __shared__ uint64_t s_state[3];
  __shared__ const T* s_src[kMaxWorld];
  __shared__ Acc s_scale[kMaxWorld];
  const int b = blockIdx.x, tid = threadIdx.x;
  const PadLayout& L = p.layout;
  const int G = L.blocks;

  if (tid == 0) {
    s_state[0] = p.pad[L.base(b)];
    s_state[1] = p.pad[L.lbase(b)];
    s_state[2] = *reinterpret_cast<volatile uint64_t*>(p.pad + L.broken());
  }
  __syncthreads();
  if (s_state[2] != 0) return;  // an earlier collective timed out: the group is broken
  const uint64_t base = s_state[0], lbase = s_state[1];
  WaitSite site{p.err, p.pad + L.broken(), p.timeout_ns, base, p.rank, p.op_name};

  // NOTE [device reuse]: every peer finished the previous collective.
  for (int q = 0; q < L.world; ++q)
    if (q != p.rank && !wait_all<true>(p.pad + L.flag(kDone, q, 0), G, base, site, q, kDone, p.reuse_phase)) return;
  if (tid == 0) p.pad[L.scale()] = static_cast<uint64_t>(__double_as_longlong(p.scale));

  const DevOp* ops = p.ops ? p.ops : p.inl.ops;
  const DevRef* srcs = p.ops ? p.srcs : p.inl.srcs;
  for (int i = 0; i < p.n_ops; ++i) {
    const DevOp& op = ops[i];
    switch (op.code) {
      case kWait:
        if (!wait_all<true>(p.pad + L.flag(op.flag, op.peer, 0), G, base + op.value, site, op.peer, op.flag, op.phase))
          return;
        break;
      case kSignal:
        __syncthreads();
        if (tid == 0) ptx::st_release_sys(detail::peer_pad(p, op.peer) + L.flag(op.flag, p.rank, b), base + op.value);
        break;
      case kLocalSync: {
        __syncthreads();
        if (tid == 0) ptx::st_release_gpu(p.pad + L.local(b), lbase + op.value);
        WaitSite local = site;
        local.base = lbase;
        if (!wait_all<false>(p.pad + L.local(0), G, lbase + op.value, local, p.rank, kLocal, op.phase)) return;
        break;
      }
      case kCopy: {
        const int64_t per = part_size(op.n, G, kE), lo = b * per;
        const int64_t hi = op.n < lo + per ? op.n : lo + per;
        if (lo < hi)
          block_copy(detail::buffer_of(p, op.dst, kE) + lo * kE, detail::buffer_of(p, srcs[op.src_begin], kE) + lo * kE,
                     (hi - lo) * kE);
        __syncthreads();
        break;
      }
      case kReduce: {
        if constexpr (kReducible<T>) {
          const int64_t per = part_size(op.n, G, kE), lo = b * per;
          const int64_t hi = op.n < lo + per ? op.n : lo + per;
          if (lo < hi) {  // uniform in the block
            if (tid < op.src_count) {
              const DevRef& s = srcs[op.src_begin + tid];
              s_src[tid] = reinterpret_cast<const T*>(detail::buffer_of(p, s, kE)) + lo;
              double f = p.scale;
              if (static_cast<RedOp>(p.redop) == RedOp::PremulSum && s.rank != p.rank)
                f = __longlong_as_double(static_cast<long long>(ptx::ld_acquire_sys(detail::peer_pad(p, s.rank) + L.scale())));
              s_scale[tid] = static_cast<Acc>(f);
            }
            __syncthreads();
            detail::reduce_by_op<T, Acc>(p.redop, reinterpret_cast<T*>(detail::buffer_of(p, op.dst, kE)) + lo, s_src,
                                         s_scale, op.src_count, hi - lo);
          }
        }
        __syncthreads();
        break;
      }
      default: break;
    }
  }

  __syncthreads();
  if (tid == 0) {
    const uint64_t next = base + p.steps + 1;
    for (int q = 0; q < L.world; ++q)
      if (q != p.rank) ptx::st_release_sys(detail::peer_pad(p, q) + L.flag(kDone, p.rank, b), next);
    p.pad[L.base(b)] = next;
    p.pad[L.lbase(b)] = lbase + p.local_syncs;
  }
}

template <class T>
cudaError_t launch_typed(const KernelParams& p, int threads, cudaStream_t stream) {
  plan_kernel<T><<<p.layout.blocks, threads, 0, stream>>>(p);
  return cudaGetLastError();
}

#define PURLIN_INSTANTIATE_PLAN_KERNEL(T) \
  template cudaError_t launch_typed<T>(const KernelParams& p, int threads, cudaStream_t stream);
// Compiled once, in its instantiation unit, not in every includer.
#define PURLIN_EXTERN_PLAN_KERNEL(T) \
  extern template cudaError_t launch_typed<T>(const KernelParams& p, int threads, cudaStream_t stream);

}  // namespace purlin::atom::cuda
