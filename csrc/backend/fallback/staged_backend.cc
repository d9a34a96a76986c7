// staged_backend.cc — see staged_backend.h (NOTE [fallback arguments]).
#include "backend/fallback/staged_backend.h"

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>

#include "backend/c10d/completed_work.h"

namespace purlin::backend {

// ---- StagedWork ------------------------------------------------------------

StagedWork::StagedWork(c10::intrusive_ptr<c10d::Work> inner, Copies copies)
    : inner_(std::move(inner)), copies_(std::move(copies)) {}

void StagedWork::copy_back() {
  std::lock_guard<std::mutex> g(mu_);
  if (copied_) return;
  copied_ = true;
  for (auto& [callers, staged] : copies_) callers.copy_(staged);
}

at::Tensor StagedWork::callers(const at::Tensor& t) const {
  for (const auto& [callers, staged] : copies_)
    if (staged.is_same(t)) return callers;
  return t;
}

bool StagedWork::isCompleted() {
  if (!inner_->isCompleted()) return false;
  if (inner_->isSuccess()) copy_back();
  return true;
}

bool StagedWork::isSuccess() const { return inner_->isSuccess(); }
std::exception_ptr StagedWork::exception() const { return inner_->exception(); }
int StagedWork::sourceRank() const { return inner_->sourceRank(); }
void StagedWork::abort() { inner_->abort(); }

std::vector<at::Tensor> StagedWork::result() {
  std::vector<at::Tensor> out;
  for (const at::Tensor& t : inner_->result()) out.push_back(callers(t));
  return out;
}

void StagedWork::synchronize() {
  inner_->synchronize();
  copy_back();
}

bool StagedWork::wait(std::chrono::milliseconds timeout) {
  const bool done = inner_->wait(timeout);
  if (done) copy_back();
  return done;
}

c10::intrusive_ptr<c10::ivalue::Future> StagedWork::getFuture() {
  c10::intrusive_ptr<c10::ivalue::Future> fut = inner_->getFuture();
  auto self = c10::intrusive_ptr<StagedWork>::reclaim_copy(this);
  return fut->then(
      [self](c10::ivalue::Future& done) -> c10::IValue {
        self->copy_back();
        const c10::IValue& v = done.value();
        if (!v.isTensorList()) return v;
        std::vector<at::Tensor> out;
        for (const at::Tensor& t : v.toTensorVector()) out.push_back(self->callers(t));
        return c10::IValue(out);
      },
      fut->elementType());
}

// ---- Stager ----------------------------------------------------------------

// Swaps the non-contiguous strided tensors of one op for contiguous ones in
// the caller's lists, and puts the caller's back when it goes out of scope.
class StagedBackend::Stager {
 public:
  Stager() = default;
  Stager(const Stager&) = delete;
  Stager& operator=(const Stager&) = delete;
  ~Stager() {  // newest first: a slot swapped twice gets the caller's tensor back last
    for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) *it->first = it->second;
  }

  void in(at::Tensor& t) {
    if (!needs(t)) return;
    saved_.emplace_back(&t, t);
    t = t.contiguous();
  }
  void out(at::Tensor& t) {
    if (!needs(t)) return;
    saved_.emplace_back(&t, t);
    at::Tensor staged = at::empty_like(t, at::MemoryFormat::Contiguous);
    copies_.emplace_back(t, staged);
    t = staged;
  }
  void inout(at::Tensor& t) {
    if (!needs(t)) return;
    saved_.emplace_back(&t, t);
    at::Tensor staged = t.contiguous();
    copies_.emplace_back(t, staged);
    t = staged;
  }
  void in(std::vector<at::Tensor>& ts) {
    for (auto& t : ts) in(t);
  }
  void out(std::vector<at::Tensor>& ts) {
    for (auto& t : ts) out(t);
  }
  void inout(std::vector<at::Tensor>& ts) {
    for (auto& t : ts) inout(t);
  }
  void in(std::vector<std::vector<at::Tensor>>& ls) {
    for (auto& l : ls) in(l);
  }
  void out(std::vector<std::vector<at::Tensor>>& ls) {
    for (auto& l : ls) out(l);
  }

