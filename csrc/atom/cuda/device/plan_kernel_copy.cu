// plan_kernel_copy.cu — plan_kernel for 16-byte elements (complex128), which
// are only ever copied.
#include "atom/cuda/device/launch_typed.cuh"

namespace purlin::atom::cuda {
PURLIN_INSTANTIATE_PLAN_KERNEL(Pod16)
}  // namespace purlin::atom::cuda
