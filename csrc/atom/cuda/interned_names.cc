// interned_names.cc — see interned_names.h.
#include "atom/cuda/interned_names.h"

#include <cstring>
#include <mutex>
#include <vector>

namespace purlin::atom::cuda {

namespace {
std::mutex g_names_mu;
std::vector<const char*>& names() {
  static std::vector<const char*> v{"?"};
  return v;
}
}  // namespace

uint16_t intern_name(const char* s) {
  if (!s) return 0;
  std::lock_guard<std::mutex> g(g_names_mu);
  auto& v = names();
  // NOTE [eager host path]: names are mostly literals, so the same pointer
  // comes back: look for it first, then compare text without building a
  // std::string per entry (that was an allocation per entry ahead of the
  // name, most phase names being longer than std::string's inline buffer,
  // on every eager launch).
  for (size_t i = 0; i < v.size(); ++i)
    if (v[i] == s) return static_cast<uint16_t>(i);
  for (size_t i = 0; i < v.size(); ++i)
    if (std::strcmp(v[i], s) == 0) return static_cast<uint16_t>(i);
  if (v.size() >= 65535) return 0;
  v.push_back(s);
  return static_cast<uint16_t>(v.size() - 1);
}

const char* interned_name(uint32_t id) {
  std::lock_guard<std::mutex> g(g_names_mu);
  const auto& v = names();
  return id < v.size() ? v[id] : "?";
}

}  // namespace purlin::atom::cuda
