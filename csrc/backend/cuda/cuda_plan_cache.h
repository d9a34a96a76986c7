// cuda_plan_cache.h — CudaPlanCache: a CUDA group's lowered plans, kept in
// the bounded cache both engines use (backend/group/plan_cache.h, NOTE [plan
// caches]), and its memo of the last plan per kind of pool use (NOTE [eager
// host path]). CudaGroup derives the plans (cuda_group_plans.cc) and owns one.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "atom/cuda/device/plan_format.h"
#include "atom/cuda/device/plan_kernel.h"
#include "backend/group/plan_cache.h"
#include "backend/group/request.h"
#include "backend/group/symmetric_use.h"
#include "lowering/protocol_choice.h"
#include "snac/spec_traits.h"

namespace purlin::backend {

// One cached plan.
struct CachedPlan {
  lowering::ProtocolChoice choice;  // NOTE [protocol choice]: the plan, its shape and signature
  snac::CallDescription call;       // the call it was chosen for (request.h's describe_call)
  // Its kernel parameters, the plan's fields prebuilt (NOTE [prebuilt kernel parameters]); the lowered
  // plan inside them when it fits a launch's parameters (inline_plan), else in device memory.
  atom::cuda::PreparedPlan kernel;
  bool inline_plan = false;
  const std::string* protocol_name = nullptr;  // choice.protocol, in CudaGroup's protocol names (protocol_counts())
};

class CudaPlanCache {
 public:
  // The plan memoized for `rq` with this pool use and region request, when
  // `rq` is the same call as the last one of its kind (NOTE [eager host
  // path]), or nullptr. `alias` and `shift`: rq's (CudaGroup::alias_of).
  const CachedPlan* memoized(const Request& rq, SymmetricUse use, bool region, atom::cuda::IoAlias alias,
                             int64_t shift) const;
  // Remembers `plan` as the one of `rq` (for the calls that may take the memo).
  void memoize(const Request& rq, SymmetricUse use, bool region, atom::cuda::IoAlias alias, int64_t shift,
               const CachedPlan& plan);
  // The plan cached under `key`, or nullptr.
  const CachedPlan* find(const std::string& key) const { return plans_.find(key); }
  // Caches `plan` under `key` (not cached yet) and returns it; forgets the
  // memo when the full cache dropped plans.
  const CachedPlan& insert(std::string key, std::unique_ptr<CachedPlan> plan);

 private:
  // NOTE [eager host path] The last plan plan_for() returned for each
  // (zero_copy, region), and the arguments it was for: a run of one
  // collective (the eager loop, a training step's all_reduce of one bucket
  // size) finds its plan without exchanging metadata, building the cache key
  // string or hashing it. Every field plan_key() and plan_for() read from the
  // call is compared; all_to_all (its splits are exchanged on every call)
  // and custom specs never take it.
  struct PlanMemo {
    const CachedPlan* plan = nullptr;
    const char* name = nullptr;  // Request::name: a literal per op
    DType dtype = DType::Float32;
    int root = 0;
    int64_t in_numel = 0, out_numel = 0, shift = 0;
    atom::cuda::IoAlias alias = atom::cuda::IoAlias::Disjoint;
  };
  static bool memoizable(const Request& rq) { return !sizes_per_rank(rq) && !rq.custom && rq.out_splits.empty(); }
  // by zero_copy * 2 + region; [4]: peer outputs
  static size_t slot(SymmetricUse use, bool region) {
    return use.write_peer_outputs ? 4 : (use.read_peer_inputs ? 2 : 0) + (region ? 1 : 0);
  }

  // NOTE [plan caches]: inline plans are host-only, safe to drop any time; device plans may be in flight.
  PlanCache<CachedPlan> plans_{1024, [](const CachedPlan& c) { return c.inline_plan; }};
  PlanMemo memo_[5];
};

}  // namespace purlin::backend
