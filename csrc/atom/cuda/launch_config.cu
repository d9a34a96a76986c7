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

// Up to 16 blocks of 512 threads: ~8 KB of 16-byte loads in flight per block
// is enough for one NVLink peer's bandwidth on Ampere-class links, and most
// SMs stay with the compute the collective overlaps with.
LaunchConfig launch_config_portable(const DeviceInfo& d) {
  LaunchConfig c;
  c.threads = 512;
  const int64_t up[] = {32 << 10, 256 << 10, 2 << 20, 0, 0, 0};
  const int g[] = {2, 4, 8, 0, 0, 0};
  std::copy(up, up + LaunchConfig::kSteps, c.up_to_bytes);
  std::copy(g, g + LaunchConfig::kSteps, c.blocks);
  c.max_blocks = std::max(1, std::min({16, d.sm_count, kMaxBlocks}));
  c.name = "portable";
  return c;
}

LaunchConfig choose_launch_config(const DeviceInfo& d) {
  if (d.major == 9 && d.minor == 0) return launch_config_sm90(d);
  return launch_config_portable(d);
}

}  // namespace purlin::atom::cuda