  // gloo splits a flat all_gather output (reduce_scatter input) into blocks shaped like the other
  // side and refuses other shapes; purlin takes any shape of the right size. A contiguous `t` of
  // world x `like`'s elements is viewed (not copied) as world blocks of `like`'s shape.
  void blocks_of(at::Tensor& t, const at::Tensor& like, int64_t world) {
    if (!t.defined() || !like.defined() || t.layout() != c10::kStrided || !t.is_contiguous() || like.dim() == 0 ||
        t.numel() != world * like.numel() || t.sizes() == like.sizes())
      return;
    std::vector<int64_t> shape = like.sizes().vec();
    shape[0] *= world;
    if (t.sizes().vec() == shape) return;
    saved_.emplace_back(&t, t);
    t = t.view(shape);
  }

  StagedWork::Copies take_copies() { return std::move(copies_); }

 private:
  static bool needs(const at::Tensor& t) {
    return t.defined() && t.layout() == c10::kStrided && !t.is_contiguous();
  }
  std::vector<std::pair<at::Tensor*, at::Tensor>> saved_;  // the caller's slot and its tensor
  StagedWork::Copies copies_;
};

// ---- StagedBackend ---------------------------------------------------------

StagedBackend::StagedBackend(c10::intrusive_ptr<c10d::Backend> inner)
    : c10d::Backend(inner->getRank(), inner->getSize()), inner_(std::move(inner)) {}

template <class Call>
c10::intrusive_ptr<c10d::Work> StagedBackend::run(Call&& call) {
  try {
    StagedWork::Copies copies;
    c10::intrusive_ptr<c10d::Work> work;
    {
      Stager stager;
      work = call(stager);
      copies = stager.take_copies();
    }  // the caller's tensors are back in its lists
    if (copies.empty()) return work;
    if (!work) {  // NCCL inside a coalescing block: the block's Work covers the op
      block_copies_.insert(block_copies_.end(), copies.begin(), copies.end());
      return work;
    }
    return c10::make_intrusive<StagedWork>(std::move(work), std::move(copies));
  } catch (...) {
    if (!in_block_) throw;
    if (!block_error_) block_error_ = std::current_exception();
    return completed_work({});
  }
}

void StagedBackend::startCoalescing() {
  if (inner_->supportsCoalescing()) inner_->startCoalescing();
  in_block_ = true;
  block_error_ = nullptr;
  block_copies_.clear();
}

c10::intrusive_ptr<c10d::Work> StagedBackend::endCoalescing() {
  in_block_ = false;
  std::exception_ptr error = std::move(block_error_);
  block_error_ = nullptr;
  StagedWork::Copies copies = std::move(block_copies_);
  block_copies_.clear();
  c10::intrusive_ptr<c10d::Work> work = inner_->supportsCoalescing() ? inner_->endCoalescing() : nullptr;
  if (error) std::rethrow_exception(error);
  if (copies.empty()) return work;
  if (!work) {  // nothing to wait for: the ops are done
    for (auto& [callers, staged] : copies) callers.copy_(staged);
    return work;
  }
  return c10::make_intrusive<StagedWork>(std::move(work), std::move(copies));
}

c10::intrusive_ptr<c10d::Work> StagedBackend::broadcast(std::vector<at::Tensor>& tensors,
                                                        const c10d::BroadcastOptions& opts) {
  return run([&](Stager& s) { s.inout(tensors); return inner_->broadcast(tensors, opts); });
}

c10::intrusive_ptr<c10d::Work> StagedBackend::allreduce(std::vector<at::Tensor>& tensors,
                                                        const c10d::AllreduceOptions& opts) {
  return run([&](Stager& s) { s.inout(tensors); return inner_->allreduce(tensors, opts); });
}

c10::intrusive_ptr<c10d::Work> StagedBackend::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                                  const c10d::AllreduceCoalescedOptions& opts) {
  return run([&](Stager& s) { s.inout(tensors); return inner_->allreduce_coalesced(tensors, opts); });
}

c10::intrusive_ptr<c10d::Work> StagedBackend::reduce(std::vector<at::Tensor>& tensors,
                                                     const c10d::ReduceOptions& opts) {
  return run([&](Stager& s) { s.inout(tensors); return inner_->reduce(tensors, opts); });
}

c10::intrusive_ptr<c10d::Work> StagedBackend::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                        std::vector<at::Tensor>& inputs,
                                                        const c10d::AllgatherOptions& opts) {
  return run([&](Stager& s) { s.in(inputs); s.out(outputs); return inner_->allgather(outputs, inputs, opts); });
}

