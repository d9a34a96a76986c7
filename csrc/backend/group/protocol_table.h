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
// plans and, where NCCL measured faster and nothing of Purlin's does better yet,
// NCCL itself. The rows that move with the world size come from two variables
// whose items may name a world (a family@W or @W item replaces the plain one
// in groups of W ranks):
// - TORCH_PURLIN_CUDA_NCCL_FROM (family=bytes): a CUDA collective of that
//   family (the longest family name that prefixes it) whose larger side holds
//   at least that many bytes runs on the NCCL fallback;
// - TORCH_PURLIN_CUDA_TWO_SHOT_BYTES (bytes): all_reduce from that size runs
//   two-shot.
// The decision must be the same on every rank: ops whose ranks pass different
// sizes never consult the NCCL rows, both variables must be equal on every rank
// (NOTE [settings across ranks]), and the two-shot threshold is in the call
// signature. The defaults are measured (docs/PERFORMANCE.md, "Where each
// default comes from") and apply to every world size not named. A group whose
// ranks span hosts has compiled-in rows of the same form (hierarchical_rows):
// from which size a CPU collective runs hierarchically instead of flat.
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

// The CPU engine's workspace slot, in elements of `esize` bytes, aligned to
// `align_elems`: half the workspace, at most `round_bytes` (NOTE [cpu rounds]
// in backend/cpu/cpu_engine.h). Alike on every rank: both are agreed.
int64_t cpu_slot_elems(int64_t workspace_bytes, int64_t round_bytes, int64_t esize, int64_t align_elems);

}  // namespace purlin::backend
