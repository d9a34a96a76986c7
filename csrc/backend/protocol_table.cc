// protocol_table.cc — see protocol_table.h.
#include "backend/protocol_table.h"

#include <stdexcept>

#include "common/env.h"

namespace purlin::backend {

NcclTable NcclTable::parse(const std::string& text) {
  NcclTable t;
  for (const std::string& item : env::split_list(text)) {
    if (item == "none") continue;
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0)
      throw std::invalid_argument("TORCH_PURLIN_CUDA_NCCL_FROM: expected family=bytes items, got '" + item + "'");
    t.rows_[item.substr(0, eq)] = env::parse_bytes(item.substr(eq + 1), "TORCH_PURLIN_CUDA_NCCL_FROM");
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
