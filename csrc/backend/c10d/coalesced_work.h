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
// Errors inside a block are raised by endCoalescing(), not by the op: torch's
// _coalescing_manager clears its block state (_world.pg_coalesce_state) only
// when its body ends normally, just before calling endCoalescing(); an
// exception escaping the body leaves the state set, and from then on torch
// itself records the group's all_reduce, all_gather_into_tensor and
// reduce_scatter_tensor calls instead of running them (a synchronous
// all_reduce returned the rank's own input; an async one an IllegalWork). So
// an op inside a block that fails in purlin (natively: on every rank alike;
// on the fallback: StagedBackend, NOTE [fallback arguments]) records its error
// and returns a completed Work, and endCoalescing() ends every fallback's block
// and raises the first error. Exceptions raised before purlin is called (torch's
// dispatcher or Python checks) still leave torch's state set: torch's to fix.
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
