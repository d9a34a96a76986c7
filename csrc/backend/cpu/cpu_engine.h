// cpu_engine.h — runs native collectives on CPU tensors: arrival handshake,
// cross-rank checks, Spec, SNAC plan (cached), and the CPU Atom.
//
// Torch-free: the backend passes a Rendezvous (backed by the c10d Store) to set
// up the shared-memory segments, and flat Requests to run. The arrival,
// agreement and broken state are the group channel's (group_channel.h), the
// plan cache is plan_cache.h's: the same pieces the CUDA group uses.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "backend/group/group_channel.h"
#include "backend/group/group_context.h"
#include "backend/group/group_health.h"
#include "backend/group/plan_cache.h"
#include "backend/group/request.h"
#include "backend/group/shm_group.h"
#include "snac/plan.h"

namespace purlin::backend {

class CpuEngine {
 public:
  // `health`: the group's (NOTE [group health], NOTE [shutdown and abort]); it outlives the engine.
  // `ctx`: the group's settings (NOTE [group settings]), read at the first collective.
  CpuEngine(int rank, int world, std::chrono::milliseconds timeout, Rendezvous rdv, GroupHealth* health,
             std::shared_ptr<const GroupContext> ctx);
  ~CpuEngine();

  // Runs one collective; throws std::runtime_error naming op, rank and reason.
  void run(Request& rq);

  uint64_t seq() const { return channel_.seq(); }
  void set_timeout(std::chrono::milliseconds t);

 private:
  void ensure_atom(const char* op);  // NOTE [setup agreement]
  const snac::Plan& plan_for(const Request& rq, const std::vector<PeerMeta>& all);

  int rank_, world_;
  Rendezvous rdv_;
  GroupChannel channel_;
  std::shared_ptr<const GroupContext> ctx_;
  uint64_t step_base_ = 0;  // NOTE [epochs]
  PlanCache<snac::Plan> plans_{256};  // NOTE [plan caches]: every plan may be dropped
  int64_t two_shot_bytes_ = 0;
  int64_t round_bytes_ = 0;  // NOTE [cpu rounds]
  bool debug_ = false;
};

// NOTE [cpu rounds] A call larger than TORCH_PURLIN_CPU_ROUND_BYTES per rank
// runs in rounds of that size through the workspace's two slots, however big
// the workspace. Two reasons, both measured on 2 cores
// (benchmarks/results/cpu_tuning_*.md): a rank that only stages (broadcast's
// root, reduce's and gather's non-roots) would otherwise leave its readers
// idle until its whole input is staged, and the readers would then read bytes
// that staging the rest pushed out of the caches (16M in one round: broadcast
// 2.4x slower, all_reduce 1.3x). Every rank derives the same rounds: the
// setting is agreed (Equal) and the workspace size is rank 0's.

}  // namespace purlin::backend
