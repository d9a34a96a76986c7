// staged_backend.h — StagedBackend: the fallback backend (gloo, NCCL) as purlin
// calls it, handed only tensors it handles; StagedWork.
//
// NOTE [fallback arguments] gloo and NCCL take dense contiguous tensors only:
// gloo's send refuses others ("input tensor has to be contiguous"), and its
// all_reduce reads numel elements from the data pointer, ignoring strides, so a
// bitwise all_reduce of a strided view reduced the wrong elements and wrote
// over the ones between the view's rows. Purlin's native ops take any strided
// tensor (tensor_args.h), so the ops it sends to a fallback must as well.
// StagedBackend wraps each fallback backend: for every op, each strided tensor
// that is not contiguous is swapped, in the caller's argument list, for a
// contiguous copy (inputs) or a contiguous buffer (outputs; in-place tensors
// get a copy that is also an output); the fallback runs on those; the
// caller's tensors are put back in its lists; and the Work returned is a
// StagedWork that copies each buffer into the caller's tensor once the
// fallback's Work has completed (wait(), synchronize(), isCompleted() finding
// it done, or its Future). Contiguous and sparse tensors pass as they are, and
// an op with nothing to stage returns the fallback's own Work: the usual path
// costs one contiguity check per tensor. Inside a coalescing block where the
// fallback's op returns no Work (NCCL), the copies wait for the block's Work.
// Errors inside a coalescing block: NOTE [coalescing] (coalesced_work.h).
#pragma once

#include <exception>
#include <mutex>
#include <utility>
#include <vector>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

namespace purlin::backend {

// The Work of a staged op: `inner`'s, then each (caller's tensor, staged buffer) copied back once.
class StagedWork : public c10d::Work {
 public:
  using Copies = std::vector<std::pair<at::Tensor, at::Tensor>>;
  StagedWork(c10::intrusive_ptr<c10d::Work> inner, Copies copies);

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  int sourceRank() const override;
  std::vector<at::Tensor> result() override;
  void synchronize() override;
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  void abort() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

 private:
  void copy_back();
  at::Tensor callers(const at::Tensor& t) const;  // the caller's tensor a staged buffer stands for, else t

  c10::intrusive_ptr<c10d::Work> inner_;
  Copies copies_;
  std::mutex mu_;
  bool copied_ = false;
};

class StagedBackend : public c10d::Backend {
 public:
  explicit StagedBackend(c10::intrusive_ptr<c10d::Backend> inner);

  c10d::Backend& inner() { return *inner_; }
  const std::string getBackendName() const override { return inner_->getBackendName(); }
  void setTimeout(std::chrono::milliseconds timeout) override { inner_->setTimeout(timeout); }
  void shutdown() override { inner_->shutdown(); }
  void abort() override { inner_->abort(); }
  // Always true, so purlin tells it of every block: it forwards the block to a backend that
  // coalesces (NCCL) and, for any, keeps the block's errors for endCoalescing (NOTE [coalescing]).
  bool supportsCoalescing() const override { return true; }
  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs, const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_split_sizes,
                                               std::vector<int64_t>& input_split_sizes,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;

  class Stager;

 private:
  // Runs `call(stager)` (which stages the op's tensors and calls inner()) and returns its Work,
  // staged; inside a coalescing block an error is kept for endCoalescing (NOTE [coalescing]) and a
  // completed Work returned.
  template <class Call>
  c10::intrusive_ptr<c10d::Work> run(Call&& call);

  c10::intrusive_ptr<c10d::Backend> inner_;
  bool in_block_ = false;
  std::exception_ptr block_error_;  // the first error inside the current block
  StagedWork::Copies block_copies_;  // staged outputs whose op returned no Work inside the block
};

}  // namespace purlin::backend
