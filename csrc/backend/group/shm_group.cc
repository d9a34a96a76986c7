// shm_group.cc — see shm_group.h.
#include "backend/group/shm_group.h"

#include <random>
#include <sstream>
#include <stdexcept>
#include <unistd.h>

#include "atom/cpu/cpu_atom.h"
#include "backend/group/shm_capacity.h"

namespace purlin::backend {

std::vector<std::string> all_gather(const Rendezvous& rdv, const std::string& key, int rank, int world,
                                    const std::string& mine) {
  rdv.set(key + std::to_string(rank), mine);
  std::vector<std::string> all(world);
  for (int r = 0; r < world; ++r) all[r] = r == rank ? mine : rdv.get(key + std::to_string(r));
  return all;
}

namespace {

// One step of the set-up, gathered: every rank's `done`, or "!" and why it could not.
void check_step(const std::vector<std::string>& all, const std::string& done, const std::string& failed) {
  std::string why;
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r] == done) continue;
    why += (why.empty() ? "" : "; ") + std::string("rank ") + std::to_string(r) + " " + failed + ": " +
           (!all[r].empty() && all[r][0] == '!' ? all[r].substr(1) : "unexpected reply '" + all[r] + "'");
  }
  if (!why.empty()) throw std::runtime_error(why);
}

}  // namespace

std::unique_ptr<atom::CpuAtom> make_shm_group(const std::string& purpose, int rank, int world, size_t workspace_bytes,
                                              size_t meta_bytes, std::chrono::milliseconds timeout,
                                              const Rendezvous& rdv, const AbortSignal* abort, size_t owner_bytes,
                                              const std::function<void(atom::CpuAtom&)>& on_created) {
  const std::string key = "purlin/" + purpose + "/";
  std::string token;
  size_t ws = workspace_bytes;
  if (rank == 0) {
    std::random_device rd;
    std::ostringstream os;
    os << "/purlin_" << getpid() << "_" << std::hex << rd() << rd();
    token = os.str();
    rdv.set(key + "token", token + " " + std::to_string(ws));  // NOTE [shm capacity]: rank 0's size for all
  } else {
    std::istringstream is(rdv.get(key + "token"));
    if (!(is >> token >> ws)) throw std::runtime_error("malformed segment token from rank 0 (another build?)");
  }
  // Each step's outcome is published, failures included, so a rank that cannot go on is
  // known to all at once rather than at the store's timeout.
  std::unique_ptr<atom::CpuAtom> a;
  std::string mine = "created";
  try {
    a = std::make_unique<atom::CpuAtom>(token, rank, world, ws, meta_bytes, timeout, owner_bytes);
    if (abort) a->set_abort_flag(abort->flag(), [abort]() { return abort->reason(); });
    if (on_created) on_created(*a);
  } catch (const atom::cpu::ShmNoSpace& e) {  // NOTE [reserved segments]
    a.reset();  // its pages back before /dev/shm is measured
    mine = "!" + std::string(e.what()) + "; the group's " + std::to_string(world) + " segments need " +
           atom::cpu::bytes_text(world * shm_segment_bytes(world, ws, meta_bytes, owner_bytes)) +
           ". Remedy: " + shm_remedy(world * shm_segment_bytes(world, ws, meta_bytes, owner_bytes),
                                     atom::cpu::ShmSpace::now()) +
           ", or set TORCH_PURLIN_CPU_WORKSPACE_BYTES smaller";
  } catch (const std::exception& e) {
    a.reset();
    mine = "!" + std::string(e.what());
  }
  check_step(all_gather(rdv, key + "created/", rank, world, mine), "created", "could not create its shared-memory segment");
  mine = "attached";
  try {
    a->attach_peers();
  } catch (const atom::cpu::ShmMissing& e) {  // every rank said "created": not the same /dev/shm
    mine = "!" + std::string(e.what()) + ", though that rank reported it created: the ranks do not share one /dev/shm "
           "(separate containers or mount namespaces: give them one, e.g. docker run --ipc=host), or something "
           "removed the name";
  } catch (const std::exception& e) {
    mine = "!" + std::string(e.what());
  }
  check_step(all_gather(rdv, key + "attached/", rank, world, mine), "attached", "could not map its peers' segments");
  a->unlink_own();
  return a;
}

}  // namespace purlin::backend
