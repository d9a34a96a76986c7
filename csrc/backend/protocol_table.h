// protocol_table.h — the NCCL rows of Purlin's protocol table: from which
// size a collective family runs on NCCL (TORCH_PURLIN_CUDA_NCCL_FROM). Free of
// torch headers.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace purlin::backend {

// NOTE [protocol table] Purlin picks a protocol per collective, size and
// world size: flagged lines, one-shot or two-shot workspace plans (CudaGroup,
// launch_config*.cu) and, where NCCL measured faster and nothing of Purlin's
// does better yet, NCCL itself. Those NCCL rows are this table, read from
// TORCH_PURLIN_CUDA_NCCL_FROM as family=bytes items: a CUDA collective whose
// name is the family or starts with family + "_" (the longest family wins:
// reduce_scatter_tensor is reduce_scatter's, not reduce's) and whose larger
// side (the rank's inputs or its outputs, all tensors summed) holds at least
// that many bytes runs on the NCCL fallback, counted and logged once like
// any fallback. Ops whose ranks legitimately pass different sizes (gather,
// scatter, all_to_all with split sizes) never consult it, so the decision is
// the same on every rank; the value itself is agreed at group setup (rank 0's
// wins). The defaults come from benchmarks/results/cuda_h200x2_20261201q_large.md
// (2x H200, session 13: with NOTE [matched waits] all_gather and, pushing,
// reduce_scatter beat NCCL to 1G, all_to_all to 256M; broadcast from 64M ties
// and keeps NCCL's few SMs; all_reduce from 32M stays 0.86-0.95x) and apply
// to every world size until measured on more GPUs.
class NcclTable {
 public:
  // Parses "family=bytes,..." ("" or "none": no rows); throws std::invalid_argument.
  static NcclTable parse(const std::string& text);
  // Bytes from which `op` runs on NCCL; 0: never.
  int64_t from(const std::string& op) const;

 private:
  std::map<std::string, int64_t> rows_;
};

}  // namespace purlin::backend
