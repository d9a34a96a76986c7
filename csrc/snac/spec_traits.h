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
};

SpecTraits spec_traits(const Spec& spec);

// A hash of the whole Spec (chunks, regions, kind, reduction, name): ranks
// that hash the same called the same collective (NOTE [call tags]).
uint64_t spec_hash(const Spec& spec);

}  // namespace purlin::snac
