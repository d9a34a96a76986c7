// launch_typed.cuh — launch_typed<T>: one launch of the plan kernel
// (plan_kernel.cuh) or, for line plans, the line kernel (line_kernel.cuh, narrow or wide lines),
// instantiated per element type in plan_kernel_<family>.cu.
//
// NOTE [overlapped launch] With `overlap` (sm_90+, TORCH_PURLIN_CUDA_PDL),
//   the kernel is launched with programmatic stream serialization: its
//   blocks may be scheduled before the previous kernel of the stream has
//   ended, as soon as that kernel let them (griddepcontrol.launch_dependents,
//   which every purlin kernel issues right after its griddepcontrol.wait, or
//   its end for any other kernel). Both purlin kernels begin with griddepcontrol.wait, before
//   any global memory access: it returns once the previous kernel
//   completed and its writes are visible, so what overlaps is only the
//   launch (block scheduling, parameter load), never a memory access. The
//   order of collectives, of a producer kernel and its collective, and of
//   the pad's epochs (NOTE [device reuse]) is therefore the plain launch's.
//   A non-kernel predecessor (copy, event, memory op) is waited for as usual.
//   Back-to-back collectives save the launch gap (docs/PERFORMANCE.md).
#pragma once

#include "atom/cuda/device/line_kernel.cuh"
#include "atom/cuda/device/plan_kernel.cuh"

namespace purlin::atom::cuda {

template <class... Args>
cudaError_t launch_kernel(void (*kernel)(Args...), const KernelParams& p, int blocks, int threads,
                          cudaStream_t stream, bool overlap) {
  cudaLaunchAttribute attr[1] = {};
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(blocks));
  cfg.blockDim = dim3(static_cast<unsigned>(threads));
  cfg.dynamicSmemBytes = 0;
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = overlap ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, kernel, p);
}

template <class T>
cudaError_t launch_typed(const KernelParams& p, int blocks, int threads, cudaStream_t stream, bool overlap) {
  if constexpr (sizeof(T) <= kLinePayload) {
    if (p.lines == kWideLines) return launch_kernel(line_kernel<T, true>, p, blocks, threads, stream, overlap);
    if (p.lines) return launch_kernel(line_kernel<T, false>, p, blocks, threads, stream, overlap);
  }
  return launch_kernel(plan_kernel<T>, p, blocks, threads, stream, overlap);
}

#define PURLIN_INSTANTIATE_PLAN_KERNEL(T)                                                               \
  template cudaError_t launch_typed<T>(const KernelParams& p, int blocks, int threads, cudaStream_t stream, \
                                       bool overlap);
// Compiled once, in its instantiation unit, not in every includer.
#define PURLIN_EXTERN_PLAN_KERNEL(T)                                                                           \
  extern template cudaError_t launch_typed<T>(const KernelParams& p, int blocks, int threads, cudaStream_t stream, \
                                              bool overlap);

}  // namespace purlin::atom::cuda
