// launch_config.h — an architecture's protocol table: how many blocks and
// threads a plan kernel launch uses, from which sizes line plans take wide
// lines, and whether launches may overlap.
//
// choose_launch_config() is the one place that picks an architecture's tuned
// configuration (launch_config_<arch>.cc) or the portable one. A config is a
// thread count and a table from the bytes a collective moves to its block
// count g: few blocks for small messages (fewer flags to raise and poll),
// many for large ones (enough loads in flight to fill NVLink). The g of one
// collective must be equal on every rank (a waiter polls the slots of all g
// producer blocks): it depends only on the Spec's size and on the config,
// which the workspace setup agrees on for the whole group.
// TORCH_PURLIN_CUDA_BLOCKS, when set, fixes g for every launch.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <utility>

namespace purlin::atom::cuda {

struct DeviceInfo {
  int major = 0, minor = 0;  // compute capability
  int sm_count = 1;
};

// A launch's grid: blocks of threads each.
struct LaunchShape {
  int blocks = 1;
  int threads = 512;
};

struct LaunchConfig {
  static constexpr int kSteps = 6;
  int threads = 512;
  int64_t up_to_bytes[kSteps] = {};  // step i serves sizes <= up_to_bytes[i] ...
  int blocks[kSteps] = {};           // ... with blocks[i] blocks; larger sizes use max_blocks
  int max_blocks = 1;
  int fixed_blocks = 0;              // > 0: every launch uses this many (TORCH_PURLIN_CUDA_BLOCKS)
  const char* name = "portable";
  // NOTE [wide lines] (device/wide_line.cuh): with the auto line format, a line plan runs on
  // wide lines above these bytes per rank: specs of one chunk (all_reduce, broadcast, reduce),
  // reductions of several chunks (reduce_scatter), copies of several chunks (all_gather,
  // all_to_all). Measured on 2x H200 (launch_config_sm90.cc); the portable table keeps them.
  int64_t wide_one_chunk_above = 128 << 10;
  int64_t wide_reductions_above = 256 << 10;
  int64_t wide_copies_above = 512 << 10;
  // NOTE [overlapped launch] (device/launch_typed.cuh): programmatic dependent launch, sm_90 on.
  bool overlapped_launch = false;

  // Blocks for a collective whose Spec moves `bytes` (rank-invariant).
  int blocks_for(int64_t bytes) const;
  // Blocks and threads for a narrow-line collective of `bytes` per rank
  // (NOTE [narrow line shape]; the block count is rank-invariant).
  LaunchShape narrow_line_shape(int64_t bytes) const;
  // ... and for a wide-line collective (NOTE [wide line shape]).
  LaunchShape wide_line_shape(int64_t bytes) const;
};

// A config from its table: (up to bytes, blocks) steps in increasing size,
// then max_blocks (clamped to [1, min(sm_count, kMaxBlocks)]) above them.
LaunchConfig make_launch_config(const char* name, int threads, std::initializer_list<std::pair<int64_t, int>> steps,
                                int max_blocks, const DeviceInfo& d);

LaunchConfig launch_config_portable(const DeviceInfo& d);
LaunchConfig launch_config_sm90(const DeviceInfo& d);  // Hopper: H100 / H200
LaunchConfig choose_launch_config(const DeviceInfo& d);

}  // namespace purlin::atom::cuda
