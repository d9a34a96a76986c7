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
// who passes which tensor, alike on every rank. Every field is derived from
// the Spec (NOTE [call shape from the Spec] in spec_traits.cc) and one fact
// of the call, one_buffer; no field names a collective, so a custom Spec of a
// built-in's shape is described as the built-in is.
struct CallDescription {
  SpecTraits traits;
  // Every rank passes an Input: every rank is a source (scatter: the root
  // only), or passes its one buffer (broadcast).
  bool inputs_everywhere = true;
  // Every rank passes an Output: every rank is a destination (reduce, gather:
  // the root only), or passes its one buffer (broadcast).
  bool outputs_everywhere = true;
  // Every rank that passes the pool tensors of one role passes its Input at one
  // pool offset. Not so where a rank that passes an Output may keep its Input
  // inside it at a place the ranks that pass no Output cannot see (gather: its
  // root's own block).
  bool inputs_at_one_offset = true;
  // Peers may write a rank's Output while it runs, whichever in-place form the
  // rank chose: a rank's Input, where it is inside its Output, lies where only
  // the rank itself writes (all_gather's own slot; broadcast's buffer, which
  // peers write only on non-roots, whose Input nobody reads).
  bool outputs_writable_by_peers = false;
  // The in-place form where one buffer is this rank's block of the other
  // (NOTE [direct local reads]): +1 Input is block `rank` of Output
  // (all_gather), -1 Output is block `rank` of Input (reduce_scatter), 0 none.
  int own_block = 0;
};

// The description of a call of `spec`. `one_buffer`: every rank passes one
// buffer as its Input and its Output, whatever the Spec reads or writes there
// (c10d's one-tensor ops, all_reduce and broadcast); a custom call never
// promises it (docs/CUSTOM_COLLECTIVES.md).
CallDescription describe(const Spec& spec, bool one_buffer = false);

// The in-place forms a rank may choose alone (NOTE [direct local reads] in
// backend/group/request.cc), by the Spec: whether `rank`'s Input may lie in
// its Output at element `at`: the rank is the source of one copied chunk, its
// whole Input, which lands there contiguously and nowhere another chunk
// writes, so the in-place copy is a no-op (all_gather's block `rank`,
// gather's root's). And whether its Output may lie in its Input at `at`: the
// rank is the destination of one chunk, its whole Output, with no other
// destination, which reads the rank's Input there contiguously and nowhere
// another chunk reads, so it reads the block before it stores over it
// (reduce_scatter's block `rank`, scatter's root's).
bool input_is_own_chunk(const Spec& spec, int rank, int64_t at);
bool output_is_own_chunk(const Spec& spec, int rank, int64_t at);

// A hash of the whole Spec (chunks, regions, kind, reduction, name): ranks
// that hash the same called the same collective (NOTE [call tags]).
uint64_t spec_hash(const Spec& spec);

}  // namespace purlin::snac
