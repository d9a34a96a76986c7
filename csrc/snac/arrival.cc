// arrival.cc — see NOTE [arrival] in arrival.h.
#include "snac/arrival.h"

#include <cstring>
#include <stdexcept>

namespace purlin::snac {

std::vector<const std::byte*> arrive(atom::HostAtom& atom, uint64_t seq, const void* blob, size_t len,
                                     const atom::WaitSite& site) {
  if (len > atom.meta_bytes()) throw std::invalid_argument("purlin: collective metadata exceeds the meta slot");
  const int me = atom.rank(), W = atom.world(), parity = static_cast<int>(seq % 2);
  std::memcpy(atom.meta(me, parity), blob, len);
  for (int p = 0; p < W; ++p)
    if (p != me) atom.signal(p, atom::FlagKind::Arrive, seq);
  atom::WaitSite s = site;
  s.phase = "arrival: wait for peer to enter the collective";
  std::vector<const std::byte*> out(W);
  for (int p = 0; p < W; ++p) {
    if (p != me) atom.wait(p, atom::FlagKind::Arrive, seq, s);
    out[p] = atom.meta(p, parity);
  }
  return out;
}

}  // namespace purlin::snac
