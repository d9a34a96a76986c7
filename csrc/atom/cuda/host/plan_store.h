// plan_store.h — device copies of the plans too large to pass inline.
//
// Each plan is uploaded once (a copy on a private stream the host waits for;
// allowed during another stream's graph capture) into memory from the
// allocator the owner passes (the engine passes torch's caching allocator,
// so nothing is cudaMalloc'd while a graph is captured). Plans are never
// freed before the store: a captured graph may still name them.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "atom/cuda/device/plan_format.h"

namespace purlin::atom::cuda {

struct DevicePlanRef {
  const DevOp* ops = nullptr;
  const DevRef* srcs = nullptr;
};

class PlanStore {
 public:
  using Alloc = std::function<void*(size_t bytes)>;
  using Free = std::function<void(void*)>;

  PlanStore(int device, Alloc alloc, Free free);
  ~PlanStore();
  PlanStore(const PlanStore&) = delete;
  PlanStore& operator=(const PlanStore&) = delete;

  DevicePlanRef upload(const DevicePlan& plan);
  size_t bytes() const { return bytes_; }

 private:
  int device_;
  Alloc alloc_;
  Free free_;
  std::vector<void*> blocks_;
  size_t bytes_ = 0;
};

}  // namespace purlin::atom::cuda
