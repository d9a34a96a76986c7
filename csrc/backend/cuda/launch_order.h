// launch_order.h — LaunchOrder: the order of one CUDA group's launches across
// streams (NOTE [stream order]). A CudaGroup owns one; torch-free.
#pragma once

#include <cuda_runtime.h>

namespace purlin::backend {

// NOTE [stream order] Kernels of one group must not overlap on a rank (they
// share the workspace and epochs). Launches on one stream are ordered by it;
// when a launch goes to another stream than the previous one (current vs
// internal stream, or the user switched streams), the new stream first waits
// for everything queued so far on the old one. Not across graph capture
// boundaries: inside a captured graph the capture's own order applies.
class LaunchOrder {
 public:
  LaunchOrder() = default;
  ~LaunchOrder();
  LaunchOrder(const LaunchOrder&) = delete;
  LaunchOrder& operator=(const LaunchOrder&) = delete;

  // Creates the event that carries the order, on the current device.
  void open();
  // Orders a launch on `s` after the group's previous launch (NOTE [stream order]).
  void order_after_last(cudaStream_t s);
  // Waits for the stream of the group's last launch (not while it is being
  // captured) and releases the event; best effort, for the group's teardown.
  void close();

 private:
  cudaStream_t last_stream_ = nullptr;
  bool have_last_ = false;
  cudaEvent_t event_ = nullptr;
};

}  // namespace purlin::backend
