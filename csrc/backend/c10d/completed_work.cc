// completed_work.cc — see completed_work.h.
#include "backend/c10d/completed_work.h"

namespace purlin::backend {

CompletedWork::CompletedWork(std::vector<at::Tensor> outputs) : outputs_(std::move(outputs)) {
  finish();  // c10d::Work's own state says completed too (its default accessors, profiling callbacks)
}

c10::intrusive_ptr<c10::ivalue::Future> CompletedWork::getFuture() {
  if (!future_) {
    future_ = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::ofTensors());
    future_->markCompleted(c10::IValue(outputs_));
  }
  return future_;
}

}  // namespace purlin::backend
