// env.cc — the registry of TORCH_PURLIN_* variables (see env.h).
#include "common/env.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace purlin::env {

const std::vector<Var>& registry() {
  static const std::vector<Var> vars = {
      {"TORCH_PURLIN_CPU_WORKSPACE_BYTES", "32M",
       "Shared-memory workspace per rank for CPU tensors (two pipelining slots). Larger tensors are pipelined in "
       "rounds."},
      {"TORCH_PURLIN_CPU_TWO_SHOT_BYTES", "256K",
       "CPU all_reduce switches from one-shot to two-shot (reduce-scatter + all-gather) at this many bytes: a byte "
       "count, optionally followed by @W=bytes items for groups of W ranks (as TORCH_PURLIN_CUDA_TWO_SHOT_BYTES)."},
      {"TORCH_PURLIN_CUDA_WORKSPACE_BYTES", "64M",
       "CUDA-IPC workspace per rank and group for CUDA tensors (two pipelining slots; at least 64K; the group uses "
       "the smallest value any rank asks for). Larger tensors are pipelined in rounds."},
      {"TORCH_PURLIN_CUDA_TWO_SHOT_BYTES", "8M,@2=4G",
       "CUDA all_reduce switches from one-shot to two-shot (reduce-scatter + all-gather) at this many bytes: a "
       "byte count, optionally followed by @W=bytes items for groups of W ranks (NOTE [protocol table] in "
       "csrc/backend/host/protocol_table.h). Default: from 8M, at W = 2 from 4G (in effect never): there one-shot "
       "sends the same link bytes as two-shot and, pushed, measured faster at 64M-1G on 2x H200 (64M 235 us vs "
       "266 two-shot)."},
      {"TORCH_PURLIN_CUDA_LINE_BYTES", "1M",
       "CUDA collectives of at most this many bytes per rank run on flagged lines (NOTE [flagged lines] in "
       "csrc/atom/cuda/device/flagged_line.cuh): data and notification in one NVLink store, no flag round trip. "
       "0 disables them; the group uses the smallest value any rank asks for (and sizes its line region, "
       "4 x world x this, by it)."},
      {"TORCH_PURLIN_CUDA_LINE_FORMAT", "auto",
       "Format of the flagged lines. narrow: 16-byte lines of 8 payload bytes (twice the NVLink bytes; relies on "
       "8-byte units only). wide: 128-byte lines of 120 payload bytes wherever a plan allows (NOTE [wide lines] in "
       "csrc/atom/cuda/device/wide_line.cuh; relies on a warp's 128-byte store reaching a peer as a unit, as NCCL's "
       "LL128 does). auto: wide lines where they measured faster on 2x H200 (reductions and broadcasts above "
       "256K per rank, all_gather and all_to_all above 512K) if the GPUs are of one architecture among sm_80, sm_90 and sm_100 and NVML reports NVLink "
       "between every pair (else narrow lines only, logged once), narrow ones elsewhere. Strided destinations always take narrow lines. The group uses "
       "narrow unless every rank asks for the same format (wide and auto add a wide-line region, "
       "2 x world x TORCH_PURLIN_CUDA_LINE_BYTES x 128/120)."},
      {"TORCH_PURLIN_CUDA_PARITY_BYTES", "16M",
       "CUDA collectives larger than TORCH_PURLIN_CUDA_LINE_BYTES and of at most this many bytes per rank run as "
       "parity plans (NOTE [parity plans] in csrc/atom/cuda/device/plan_kernel.cuh): pushed into one of two alternating "
       "halves of a region, so a collective does not wait for the previous one to end (on 2x H200 1.1-1.3x "
       "faster at 2M-16M than workspace plans). 0 disables them; the group uses the smallest value any rank asks "
       "for (and sizes its parity region, 2 x world x this, by it)."},
      {"TORCH_PURLIN_CUDA_PDL", "1",
       "1: on sm_90 and newer GPUs, CUDA collectives are launched with programmatic dependent launch (NOTE "
       "[overlapped launch] in csrc/atom/cuda/device/launch_typed.cuh): a collective's blocks are scheduled while the "
       "previous kernel of the stream ends and wait for it before touching memory, which hides the launch gap "
       "between back-to-back collectives. 0: plain launches. A rank's own choice (ranks may differ)."},
      {"TORCH_PURLIN_CUDA_CE_BYTES", "0",
       "Pure-copy collectives (all_gather, broadcast, all_to_all, gather, scatter) whose Spec moves at least this "
       "many bytes run on the copy-engine Atom (no SMs) outside CUDA-graph capture; 0 (default) disables it: on "
       "2x H200 it was 0.6-0.9x the SM kernel when staging (docs/PERFORMANCE.md, session 2), so it is worth it "
       "only to keep SMs for overlapped compute. Pool tensors (torch_purlin.empty) are pulled straight from the "
       "peers' inputs (NOTE [copy-engine zero-copy] in csrc/atom/cuda/host/ce_atom.h; not yet timed). Every "
       "copy-engine call is checked with every rank on the host first (NOTE [copy-engine call check])."},
      {"TORCH_PURLIN_CUDA_BLOCKS", "0",
       "Blocks per CUDA collective launch (0: by message size from the architecture's table, "
       "csrc/atom/cuda/launch_config*.cu; N: always N, max 128; the group uses the smallest value any rank asks "
       "for)."},
      {"TORCH_PURLIN_CUDA_POOL_BYTES", "4G",
       "Size of the symmetric pool per rank and group behind torch_purlin.empty() / allocateTensor (CUDA memory "
       "every peer maps; collectives read inputs from it in place). Read when the group is created, allocated on "
       "first use."},
      {"TORCH_PURLIN_CUDA_POOL_PLACEMENT", "agreed",
       "How the symmetric pool places a block at the same offset on every rank. agreed: every allocation "
       "exchanges proposals with every rank (NOTE [pool agreement] in csrc/atom/cuda/host/symmetric_pool.h; tolerates "
       "ranks that free in different orders; each allocation waits for the slowest rank's host). local: each rank "
       "places alone by a rule that depends only on the order of allocations and frees (NOTE [local placement]); "
       "ranks that allocate or free in different orders get collectives that fail with a call-tag error, never "
       "wrong data. local only if every rank asks."},
      {"TORCH_PURLIN_CUDA_NCCL_FROM", "all_reduce=32M,all_reduce@2=256M,all_to_all=1G,broadcast=64M",
       "The protocol table's NCCL rows (NOTE [protocol table] in csrc/backend/host/protocol_table.h): family=bytes items "
       "(family@W=bytes: a row for groups of W ranks only, replacing the family's row there); a "
       "CUDA collective of that family (all_reduce also names all_reduce_coalesced, all_gather names "
       "all_gather_into_tensor, ...) whose larger side (all inputs or all outputs of the rank) holds at least "
       "that many bytes goes to NCCL, which measured faster there on 2x H200 (benchmarks/results; at W = 2 "
       "one-shot all_reduce beats NCCL to 256M, elsewhere all_reduce is measured at W = 2 only). 'none' "
       "keeps every size native. Every rank must use the same value."},
      {"TORCH_PURLIN_CUDA_SHARE_GPU", "0",
       "1 on every rank: ranks of a group may share a GPU (NOTE [shared GPU] in "
       "csrc/atom/cuda/host/symmetric_workspace.h): their CUDA tensors run on purlin's datapath with at most half an equal "
       "share of the SMs per launch, narrow flagged lines where the format is auto, the protocol table's NCCL rows ignored, and ops that need NCCL fail there (NCCL refuses "
       "several ranks on one GPU). Run such processes under CUDA MPS, else the GPU time-slices them and every "
       "collective waits a time slice. 0: a group whose ranks share a GPU sends its CUDA tensors to NCCL."},
      {"TORCH_PURLIN_CUDA_SHARE_GPU_RANKS", "0",
       "With TORCH_PURLIN_CUDA_SHARE_GPU=1: how many ranks of the job share each GPU, for the SMs a launch "
       "plans with (half of an equal share; NOTE [shared GPU]). 0: the group's own ranks on the GPU, which is "
       "too many SMs where groups of other ranks run at the same time on the same GPU (subgroups, a "
       "DeviceMesh's dimensions): their spinning blocks can keep a peer's blocks from ever becoming "
       "resident. tools/device_session.sh sets it to the ranks per GPU."},
      {"TORCH_PURLIN_FORCE_FALLBACK", "",
       "Comma list of ops (e.g. all_reduce,broadcast) always served by the fallback backend (gloo for CPU "
       "tensors, NCCL for CUDA tensors). 'all' forces every op."},
      {"TORCH_PURLIN_FORCE_NCCL", "",
       "Comma list of ops (or 'all') that always go to the NCCL fallback when their tensors are on CUDA."},
      {"TORCH_PURLIN_DEFAULT", "",
       "Comma list of device types (cuda, cpu) for which purlin becomes the backend torch.distributed picks when "
       "a program names none (init_process_group() without a backend, init_device_mesh, torchtitan): read when "
       "torch_purlin is imported and, where the package is installed, at `import torch` (NOTE [default backend "
       "map] in torch_purlin/defaults.py). Same as torch_purlin.set_default(devices). Unset: torch's defaults "
       "(gloo, nccl) stay."},
      {"TORCH_PURLIN_AUTOLOAD", "1",
       "1: where the package is installed, `import torch` registers \"purlin\" through torch's device-backend "
       "autoload entry point (the extension itself is loaded at the first purlin group; NOTE [autoload] in "
       "torch_purlin_autoload.py) and applies TORCH_PURLIN_DEFAULT. 0: the hook does nothing "
       "(TORCH_DEVICE_BACKEND_AUTOLOAD=0 turns off every such hook of torch)."},
      {"TORCH_PURLIN_LOG", "1", "0 silences the once-per-(op, reason) fallback log lines on stderr."},
      {"TORCH_PURLIN_CUDA_CHECK_CALLS", "0",
       "1: every native CUDA collective first compares its arguments (op, dtype, reduce op, root, sizes) with "
       "every rank's on the host, through shared memory, and raises naming the rank and what differs before "
       "anything is launched; the group stays usable. A debugging aid: each call then waits on the host for every "
       "rank's same call (microseconds when they are in step). Without it the GPU's call tags catch "
       "mismatched calls that run the same protocol (NOTE [call tags]), while calls whose sizes put ranks on "
       "different protocols end in the group's timeout. On only if every rank sets it (else logged once)."},
      {"TORCH_PURLIN_DEBUG", "0", "1 prints every new SNAC plan to stderr."},
  };
  return vars;
}

std::string get(const char* name) {
  for (const Var& v : registry()) {
    if (std::strcmp(v.name, name) == 0) {
      const char* s = std::getenv(name);
      return s ? std::string(s) : std::string(v.default_value);
    }
  }
  throw std::invalid_argument(std::string("purlin: environment variable not in the registry: ") + name);
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

int64_t get_bytes(const char* name) { return parse_bytes(get(name), name); }

bool get_bool(const char* name) {
  std::string s = get(name);
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s == "1" || s == "true" || s == "yes" || s == "on";
}

int get_int(const char* name) {
  const std::string v = get(name);
  try {
    return std::stoi(v);
  } catch (const std::exception&) {
    throw std::invalid_argument(std::string(name) + ": not a number: '" + v + "'");
  }
}

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

}  // namespace purlin::env
