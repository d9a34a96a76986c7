// launch_config.cu — the portable launch configuration and the one choice.
#include <algorithm>

#include "atom/cuda/launch_config.h"
#include "atom/cuda/signal_pad.h"

namespace purlin::atom::cuda {

int LaunchConfig::blocks_for(int64_t bytes) const {
  if (fixed_blocks > 0) return fixed_blocks;
  for (int i = 0; i < kSteps; ++i)
    if (blocks[i] > 0 && bytes <= up_to_bytes[i]) return std::min(blocks[i], max_blocks);
  return max_blocks;
}

// NOTE [line plans]: a line kernel's threads are latency-bound (each polls
// its lines), so it takes one 8-byte line per thread and op: bytes / 8 /
// threads blocks, within [1, max_blocks].
int LaunchConfig::line_blocks_for(int64_t bytes) const {
  if (fixed_blocks > 0) return fixed_blocks;
  const int64_t per_block = static_cast<int64_t>(threads) * 8;
  return static_cast<int>(std::clamp<int64_t>((bytes + per_block - 1) / per_block, 1, max_blocks));
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
  if (d.major == 9 && d.minor == 0) return launch_config_sm90(d);
  return launch_config_portable(d);
}

}  // namespace purlin::atom::cuda
