// group_hosts.h — a purlin group's hosts (NOTE [host map] in
// backend/machines/host_map.h) and what runs when they are more than one: every
// collective agreed across the group first (NOTE [call agreement]), then run
// flat (the engine moving bytes among all ranks, purlin reducing) or
// hierarchically (NOTE [hierarchical collectives] in hierarchical.cc) on two
// kinds of subgroups: one purlin group per host, and one engine group per local
// index (the ranks of the same place on each host). NOTE [groups spanning
// hosts] in spanning_ops.cc.
//
// NOTE [host map at the first collective]
// The map is made at the group's first collective (the first call that reaches
// PurlinBackend::fallback_reason, i.e. any collective; point-to-point ops never
// need it), not at construction, because:
// - PurlinBackend::split() must talk to nobody (NOTE [split groups]), and
//   new_group()/DeviceMesh make groups that may never run a collective;
// - a group sets itself up lazily anyway (CpuEngine::ensure_atom, NOTE [setup
//   agreement]; the CUDA workspace): the first collective is the one point every
//   rank is known to reach in the same order, with the group's timeout.
// It comes before any native-or-fallback decision, so every op's decision is
// made from the same map on every rank. A group on one host pays one probe and
// two Store exchanges once; afterwards each op reads one bool (spans()). A group
// that spans hosts connects its engine groups (the flat one, and the subgroups
// of the hierarchical forms) right there, so no later op waits on a connection.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "backend/c10d/call_agreement.h"
#include "backend/fallback/fallback.h"
#include "backend/group/group_context.h"
#include "backend/group/protocol_table.h"
#include "backend/group/request.h"
#include "backend/machines/host_map.h"

namespace purlin::backend {

// A reduction as the parts across hosts apply it: purlin's dtype and op, and every rank's
// PREMUL_SUM factor (NOTE [call agreement]).
struct Reduction {
  DType dtype = DType::Float32;
  RedOp redop = RedOp::Sum;
  c10d::ReduceOp op;
  std::vector<double> factors;  // per rank
};

class GroupHosts {
 public:
  // `fallback`: the group's (its CPU backend is the engine that moves the data across hosts,
  // and it counts those calls); it outlives this object. `ctx`: the group's ranks, for messages.
  // Communicates with nobody.
  GroupHosts(c10::intrusive_ptr<c10d::Store> store, int rank, int world, std::chrono::milliseconds timeout,
             Fallback& fallback, std::shared_ptr<const GroupContext> ctx);
  ~GroupHosts();

  // Maps the hosts once (collective: every rank's first collective calls it); throws naming `op`.
  // NOTE [groups spanning hosts]: a group that spans hosts connects its engine groups here.
  void ensure(const char* op) {
    if (C10_UNLIKELY(!mapped_)) map(op);
  }
  // After ensure(): whether the group spans hosts.
  bool spans() const { return spans_; }
  // "the group spans N hosts (...)": why an op of such a group does not run natively as a whole.
  const std::string& reason() const { return reason_; }
  // For an op purlin serves natively on one host (CPU tensors), in a group that spans hosts: ""
  // with *span set (it runs through the calls below), or, with `span` null (an op without a
  // form here: a custom Spec), why it cannot run.
  std::string route(bool* span) const;

