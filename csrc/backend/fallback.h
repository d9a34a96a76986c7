// fallback.h — the explicit fallback: ops Purlin does not serve natively go to
// a torch backend (gloo for CPU tensors, NCCL for CUDA tensors) created lazily
// on a prefixed store. Every decision is counted per op, and logged once per
// (op, reason), so tests and benchmarks can assert what actually ran.
#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <utility>

#include <torch/csrc/distributed/c10d/Backend.hpp>

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
// wins). The defaults come from benchmarks/results/cuda_h200x2_20261130c.md
// (2x H200) and apply to every world size until measured on more GPUs.
class NcclTable {
 public:
  // Parses "family=bytes,..." ("" or "none": no rows); throws std::invalid_argument.
  static NcclTable parse(const std::string& text);
  // Bytes from which `op` runs on NCCL; 0: never.
  int64_t from(const std::string& op) const;

 private:
  std::map<std::string, int64_t> rows_;
};

class Fallback {
 public:
  // Creates the fallback backend for a device type ("cpu" or "cuda").
  using Factory = std::function<c10::intrusive_ptr<c10d::Backend>(const std::string& device_type)>;

  Fallback(int rank, Factory factory);

  // The fallback backend for `device`, created on first use.
  c10d::Backend& get(const c10::Device& device);

  // Records that `op` ran natively.
  void count_native(const std::string& op);
  // Records that `op` falls back for `reason` (logged once per (op, reason)).
  void count_fallback(const std::string& op, const std::string& reason);
  // Whether TORCH_PURLIN_FORCE_FALLBACK (any device) or, for CUDA tensors,
  // TORCH_PURLIN_FORCE_NCCL names `op` (or "all").
  bool forced(const std::string& op, bool cuda) const;

  // op -> (native calls, fallback calls)
  std::map<std::string, std::pair<int64_t, int64_t>> counters() const;

 private:
  int rank_;
  Factory factory_;
  std::set<std::string> forced_, forced_nccl_;
  bool log_;
  mutable std::mutex mu_;
  std::map<std::string, c10::intrusive_ptr<c10d::Backend>> backends_;
  std::map<std::string, std::pair<int64_t, int64_t>> counters_;
  std::set<std::pair<std::string, std::string>> logged_;
};

}  // namespace purlin::backend
