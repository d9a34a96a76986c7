// symmetric_use.h — whether a call reads its peers' inputs in place or writes
// straight into their outputs, when its tensors are in a symmetric pool.
//
// NOTE [symmetric use is rank-invariant] Every rank decides alone (GPU
//   collectives have no host handshake), and a rank whose decision differs
//   from its peers' runs another plan: the call tags then refuse the call
//   (NOTE [call tags]) although every rank passed the same arguments. So the
//   decision may rest only on what every rank of an identical call shares:
//   the call's description (snac::CallDescription: the Spec's traits and
//   which ranks pass an input and an output at all, derived from the Spec
//   and the op's one-buffer API, NOTE [call shape from the Spec]), the
//   two-shot choice, and whether the rank's tensor is in the pool (by the
//   pool's contract, tensors of one role are pool tensors at one offset on
//   every rank). A rank's own aliasing of Input and Output may decide only
//   where every rank of an identical call aliases alike. A reduce's root
//   passes its buffer as Input and Output (Same), its peers an Input only
//   (Disjoint): deciding by that alias once sent the root to a staged plan
//   and its peers to zero-copy plans (a wrong reduce from 20 MB of pool
//   memory on, where workspace plans take over). test/cpp/test_plan_symmetry.cc
//   checks every built-in collective x pool or plain x in place or not x every
//   root x every size class x worlds 2-8.
// Torch-free.
#pragma once

#include "backend/group/request.h"
#include "snac/spec_traits.h"

namespace purlin::backend {

struct SymmetricUse {
  bool read_peer_inputs = false;    // NOTE [zero-copy]: peers read this call's Inputs in place
  bool write_peer_outputs = false;  // NOTE [peer outputs]: writers copy into the destinations' Outputs
};

// Whether peers may read the Inputs of `rq` in place (before asking whether
// they are in the pool): NOTE [zero-copy in place] in symmetric_use.cc.
bool reads_in_place_allowed(const Request& rq, const snac::CallDescription& call, bool two_shot);

// The call's use of the pool, given whether this rank's Input / Output are in
// it. Peer outputs first (pure writers), else zero-copy reads.
SymmetricUse symmetric_use(const Request& rq, const snac::CallDescription& call, bool two_shot, bool input_in_pool,
                           bool output_in_pool);

}  // namespace purlin::backend
