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
#include <vector>

#include "atom/atom.h"

namespace purlin::snac {

// Publishes `len` bytes of `blob` for collective `seq` (>= 1) and returns a
// pointer to each rank's blob (index = rank), valid until seq + 2 begins.
std::vector<const std::byte*> arrive(atom::HostAtom& atom, uint64_t seq, const void* blob, size_t len,
                                     const atom::WaitSite& site);

}  // namespace purlin::snac
