// cuda_work.cc — see cuda_work.h.
#ifdef PURLIN_WITH_CUDA

#include "backend/cuda/cuda_work.h"

#include <c10/cuda/CUDAGuard.h>

#include "atom/cuda/host/cuda_check.h"

namespace purlin::backend {

CudaWork::CudaWork(int rank, std::vector<at::Tensor> outputs, c10::Device device,
                   std::function<std::string()> device_error)
    : c10d::Work(rank, c10d::OpType::UNKNOWN, "purlin:cuda"),
      outputs_(std::move(outputs)),
      device_(device),
      device_error_(std::move(device_error)) {
  c10::cuda::CUDAGuard guard(device_);
  atom::cuda::check(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), "cudaEventCreate");
  future_ = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()),
                                                     std::vector<c10::Device>{device_});
}

CudaWork::~CudaWork() {
  c10::cuda::CUDAGuard guard(device_);
  cudaEventDestroy(done_);
  cudaGetLastError();
}

void CudaWork::complete_on(const c10::cuda::CUDAStream& stream) {
  c10::cuda::CUDAStreamGuard guard(stream);
  atom::cuda::check(cudaEventRecord(done_, stream.stream()), "cudaEventRecord");
  recorded_ = true;
  future_->markCompleted(c10::IValue(outputs_));
}

bool CudaWork::isCompleted() {
  if (!recorded_) return false;
  const cudaError_t e = cudaEventQuery(done_);
  if (e == cudaErrorNotReady) {
    cudaGetLastError();
    return false;
  }
  atom::cuda::check(e, "cudaEventQuery");
  return true;
}

bool CudaWork::isSuccess() const { return device_error_().empty(); }

std::exception_ptr CudaWork::exception() const {
  const std::string err = device_error_();
  return err.empty() ? nullptr : std::make_exception_ptr(std::runtime_error(err));
}

void CudaWork::block_current_stream() {
  if (!recorded_) return;
  c10::cuda::CUDAGuard guard(device_);
  atom::cuda::check(cudaStreamWaitEvent(c10::cuda::getCurrentCUDAStream(device_.index()).stream(), done_, 0),
                    "cudaStreamWaitEvent");
}

bool CudaWork::wait(std::chrono::milliseconds /*timeout: the device wait is bounded by the group timeout*/) {
  const std::string err = device_error_();
  TORCH_CHECK(err.empty(), err);
  block_current_stream();
  return true;
}

void CudaWork::synchronize() { block_current_stream(); }

std::vector<at::Tensor> CudaWork::result() { return outputs_; }

c10::intrusive_ptr<c10::ivalue::Future> CudaWork::getFuture() { return future_; }

}  // namespace purlin::backend

#endif  // PURLIN_WITH_CUDA
