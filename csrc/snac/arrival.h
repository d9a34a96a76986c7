// arrival.h — the arrival handshake that opens every host-driven collective.
//
// NOTE [arrival] Each rank writes a small metadata blob (what it was asked to
// do: op, dtype, sizes, root, split sizes, or a local error) into its own
// meta slot (seq % 2), raises Arrive = seq at every peer (release), then waits
// for Arrive >= seq from every peer (acquire) and reads their blobs. Hence:
//   - every rank sees every rank's arguments, so argument mismatches are
//     detected identically everywhere and raised as errors on all ranks;
//   - a rank that never arrives is named in the timeout error;
//   - the parity slot is safe to overwrite at seq + 2, because a rank reaches
//     seq + 2 only after every peer arrived at seq + 1, i.e. finished seq;
//   - collectives need no Consumed wait across calls (NOTE [epochs]).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "atom/atom.h"

namespace purlin::snac {

// Publishes `len` bytes of `blob` for collective `seq` (>= 1) and returns a
// pointer to each rank's blob (index = rank), valid until seq + 2 begins.
std::vector<const std::byte*> arrive(atom::HostAtom& atom, uint64_t seq, const void* blob, size_t len,
                                     const atom::WaitSite& site);

// A string all-gather over arrive() for host protocols of several steps
// (the CUDA pool's offset agreement: NOTE [pool agreement on the host] in
// backend/cuda/pool_agreement.cc): every rank publishes `tag` (the step it is at) and
// `value` (tag.size() + value.size() + 2 <= atom.meta_bytes()) and gets every
// rank's value in rank order. If some rank's tag differs, every rank throws
// std::runtime_error "rank R is at <R's tag>, this rank at <tag>" + hint,
// naming the first such rank.
std::vector<std::string> arrive_tagged(atom::HostAtom& atom, uint64_t seq, const std::string& tag,
                                       const std::string& value, const atom::WaitSite& site, const std::string& hint);

}  // namespace purlin::snac
