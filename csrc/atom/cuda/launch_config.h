// launch_config.h — how many blocks and threads the plan kernel uses.
//
// choose_launch_config() is the one place that picks an architecture's
// tuned configuration (launch_config_<arch>.cu) or the portable one. The
// block count G must be equal on every rank of a group (flag slots are per
// block): the workspace setup exchanges each rank's choice and takes the
// smallest. TORCH_PURLIN_CUDA_BLOCKS, when set, overrides G.
#pragma once

namespace purlin::atom::cuda {

struct DeviceInfo {
  int major = 0, minor = 0;  // compute capability
  int sm_count = 1;
};

struct LaunchConfig {
  int blocks = 1;
  int threads = 512;
  const char* name = "portable";
};

LaunchConfig launch_config_portable(const DeviceInfo& d);
LaunchConfig launch_config_sm90(const DeviceInfo& d);  // Hopper: H100 / H200
LaunchConfig choose_launch_config(const DeviceInfo& d);

}  // namespace purlin::atom::cuda
