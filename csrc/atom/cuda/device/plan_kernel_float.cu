// plan_kernel_float.cu — plan_kernel for floating element types.
#include "atom/cuda/device/launch_typed.cuh"

namespace purlin::atom::cuda {
PURLIN_INSTANTIATE_PLAN_KERNEL(float)
PURLIN_INSTANTIATE_PLAN_KERNEL(double)
PURLIN_INSTANTIATE_PLAN_KERNEL(__half)
PURLIN_INSTANTIATE_PLAN_KERNEL(__nv_bfloat16)
}  // namespace purlin::atom::cuda
