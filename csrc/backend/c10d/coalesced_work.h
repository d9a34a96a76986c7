// coalesced_work.h — the Work that endCoalescing() returns for a block of ops.
//
// NOTE [coalescing] torch's _coalescing_manager (and batch_isend_irecv)
// hands the caller only the Work endCoalescing() returns, so that Work must
// cover every op of the block: PurlinBackend runs each op as it is called
// (natively, or on the fallback, which for CUDA point-to-point forwards the
// block as NCCL's own coalescing: a ring's sends and receives must be one
// group) and endCoalescing() returns the only Work or this one over all of
// them. Errors inside a block are raised by endCoalescing(), not by the op:
// torch clears its block state only when the block's body ends normally, and
// an exception escaping it leaves torch recording the group's later calls
// instead of running them. So an op that fails in purlin inside a block
// records its error and returns a completed Work; endCoalescing() ends every
// fallback's block and raises the first error. Exceptions raised before purlin
// is called still leave torch's state set: torch's to fix.
// Details: docs/DESIGN.md, "Coalescing".
#pragma once

#include <vector>

#include <torch/csrc/distributed/c10d/Work.hpp>

namespace purlin::backend {

class CoalescedWork : public c10d::Work {
 public:
  explicit CoalescedWork(std::vector<c10::intrusive_ptr<c10d::Work>> works);

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  void synchronize() override;
  std::vector<at::Tensor> result() override;
  // Several ops' Futures do not make one list of outputs: raises, naming the count.
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

 private:
  std::vector<c10::intrusive_ptr<c10d::Work>> works_;
};

}  // namespace purlin::backend
