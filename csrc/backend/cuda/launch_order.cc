// launch_order.cc — see launch_order.h.
#ifdef PURLIN_WITH_CUDA

#include "backend/cuda/launch_order.h"

#include "atom/cuda/host/cuda_check.h"

namespace purlin::backend {

namespace cu = purlin::atom::cuda;

LaunchOrder::~LaunchOrder() {
  if (event_) cudaEventDestroy(event_);  // close() did not run (a group whose setup failed)
}

void LaunchOrder::open() { cu::check(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming), "cudaEventCreate"); }

void LaunchOrder::order_after_last(cudaStream_t s) {
  if (have_last_ && last_stream_ != s) {
    cudaStreamCaptureStatus a = cudaStreamCaptureStatusNone, b = cudaStreamCaptureStatusNone;
    cudaStreamIsCapturing(last_stream_, &a);
    cudaStreamIsCapturing(s, &b);
    if (a == cudaStreamCaptureStatusNone && b == cudaStreamCaptureStatusNone) {
      cu::check(cudaEventRecord(event_, last_stream_), "cudaEventRecord");
      cu::check(cudaStreamWaitEvent(s, event_, 0), "cudaStreamWaitEvent");
    }
    cudaGetLastError();
  }
  last_stream_ = s;
  have_last_ = true;
}

void LaunchOrder::close() {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  if (have_last_ && cudaStreamIsCapturing(last_stream_, &st) == cudaSuccess && st == cudaStreamCaptureStatusNone)
    cudaStreamSynchronize(last_stream_);
  if (event_) cudaEventDestroy(event_);
  event_ = nullptr;
}

}  // namespace purlin::backend

#endif  // PURLIN_WITH_CUDA
