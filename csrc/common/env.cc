// env.cc — the registry of TORCH_PURLIN_* variables (see env.h).
#include "common/env.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <stdexcept>

extern char** environ;

namespace purlin::env {

const std::vector<Var>& registry() {
  using A = Audience;
  using X = Across;
  using K = Kind;
  static const std::vector<Var> vars = {
      // ---- user-facing (README) -------------------------------------------------------------
      {"TORCH_PURLIN_FORCE_FALLBACK", "", A::User, X::Equal, K::List,
       "Comma list of ops always served by the fallback (gloo for CPU tensors, NCCL for CUDA tensors): op (any "
       "device), cpu:op or cuda:op, all, cpu:all or cuda:all. CPU ops on dtypes gloo lacks (int16, complex) stay "
       "native. Replaces TORCH_PURLIN_FORCE_NCCL=ops (now cuda:ops)."},
      {"TORCH_PURLIN_DEFAULT", "", A::User, X::Local, K::List,
       "Comma list of device types (cuda, cpu) for which purlin becomes the backend torch picks when a program "
       "names none (init_process_group() without a backend, init_device_mesh, torchtitan), as "
       "torch_purlin.set_default() does. A bad value raises (at the first purlin group where the autoload hook "
       "read it)."},
      {"TORCH_PURLIN_AUTOLOAD", "1", A::User, X::Local, K::Bool,
       "1: where the package is installed, `import torch` registers \"purlin\" (torch's device-backend autoload "
       "entry point; the extension loads at the first purlin group) and applies TORCH_PURLIN_DEFAULT. 0: it does "
       "nothing."},
      {"TORCH_PURLIN_LOG", "1", A::User, X::Local, K::Bool,
       "0 silences the once-per-(op, reason) fallback log lines and the other notices on stderr."},
      {"TORCH_PURLIN_CPU_WORKSPACE_BYTES", "32M", A::User, X::Equal, K::Bytes,
       "Shared-memory workspace per rank for CPU tensors (at least 4K); larger tensors are pipelined in rounds. "
       "Reserved in /dev/shm when the group sets up: where the default does not fit, the group takes a smaller "
       "one (down to 256K, logged once); a value that is set and does not fit raises on every rank at setup, as "
       "does a /dev/shm too small even for 256K."},
      {"TORCH_PURLIN_CUDA_WORKSPACE_BYTES", "64M", A::User, X::Combined, K::Bytes,
       "CUDA-IPC workspace per rank and group (at least 64K); larger tensors are pipelined in rounds. The group "
       "uses the smallest value any rank asks for."},
      {"TORCH_PURLIN_CUDA_POOL_BYTES", "4G", A::User, X::Equal, K::Bytes,
       "The symmetric pool per rank and group behind torch_purlin.empty() / allocateTensor (CUDA memory every "
       "peer maps; collectives read it in place), allocated on first use."},
      {"TORCH_PURLIN_CUDA_SHARE_GPU", "0", A::User, X::Equal, K::Bool,
       "1: ranks of a group may share a GPU (run them under CUDA MPS): their CUDA tensors stay on purlin's "
       "datapath with a share of the SMs per launch; ops that need NCCL fail there (NCCL refuses such groups). "
       "0: such a group sends its CUDA tensors to NCCL."},
      {"TORCH_PURLIN_CUDA_CHECK_CALLS", "0", A::User, X::Combined, K::Bool,
       "1 (a debugging aid): every native CUDA collective first compares its arguments with every rank's on the "
       "host and raises naming the rank and what differs, before anything is launched. Without it the GPU's call "
       "tags catch mismatched calls on the same protocol; calls whose sizes put ranks on "
       "different protocols end at the group's timeout. On only if every rank sets it."},
      // ---- tuning and debugging (docs/TUNING.md) ---------------------------------------------
      {"TORCH_PURLIN_CPU_TWO_SHOT_BYTES", "256K,@2=1024G,@3=1024G,@4=1024G", A::Tuning, X::Equal, K::BytesList,
       "CPU all_reduce switches from one-shot to two-shot (reduce-scatter + all-gather) at this many bytes: a byte "
       "count, optionally followed by @W=bytes items for groups of W ranks (as TORCH_PURLIN_CUDA_TWO_SHOT_BYTES). "
       "Default: never up to 4 ranks, where one-shot measured faster at every size from 16K to 16M on 2 cores "
       "(benchmarks/results/cpu_tuning_two_shot_20261205.md; W = 3 between the measured 2 and 4); from 256K "
       "beyond (not measured). Equal on every rank (ranks on different protocols corrupt the result)."},
      {"TORCH_PURLIN_CPU_ROUND_BYTES", "128K", A::Tuning, X::Equal, K::Bytes,
       "CPU collectives larger than this many bytes per rank run in rounds of this size through the workspace's "
       "two slots (at least 4K; half the workspace at most): while a rank consumes one round its peers stage the "
       "next, and each round's bytes are still in the cores' caches when they are read (NOTE [cpu rounds] in "
       "backend/cpu/cpu_engine.h). Equal on every rank."},
      {"TORCH_PURLIN_CUDA_TWO_SHOT_BYTES", "8M,@2=4G", A::Tuning, X::Equal, K::BytesList,
       "CUDA all_reduce switches from one-shot to two-shot (reduce-scatter + all-gather) at this many bytes: a "
       "byte count, optionally followed by @W=bytes items for groups of W ranks (NOTE [protocol table] in "
       "csrc/backend/group/protocol_table.h). Default: from 8M, at W = 2 from 4G (in effect never): there one-shot "
       "sends the same link bytes as two-shot and, pushed, measured faster at 64M-1G on 2x H200 (64M 235 us vs "
       "266 two-shot). Equal on every rank."},
      {"TORCH_PURLIN_CUDA_LINE_BYTES", "1M", A::Tuning, X::Combined, K::Bytes,
       "CUDA collectives of at most this many bytes per rank run on flagged lines (NOTE [flagged lines] in "
       "csrc/atom/cuda/device/flagged_line.cuh): data and notification in one NVLink store, no flag round trip. "
       "0 disables them. Ranks may differ: the group uses the smallest value any rank asks for (and sizes its "
       "line region, 4 x world x this, by it)."},
      {"TORCH_PURLIN_CUDA_LINE_FORMAT", "auto", A::Tuning, X::Combined, K::Text,
       "Format of the flagged lines. narrow: 16-byte lines of 8 payload bytes (twice the NVLink bytes; relies on "
       "8-byte units only). wide: 128-byte lines of 120 payload bytes wherever a plan allows (NOTE [wide lines] in "
       "csrc/atom/cuda/device/wide_line.cuh; relies on a warp's 128-byte store reaching a peer as a unit, as NCCL's "
       "LL128 does). auto: wide lines where they measured faster on 2x H200 (reductions and broadcasts above "
       "256K per rank, all_gather and all_to_all above 512K) if the GPUs are of one architecture among sm_80, "
       "sm_90 and sm_100 and NVML reports NVLink between every pair (else narrow lines only, logged once), narrow "
       "ones elsewhere. Strided destinations always take narrow lines. Ranks may differ: the group uses narrow "
       "unless every rank asks for the same format (wide and auto add a wide-line region, "
       "2 x world x TORCH_PURLIN_CUDA_LINE_BYTES x 128/120)."},
      {"TORCH_PURLIN_CUDA_PARITY_BYTES", "16M", A::Tuning, X::Combined, K::Bytes,
       "CUDA collectives larger than TORCH_PURLIN_CUDA_LINE_BYTES and of at most this many bytes per rank run as "
       "parity plans (NOTE [parity plans] in csrc/atom/cuda/device/plan_kernel.cuh): pushed into one of two "
       "alternating halves of a region, so a collective does not wait for the previous one to end (on 2x H200 "
       "1.1-1.3x faster at 2M-16M than workspace plans). 0 disables them. Ranks may differ: the group uses the "
       "smallest value any rank asks for (and sizes its parity region, 2 x world x this, by it)."},
      {"TORCH_PURLIN_CUDA_PDL", "1", A::Tuning, X::Local, K::Bool,
       "1: on sm_90 and newer GPUs, CUDA collectives are launched with programmatic dependent launch (NOTE "
       "[overlapped launch] in csrc/atom/cuda/device/launch_typed.cuh): a collective's blocks are scheduled while "
       "the previous kernel of the stream ends and wait for it before touching memory, which hides the launch gap "
       "between back-to-back collectives. 0: plain launches. A rank's own choice (ranks may differ)."},
      {"TORCH_PURLIN_CUDA_CE_BYTES", "0", A::Tuning, X::Combined, K::Bytes,
       "Pure-copy collectives (all_gather, broadcast, all_to_all, gather, scatter) whose Spec moves at least this "
       "many bytes run on the copy-engine Atom (no SMs) outside CUDA-graph capture; 0 (default) disables it: on "
       "2x H200 it was 0.6-0.9x the SM kernel when staging (docs/PERFORMANCE.md), so it is worth it only to keep "
       "SMs for overlapped compute. Pool tensors (torch_purlin.empty) are pulled straight from the peers' inputs "
       "(NOTE [copy-engine zero-copy] in csrc/atom/cuda/host/ce_atom.h; not yet timed). Every copy-engine call is "
       "checked with every rank on the host first (NOTE [copy-engine call check]). Ranks may differ: on only if "
       "every rank can use it and asks for it, from the largest value any rank asks for."},
      {"TORCH_PURLIN_CUDA_BLOCKS", "0", A::Tuning, X::Combined, K::Int,
       "Blocks per CUDA collective launch (0: by message size from the architecture's table, "
       "csrc/atom/cuda/protocol/launch_config*.cc; N: always N, max 128). Ranks may differ: the group uses the smallest "
       "value any rank asks for."},
      {"TORCH_PURLIN_CUDA_POOL_PLACEMENT", "agreed", A::Tuning, X::Combined, K::Text,
       "How the symmetric pool places a block at the same offset on every rank. agreed: every allocation "
       "exchanges proposals with every rank (NOTE [pool agreement] in csrc/atom/cuda/host/symmetric_pool.h; "
       "tolerates ranks that free in different orders; each allocation waits for the slowest rank's host). local: "
       "each rank places alone by a rule that depends only on the order of allocations and frees (NOTE [local "
       "placement]); ranks that allocate or free in different orders get collectives that fail with a call-tag "
       "error, never wrong data. Ranks may differ: local only if every rank asks (else logged once)."},
      {"TORCH_PURLIN_CUDA_NCCL_FROM", "all_reduce=32M,all_reduce@2=256M,all_to_all=1G,broadcast=64M", A::Tuning,
       X::Equal, K::BytesList,
       "The protocol table's NCCL rows (NOTE [protocol table] in csrc/backend/group/protocol_table.h): "
       "family=bytes items (family@W=bytes: a row for groups of W ranks only, replacing the family's row there); a "
       "CUDA collective of that family (all_reduce also names all_reduce_coalesced, all_gather names "
       "all_gather_into_tensor, ...) whose larger side (all inputs or all outputs of the rank) holds at least "
       "that many bytes goes to NCCL, which measured faster there on 2x H200 (benchmarks/results; at W = 2 "
       "one-shot all_reduce beats NCCL to 256M, elsewhere all_reduce is measured at W = 2 only). 'none' "
       "keeps every size native. Equal on every rank (ranks would route one call to different backends)."},
      {"TORCH_PURLIN_DEBUG", "0", A::Tuning, X::Local, K::Bool, "1 prints every new SNAC plan to stderr."},
  };
  return vars;
}

const Var* find(const std::string& name) {
  for (const Var& v : registry())
    if (name == v.name) return &v;
  return nullptr;
}

const std::vector<Retired>& retired() {
  static const std::vector<Retired> vars = {
      {"TORCH_PURLIN_FORCE_NCCL", "TORCH_PURLIN_FORCE_FALLBACK=cuda:<op>,... (it was folded into that variable)",
       true},
      {"TORCH_PURLIN_CUDA_SHARE_GPU_RANKS",
       "nothing: the ranks per GPU are derived from the group; the variable is ignored", false},
      {"TORCH_PURLIN_CUDA_PUSH", "nothing: collectives always push; the variable is ignored", false},
      {"TORCH_PURLIN_CUDA_MATCHED_WAITS",
       "nothing: plan-kernel waits are always matched; the variable is ignored", false},
  };
  return vars;
}

std::string get(const char* name) {
  const Var* v = find(name);
  if (!v) throw std::invalid_argument(std::string("purlin: environment variable not in the registry: ") + name);
  const char* s = std::getenv(name);
  return s ? std::string(s) : std::string(v->default_value);
}

int64_t parse_bytes(const std::string& s, const std::string& what) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || v < 0) throw std::invalid_argument(what + ": not a byte count: '" + s + "'");
  int64_t mult = 1;
  switch (std::toupper(static_cast<unsigned char>(*end))) {
    case 'K': mult = int64_t{1} << 10; break;
    case 'M': mult = int64_t{1} << 20; break;
    case 'G': mult = int64_t{1} << 30; break;
    case '\0': break;
    default: throw std::invalid_argument(what + ": bad suffix in '" + s + "'");
  }
  return static_cast<int64_t>(v * static_cast<double>(mult));
}

