// launch_config_sm90.cu — the Hopper (sm_90: H100, H200) launch configuration.
//
// NVLink 4 (18 links, ~450 GB/s each way) needs about twice the loads in
// flight of the portable choice to stay busy: 32 blocks of 512 threads, out
// of 132 SMs.
#include <algorithm>

#include "atom/cuda/launch_config.h"
#include "atom/cuda/signal_pad.h"

namespace purlin::atom::cuda {

LaunchConfig launch_config_sm90(const DeviceInfo& d) {
  return LaunchConfig{std::max(1, std::min({32, d.sm_count, kMaxBlocks})), 512, "sm90"};
}

}  // namespace purlin::atom::cuda
