// fallback.cc — see fallback.h.
#include "backend/fallback.h"

#include <cctype>
#include <cstdio>
#include <stdexcept>

#include "common/env.h"

namespace purlin::backend {

NcclTable NcclTable::parse(const std::string& text) {
  NcclTable t;
  std::string cur;
  for (char c : text + ",") {
    if (c != ',') {
      if (!std::isspace(static_cast<unsigned char>(c))) cur.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
      continue;
    }
    if (cur.empty() || cur == "none") {
      cur.clear();
      continue;
    }
    const size_t eq = cur.find('=');
    if (eq == std::string::npos || eq == 0)
      throw std::invalid_argument("TORCH_PURLIN_CUDA_NCCL_FROM: expected family=bytes items, got '" + cur + "'");
    t.rows_[cur.substr(0, eq)] = env::parse_bytes(cur.substr(eq + 1), "TORCH_PURLIN_CUDA_NCCL_FROM");
    cur.clear();
  }
  return t;
}

int64_t NcclTable::from(const std::string& op) const {
  size_t best = 0;
  int64_t bytes = 0;
  for (const auto& [family, b] : rows_) {
    const bool match = op == family || (op.size() > family.size() && op.compare(0, family.size(), family) == 0 &&
                                        op[family.size()] == '_');
    if (match && family.size() > best) {
      best = family.size();
      bytes = b;
    }
  }
  return bytes;
}

Fallback::Fallback(int rank, Factory factory) : rank_(rank), factory_(std::move(factory)) {
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
    it = backends_.emplace(type, factory_(type)).first;
  }
  return *it->second;
}

void Fallback::count_native(const std::string& op) {
  std::lock_guard<std::mutex> g(mu_);
  counters_[op].first++;
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

std::map<std::string, std::pair<int64_t, int64_t>> Fallback::counters() const {
  std::lock_guard<std::mutex> g(mu_);
  return counters_;
}

}  // namespace purlin::backend
