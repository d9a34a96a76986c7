// shm_group.cc — see shm_group.h.
#include "backend/shm_group.h"

#include <random>
#include <sstream>
#include <unistd.h>

#include "atom/cpu/cpu_atom.h"

namespace purlin::backend {

std::unique_ptr<atom::CpuAtom> make_shm_group(const std::string& purpose, int rank, int world, size_t workspace_bytes,
                                              size_t meta_bytes, std::chrono::milliseconds timeout,
                                              const Rendezvous& rdv) {
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
  auto a = std::make_unique<atom::CpuAtom>(token, rank, world, workspace_bytes, meta_bytes, timeout);
  rdv.set(key + "created/" + std::to_string(rank), "1");
  for (int r = 0; r < world; ++r) rdv.get(key + "created/" + std::to_string(r));
  a->attach_peers();
  rdv.set(key + "attached/" + std::to_string(rank), "1");
  for (int r = 0; r < world; ++r) rdv.get(key + "attached/" + std::to_string(r));
  a->unlink_own();
  return a;
}

}  // namespace purlin::backend
