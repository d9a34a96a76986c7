// fallback.cc — see fallback.h.
#include "backend/fallback/fallback.h"

#include <algorithm>
#include <cstdio>
#include <exception>
#include <vector>

#include "backend/fallback/staged_backend.h"

namespace purlin::backend {

const std::vector<std::string>& Fallback::op_names() {
  static const std::vector<std::string> names = {
      "all_reduce", "all_reduce_coalesced", "reduce", "broadcast", "all_gather", "all_gather_into_tensor",
      "all_gather_coalesced", "all_gather_into_tensor_coalesced", "reduce_scatter", "reduce_scatter_tensor",
      "reduce_scatter_tensor_coalesced", "all_to_all", "all_to_all_single", "gather", "scatter", "barrier"};
  return names;
}

Fallback::Fallback(c10::intrusive_ptr<c10d::Store> store, int rank, int size, std::chrono::milliseconds timeout,
                   GroupFactory factory, const env::Settings& settings)
    : store_(std::move(store)), rank_(rank), size_(size), timeout_(timeout), factory_(std::move(factory)) {
  // Items: op or all (every device), cpu:op / cuda:op / cpu:all / cuda:all (one device's tensors).
  const std::vector<std::string>& ops = op_names();
  for (const auto& item : settings.get_list("TORCH_PURLIN_FORCE_FALLBACK")) {
    const size_t colon = item.find(':');
    const std::string device = colon == std::string::npos ? "" : item.substr(0, colon);
    const std::string op = colon == std::string::npos ? item : item.substr(colon + 1);
    const bool known = op == "all" || std::find(ops.begin(), ops.end(), op) != ops.end();
    if (!known || (device != "" && device != "cpu" && device != "cuda")) {
      std::string list;
      for (const auto& o : ops) list += ", " + o;
      settings_error_ += (settings_error_.empty() ? "" : "; ") + std::string("TORCH_PURLIN_FORCE_FALLBACK: '") + item +
                         "' is not an op, cpu:op or cuda:op (ops: all" + list + ")";
      continue;
    }
    if (device != "cuda") forced_[0].insert(op);
    if (device != "cpu") forced_[1].insert(op);
  }
  log_ = settings.get_bool("TORCH_PURLIN_LOG");
}

c10d::Backend& Fallback::get(const c10::Device& device) {
  const std::string type = device.is_cuda() ? "cuda" : "cpu";
  std::lock_guard<std::mutex> g(mu_);
  auto it = backends_.find(type);
  if (it == backends_.end()) {
    TORCH_CHECK(factory_, "purlin: no fallback backend factory for ", type, " tensors");
    it = backends_.emplace(type, c10::make_intrusive<StagedBackend>(factory_(store_, rank_, size_, timeout_, type)))
             .first;
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
  const std::set<std::string>& f = forced_[cuda ? 1 : 0];
  return !f.empty() && (f.count(op) || f.count("all"));
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

void Fallback::abandon() {
  std::lock_guard<std::mutex> g(mu_);
  for (auto& kv : backends_) kv.second.release();  // leaked on purpose: never destroyed
  backends_.clear();
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
