// group_context.h — what a group knows of itself from the moment it is made:
// its settings (NOTE [group settings] in common/env.h) and who its ranks are in
// the job, for messages. Shared (read-only) by the group's engines. Torch-free.
#pragma once

#include <string>
#include <vector>

#include "common/env.h"

namespace purlin::backend {

struct GroupContext {
  env::Settings settings;
  std::vector<int> global_ranks;  // global rank of each group rank; empty: the same numbers
  int host_ranks = 0;             // ranks of the job on this host, 0 if not known (NOTE [shared GPU])

  // NOTE [shared GPU] (atom/cuda/host/symmetric_workspace.h): how many ranks of the job run on
  // each GPU, for the SMs a launch of ranks that share one plans with (the group's own ranks on a
  // GPU are too few where groups of other ranks run on it at the same time: subgroups, a
  // DeviceMesh's dimensions). Derived, not asked of the user: the job's ranks on this host spread
  // evenly over the `gpus` this process sees, rounded up (0 if either is not known). Every rank
  // states it in the workspace's probe, which plans with the largest any rank states and the
  // group's own count where that is more, so all ranks plan alike. Ranks spread unevenly over the
  // GPUs (more on one than the even share) are counted too few there.
  int job_ranks_per_gpu(int gpus) const {
    if (host_ranks <= 0 || gpus <= 0) return 0;
    const int used = gpus < host_ranks ? gpus : host_ranks;
    return (host_ranks + used - 1) / used;
  }

  // Whether some group rank has another global rank.
  bool renumbered() const {
    for (size_t r = 0; r < global_ranks.size(); ++r)
      if (global_ranks[r] != static_cast<int>(r)) return true;
    return false;
  }
  // "rank 1", or "rank 1 (global rank 2)" in a renumbered group.
  std::string rank_name(int r) const {
    std::string s = "rank " + std::to_string(r);
    if (renumbered() && r >= 0 && r < static_cast<int>(global_ranks.size()))
      s += " (global rank " + std::to_string(global_ranks[r]) + ")";
    return s;
  }
  // "" or, in a renumbered group, " [ranks here are the group's: rank 0 = global rank 1, ...]" for
  // messages that name ranks by their group numbers.
  std::string legend() const {
    if (!renumbered()) return "";
    std::string s = " [ranks here are the group's: ";
    for (size_t r = 0; r < global_ranks.size(); ++r)
      s += (r ? ", " : "") + ("rank " + std::to_string(r)) + " = global rank " + std::to_string(global_ranks[r]);
    return s + "]";
  }
};

}  // namespace purlin::backend
