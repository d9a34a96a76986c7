// setup_agreement.cc — see setup_agreement.h.
#include "backend/host/setup_agreement.h"

namespace purlin::backend {

std::string agree_on_setup(const Rendezvous& rdv, const std::string& key, int rank, int world,
                           const std::string& my_error) {
  const std::vector<std::string> all = all_gather(rdv, key, rank, world, my_error.empty() ? "ok" : "!" + my_error);
  std::string why;
  for (int r = 0; r < world; ++r) {
    const std::string& v = all[r];
    if (v == "ok") continue;
    why += (why.empty() ? "" : "; ") + std::string("rank ") + std::to_string(r) + " could not set up the group: " +
           (v.empty() || v[0] != '!' ? "unexpected setup reply '" + v + "'" : v.substr(1));
  }
  return why;
}

}  // namespace purlin::backend
