// spec_traits.h — what a Spec says about who reads and who writes, for the
// choices made below it.
//
// Layers under the Spec (the symmetric-memory rules, the CUDA protocol
// choice) must not ask which collective they run: they ask these traits, and
// a collective added as a Spec gets the same treatment as a built-in one.
// Every trait is a function of the Spec alone, so every rank derives it alike.
// Torch-free.
#pragma once

#include <cstdint>

#include "snac/spec.h"

namespace purlin::snac {

struct SpecTraits {
  bool reduces = false;  // OpKind::Reduce: destinations combine their sources; else they copy
  // Every rank is a source of some chunk: each holds an input that is read.
  bool every_rank_reads_input = false;
  // Every rank is a destination of some chunk: each has an output that is written.
  bool every_rank_writes_output = false;
  // NOTE [reads in place] No rank whose Input another rank reads is a
  // destination of any chunk: while peers read a rank's Input, that rank
  // writes no Output. Peers may then read Inputs in place (NOTE [zero-copy])
  // however each rank's Input and Output overlap (reduce: the root reads only
  // its own Input, elementwise before storing; broadcast: the root writes
  // nothing; gather: likewise).
  bool inputs_unwritten_while_read = false;
  // The Spec reduces (OpKind::Reduce) and some chunk of it has several
  // sources and several destinations: the reductions two-shot plans split
  // among their destinations (all_reduce, not reduce or reduce_scatter).
  bool reduces_to_several_ranks = false;
  // Every chunk's sources and destinations share one region, and every
  // destination of a chunk is a source of it or of no chunk at all: each
  // destination element is computed by the op that reads the source elements
  // of the same place, or from data of a rank whose Input nobody reads
  // (all_reduce, reduce, broadcast). A rank whose Input is its Output may then
  // read its own contribution in place (NOTE [direct local reads]).
  bool elementwise_aligned = true;
  // The most elements any rank sends or receives (snac::max_rank_elems): the
  // call's size, alike on every rank.
  int64_t max_rank_elems = 0;
};

SpecTraits spec_traits(const Spec& spec);

// What the layers below the Spec ask about one call (NOTE [symmetric use is
// rank-invariant] in backend/group/symmetric_use.h): the Spec's traits and
// who passes which tensor, alike on every rank. describe() gives a Spec's
// own (every rank passes an Input and an Output, no in-place form known);
// the backend's Spec builder states a built-in collective's API.
struct CallDescription {
  SpecTraits traits;
  bool inputs_everywhere = true;   // every rank passes an Input (scatter: the root only)
  bool outputs_everywhere = true;  // every rank passes an Output (reduce, gather: the root only)
  // Every rank that passes the pool tensors of one role passes its Input at one
  // pool offset. Not so for gather: its root may pass its own block of the
  // Output as Input, which its peers cannot see.
  bool inputs_at_one_offset = true;
  // Peers may write a rank's Output while it runs, whichever in-place form the
  // op lets that rank choose: a rank's Input, where it is inside its Output,
  // lies where only the rank itself writes (all_gather's own slot; broadcast's
  // buffer, which peers write only on non-roots, whose Input nobody reads).
  bool outputs_writable_by_peers = false;
  // The in-place form where one buffer is this rank's block of the other
  // (NOTE [direct local reads]): +1 Input is block `rank` of Output
  // (all_gather), -1 Output is block `rank` of Input (reduce_scatter), 0 none.
  int own_block = 0;
};

CallDescription describe(const Spec& spec);

// A hash of the whole Spec (chunks, regions, kind, reduction, name): ranks
// that hash the same called the same collective (NOTE [call tags]).
uint64_t spec_hash(const Spec& spec);

}  // namespace purlin::snac
