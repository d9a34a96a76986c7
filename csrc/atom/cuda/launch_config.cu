// launch_config.cu — the portable launch configuration and the one choice.
#include <algorithm>

#include "atom/cuda/launch_config.h"
#include "atom/cuda/signal_pad.h"

namespace purlin::atom::cuda {

// 16 blocks of 512 threads keep ~8 KB of 16-byte loads in flight per block,
// enough for one NVLink peer's bandwidth on Ampere-class links, and leave
// most SMs to the compute the collective overlaps with.
LaunchConfig launch_config_portable(const DeviceInfo& d) {
  return LaunchConfig{std::max(1, std::min({16, d.sm_count, kMaxBlocks})), 512, "portable"};
}

LaunchConfig choose_launch_config(const DeviceInfo& d) {
  if (d.major == 9 && d.minor == 0) return launch_config_sm90(d);
  return launch_config_portable(d);
}

}  // namespace purlin::atom::cuda
