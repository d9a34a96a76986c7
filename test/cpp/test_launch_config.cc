// test_launch_config.cc — the block-count tables and the narrow line shape (launch_config*.cu), host only.
// Build: g++ -std=c++17 -Icsrc -x c++ csrc/atom/cuda/protocol/launch_config.cc
//        csrc/atom/cuda/protocol/launch_config_sm90.cc -x none this.cc
#include <cstdio>

#include "atom/cuda/protocol/launch_config.h"
#include "expect.h"

namespace cu = purlin::atom::cuda;

using purlin::test::expect_eq;

int main() {
  const cu::DeviceInfo h200{9, 0, 132};
  const cu::LaunchConfig c = cu::choose_launch_config(h200);
  expect_eq(c.blocks_for(1 << 10), 2, "sm90 1 KB");
  expect_eq(c.blocks_for(16 << 10), 2, "sm90 16 KB");
  expect_eq(c.blocks_for((16 << 10) + 1), 8, "sm90 16 KB + 1");
  expect_eq(c.blocks_for(1 << 20), 32, "sm90 1 MB");
  expect_eq(c.blocks_for(int64_t{1} << 30), 128, "sm90 1 GB");
  cu::LaunchConfig fixed = c;
  fixed.fixed_blocks = 5;
  expect_eq(fixed.blocks_for(1), 5, "TORCH_PURLIN_CUDA_BLOCKS");
  const cu::LaunchConfig a100 = cu::choose_launch_config(cu::DeviceInfo{8, 0, 108});
  expect_eq(a100.blocks_for(int64_t{1} << 30), 16, "portable max");
  expect_eq(a100.blocks_for(1 << 10), 2, "portable 1 KB");
  const cu::LaunchConfig tiny = cu::choose_launch_config(cu::DeviceInfo{9, 0, 4});
  expect_eq(tiny.blocks_for(int64_t{1} << 30), 4, "capped by the SM count");
  expect_eq(tiny.blocks_for(1 << 20), 4, "table capped by max_blocks");
  // NOTE [narrow line shape]: 128 threads a block, one line per thread, up to max_blocks blocks.
  const cu::LaunchShape s1k = c.narrow_line_shape(1 << 10), s64k = c.narrow_line_shape(64 << 10);
  expect_eq(s1k.blocks, 1, "narrow lines 1 KB blocks");
  expect_eq(s1k.threads, 128, "narrow lines 1 KB threads");
  expect_eq(c.narrow_line_shape(3 << 10).blocks, 3, "narrow lines 3 KB: 384 lines, 3 blocks");
  expect_eq(c.narrow_line_shape(200 << 10).blocks, 128, "narrow lines 200 KB blocks");
  expect_eq(c.narrow_line_shape(200 << 10).threads, 224, "narrow lines 200 KB: 200 lines a block, a warp multiple");
  expect_eq(c.narrow_line_shape(5).threads, 128, "narrow lines: at least 128 threads");
  expect_eq(s64k.blocks, 64, "narrow lines 64 KB blocks");
  expect_eq(s64k.threads, 128, "narrow lines 64 KB threads");
  const cu::LaunchShape s256k = c.narrow_line_shape(256 << 10), s1m = c.narrow_line_shape(1 << 20);
  expect_eq(s256k.blocks, 128, "narrow lines 256 KB blocks: max_blocks");
  expect_eq(s256k.threads, 256, "narrow lines 256 KB threads");
  expect_eq(s1m.threads, 512, "narrow lines 1 MB threads: the config's");
  const cu::LaunchShape sfixed = fixed.narrow_line_shape(64 << 10);
  expect_eq(sfixed.blocks, 5, "narrow lines, TORCH_PURLIN_CUDA_BLOCKS");
  expect_eq(sfixed.threads, 512, "narrow lines, fixed blocks: threads capped by the config");
  expect_eq(a100.narrow_line_shape(64 << 10).blocks, 16, "portable narrow lines 64 KB blocks");
  expect_eq(a100.narrow_line_shape(64 << 10).threads, 512, "portable narrow lines 64 KB threads");
  // NOTE [wide line shape]: two 120-byte lines a warp, blocks of at least 4 warps, then up to 1024 threads.
  const cu::LaunchShape w1m = c.wide_line_shape(1 << 20), w256k = c.wide_line_shape(256 << 10);
  const cu::LaunchShape w64k = c.wide_line_shape(64 << 10), w1k = c.wide_line_shape(1 << 10);
  expect_eq(w1m.blocks, 128, "wide lines 1 MB blocks");
  expect_eq(w1m.threads, 1024, "wide lines 1 MB threads: 35 warps a block, capped");
  expect_eq(w256k.blocks, 128, "wide lines 256 KB blocks");
  expect_eq(w256k.threads, 288, "wide lines 256 KB threads: 9 warps");
  expect_eq(w64k.blocks, 69, "wide lines 64 KB blocks: 274 warps / 4");
  expect_eq(w64k.threads, 128, "wide lines 64 KB threads");
  expect_eq(w1k.blocks, 2, "wide lines 1 KB blocks: 9 lines, 5 warps");
  expect_eq(w1k.threads, 128, "wide lines 1 KB threads: at least 4 warps");
  expect_eq(fixed.wide_line_shape(1 << 20).blocks, 5, "wide lines, TORCH_PURLIN_CUDA_BLOCKS");
  expect_eq(fixed.wide_line_shape(1 << 20).threads, 1024, "wide lines, fixed blocks: 1024 threads at most");
  return purlin::test::test_summary("launch config");
}
