// workspace_probe.h — what each rank states before the group's symmetric
// workspace is made (its host, GPU, sizes, settings), and the verdict every
// rank derives from all of them alike (symmetric_workspace.cc's first
// exchange). Host code only, free of torch and of the CUDA runtime, so the
// rules are tested on CI (test/cpp/test_workspace_probe.cc).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace purlin::atom::cuda {

struct WorkspaceProbe {
  std::string host, bus, error;  // bus: the GPU's PCI id, lower case; error: why this rank cannot take part
  int major = 0, minor = 0, sms = 0, blocks = 0;
  int64_t ws = 0, lines = 0, parity = 0;
  int format = 0;  // LineFormat
  // TORCH_PURLIN_CUDA_SHARE_GPU: 0 no sharing, >= 1 this rank lets ranks share a GPU (NOTE
  // [shared GPU]); above 1, the job's ranks on each GPU as this rank derives them.
  int share = 0;

  // Fields separated by '\n'; free text hex-encoded.
  std::string encode() const;
  static WorkspaceProbe decode(const std::string& s);
};

// "" if the group can set up CUDA IPC buffers at all, else why not (the same
// text on every rank). Ranks may share a GPU only if every rank allows it
// (NOTE [shared GPU] in symmetric_workspace.h); *shared then names the first
// pair that does ("" if none).
std::string check_probes(const std::vector<WorkspaceProbe>& all, std::string* shared);

// The most ranks of the group on one GPU.
int ranks_per_gpu(const std::vector<WorkspaceProbe>& all);

// The ranks the SM budget counts on each GPU: ranks_per_gpu, or more where a rank
// states how many ranks of the job share its GPU (WorkspaceProbe::share > 1): groups of
// other ranks on the same GPUs (subgroups, a DeviceMesh's dimensions) run at the same time.
int budget_ranks_per_gpu(const std::vector<WorkspaceProbe>& all);

// SMs a rank's launch configuration may plan with on a GPU of `sms` SMs that
// `per_gpu` ranks share: all of them alone, else half an equal share (NOTE
// [shared GPU]), at least 1.
int sm_budget(int sms, int per_gpu);

}  // namespace purlin::atom::cuda
