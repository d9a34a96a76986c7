// protocol_table.h — the size rows of Purlin's protocol table that depend on
// the world size: from which size a collective family runs on NCCL
// (TORCH_PURLIN_CUDA_NCCL_FROM), from which size all_reduce runs two-shot
// (TORCH_PURLIN_CUDA_TWO_SHOT_BYTES), and from which size a group spanning
// hosts runs a collective hierarchically. Free of torch headers.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "common/env.h"
#include "snac/spec_traits.h"

namespace purlin::backend {

// NOTE [protocol table] Purlin picks a protocol per collective, size and
// world size: flagged lines, parity plans, one-shot or two-shot workspace
// plans (CudaGroup, launch_config*.cu) and, where NCCL measured faster and
// nothing of Purlin's does better yet, NCCL itself. The rows that move with
// the world size are read from two variables whose items may name a world:
// - TORCH_PURLIN_CUDA_NCCL_FROM, family=bytes or family@W=bytes items: a CUDA
//   collective whose name is the family or starts with family + "_" (the
//   longest family wins: reduce_scatter_tensor is reduce_scatter's, not
//   reduce's) and whose larger side (the rank's inputs or its outputs, all
//   tensors summed) holds at least that many bytes runs on the NCCL
//   fallback, counted and logged once like any fallback. A family@W row
//   replaces the family's row in groups of W ranks.
// - TORCH_PURLIN_CUDA_TWO_SHOT_BYTES, bytes or @W=bytes items: all_reduce of
//   at least that many bytes runs two-shot; an @W item replaces the plain one
//   in groups of W ranks. At W = 2 one-shot and two-shot move the same bytes
//   over the links (each rank sends its whole tensor), at W > 2 one-shot
//   sends W-1 times as many.
// Ops whose ranks legitimately pass different sizes (gather, scatter,
// all_to_all with split sizes) never consult the NCCL rows, so the decision
// is the same on every rank; both variables must be equal on every rank
// (NOTE [settings across ranks] in common/env.h: compared when the group is
// made), and the two-shot threshold is also in the call signature. The defaults
// come from benchmarks/results on 2x H200 (cuda_h200x2_20261201q_large.md:
// with matched waits all_gather and, pushing, reduce_scatter beat NCCL to 1G,
// all_to_all to 256M; broadcast from 64M ties and keeps NCCL's few SMs;
// all_reduce one-shot pushed beats NCCL at 64M-256M at W = 2, hence
// all_reduce@2 and two-shot never at W = 2) and apply to every world size not
// named until measured on more GPUs.
// A group whose ranks span hosts (NOTE [host map]) has rows of its own, in the
// same form but compiled in (hierarchical_rows below): from which size a CPU
// collective runs hierarchically instead of flat on gloo.
class NcclTable {
 public:
  // Parses "family[@W]=bytes,..." ("" or "none": no rows) and keeps the rows
  // of a group of `world` ranks; throws std::invalid_argument naming `var`.
  static NcclTable parse(const std::string& text, int world, const char* var = "TORCH_PURLIN_CUDA_NCCL_FROM");
  // Bytes from which `op` runs on NCCL (hierarchically, for hierarchical_rows); 0: never.
  int64_t from(const std::string& op) const;

 private:
  std::map<std::string, int64_t> rows_;
};

// The hierarchical rows (NOTE [hierarchical collectives] in backend/c10d/hierarchical.cc): in a
// group spanning hosts with the same number of ranks on each, a CPU collective of a family named
// here whose larger side holds at least that many bytes runs hierarchically (within each host
// natively, across hosts on the fallback engine); smaller ones, and families not named, run flat on
// the fallback engine. Same form as the NCCL rows, for a group of `world` ranks.
NcclTable hierarchical_rows(int world);

// The value of a "bytes[,@W=bytes...]" list for a group of `world` ranks
// (TORCH_PURLIN_CUDA_TWO_SHOT_BYTES); `var` names the variable in errors.
int64_t bytes_for_world(const std::string& text, int world, const char* var);

// The two-shot threshold a group of `world` ranks reads from `var` of its settings
// (TORCH_PURLIN_CPU_TWO_SHOT_BYTES for the CPU engine,
// TORCH_PURLIN_CUDA_TWO_SHOT_BYTES for the CUDA group): the one parser of
// both; throws std::invalid_argument naming `var`.
int64_t two_shot_bytes(const env::Settings& settings, const char* var, int world);

// The two-shot rule of both engines: a call whose Spec reduces to several
// ranks (SpecTraits::reduces_to_several_ranks: all_reduce, not reduce or
// reduce_scatter), in a group of more than one rank, of at least `threshold`
// bytes per rank (its size, SpecTraits::max_rank_elems of `esize` bytes:
// alike on every rank).
bool runs_two_shot(const snac::CallDescription& call, int64_t esize, int world, int64_t threshold);

}  // namespace purlin::backend
