// workspace_probe.cc — the setup probes' encoding and the group's verdict
// (workspace_probe.h). Host code, compiled as C++ by the tests.
#include "atom/cuda/host/workspace_probe.h"

#include <algorithm>
#include <sstream>

#include "common/hex.h"

namespace purlin::atom::cuda {

namespace {

std::string rank_str(size_t r) { return "rank " + std::to_string(r); }

}  // namespace

std::string WorkspaceProbe::encode() const {
  std::ostringstream os;
  // 'x' keeps hex fields non-empty for operator>>.
  os << 'x' << to_hex(host.data(), host.size()) << '\n' << bus << '\n' << major << '\n' << minor << '\n' << sms
     << '\n' << blocks << '\n' << ws << '\n' << lines << '\n' << parity << '\n' << format << '\n' << share << '\n'
     << 'x' << to_hex(error.data(), error.size());
  return os.str();
}

WorkspaceProbe WorkspaceProbe::decode(const std::string& s) {
  std::istringstream is(s);
  WorkspaceProbe p;
  std::string host, err;
  is >> host >> p.bus >> p.major >> p.minor >> p.sms >> p.blocks >> p.ws >> p.lines >> p.parity >> p.format >> p.share;
  if (!(is >> err)) err = "x";
  p.host = from_hex(host.substr(1));
  p.error = from_hex(err.substr(1));
  return p;
}

std::string check_probes(const std::vector<WorkspaceProbe>& all, std::string* shared) {
  shared->clear();
  for (size_t r = 0; r < all.size(); ++r)
    if (!all[r].error.empty()) return rank_str(r) + ": " + all[r].error;
  bool all_share = true;
  for (const WorkspaceProbe& p : all) all_share &= p.share != 0;
  for (size_t r = 1; r < all.size(); ++r) {
    // A group spanning hosts never gets here: the backend maps its hosts first (NOTE [host map] in
    // backend/machines/host_map.h: shared memory every rank of a host can open) and sends its CUDA
    // tensors to NCCL. This check stays as a second guard for ranks that share /dev/shm under
    // different hostnames; the handle exchange after it checks that every IPC handle opens.
    if (all[r].host != all[0].host)
      return rank_str(0) + " is on host '" + all[0].host + "' but " + rank_str(r) + " on '" + all[r].host +
             "' (CUDA IPC needs one host)";
    for (size_t q = 0; q < r; ++q) {
      if (all[r].bus != all[q].bus) continue;
      const std::string pair = rank_str(q) + " and " + rank_str(r) + " share GPU " + all[r].bus;
      if (!all_share) return pair + " (TORCH_PURLIN_CUDA_SHARE_GPU=1 on every rank lets them, best under CUDA MPS)";
      if (shared->empty()) *shared = pair;
    }
  }
  return "";
}

int ranks_per_gpu(const std::vector<WorkspaceProbe>& all) {
  int most = all.empty() ? 0 : 1;
  for (const WorkspaceProbe& p : all)
    most = std::max(most, static_cast<int>(std::count_if(all.begin(), all.end(),
                                                         [&](const WorkspaceProbe& q) { return q.bus == p.bus; })));
  return most;
}

int budget_ranks_per_gpu(const std::vector<WorkspaceProbe>& all) {
  int most = ranks_per_gpu(all);
  for (const WorkspaceProbe& p : all) most = std::max(most, p.share);
  return most;
}

int sm_budget(int sms, int per_gpu) { return per_gpu > 1 ? std::max(1, sms / (2 * per_gpu)) : sms; }

}  // namespace purlin::atom::cuda
