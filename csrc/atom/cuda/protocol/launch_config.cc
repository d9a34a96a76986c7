// launch_config.cc — the portable launch configuration and the one choice.
#include <algorithm>
#include <utility>

#include "atom/cuda/protocol/launch_config.h"

#include "atom/cuda/device/plan_format.h"  // kWidePayload
#include "atom/cuda/signal_pad.h"

namespace purlin::atom::cuda {

int LaunchConfig::blocks_for(int64_t bytes) const {
  if (fixed_blocks > 0) return fixed_blocks;
  for (int i = 0; i < kSteps; ++i)
    if (blocks[i] > 0 && bytes <= up_to_bytes[i]) return std::min(blocks[i], max_blocks);
  return max_blocks;
}

namespace {

// A line launch's blocks for `units` of work (lines, warps) at `per_block`
// units a block, within [1, max_blocks] (TORCH_PURLIN_CUDA_BLOCKS wins), and
// the units each block then takes.
std::pair<int, int64_t> spread(const LaunchConfig& c, int64_t units, int64_t per_block) {
  const int blocks = c.fixed_blocks > 0 ? c.fixed_blocks
                                        : static_cast<int>(std::clamp<int64_t>((units + per_block - 1) / per_block, 1,
                                                                               c.max_blocks));
  return {blocks, (units + blocks - 1) / blocks};
}

}  // namespace

// NOTE [narrow line shape] A line kernel's threads are latency-bound (each
//   polls its lines). A narrow line kernel runs one line per thread in
//   blocks of kLineThreads: more, smaller blocks, spread over more SMs, and
//   no idle threads in a block's barriers. Measured on 2x H200
//   (benchmarks/results/cuda_h200x2_20261130m_probes.md, per launch in a
//   graph): all_reduce 1K 3.47 us with 512 threads, 3.25 with 128; 64K 4.78
//   with 16 x 512, 4.52 with 32 x 256, 4.48 with 64 x 128, 5.23 with 8 x
//   1024. Past max_blocks blocks a block takes more threads (up to
//   `threads`), then more than one line per thread. Only the block count
//   must agree across ranks (it partitions the ops); it depends on the
//   bytes and the agreed config only. Threads are a launch's own choice.
//   (Until 2026-11-30 narrow and wide launches both took bytes / 8 /
//   `threads` blocks of `threads`.)
LaunchShape LaunchConfig::narrow_line_shape(int64_t bytes) const {
  constexpr int64_t kLineThreads = 128, kWarp = 32;
  const int64_t lines = std::max<int64_t>(1, (bytes + 7) / 8);
  const auto [blocks, per_block] = spread(*this, lines, kLineThreads);
  LaunchShape s;
  s.blocks = blocks;
  s.threads = static_cast<int>(
      std::clamp<int64_t>((per_block + kWarp - 1) / kWarp * kWarp, std::min<int64_t>(kLineThreads, threads), threads));
  return s;
}

LaunchConfig make_launch_config(const char* name, int threads, std::initializer_list<std::pair<int64_t, int>> steps,
                                int max_blocks, const DeviceInfo& d) {
  LaunchConfig c;
  c.name = name;
  c.threads = threads;
  int i = 0;
  for (const auto& [up_to, blocks] : steps) {
    if (i == LaunchConfig::kSteps) break;
    c.up_to_bytes[i] = up_to;
    c.blocks[i++] = blocks;
  }
  c.max_blocks = std::max(1, std::min({max_blocks, d.sm_count, kMaxBlocks}));
  return c;
}

// Up to 16 blocks of 512 threads: ~8 KB of 16-byte loads in flight per block
// is enough for one NVLink peer's bandwidth on Ampere-class links, and most
// SMs stay with the compute the collective overlaps with.
LaunchConfig launch_config_portable(const DeviceInfo& d) {
  return make_launch_config("portable", 512, {{32 << 10, 2}, {256 << 10, 4}, {2 << 20, 8}}, 16, d);
}

LaunchConfig choose_launch_config(const DeviceInfo& d) {
  LaunchConfig c = d.major == 9 && d.minor == 0 ? launch_config_sm90(d) : launch_config_portable(d);
  c.overlapped_launch = d.major >= 9;  // programmatic dependent launch exists from sm_90 on
  return c;
}

// NOTE [wide line shape] A warp moves wide lines (128 bytes, 120 of payload:
//   NOTE [wide lines]) one at a time; a wide line launch gives each warp
//   kWideLinesPerWarp of them, in blocks of at least 4 warps, as many blocks
//   as that needs up to max_blocks, then more warps a block (up to 1024
//   threads). Measured on 2x H200 (cuda_h200x2_20261130m_probes.md, table C):
//   all_reduce 1M 8.69 us at 128 x 512 (4.3 lines a warp), 8.17 at 128 x
//   1024 (2.1); 256K 5.39 at 64 x 512, 5.20 at 128 x 256, 6.16 at 128 x 128
//   (4.3); 128K 5.05 at 32 x 512, 4.76 at 64 x 256. The block count is
//   rank-invariant as for narrow lines.
LaunchShape LaunchConfig::wide_line_shape(int64_t bytes) const {
  constexpr int64_t kWideLinesPerWarp = 2, kWarp = 32, kMinWarps = 4, kMaxThreads = 1024;
  const int64_t lines = std::max<int64_t>(1, (bytes + kWidePayload - 1) / kWidePayload);
  const int64_t warps = (lines + kWideLinesPerWarp - 1) / kWideLinesPerWarp;
  const auto [blocks, per_block] = spread(*this, warps, kMinWarps);
  LaunchShape s;
  s.blocks = blocks;
  s.threads = static_cast<int>(std::clamp<int64_t>(per_block, kMinWarps, kMaxThreads / kWarp) * kWarp);
  return s;
}

}  // namespace purlin::atom::cuda
