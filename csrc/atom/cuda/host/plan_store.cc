// plan_store.cc — see plan_store.h.
#include "atom/cuda/host/plan_store.h"

#include <cstring>

#include <cuda_runtime.h>

#include "atom/cuda/host/cuda_check.h"

namespace purlin::atom::cuda {

PlanStore::PlanStore(int device, Alloc alloc, Free free)
    : device_(device), alloc_(std::move(alloc)), free_(std::move(free)) {
  if (!alloc_) {
    alloc_ = [](size_t n) {
      void* p = nullptr;
      check(cudaMalloc(&p, n), "cudaMalloc of a plan");
      return p;
    };
    free_ = [](void* p) { cudaFree(p); };
  }
}

PlanStore::~PlanStore() {
  DeviceScope scope(device_);
  for (void* p : blocks_) free_(p);
}

DevicePlanRef PlanStore::upload(const DevicePlan& plan) {
  DeviceScope scope(device_);
  const size_t ops = plan.ops.size() * sizeof(DevOp), srcs = plan.srcs.size() * sizeof(DevRef);
  const size_t total = ops + srcs + 16;
  std::vector<char> host(total, 0);
  std::memcpy(host.data(), plan.ops.data(), ops);
  const size_t srcs_at = (ops + 15) / 16 * 16;
  std::memcpy(host.data() + srcs_at, plan.srcs.data(), srcs);
  RelaxedCaptureMode relaxed;
  void* dev = alloc_(total);
  blocks_.push_back(dev);
  bytes_ += total;
  cudaStream_t s;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  cudaError_t e = cudaMemcpyAsync(dev, host.data(), total, cudaMemcpyHostToDevice, s);
  if (e == cudaSuccess) e = cudaStreamSynchronize(s);
  cudaStreamDestroy(s);
  check(e, "uploading a plan");
  return DevicePlanRef{static_cast<const DevOp*>(dev),
                       reinterpret_cast<const DevRef*>(static_cast<const char*>(dev) + srcs_at)};
}

}  // namespace purlin::atom::cuda
