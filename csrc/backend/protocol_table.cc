// protocol_table.cc — see protocol_table.h.
#include "backend/protocol_table.h"

#include <cctype>
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

}  // namespace purlin::backend
