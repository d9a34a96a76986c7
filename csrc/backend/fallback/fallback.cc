// fallback.cc — see fallback.h.
#include "backend/fallback/fallback.h"

#include <cstdio>
#include <exception>
#include <vector>

#include "common/env.h"

namespace purlin::backend {

Fallback::Fallback(c10::intrusive_ptr<c10d::Store> store, int rank, int size, std::chrono::milliseconds timeout,
                   GroupFactory factory)
    : store_(std::move(store)), rank_(rank), size_(size), timeout_(timeout), factory_(std::move(factory)) {
  for (const auto& op : env::get_list("TORCH_PURLIN_FORCE_FALLBACK")) forced_.insert(op);
  for (const auto& op : env::get_list("TORCH_PURLIN_FORCE_NCCL")) forced_nccl_.insert(op);
  log_ = env::get_bool("TORCH_PURLIN_LOG");
}

c10d::Backend& Fallback::get(const c10::Device& device) {
  const std::string type = device.is_cuda() ? "cuda" : "cpu";
  std::lock_guard<std::mutex> g(mu_);
  auto it = backends_.find(type);
  if (it == backends_.end()) {
    TORCH_CHECK(factory_, "purlin: no fallback backend factory for ", type, " tensors");
    it = backends_.emplace(type, factory_(store_, rank_, size_, timeout_, type)).first;
  }
  return *it->second;
}

void Fallback::count_native(const char* op) {
  std::lock_guard<std::mutex> g(mu_);
  if (op != last_native_) {
    last_native_counts_ = &counters_[op];
    last_native_ = op;
  }
  last_native_counts_->first++;
}

void Fallback::count_fallback(const std::string& op, const std::string& reason) {
  std::lock_guard<std::mutex> g(mu_);
  counters_[op].second++;
  if (log_ && logged_.emplace(op, reason).second)
    std::fprintf(stderr, "[purlin] rank %d: %s falls back: %s (logged once)\n", rank_, op.c_str(), reason.c_str());
}

bool Fallback::forced(const std::string& op, bool cuda) const {
  return forced_.count(op) || forced_.count("all") || (cuda && (forced_nccl_.count(op) || forced_nccl_.count("all")));
}

namespace {
// Calls `step` on each backend (outside the lock: NCCL's abort may be called while another thread is
// inside one of its collectives) and rethrows the first error once all were called.
void for_each_backend(std::vector<c10::intrusive_ptr<c10d::Backend>> backends,
                      const std::function<void(c10d::Backend&)>& step) {
  std::exception_ptr first;
  for (auto& b : backends) {
    try {
      step(*b);
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}
}  // namespace

std::vector<c10::intrusive_ptr<c10d::Backend>> Fallback::made() const {
  std::lock_guard<std::mutex> g(mu_);
  std::vector<c10::intrusive_ptr<c10d::Backend>> out;
  for (const auto& kv : backends_) out.push_back(kv.second);
  return out;
}

void Fallback::shutdown_all() {
  for_each_backend(made(), [](c10d::Backend& b) { b.shutdown(); });
}

void Fallback::abort_all() {
  for_each_backend(made(), [](c10d::Backend& b) { b.abort(); });
}

std::map<std::string, std::pair<int64_t, int64_t>> Fallback::counters() const {
  std::lock_guard<std::mutex> g(mu_);
  return counters_;
}

}  // namespace purlin::backend
