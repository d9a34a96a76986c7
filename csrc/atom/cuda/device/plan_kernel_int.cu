// plan_kernel_int.cu — plan_kernel for integer element types (also the
// copy-only kernels of 1, 2, 4 and 8-byte elements).
#include "atom/cuda/device/launch_typed.cuh"

namespace purlin::atom::cuda {
PURLIN_INSTANTIATE_PLAN_KERNEL(int8_t)
PURLIN_INSTANTIATE_PLAN_KERNEL(int16_t)
PURLIN_INSTANTIATE_PLAN_KERNEL(int32_t)
PURLIN_INSTANTIATE_PLAN_KERNEL(int64_t)
PURLIN_INSTANTIATE_PLAN_KERNEL(uint8_t)
}  // namespace purlin::atom::cuda
