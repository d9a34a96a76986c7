// test_launch_config.cc — the block-count tables (launch_config*.cu), host only.
// Build: g++ -std=c++17 -Icsrc -x c++ csrc/atom/cuda/launch_config.cu
//        csrc/atom/cuda/launch_config_sm90.cu -x none this.cc
#include <cstdio>

#include "atom/cuda/launch_config.h"

namespace cu = purlin::atom::cuda;

int failed = 0;

void expect(int got, int want, const char* what) {
  if (got != want) {
    std::printf("FAIL %s: %d, expected %d\n", what, got, want);
    ++failed;
  }
}

int main() {
  const cu::DeviceInfo h200{9, 0, 132};
  const cu::LaunchConfig c = cu::choose_launch_config(h200);
  expect(c.blocks_for(1 << 10), 2, "sm90 1 KB");
  expect(c.blocks_for(16 << 10), 2, "sm90 16 KB");
  expect(c.blocks_for((16 << 10) + 1), 8, "sm90 16 KB + 1");
  expect(c.blocks_for(1 << 20), 32, "sm90 1 MB");
  expect(c.blocks_for(int64_t{1} << 30), 128, "sm90 1 GB");
  cu::LaunchConfig fixed = c;
  fixed.fixed_blocks = 5;
  expect(fixed.blocks_for(1), 5, "TORCH_PURLIN_CUDA_BLOCKS");
  const cu::LaunchConfig a100 = cu::choose_launch_config(cu::DeviceInfo{8, 0, 108});
  expect(a100.blocks_for(int64_t{1} << 30), 16, "portable max");
  expect(a100.blocks_for(1 << 10), 2, "portable 1 KB");
  const cu::LaunchConfig tiny = cu::choose_launch_config(cu::DeviceInfo{9, 0, 4});
  expect(tiny.blocks_for(int64_t{1} << 30), 4, "capped by the SM count");
  expect(tiny.blocks_for(1 << 20), 4, "table capped by max_blocks");
  std::printf("launch config: %d failed\n", failed);
  return failed ? 1 : 0;
}
