// test_nvlink_probe.cc — nvlink_probe's answers where NVML cannot confirm NVLink.
//
// On a machine without NVML (CI) the probe must say "unknown" (false, with a
// reason), so TORCH_PURLIN_CUDA_LINE_FORMAT=auto never takes wide lines there;
// where NVML exists, made-up bus ids must not pass either. A one-GPU list has
// no pair to check.
#include <cstdio>
#include <string>

#include "atom/cuda/host/nvlink_probe.h"

int main() {
  namespace cu = purlin::atom::cuda;
  int failed = 0;
  std::string why;
  if (cu::nvlink_between_all({"0000:fe:1f.0", "0000:fd:1f.0"}, &why) || why.empty()) {
    std::printf("FAIL: two made-up GPUs passed (why: '%s')\n", why.c_str());
    ++failed;
  } else {
    std::printf("made-up GPUs refused: %s\n", why.c_str());
  }
  std::printf("%d failed\n", failed);
  return failed ? 1 : 0;
}
