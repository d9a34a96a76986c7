// launch_config_sm90.cc — the Hopper (sm_90: H100, H200) launch configuration.
//
// A block pulls a few GB/s from a peer over NVLink 4 (512 threads x 4
// 16-byte loads in flight against ~1.5 us of latency), so large messages
// take 128 blocks; small ones use a few, because every block raises and
// polls its own flags.
#include <algorithm>

#include "atom/cuda/protocol/launch_config.h"
#include "atom/cuda/signal_pad.h"

namespace purlin::atom::cuda {

LaunchConfig launch_config_sm90(const DeviceInfo& d) {
  // From the 2026-11-30 sweep (benchmarks/results/cuda_h200x2_20261130b_blocks.md):
  // graph-mode all_reduce 1 KB: 2 blocks 11.3 us, 128 blocks 13.5 us; 64 KB:
  // 8 blocks 12.3 us; 512 KB: 32 blocks 15.2 us (8: 22.5 us); 4 MB: 128
  // blocks 26.9 us (32: 35.7 us); 256 MB: 128 blocks 1448 us (32: 2679 us).
  LaunchConfig c = make_launch_config("sm90", 512, {{16 << 10, 2}, {64 << 10, 8}, {1 << 20, 32}}, 128, d);
  // NOTE [wide lines]: single-chunk specs above 128K per rank (with NOTE [wide line shape]:
  // cuda_h200x2_20261130m_probes.md, table C: all_reduce 256K 5.20 us wide vs 5.64 narrow; 128K
  // even, 64K narrow ahead); reductions of several chunks above 256K and copies of several chunks
  // above 512K (cuda_h200x2_20261130f / g_probes.md; with wide lines from 128K, all_gather and
  // reduce_scatter in place were 0.2-0.4 us slower at 256K in cuda_h200x2_20261130m).
  c.wide_one_chunk_above = 128 << 10;
  c.wide_reductions_above = 256 << 10;
  c.wide_copies_above = 512 << 10;
  return c;
}

}  // namespace purlin::atom::cuda
