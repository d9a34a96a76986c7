// fallback.h — the explicit fallback: ops Purlin does not serve natively go to
// a torch backend (gloo for CPU tensors, NCCL for CUDA tensors) created lazily
// on a prefixed store. Every decision is counted per op, and logged once per
// (op, reason), so tests and benchmarks can assert what actually ran. The
// backend is reached through StagedBackend (staged_backend.h), which hands it
// only tensors it handles (NOTE [fallback arguments]).
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "common/env.h"

namespace purlin::backend {

class Fallback {
 public:
  // Creates a group's fallback backend from the group's store, rank, size and timeout and the
  // device type ("cpu" or "cuda"); a group split from another (PurlinBackend::split) builds its
  // own with its parent's.
  using GroupFactory = std::function<c10::intrusive_ptr<c10d::Backend>(
      const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, std::chrono::milliseconds timeout,
      const std::string& device_type)>;

  // Reads TORCH_PURLIN_FORCE_FALLBACK and TORCH_PURLIN_LOG from the group's `settings`.
  Fallback(c10::intrusive_ptr<c10d::Store> store, int rank, int size, std::chrono::milliseconds timeout,
           GroupFactory factory, const env::Settings& settings);

  // "" or why TORCH_PURLIN_FORCE_FALLBACK cannot be read (an unknown op or device), for the
  // group's settings agreement (NOTE [setup agreement]).
  const std::string& settings_error() const { return settings_error_; }

  const GroupFactory& group_factory() const { return factory_; }

  // The fallback backend for `device`, created on first use, behind its StagedBackend.
  c10d::Backend& get(const c10::Device& device);

  // Records that `op` (a name that lives as long as the process, e.g. a
  // literal: Request::name) ran natively.
  void count_native(const char* op);
  // Records that `op` falls back for `reason` (logged once per (op, reason)).
  void count_fallback(const std::string& op, const std::string& reason);
  // Whether TORCH_PURLIN_FORCE_FALLBACK names `op` (or all) for tensors on any device, or for
  // the op's device (cpu:op, cuda:op, cpu:all, cuda:all).
  bool forced(const std::string& op, bool cuda) const;
  // The c10d ops a group serves, by the names TORCH_PURLIN_FORCE_FALLBACK and the counters use.
  static const std::vector<std::string>& op_names();

  // NOTE [shutdown and abort] (group_lifecycle.cc): forwards to every fallback backend made so
  // far (NCCL releases its communicators; gloo's are no-ops), each called even if an earlier
  // one throws; the first error is rethrown after. Callable from any thread.
  void shutdown_all();
  void abort_all();

  // Drops the fallback backends made so far without destroying them, for a group aborted while an
  // op of theirs is in flight: gloo cannot abort one, and its destructor would wait for it until
  // the timeout (NOTE [call agreement]). Later ops make new ones. Callable from any thread.
  void abandon();

  // op -> (native calls, fallback calls)
  std::map<std::string, std::pair<int64_t, int64_t>> counters() const;

 private:
  std::vector<c10::intrusive_ptr<c10d::Backend>> made() const;  // the fallback backends made so far

  c10::intrusive_ptr<c10d::Store> store_;
  int rank_, size_;
  std::chrono::milliseconds timeout_;
  GroupFactory factory_;
  std::set<std::string> forced_[2];  // [0]: CPU tensors, [1]: CUDA tensors
  std::string settings_error_;
  bool log_;
  mutable std::mutex mu_;
  std::map<std::string, c10::intrusive_ptr<c10d::Backend>> backends_;  // StagedBackends, by device type
  std::map<std::string, std::pair<int64_t, int64_t>> counters_;
  // NOTE [eager host path]: the counter of the last native op's name, kept so
  // a run of one op neither builds a string nor searches the map per call
  // (std::map nodes stay where they are).
  const char* last_native_ = nullptr;
  std::pair<int64_t, int64_t>* last_native_counts_ = nullptr;
  std::set<std::pair<std::string, std::string>> logged_;
};

}  // namespace purlin::backend
