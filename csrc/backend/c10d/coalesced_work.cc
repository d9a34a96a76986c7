// coalesced_work.cc — see coalesced_work.h.
#include "backend/c10d/coalesced_work.h"

#include <c10/util/Exception.h>

namespace purlin::backend {

CoalescedWork::CoalescedWork(std::vector<c10::intrusive_ptr<c10d::Work>> works) : works_(std::move(works)) {}

bool CoalescedWork::isCompleted() {
  for (auto& w : works_)
    if (!w->isCompleted()) return false;
  return true;
}

bool CoalescedWork::isSuccess() const {
  for (const auto& w : works_)
    if (!w->isSuccess()) return false;
  return true;
}

std::exception_ptr CoalescedWork::exception() const {
  for (const auto& w : works_)
    if (auto e = w->exception()) return e;
  return nullptr;
}

bool CoalescedWork::wait(std::chrono::milliseconds timeout) {
  bool ok = true;
  for (auto& w : works_) ok &= w->wait(timeout);
  return ok;
}

void CoalescedWork::synchronize() {
  for (auto& w : works_) w->synchronize();
}

std::vector<at::Tensor> CoalescedWork::result() {
  std::vector<at::Tensor> out;
  for (auto& w : works_) {
    std::vector<at::Tensor> r = w->result();
    out.insert(out.end(), r.begin(), r.end());
  }
  return out;
}

c10::intrusive_ptr<c10::ivalue::Future> CoalescedWork::getFuture() {
  TORCH_CHECK(false, "purlin: the Work of a coalesced block of ", works_.size(),
              " ops has no Future (their outputs are not one list); call wait() on it");
}

}  // namespace purlin::backend
