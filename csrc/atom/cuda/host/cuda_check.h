// cuda_check.h — host-side CUDA error handling of the CUDA Atom.
#pragma once

#include <stdexcept>
#include <string>

#include <cuda_runtime.h>

namespace purlin::atom::cuda {

inline std::string cuda_error_text(cudaError_t e, const char* what) {
  return std::string("purlin: ") + what + " failed: " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
}

// Throws std::runtime_error naming the call on failure.
inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(cuda_error_text(e, what));
}

// Lets this thread make calls that stream capture forbids (a synchronous
// copy on a private stream, say) while another stream is being captured.
class RelaxedCaptureMode {
 public:
  RelaxedCaptureMode() : mode_(cudaStreamCaptureModeRelaxed) { cudaThreadExchangeStreamCaptureMode(&mode_); }
  ~RelaxedCaptureMode() { cudaThreadExchangeStreamCaptureMode(&mode_); }
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  cudaStreamCaptureMode mode_;
};

// Restores the calling thread's current device on scope exit.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    cudaGetDevice(&prev_);
    if (device != prev_) cudaSetDevice(device);
  }
  ~DeviceScope() { cudaSetDevice(prev_); }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int prev_ = 0;
};

}  // namespace purlin::atom::cuda
