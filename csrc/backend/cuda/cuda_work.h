// cuda_work.h — the Work of an asynchronous native CUDA collective.
//
// Completion is an event on the engine's internal stream, recorded after
// the copies back into the caller's tensors (cuda_engine.h's contract):
//   wait() / synchronize()  make the caller's current stream wait for it
//                           (the host does not block), after raising a
//                           device timeout the group already recorded;
//   isCompleted()           polls the event;
//   getFuture()             a CUDA-aware Future completed on that stream
//                           (what DDP comm hooks chain on).
// Holds the output tensors until it is destroyed.
#pragma once

#ifdef PURLIN_WITH_CUDA

#include <functional>
#include <string>
#include <vector>

#include <ATen/core/ivalue.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

namespace purlin::backend {

class CudaWork : public c10d::Work {
 public:
  // `device_error` returns the group's recorded device error ("" if none).
  CudaWork(int rank, std::vector<at::Tensor> outputs, c10::Device device, std::function<std::string()> device_error);
  ~CudaWork() override;

  // Marks completion at the current end of `stream` (called once, by CudaOpScope).
  void complete_on(const c10::cuda::CUDAStream& stream);

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  void synchronize() override;
  std::vector<at::Tensor> result() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

 private:
  void block_current_stream();

  std::vector<at::Tensor> outputs_;
  c10::Device device_;
  std::function<std::string()> device_error_;
  cudaEvent_t done_ = nullptr;
  bool recorded_ = false;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

}  // namespace purlin::backend

#endif  // PURLIN_WITH_CUDA