namespace {

bool bool_of(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s == "1" || s == "true" || s == "yes" || s == "on";
}

int int_of(const std::string& v, const char* name) {
  try {
    size_t used = 0;
    const int i = std::stoi(v, &used);
    if (v.find_first_not_of(" \t", used) == std::string::npos) return i;
  } catch (const std::exception&) {
  }
  throw std::invalid_argument(std::string(name) + ": not a number: '" + v + "'");
}

// Logs `line` to stderr once per process (TORCH_PURLIN_LOG permitting).
void log_once(const std::string& line, bool log) {
  static std::mutex mu;
  static std::set<std::string> said;
  std::lock_guard<std::mutex> g(mu);
  if (log && said.insert(line).second) std::fprintf(stderr, "[purlin] %s (logged once)\n", line.c_str());
}

}  // namespace

int64_t get_bytes(const char* name) { return parse_bytes(get(name), name); }

bool get_bool(const char* name) { return bool_of(get(name)); }

int get_int(const char* name) { return int_of(get(name), name); }

std::vector<std::string> get_list(const char* name) { return split_list(get(name)); }

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s + ",") {
    if (c == ',') {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else if (!std::isspace(static_cast<unsigned char>(c))) {
      cur.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
    }
  }
  return out;
}

std::string normalize(const Var& v, const std::string& text) {
  switch (v.kind) {
    case Kind::Bytes:
      return std::to_string(parse_bytes(text, v.name));
    case Kind::Bool:
      return bool_of(text) ? "1" : "0";
    case Kind::Int:
      return std::to_string(int_of(text, v.name));
    case Kind::List:
    case Kind::BytesList: {
      std::vector<std::string> items = split_list(text);
      if (v.kind == Kind::BytesList) {
        for (std::string& item : items) {  // bytes, or key=bytes (the key itself checked where it is used)
          const size_t eq = item.find('=');
          if (eq == std::string::npos) {
            if (item != "none") item = std::to_string(parse_bytes(item, v.name));
          } else {
            const size_t at = item.find('@');
            if (at != std::string::npos && (at + 1 >= eq || item.find_first_not_of("0123456789", at + 1) < eq))
              throw std::invalid_argument(std::string(v.name) + ": '@' must be followed by a world size, got '" + item +
                                          "'");
            item = item.substr(0, eq + 1) + std::to_string(parse_bytes(item.substr(eq + 1), v.name));
          }
        }
      }
      std::sort(items.begin(), items.end());
      items.erase(std::unique(items.begin(), items.end()), items.end());
      std::string out;
      for (const std::string& item : items) out += (out.empty() ? "" : ",") + item;
      return out;
    }
    case Kind::Text:
    default: {
      std::string out;
      for (char c : text)
        if (!std::isspace(static_cast<unsigned char>(c))) out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      return out;
    }
  }
}

