// coalesced_work.h — the Work that endCoalescing() returns for a block of ops.
//
// NOTE [coalescing] torch's _coalescing_manager (and batch_isend_irecv, which
// uses it for backends that support coalescing) calls startCoalescing(), then
// each op, then endCoalescing(), and hands the caller only the Work that
// endCoalescing() returns (the ops' own Works are dropped, also the fast-path
// all_reduce_coalesced's). So that Work must cover every op of the block.
// PurlinBackend runs each op as it is called (natively, or on the fallback,
// which for CUDA point-to-point is NCCL: there the block is forwarded as
// NCCL's own coalescing, since sends and receives of a ring must be issued as
// one group) and keeps their Works; endCoalescing() returns the only one, or
// this Work over all of them: wait() / synchronize() wait for each (CUDA
// Works make the current stream wait), isCompleted() when all are.
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
