// plan_cache.h — the bounded plan cache both engines keep: the CPU engine's
// SNAC plans (cpu_engine.h) and the CUDA group's lowered plans
// (backend/cuda/cuda_plan_cache.h). Header-only, no torch headers.
//
// NOTE [plan caches] A plan is derived once per distinct call (its key:
// request.h's plan_key() and the options the engine chose) and kept. A job
// whose calls take ever new shapes (dynamic shapes, all_to_all splits that
// change every step) must not grow the cache without bound, so a cache holds
// `bound` plans; when it is full, every entry the engine allows to go
// (`droppable`) is dropped at once: no bookkeeping on the hot path, and a
// dropped plan costs microseconds to derive again. The CPU engine drops all of
// them; the CUDA group drops only host-only (inline) plans, since a plan in
// device memory may still be read by a kernel in flight. insert() says when
// it dropped entries: a pointer kept to one (CudaPlanCache's memo, NOTE
// [eager host path]) must be forgotten then.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>

namespace purlin::backend {

template <class Plan>
class PlanCache {
 public:
  // `droppable` (nullptr: every plan) says which plans may be dropped when the cache is full.
  explicit PlanCache(size_t bound, std::function<bool(const Plan&)> droppable = nullptr)
      : bound_(bound), droppable_(std::move(droppable)) {}

  // The plan cached under `key`, or nullptr.
  const Plan* find(const std::string& key) const {
    auto it = plans_.find(key);
    return it == plans_.end() ? nullptr : it->second.get();
  }

  // Caches `plan` under `key` (not cached yet) and returns it. A full cache
  // first drops its droppable plans; *dropped (if given) says whether any went.
  const Plan& insert(std::string key, std::unique_ptr<Plan> plan, bool* dropped = nullptr) {
    bool any = false;
    if (plans_.size() >= bound_) {
      for (auto i = plans_.begin(); i != plans_.end();) {
        if (!droppable_ || droppable_(*i->second)) {
          i = plans_.erase(i);
          any = true;
        } else {
          ++i;
        }
      }
    }
    if (dropped) *dropped = any;
    return *plans_.emplace(std::move(key), std::move(plan)).first->second;
  }

  size_t size() const { return plans_.size(); }
  size_t bound() const { return bound_; }

 private:
  size_t bound_;
  std::function<bool(const Plan&)> droppable_;
  std::unordered_map<std::string, std::unique_ptr<Plan>> plans_;
};

}  // namespace purlin::backend
