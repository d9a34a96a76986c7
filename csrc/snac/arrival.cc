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

std::vector<std::string> arrive_tagged(atom::HostAtom& atom, uint64_t seq, const std::string& tag,
                                       const std::string& value, const atom::WaitSite& site, const std::string& hint) {
  const size_t len = atom.meta_bytes();
  if (tag.size() + value.size() + 2 > len)
    throw std::invalid_argument("purlin: a tagged exchange's message exceeds the meta slot: " + tag + " " + value);
  std::string blob = tag;
  blob.push_back('\0');
  blob += value;
  blob.resize(len, '\0');
  const std::vector<const std::byte*> all = arrive(atom, seq, blob.data(), blob.size(), site);
  std::vector<std::string> out;
  out.reserve(all.size());
  for (size_t r = 0; r < all.size(); ++r) {
    const char* c = reinterpret_cast<const char*>(all[r]);
    const std::string theirs(c, strnlen(c, len));
    if (theirs != tag)
      throw std::runtime_error("rank " + std::to_string(r) + " is at " + theirs + ", this rank at " + tag + hint);
    const size_t at = theirs.size() + 1;
    out.emplace_back(c + at, strnlen(c + at, len - at));
  }
  return out;
}

}  // namespace purlin::snac