c10::intrusive_ptr<c10d::Work> StagedBackend::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                              const c10d::AllgatherOptions& opts) {
  return run([&](Stager& s) {
    s.in(input);
    s.out(output);
    s.blocks_of(output, input, getSize());
    return inner_->_allgather_base(output, input, opts);
  });
}

c10::intrusive_ptr<c10d::Work> StagedBackend::allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                                  std::vector<at::Tensor>& inputs,
                                                                  const c10d::AllgatherOptions& opts) {
  return run([&](Stager& s) {
    s.in(inputs);
    s.out(outputs);
    return inner_->allgather_coalesced(outputs, inputs, opts);
  });
}

c10::intrusive_ptr<c10d::Work> StagedBackend::allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                              std::vector<at::Tensor>& inputs,
                                                                              const c10d::AllgatherOptions& opts) {
  return run([&](Stager& s) {
    s.in(inputs);
    s.out(outputs);
    return inner_->allgather_into_tensor_coalesced(outputs, inputs, opts);
  });
}

c10::intrusive_ptr<c10d::Work> StagedBackend::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::GatherOptions& opts) {
  return run([&](Stager& s) { s.in(inputs); s.out(outputs); return inner_->gather(outputs, inputs, opts); });
}

c10::intrusive_ptr<c10d::Work> StagedBackend::scatter(std::vector<at::Tensor>& outputs,
                                                      std::vector<std::vector<at::Tensor>>& inputs,
                                                      const c10d::ScatterOptions& opts) {
  return run([&](Stager& s) { s.in(inputs); s.out(outputs); return inner_->scatter(outputs, inputs, opts); });
}

c10::intrusive_ptr<c10d::Work> StagedBackend::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                             std::vector<std::vector<at::Tensor>>& inputs,
                                                             const c10d::ReduceScatterOptions& opts) {
  return run([&](Stager& s) { s.in(inputs); s.out(outputs); return inner_->reduce_scatter(outputs, inputs, opts); });
}

c10::intrusive_ptr<c10d::Work> StagedBackend::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                   const c10d::ReduceScatterOptions& opts) {
  return run([&](Stager& s) {
    s.in(input);
    s.out(output);
    s.blocks_of(input, output, getSize());
    return inner_->_reduce_scatter_base(output, input, opts);
  });
}

c10::intrusive_ptr<c10d::Work> StagedBackend::reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                              std::vector<at::Tensor>& inputs,
                                                                              const c10d::ReduceScatterOptions& opts) {
  return run([&](Stager& s) {
    s.in(inputs);
    s.out(outputs);
    return inner_->reduce_scatter_tensor_coalesced(outputs, inputs, opts);
  });
}

c10::intrusive_ptr<c10d::Work> StagedBackend::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                            std::vector<int64_t>& output_split_sizes,
                                                            std::vector<int64_t>& input_split_sizes,
                                                            const c10d::AllToAllOptions& opts) {
  return run([&](Stager& s) {
    s.in(input);
    s.out(output);
    return inner_->alltoall_base(output, input, output_split_sizes, input_split_sizes, opts);
  });
}

c10::intrusive_ptr<c10d::Work> StagedBackend::alltoall(std::vector<at::Tensor>& outputs,
                                                       std::vector<at::Tensor>& inputs,
                                                       const c10d::AllToAllOptions& opts) {
  return run([&](Stager& s) { s.in(inputs); s.out(outputs); return inner_->alltoall(outputs, inputs, opts); });
}

c10::intrusive_ptr<c10d::Work> StagedBackend::barrier(const c10d::BarrierOptions& opts) {
  return run([&](Stager&) { return inner_->barrier(opts); });
}

c10::intrusive_ptr<c10d::Work> StagedBackend::send(std::vector<at::Tensor>& tensors, int dst, int tag) {
  return run([&](Stager& s) { s.in(tensors); return inner_->send(tensors, dst, tag); });
}

c10::intrusive_ptr<c10d::Work> StagedBackend::recv(std::vector<at::Tensor>& tensors, int src, int tag) {
  return run([&](Stager& s) { s.out(tensors); return inner_->recv(tensors, src, tag); });
}

c10::intrusive_ptr<c10d::Work> StagedBackend::recvAnysource(std::vector<at::Tensor>& tensors, int tag) {
  return run([&](Stager& s) { s.out(tensors); return inner_->recvAnysource(tensors, tag); });
}

}  // namespace purlin::backend
