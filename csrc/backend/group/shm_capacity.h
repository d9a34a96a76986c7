// shm_capacity.h — how much of /dev/shm a group's CPU workspace may take, and
// what to tell the user when /dev/shm is too small. Torch-free.
//
// NOTE [shm capacity] Every segment reserves its pages when it is made (NOTE
// [reserved segments]), so /dev/shm's size is a fact of a group's setup, not a
// SIGBUS in a collective. The CPU engine's workspace is by far the largest
// (32M per rank by default, against a container's 64 MB /dev/shm), so the
// group sizes it once, at its first collective, before any segment exists:
// rank 0 decides from statvfs of the /dev/shm the group shares and publishes
// the size with the segments' token, so every rank lays out its segment alike.
// Unset, the default is taken if it fits, else the largest of default/2, /4,
// ... down to kFloor that fills at most half the free bytes (leaving room for
// groups made later); a value someone set is used as given or refused, never
// changed behind their back. Too small: every rank raises at setup, naming
// /dev/shm's size, the bytes needed and the remedy. A segment that still cannot
// be made (/dev/shm filled meanwhile) is published as an error, and every rank
// raises with it. Details: docs/DESIGN.md, "Shared-memory capacity".
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
