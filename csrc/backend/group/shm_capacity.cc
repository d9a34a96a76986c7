// shm_capacity.cc — see shm_capacity.h (NOTE [shm capacity]).
#include "backend/group/shm_capacity.h"

#include <algorithm>

#include "atom/cpu/cpu_atom.h"

namespace purlin::backend {

using atom::cpu::bytes_text;

size_t shm_segment_bytes(int world, size_t workspace_bytes, size_t meta_bytes, size_t owner_bytes) {
  constexpr size_t kPage = 4096;
  const size_t total = atom::CpuAtom::Layout::compute(world, meta_bytes, workspace_bytes, owner_bytes).total;
  return (total + kPage - 1) / kPage * kPage;
}

size_t ShmCapacity::needs(const WorkspaceRequest& rq, size_t ws) {
  const size_t w = static_cast<size_t>(rq.world);
  return w * (shm_segment_bytes(rq.world, ws, rq.meta_bytes, rq.owner_bytes) + kHeadroomPerRank);
}

std::string shm_remedy(size_t needed, const atom::cpu::ShmSpace& space) {
  // The smallest power-of-two MiB that holds what is used now and `needed`.
  const size_t used = space.known ? space.total - std::min(space.total, space.free) : 0;
  size_t mib = 64;
  while (mib * (1 << 20) < used + needed) mib *= 2;
  const std::string size = mib % 1024 == 0 ? std::to_string(mib / 1024) + "g" : std::to_string(mib) + "m";
  return "give /dev/shm more room (a container: docker run --shm-size=" + size +
         " or --ipc=host; Kubernetes: a memory-backed emptyDir mounted on /dev/shm)";
}

namespace {

// A byte count as TORCH_PURLIN_CPU_WORKSPACE_BYTES is written: 4M, 768K, 5000.
std::string setting_text(size_t bytes) {
  if (bytes % (1 << 20) == 0) return std::to_string(bytes >> 20) + "M";
  if (bytes % (1 << 10) == 0) return std::to_string(bytes >> 10) + "K";
  return std::to_string(bytes);
}

// The largest of requested/2, /4, ... down to `floor` whose needs fit in
// `room`; else `floor` if it fits the free bytes at all; else 0.
size_t shrunk(const WorkspaceRequest& rq, const atom::cpu::ShmSpace& space, size_t floor, size_t room) {
  for (size_t ws = rq.requested / 2; ws >= floor && ws > 0; ws /= 2)
    if (ShmCapacity::needs(rq, ws) <= room) return ws;
  return ShmCapacity::needs(rq, floor) <= space.free ? floor : 0;
}

}  // namespace

WorkspaceChoice ShmCapacity::choose(const WorkspaceRequest& rq, const atom::cpu::ShmSpace& space) {
  WorkspaceChoice c;
  if (!space.known || needs(rq, rq.requested) <= space.free) {  // unknown: creation reports what goes wrong
    c.bytes = rq.requested;
    return c;
  }
  const std::string what = std::to_string(rq.world) + " ranks x " + bytes_text(rq.requested) + " workspace need " +
                           bytes_text(needs(rq, rq.requested)) + " of /dev/shm with the group's other segments, and " +
                           space.describe();
  const std::string remedy = shm_remedy(needs(rq, rq.requested), space);
  const size_t floor = std::min(rq.requested, kFloor);
  if (rq.is_explicit) {  // what would be used as given now: the free bytes, not half
    const size_t fits = shrunk(rq, space, std::min<size_t>(rq.requested, 4096), space.free);
    c.error = "/dev/shm is too small for TORCH_PURLIN_CPU_WORKSPACE_BYTES=" + setting_text(rq.requested) +
              " (set explicitly, so not reduced): " + what + ". Remedy: " + remedy + ", or set " +
              "TORCH_PURLIN_CPU_WORKSPACE_BYTES smaller" +
              (fits ? " (" + setting_text(fits) + " fits now)" : std::string());
    return c;
  }
  const size_t fits = shrunk(rq, space, floor, space.free / 2);
  if (fits == 0) {
    c.error = "/dev/shm is too small for this group's shared memory: " + what + "; even the smallest workspace, " +
              bytes_text(floor) + ", needs " + bytes_text(needs(rq, floor)) + ". Remedy: " + remedy +
              ", run fewer ranks per host, or set TORCH_PURLIN_CPU_WORKSPACE_BYTES below " + setting_text(floor) + " (slower)";
    return c;
  }
  c.bytes = fits;
  c.note = "the CPU workspace is " + bytes_text(fits) + " per rank, not the default " + bytes_text(rq.requested) +
           ": " + what + " (a group that shrinks its workspace takes at most half the free bytes); large tensors "
           "take more rounds. To keep the default, " + remedy + "; TORCH_PURLIN_CPU_WORKSPACE_BYTES sets the size";
  return c;
}

}  // namespace purlin::backend
