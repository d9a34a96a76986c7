// launch_typed.cuh — launch_typed<T>: one launch of the plan kernel
// (plan_kernel.cuh) or, for line plans, the line kernel (line_kernel.cuh, narrow or wide lines),
// instantiated per element type in plan_kernel_<family>.cu.
#pragma once

#include "atom/cuda/line_kernel.cuh"
#include "atom/cuda/plan_kernel.cuh"

namespace purlin::atom::cuda {

template <class T>
cudaError_t launch_typed(const KernelParams& p, int blocks, int threads, cudaStream_t stream) {
  if constexpr (sizeof(T) <= kLinePayload) {
    if (p.lines == kWideLines) {
      line_kernel<T, true><<<blocks, threads, 0, stream>>>(p);
      return cudaGetLastError();
    }
    if (p.lines) {
      line_kernel<T, false><<<blocks, threads, 0, stream>>>(p);
      return cudaGetLastError();
    }
  }
  plan_kernel<T><<<blocks, threads, 0, stream>>>(p);
  return cudaGetLastError();
}

#define PURLIN_INSTANTIATE_PLAN_KERNEL(T) \
  template cudaError_t launch_typed<T>(const KernelParams& p, int blocks, int threads, cudaStream_t stream);
// Compiled once, in its instantiation unit, not in every includer.
#define PURLIN_EXTERN_PLAN_KERNEL(T) \
  extern template cudaError_t launch_typed<T>(const KernelParams& p, int blocks, int threads, cudaStream_t stream);

}  // namespace purlin::atom::cuda
