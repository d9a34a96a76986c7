// cuda_plan_cache.cc — see cuda_plan_cache.h.
#ifdef PURLIN_WITH_CUDA

#include "backend/cuda/cuda_plan_cache.h"

namespace purlin::backend {

const CachedPlan* CudaPlanCache::memoized(const Request& rq, SymmetricUse use, bool region, atom::cuda::IoAlias alias,
                                          int64_t shift) const {
  const PlanMemo& memo = memo_[slot(use, region)];
  if (memoizable(rq) && memo.plan && memo.name == rq.name && memo.dtype == rq.dtype && memo.root == rq.root &&
      memo.in_numel == rq.in_numel && memo.out_numel == rq.out_numel && memo.alias == alias && memo.shift == shift)
    return memo.plan;
  return nullptr;
}

void CudaPlanCache::memoize(const Request& rq, SymmetricUse use, bool region, atom::cuda::IoAlias alias,
                            int64_t shift, const CachedPlan& plan) {
  if (memoizable(rq))
    memo_[slot(use, region)] = PlanMemo{&plan, rq.name, rq.dtype, rq.root, rq.in_numel, rq.out_numel, shift, alias};
}

const CachedPlan& CudaPlanCache::insert(std::string key, std::unique_ptr<CachedPlan> plan) {
  bool dropped = false;
  const CachedPlan& kept = plans_.insert(std::move(key), std::move(plan), &dropped);
  if (dropped)
    for (PlanMemo& m : memo_) m = PlanMemo{};  // they may point at a dropped plan
  return kept;
}

}  // namespace purlin::backend

#endif  // PURLIN_WITH_CUDA
