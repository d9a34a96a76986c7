// shm_group.cc — see shm_group.h.
#include "backend/host/shm_group.h"

#include <random>
#include <sstream>
#include <unistd.h>

#include "atom/cpu/cpu_atom.h"

namespace purlin::backend {

std::vector<std::string> all_gather(const Rendezvous& rdv, const std::string& key, int rank, int world,
                                    const std::string& mine) {
  rdv.set(key + std::to_string(rank), mine);
  std::vector<std::string> all(world);
  for (int r = 0; r < world; ++r) all[r] = r == rank ? mine : rdv.get(key + std::to_string(r));
  return all;
}

std::unique_ptr<atom::CpuAtom> make_shm_group(const std::string& purpose, int rank, int world, size_t workspace_bytes,
                                              size_t meta_bytes, std::chrono::milliseconds timeout,
                                              const Rendezvous& rdv, const AbortSignal* abort, size_t owner_bytes,
                                              const std::function<void(atom::CpuAtom&)>& on_created) {
  const std::string key = "purlin/" + purpose + "/";
  std::string token;
  if (rank == 0) {
    std::random_device rd;
    std::ostringstream os;
    os << "/purlin_" << getpid() << "_" << std::hex << rd() << rd();
    token = os.str();
    rdv.set(key + "token", token);
  } else {
    token = rdv.get(key + "token");
  }
  auto a = std::make_unique<atom::CpuAtom>(token, rank, world, workspace_bytes, meta_bytes, timeout, owner_bytes);
  if (abort) a->set_abort_flag(abort->flag(), [abort]() { return abort->reason(); });
  if (on_created) on_created(*a);
  all_gather(rdv, key + "created/", rank, world, "1");  // every segment exists
  a->attach_peers();
  all_gather(rdv, key + "attached/", rank, world, "1");  // every peer mapped ours
  a->unlink_own();
  return a;
}

}  // namespace purlin::backend
