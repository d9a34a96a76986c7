// completed_work.h — the Work of a collective that is done when its call
// returns: every CPU collective, and a synchronous CUDA one (its kernel is
// queued on the caller's stream, which orders whatever the caller does next).
//
// NOTE [eager host path] An eager small collective is bound by the host
// (benchmarks/results/cuda_h200x2_20261130p_probes.md: purlin's own code cost ~4-5 us per call
// on the H200 VM around a ~2.4 us launch). This Work is one allocation: no
// Future, list type or IValue list is built unless someone asks for the
// Future (DDP comm hooks do), and then it is made once, completed.
#pragma once

#include <vector>

#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

namespace purlin::backend {

class CompletedWork : public c10d::Work {
 public:
  explicit CompletedWork(std::vector<at::Tensor> outputs);

  bool isCompleted() override { return true; }
  bool isSuccess() const override { return true; }
  bool wait(std::chrono::milliseconds /*timeout*/ = kNoTimeout) override { return true; }
  void synchronize() override {}
  void blockCurrentStream() override {}
  std::vector<at::Tensor> result() override { return outputs_; }
  // A completed Future of the outputs (a list of tensors), made on first use.
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

 private:
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

inline c10::intrusive_ptr<c10d::Work> completed_work(std::vector<at::Tensor> outputs) {
  return c10::make_intrusive<CompletedWork>(std::move(outputs));
}

}  // namespace purlin::backend
