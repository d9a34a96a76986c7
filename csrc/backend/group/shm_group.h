// shm_group.h — a CPU shared-memory Atom (atom/cpu/cpu_atom.h) shared by the
// ranks of one group, set up through the group's Store.
//
// Used by the CPU engine (workspace + arrival handshake) and by the CUDA
// engine to exchange all_to_all split sizes on the host in microseconds
// instead of a Store round trip. Collective: every rank calls it at the same
// point with the same `purpose` (which names the Store keys).
// Torch-free: the backend passes the Store as a Rendezvous.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/group/abort_signal.h"

namespace purlin::atom {
class CpuAtom;
}

namespace purlin::backend {

struct Rendezvous {
  std::function<void(const std::string& key, const std::string& value)> set;
  std::function<std::string(const std::string& key)> get;  // blocks until set (bounded by the store timeout)
};

// Publishes `mine` under key + rank and returns every rank's value, in rank
// order (a rank's own without a round trip); waits as Rendezvous::get does.
std::vector<std::string> all_gather(const Rendezvous& rdv, const std::string& key, int rank, int world,
                                    const std::string& mine);

// Every rank creates its segment, all attach, then each unlinks its own name:
// from then on nothing is left in /dev/shm, even if a process is killed
// (NOTE [cpu segment layout] and the lifecycle in cpu_atom.h). Each step's
// outcome is gathered through `rdv`, failures included: a rank that cannot
// create its segment (a /dev/shm too small, NOTE [reserved segments]) or map
// a peer's (not found: the ranks do not share /dev/shm; refused: NOTE
// [checked segments]) publishes why, and every rank throws
// std::runtime_error naming each such rank and its reason, at once; nothing
// is left in /dev/shm. `workspace_bytes`: rank 0's value is every rank's (it
// travels with the segments' names, NOTE [shm capacity]). `abort`: the
// group's abort request, which ends the atom's waits naming its reason
// (CpuAtom::set_abort_flag), or nullptr. `owner_bytes`: the owner area of
// each segment; `on_created` (may be empty) fills this rank's before any peer
// maps the segment (the group's health record: NOTE [group health]).
std::unique_ptr<atom::CpuAtom> make_shm_group(const std::string& purpose, int rank, int world, size_t workspace_bytes,
                                              size_t meta_bytes, std::chrono::milliseconds timeout,
                                              const Rendezvous& rdv, const AbortSignal* abort, size_t owner_bytes = 0,
                                              const std::function<void(atom::CpuAtom&)>& on_created = {});

}  // namespace purlin::backend
