// copy_engine_plan.h — whether a SNAC plan suits the copy-engine Atom
// (atom/cuda/host/ce_atom.h): copies only (copy engines do not compute),
// pulls only (its waits do not flush remote data writes: NOTE [stream memop
// ordering]), reading a peer's Input only with the peer table (NOTE
// [copy-engine zero-copy]) and never a peer's Output. The CUDA engine asks
// before it runs a plan on that Atom through snac::execute. Torch-free.
#pragma once

#include <cstdint>
#include <string>

#include "snac/plan.h"

namespace purlin::lowering {

// "" if rank `rank` of `world` may run `plan` on the copy-engine Atom, whose
// workspace holds `workspace_bytes`, on elements of `esize` bytes;
// `peer_inputs`: the peers' inputs are mapped here. Else why not.
std::string copy_engine_refusal(const snac::Plan& plan, int rank, int world, int64_t workspace_bytes,
                                int64_t esize, bool peer_inputs);

}  // namespace purlin::lowering
