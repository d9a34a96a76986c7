// symmetric_use.cc — see symmetric_use.h.
#include "backend/group/symmetric_use.h"


namespace purlin::backend {

// NOTE [zero-copy in place] Reading peers' inputs in place is safe when no
// rank overwrites an Input a peer may still read:
//  - whatever the aliasing, when no rank whose Input a peer reads writes any
//    Output (SpecTraits::inputs_unwritten_while_read: reduce, broadcast; gather
//    too, but its root may pass its Input inside its Output, at a pool offset
//    its peers do not know, so it never reads in place);
//  - for two-shot reductions: rank d writes slice o of its output only after
//    owner o's phase-1 Staged, i.e. after o finished reading slice o of every
//    input, and o is the only reader of that slice;
//  - otherwise only where Input and Output are disjoint. Every rank of such a
//    Spec passes an Input (every_rank_reads_input), so an identical call
//    aliases alike on every rank. One-shot all_reduce in place would
//    overwrite an input every peer reads, so it stages.
// (test/cpp/test_cuda_plan_emulation.cc fails if this rule admits one-shot in place.)
bool reads_in_place_allowed(const Request& rq, const snac::CallDescription& call, bool two_shot) {
  if (!call.inputs_everywhere) return false;     // a rank without an Input cannot judge the pool
  if (!call.inputs_at_one_offset) return false;  // the peers would read at offsets they cannot know
  const snac::SpecTraits& t = call.traits;
  if (t.inputs_unwritten_while_read) return true;
  if (two_shot && t.reduces) return true;
  return t.every_rank_reads_input && io_alias(rq) == IoAlias::Disjoint;
}

// NOTE [peer outputs] (snac/plan.h): every rank's Output in the pool at the
// same offset (the call tag checks it) lets copy collectives write straight
// into the peers' Outputs, where every rank passes an Output and the op's
// in-place forms keep what peers write away from Inputs still to be read
// (CallDescription::outputs_writable_by_peers). all_to_all in place would let a peer
// overwrite a slot this rank has yet to send, and a rank's alias is its own
// choice, so it is left out.
SymmetricUse symmetric_use(const Request& rq, const snac::CallDescription& call, bool two_shot, bool input_in_pool,
                           bool output_in_pool) {
  SymmetricUse u;
  u.write_peer_outputs = output_in_pool && !call.traits.reduces && call.outputs_everywhere &&
                         call.outputs_writable_by_peers && rq.out_numel > 0;
  u.read_peer_inputs = !u.write_peer_outputs && input_in_pool && reads_in_place_allowed(rq, call, two_shot);
  return u;
}

}  // namespace purlin::backend