Settings::Settings(const std::map<std::string, std::string>& overrides) : overrides_(overrides) {
  const std::vector<Var>& vars = registry();
  for (const auto& [name, value] : overrides) {
    if (find(name)) continue;
    std::string why = "purlin: '" + name + "' is not a TORCH_PURLIN_* setting (torch_purlin.env_vars() lists them)";
    for (const Retired& r : retired())
      if (name == r.name) why = "purlin: " + name + " is no longer read; use " + r.instead;
    throw std::invalid_argument(why);
  }
  values_.reserve(vars.size());
  sources_.reserve(vars.size());
  for (const Var& v : vars) {
    auto it = overrides.find(v.name);
    const char* s = std::getenv(v.name);
    if (it != overrides.end()) {
      values_.push_back(it->second);
      sources_.push_back(Source::Options);
    } else if (s) {
      values_.push_back(s);
      sources_.push_back(Source::Environment);
    } else {
      values_.push_back(v.default_value);
      sources_.push_back(Source::Default);
    }
  }
  const bool log = get_bool("TORCH_PURLIN_LOG");
  for (const Retired& r : retired()) {
    if (!std::getenv(r.name)) continue;
    const std::string line = std::string(r.name) + " is no longer read; use " + r.instead;
    if (r.fatal) throw std::invalid_argument("purlin: " + line);
    log_once(line, log);
  }
  for (char** e = environ; e && *e; ++e) {  // a misspelt setting would otherwise be ignored silently
    const std::string entry(*e);
    const std::string name = entry.substr(0, entry.find('='));
    if (name.rfind("TORCH_PURLIN_", 0) != 0 || find(name)) continue;
    bool is_retired = false;
    for (const Retired& r : retired()) is_retired |= name == r.name;
    if (!is_retired) log_once(name + " is set but is not a TORCH_PURLIN_* setting (torch_purlin.env_vars() lists them)", log);
  }
}

size_t Settings::index(const char* name) const {
  const std::vector<Var>& vars = registry();
  for (size_t i = 0; i < vars.size(); ++i)
    if (std::strcmp(vars[i].name, name) == 0) return i;
  throw std::invalid_argument(std::string("purlin: setting not in the registry: ") + name);
}

std::string Settings::get(const char* name) const { return values_[index(name)]; }
int64_t Settings::get_bytes(const char* name) const { return parse_bytes(get(name), name); }
bool Settings::get_bool(const char* name) const { return bool_of(get(name)); }
int Settings::get_int(const char* name) const { return int_of(get(name), name); }
std::vector<std::string> Settings::get_list(const char* name) const { return split_list(get(name)); }
Settings::Source Settings::source(const char* name) const { return sources_[index(name)]; }

const char* Settings::source_name(Source s) {
  switch (s) {
    case Source::Options: return "from the group's options";
    case Source::Environment: return "from the environment";
    default: return "the default";
  }
}

}  // namespace purlin::env
