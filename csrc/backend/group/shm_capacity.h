// shm_capacity.h — how much of /dev/shm a group's CPU workspace may take, and
// what to tell the user when /dev/shm is too small. Torch-free.
//
// NOTE [shm capacity] Every segment reserves its pages when it is made (NOTE
// [reserved segments] in atom/cpu/shm_segment.h), so /dev/shm's size is a
// fact of a group's setup, not a SIGBUS in a collective. The CPU engine's
// segments are by far the largest (TORCH_PURLIN_CPU_WORKSPACE_BYTES per rank,
// 32M by default, against a container's 64 MB /dev/shm), so the group sizes
// its workspace once, at its first collective, before any segment exists:
//   who       rank 0 decides, from statvfs of its /dev/shm (the one every rank
//             of the group shares, NOTE [host map]), and publishes the size
//             with the segments' token (make_shm_group), so every rank lays
//             out its segment alike (plans slice the workspace by its size);
//   needs     world x the page-rounded segment (NOTE [cpu segment layout]),
//             plus kHeadroomPerRank per rank for the group's other, small
//             segments (the CUDA engine's host channels, a later group's
//             host probe);
//   default   (the variable unset) the default if its needs fit the free
//             bytes; else the largest of default/2, /4, ... down to kFloor
//             whose needs fill at most half the free bytes, leaving the rest
//             to groups made later (subgroups, a DeviceMesh's dimensions,
//             each shrinking the same way); else kFloor if it fits at all.
//             A smaller workspace only pipelines large tensors in more
//             rounds. Rank 0 logs the choice once (TORCH_PURLIN_LOG);
//   explicit  (set in the environment or the group's options) used as given
//             if it fits, else refused: a value someone chose is not changed
//             behind their back;
//   too small every rank raises at setup (NOTE [setup agreement]: rank 0's
//             reason reaches all), naming /dev/shm's size and free bytes, the
//             bytes needed and the remedy (shm_remedy).
// /dev/shm may still fill between the decision and the segments (another job
// or group): a rank whose segment cannot be made publishes its error instead
// of "created" (make_shm_group), and every rank raises with it.
#pragma once

#include <cstddef>
#include <string>

#include "atom/cpu/shm_segment.h"

namespace purlin::backend {

// Bytes one rank's segment of a shared-memory group (shm_group.h) takes in /dev/shm.
size_t shm_segment_bytes(int world, size_t workspace_bytes, size_t meta_bytes, size_t owner_bytes);

struct WorkspaceRequest {
  int world = 1;
  size_t requested = 0;     // TORCH_PURLIN_CPU_WORKSPACE_BYTES as the group reads it
  bool is_explicit = false;  // set in the environment or the group's options (not the default)
  size_t meta_bytes = 0, owner_bytes = 0;  // the rest of each segment (NOTE [cpu segment layout])
};

struct WorkspaceChoice {
  size_t bytes = 0;   // the workspace per rank; 0 with `error` set
  std::string note;   // why it is smaller than requested ("" if it is not)
  std::string error;  // why no workspace fits ("" if one does)
};

class ShmCapacity {
 public:
  static constexpr size_t kFloor = 256 << 10;           // the smallest default workspace chosen
  static constexpr size_t kHeadroomPerRank = 64 << 10;  // the group's other segments
  // NOTE [shm capacity]: the workspace for `rq` on a /dev/shm with `space` (unknown: the request).
  static WorkspaceChoice choose(const WorkspaceRequest& rq, const atom::cpu::ShmSpace& space);
  // The group's bytes in /dev/shm with a workspace of `ws` (segments and headroom).
  static size_t needs(const WorkspaceRequest& rq, size_t ws);
};

// What to do when /dev/shm cannot hold `needed` more bytes: the --shm-size that
// would hold them (with what is used now), and the workspace setting.
std::string shm_remedy(size_t needed, const atom::cpu::ShmSpace& space);

}  // namespace purlin::backend
