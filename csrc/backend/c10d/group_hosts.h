// group_hosts.h — a purlin group's hosts (NOTE [host map] in
// backend/host/host_map.h) and what runs when they are more than one:
// the flat fallback, or the hierarchical collectives (NOTE [hierarchical
// collectives] in hierarchical.cc) on two kinds of subgroups made once,
// lazily: one purlin group per host, and one fallback-engine group per local
// index (the ranks of the same place on each host).
//
// NOTE [host map at the first collective]
// The map is made at the group's first collective (the first call that reaches
// PurlinBackend::fallback_reason, i.e. any collective; point-to-point ops never
// need it), not at construction, because:
// - PurlinBackend::split() must talk to nobody (NOTE [split groups]), and
//   new_group()/DeviceMesh make groups that may never run a collective;
// - a group sets itself up lazily anyway (HostEngine::ensure_atom, NOTE [setup
//   agreement]; the CUDA workspace): the first collective is the one point every
//   rank is known to reach in the same order, with the group's timeout.
// It comes before any native-or-fallback decision, so every op's decision is
// made from the same map on every rank. A group on one host pays one probe and
// two Store exchanges once; afterwards each op reads one bool (spans()).
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "backend/fallback/fallback.h"
#include "backend/host/host_map.h"
#include "backend/host/protocol_table.h"

namespace purlin::backend {

class GroupHosts {
 public:
  // `fallback`: the group's (it counts the parts that cross hosts and makes the engine's
  // subgroups); it outlives this object. Communicates with nobody.
  GroupHosts(c10::intrusive_ptr<c10d::Store> store, int rank, int world, std::chrono::milliseconds timeout,
             Fallback& fallback);
  ~GroupHosts();

  // Maps the hosts once (collective: every rank's first collective calls it); throws naming `op`.
  void ensure(const char* op) {
    if (C10_UNLIKELY(!mapped_)) map(op);
  }
  // After ensure(): whether the group spans hosts.
  bool spans() const { return spans_; }
  // "the group spans N hosts (...)": why an op of such a group runs on the fallback.
  const std::string& reason() const { return reason_; }
  // For an op purlin serves natively on one host (CPU tensors), in a group that spans hosts:
  // "" with *hier set when it runs hierarchically, else why it runs flat on the fallback.
  // `hier` null: the op has no hierarchical form. `table_bytes`: the op's larger side (NOTE
  // [protocol table]), alike on every rank.
  std::string route(const std::string& op, const std::vector<at::Tensor>& tensors, int64_t table_bytes,
                    const c10d::ReduceOp* redop, bool* hier) const;

  // NOTE [hierarchical collectives] (hierarchical.cc): each returns a completed Work.
  c10::intrusive_ptr<c10d::Work> all_reduce(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts);
  c10::intrusive_ptr<c10d::Work> all_gather(at::Tensor& output, const at::Tensor& input, const char* op);
  c10::intrusive_ptr<c10d::Work> all_gather_list(std::vector<std::vector<at::Tensor>>& outputs,
                                                 std::vector<at::Tensor>& inputs);
  c10::intrusive_ptr<c10d::Work> reduce_scatter(at::Tensor& output, const at::Tensor& input,
                                                const c10d::ReduceScatterOptions& opts, const char* op);
  c10::intrusive_ptr<c10d::Work> reduce_scatter_list(std::vector<at::Tensor>& outputs,
                                                     std::vector<std::vector<at::Tensor>>& inputs,
                                                     const c10d::ReduceScatterOptions& opts);
  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts);

  void set_timeout(std::chrono::milliseconds timeout);
  // NOTE [shutdown and abort]: forwarded to the subgroups made so far (abort from any thread).
  void shutdown();
  void abort();
  // Adds the host subgroup's counters as "<op> within hosts" (the parts across hosts are
  // counted in the group's own Fallback as "<op> across hosts").
  void add_counters(std::map<std::string, std::pair<int64_t, int64_t>>* counters) const;

 private:
  void map(const char* op);
  c10d::Backend& within();  // this host's purlin group (local rank, ranks per host)
  c10d::Backend& across();  // the engine's group of this local index (host index, hosts)
  c10d::Backend& install(c10::intrusive_ptr<c10d::Backend>* slot,
                         const std::function<c10::intrusive_ptr<c10d::Backend>()>& make);
  // Runs one part of a hierarchical op; errors name `op`, this rank and the part.
  template <class F>
  void part(const char* op, const char* what, F&& fn);
  [[noreturn]] void fail(const char* op, const char* what, const std::string& why) const;
  void count_across(const char* op);

  c10::intrusive_ptr<c10d::Store> store_;
  int rank_, world_;
  std::chrono::milliseconds timeout_;
  Fallback& fallback_;
  // Set once by ensure(), on the ops' thread, before any op's decision.
  bool mapped_ = false, spans_ = false;
  std::string failed_;  // the map's error: later ops fail alike (the keys are spent)
  HostMap map_;
  int host_ = 0, local_ = 0, per_host_ = 1;
  std::string reason_, across_reason_;
  NcclTable rows_;       // NOTE [protocol table]: from which size each family runs hierarchically
  at::Tensor by_local_;  // [per_host * hosts]: rank of (local l, host h) at l * hosts + h
  // The subgroups, made on first use; mu_ guards them against abort() on another thread.
  mutable std::mutex mu_;
  bool aborted_ = false;
  c10::intrusive_ptr<c10d::Backend> within_, across_;
};

}  // namespace purlin::backend
