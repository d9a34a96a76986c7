// protocol_table.cc — see protocol_table.h.
#include "backend/group/protocol_table.h"

#include <algorithm>

#include <stdexcept>
#include <utility>

#include "common/env.h"

namespace purlin::backend {
namespace {

// Splits "name@W" into name and W (0: no world named); throws naming `var`.
std::pair<std::string, int> split_world(const std::string& key, const char* var, const std::string& item) {
  const size_t at = key.find('@');
  if (at == std::string::npos) return {key, 0};
  const std::string w = key.substr(at + 1);
  if (w.empty() || w.size() > 6 || w.find_first_not_of("0123456789") != std::string::npos || std::stoi(w) < 1)
    throw std::invalid_argument(std::string(var) + ": '@' must be followed by a world size, got '" + item + "'");
  return {key.substr(0, at), std::stoi(w)};
}

}  // namespace

NcclTable NcclTable::parse(const std::string& text, int world, const char* var) {
  NcclTable t;
  std::map<std::string, int64_t> for_world;  // family@world rows replace the family's row
  for (const std::string& item : env::split_list(text)) {
    if (item == "none") continue;
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0 || item[0] == '@')
      throw std::invalid_argument(std::string(var) + ": expected family=bytes or family@W=bytes items, got '" + item +
                                  "'");
    const auto [family, w] = split_world(item.substr(0, eq), var, item);
    const int64_t bytes = env::parse_bytes(item.substr(eq + 1), var);
    if (w == 0) t.rows_[family] = bytes;
    else if (w == world) for_world[family] = bytes;
  }
  for (const auto& [family, bytes] : for_world) t.rows_[family] = bytes;
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

NcclTable hierarchical_rows(int world) {
  // benchmarks/bench_hosts_cpu.py on 2x2 and 2x3 simulated hosts (2-core VM, loaded; loopback TCP
  // across hosts), float32 1K-16M against flat gloo: all_reduce and reduce_scatter hierarchical
  // 1.3-7x faster at every size (one noisy 0.8-0.9 cell each), all_gather 1.2-2.4x to 256K and
  // 0.8-1.3x (a tie) above, broadcast 0.2-0.8x at 2x2 (three steps against gloo's one; 1.16x at
  // 4M on 2x3): broadcast stays flat. On a real network the bytes crossing hosts weigh more (the
  // hierarchical forms send 1/L of all_reduce's and (H-1)/(W-L) of broadcast's): re-measure there.
  static const char* kRows = "all_reduce=1,all_gather=1,reduce_scatter=1";
  return NcclTable::parse(kRows, world, "the hierarchical rows");
}

int64_t bytes_for_world(const std::string& text, int world, const char* var) {
  int64_t plain = -1, named = -1;
  for (const std::string& item : env::split_list(text)) {
    const size_t eq = item.find('=');
    if (eq == std::string::npos) {
      plain = env::parse_bytes(item, var);
      continue;
    }
    const auto [name, w] = split_world(item.substr(0, eq), var, item);
    if (!name.empty() || w == 0)
      throw std::invalid_argument(std::string(var) + ": expected bytes or @W=bytes items, got '" + item + "'");
    const int64_t bytes = env::parse_bytes(item.substr(eq + 1), var);
    if (w == world) named = bytes;
  }
  if (plain < 0)
    throw std::invalid_argument(std::string(var) + ": needs a plain bytes item (every other world size), got '" + text +
                                "'");
  return named >= 0 ? named : plain;
}

int64_t two_shot_bytes(const env::Settings& settings, const char* var, int world) {
  return bytes_for_world(settings.get(var), world, var);
}

bool runs_two_shot(const snac::CallDescription& call, int64_t esize, int world, int64_t threshold) {
  return call.traits.reduces_to_several_ranks && world > 1 && call.traits.max_rank_elems * esize >= threshold;
}

int64_t cpu_slot_elems(int64_t workspace_bytes, int64_t round_bytes, int64_t esize, int64_t align_elems) {
  return std::min(workspace_bytes / 2, round_bytes) / esize / align_elems * align_elems;
}

}  // namespace purlin::backend