  // NOTE [groups spanning hosts] (spanning_ops.cc): every collective of such a group, each
  // agreed first (NOTE [call agreement]) and returning a completed Work.
  c10::intrusive_ptr<c10d::Work> all_reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOp& op,
                                            const char* name);
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts);
  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts);
  c10::intrusive_ptr<c10d::Work> all_gather_into_tensor(at::Tensor& output, const at::Tensor& input);
  c10::intrusive_ptr<c10d::Work> all_gather(std::vector<std::vector<at::Tensor>>& outputs,
                                            std::vector<at::Tensor>& inputs);
  c10::intrusive_ptr<c10d::Work> all_gather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                      std::vector<at::Tensor>& inputs);
  c10::intrusive_ptr<c10d::Work> all_gather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                  std::vector<at::Tensor>& inputs);
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor(at::Tensor& output, const at::Tensor& input,
                                                       const c10d::ReduceOp& op);
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs, const c10d::ReduceOp& op);
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::ReduceOp& op);
  c10::intrusive_ptr<c10d::Work> all_to_all_single(at::Tensor& output, const at::Tensor& input,
                                                   const std::vector<int64_t>& output_split_sizes,
                                                   const std::vector<int64_t>& input_split_sizes);
  c10::intrusive_ptr<c10d::Work> all_to_all(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs);
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts);
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts);
  c10::intrusive_ptr<c10d::Work> barrier();

  void set_timeout(std::chrono::milliseconds timeout);
  // NOTE [shutdown and abort]: forwarded to the subgroups made so far (abort from any thread).
  void shutdown();
  void abort();
  // Adds the host subgroup's counters as "<op> within hosts" (the parts across hosts are
  // counted in the group's own Fallback: "<op> across hosts" for a hierarchical call's, "<op>"
  // for a flat one).
  void add_counters(std::map<std::string, std::pair<int64_t, int64_t>>* counters) const;

 private:
  void map(const char* op);
  c10d::Backend& within();  // this host's purlin group (local rank, ranks per host)
  c10d::Backend& across();  // the engine's group of this local index (host index, hosts)
  c10d::Backend& flat();    // the engine's group of every rank (the group's own fallback)
  c10d::Backend& install(c10::intrusive_ptr<c10d::Backend>* slot,
                         const std::function<c10::intrusive_ptr<c10d::Backend>()>& make);
  // Runs one part of a hierarchical op; errors name `op`, this rank and the part.
  template <class F>
  void part(const char* op, const char* what, F&& fn);
  [[noreturn]] void fail(const char* op, const char* what, const std::string& why) const;
  void count_across(const char* op);
  void count_flat(const char* op);
  std::string who(const char* op) const;  // "purlin <op> on rank r (global rank g): "

  // NOTE [call agreement]: fills `d`'s op, dtype (local errors for what purlin has no form of)
  // and, for reductions, `red` (every rank's factor once agreed).
  CallDescriptor describe(const char* op, const at::Tensor* like, const c10d::ReduceOp* redop, Reduction* red) const;
  AgreedCall agree(const char* op, const CallDescriptor& d, Reduction* red);
  // Whether `op` (a family of the hierarchical rows) of `bytes` runs hierarchically.
  bool hierarchical(const char* op, int64_t bytes) const;

  // The forms of NOTE [groups spanning hosts], on 1-D contiguous tensors of agreed sizes.
  // Flat (flat_across.cc): the engine moves bytes among all ranks; purlin reduces.
  void flat_all_reduce(const char* op, at::Tensor& buf, const Reduction& red);
  void flat_reduce_scatter(const char* op, at::Tensor& out, const at::Tensor& in, const Reduction& red);
  void flat_all_gather(const char* op, at::Tensor& out, const at::Tensor& in);
  void flat_all_to_all(const char* op, at::Tensor& out, const at::Tensor& in, const std::vector<int64_t>& sends,
                       const std::vector<int64_t>& expects);
  void flat_broadcast(const char* op, at::Tensor& buf, int root);
  void flat_gather(const char* op, at::Tensor& out, const at::Tensor& in, int root);
  void flat_scatter(const char* op, at::Tensor& out, const at::Tensor& in, int root);
  // Hierarchical (hierarchical.cc, NOTE [hierarchical collectives]).
  void hier_all_reduce(const char* op, at::Tensor& buf, const Reduction& red);
  void hier_all_gather(const char* op, at::Tensor& out, const at::Tensor& in);
  void hier_reduce_scatter(const char* op, at::Tensor& out, const at::Tensor& in, const Reduction& red);

  c10::intrusive_ptr<c10d::Store> store_;
  int rank_, world_;
  std::chrono::milliseconds timeout_;
  Fallback& fallback_;
  std::shared_ptr<const GroupContext> ctx_;
  // Set once by ensure(), on the ops' thread, before any op's decision.
  bool mapped_ = false, spans_ = false;
  std::string failed_;  // the map's error: later ops fail alike (the keys are spent)
  HostMap map_;
  int host_ = 0, local_ = 0, per_host_ = 1;
  std::string reason_, across_reason_, flat_reason_;
  NcclTable rows_;       // NOTE [protocol table]: from which size each family runs hierarchically
  at::Tensor by_local_;  // [per_host * hosts]: rank of (local l, host h) at l * hosts + h
  // The subgroups, made when the map finds several hosts; mu_ guards them against abort() on
  // another thread.
  mutable std::mutex mu_;
  std::atomic<bool> aborted_{false};  // also read without mu_ (NOTE [call agreement])
  c10::intrusive_ptr<c10d::Backend> within_, across_;
};

}  // namespace purlin::backend
