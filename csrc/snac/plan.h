// plan.h — SNAC (Stage, Notify, And Consume): the plan one rank executes.
//
// A Plan is derived from (Spec, world, rank, workspace capacity) by
// make_plan() and is a flat list of Ops that any Atom can execute in order:
//   Wait    — acquire: block until flag (kind, from peer) >= value
//   Signal  — release: raise flag (kind, from this rank) at peer to value
//   Copy    — dst <- srcs[0], n elements
//   Reduce  — dst <- reduction over srcs (in order), n elements
// Buffers are named, not addressed: Input/Output are this rank's tensors,
// Workspace(rank) is that rank's symmetric workspace as mapped here. The same
// plan therefore runs on any datapath that can resolve the three buffers.
//
// NOTE [SNAC protocol] — how a plan moves one round of data
//   Stage    each source copies its contributions for the round from its input
//            into its own workspace slot (round % 2): peers then read only
//            memory that stays valid however the owner reuses its tensors.
//   Notify   the source raises Staged to value step(round, 0) at every rank
//            that will read what it staged.
//   Consume  each destination waits for Staged from each rank it reads, then
//            copies (Copy) or reduces in ascending source order (Reduce) into
//            its output, then raises Consumed to step(round, phase) at each
//            rank it read from.
//   Reuse    before staging round r >= 2 into slot r % 2 a source waits for
//            Consumed >= the last step each reader of round r - 2 acked.
// NOTE [two-shot] — a Reduce chunk with several destinations may be split
//   among its destinations ("owners"): phase 0 consumes only the owner's
//   slice, reduced into the owner's workspace (scratch); phase 1 is a Copy
//   spec from each owner's scratch to the other destinations, with Notify at
//   step(round, 1). One-shot and two-shot all_reduce are the same Spec; the
//   option only changes how Consume is distributed.
// NOTE [zero-copy] — with read_peer_inputs (inputs in symmetric memory,
//   disjoint from outputs) nothing is staged: Notify says "my input is
//   ready", readers consume straight from Input(source rank), and the plan
//   ends with Release: a source waits until every rank that read its input
//   acked (Consumed of the last round it read), so the caller may overwrite
//   the input once the collective returns. The workspace only holds two-shot
//   scratch.
// NOTE [push] — the same protocol with Stage writing each contribution
//   straight into every reader's workspace slot (a remote write) instead of
//   the source's own: readers then consume local memory. Notify, Consume and
//   the acks are unchanged; Reuse waits for the same acks (a source writes
//   into reader d's slot exactly when d reads from it). Two-shot phase 1
//   pulls the owners' reduced slices, unless push_reduced: then each owner
//   copies its reduced slice from its scratch into every other destination's
//   slot before it notifies (stores over NVLink instead of loads), and the
//   destination copies it from its own workspace; the owner's Reuse waits
//   and the destinations' end-of-round acks cover these writes as they do
//   phase 0's (2026-12-01).
// NOTE [peer outputs] — with write_peer_outputs (every rank's output in
//   symmetric memory; Copy specs) nothing is staged and nothing is consumed:
//   one round, no workspace. Each destination first raises Staged to step 1
//   at every rank that writes into it ("my output is free": the destination
//   has reached this collective, so its earlier work on the output is done);
//   each source waits for that from every destination, copies its chunks
//   from its Input straight into each destination's Output, and raises
//   Staged to step 2 there; each destination waits for step 2 from every
//   writer before it ends, so what follows it sees the data. Both notices
//   are Staged steps so that a writer's first wait for a peer is a Staged
//   wait, the one an Atom checks the peer's call tag on. Every block is a
//   pure writer: no consume copy (docs/PERFORMANCE.md).
// NOTE [epochs] — flag values are step counters relative to the plan start;
//   the executor adds the group's running base, so flags only ever grow and
//   never need resetting (safe under graph replay with a device-side base).
//   Workspace reuse *across* collectives needs no Consumed wait: a rank
//   begins collective k+1 only after every peer arrived at k+1 (handshake),
//   i.e. finished reading everything of collective k.
// NOTE [matched waits] — an Atom may run a plan on several workers per rank
//   (the CUDA plan kernel's blocks), each taking its share of every Copy and
//   Reduce by a rule of the op's element count alone and raising its own slot
//   of a flag. A Wait then waits only for its own worker's slot of the peer
//   (`matched`) when what it orders was touched by the peer's worker of the
//   same index; make_plan(match_waits) proves that per pair of conflicting
//   Workspace accesses of different ops (matched: same elements, same offset,
//   same n), and before each op with an unmatched pair (unclean) the rank
//   waits again on all slots for the highest value it waited for on each
//   (peer, flag) since the last such catch-up. Sound because every worker
//   executes every op: a matched pair keeps its ordering chain through worker b
//   of every rank, and an unmatched one is covered by the catch-ups at both
//   ends. Workers then pipeline independently; rounds are cut to equal sizes
//   (planner.cc round_cut) so that only ops meeting the last, shorter round
//   are unclean. Details and the proof: docs/DESIGN.md, "Matched waits".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "snac/spec.h"

namespace purlin::snac {

enum class Buf : uint8_t { Input = 0, Output = 1, Workspace = 2 };

struct Ref {
  Buf buf = Buf::Input;
  int32_t rank = 0;    // owner (Input: this plan's rank, or a peer's with read_peer_inputs;
                       // Output: this plan's rank, or a peer's with write_peer_outputs)
  int64_t offset = 0;  // in elements from the buffer's start
  int32_t origin = -1; // whose contribution it holds, where that is not `rank`
                       // (a push lands in the reader's workspace); -1: rank's
};

enum class OpCode : uint8_t { Wait = 0, Signal = 1, Copy = 2, Reduce = 3 };
enum class Flag : uint8_t { Staged = 1, Consumed = 2 };  // same numbers as atom::FlagKind

struct Op {
  OpCode code = OpCode::Copy;
  Flag flag = Flag::Staged;  // Wait / Signal
  int32_t peer = -1;         // Wait: who raises it; Signal: whose flag is raised
  uint64_t value = 0;        // Wait / Signal: relative step (>= 1)
  Ref dst;                   // Copy / Reduce
  int64_t n = 0;             // Copy / Reduce: elements
  int32_t src_begin = 0;     // Copy / Reduce: srcs[src_begin, src_begin + src_count)
  int32_t src_count = 0;
  const char* phase = "";    // for timeout messages (static strings)
  bool matched = false;      // Wait: NOTE [matched waits]
  int32_t round = -1;        // the round that emitted it; -1: after the rounds (Release)
};

enum class ReduceAlgo : uint8_t { OneShot = 0, TwoShot = 1 };

struct PlanOptions {
  int64_t slot_elems = 0;      // workspace capacity of one slot (two slots are used)
  int64_t align_elems = 1;     // staged pieces start at multiples of this
  ReduceAlgo reduce_algo = ReduceAlgo::OneShot;
  bool direct_local = true;    // read own contributions straight from Input
                               // (false when Input and Output overlap)
  bool read_peer_inputs = false;  // NOTE [zero-copy]: every rank's Input is
                               // readable by its peers (symmetric memory)
  bool push = false;           // NOTE [push]: stage into the readers' workspaces
  bool push_reduced = false;   // NOTE [push]: two-shot phase 1 pushes the reduced slices
  bool match_waits = false;    // NOTE [matched waits]: mark Waits a worker may make on its own slot
  bool write_peer_outputs = false;  // NOTE [peer outputs]: every rank's Output is writable by its
                               // peers (symmetric memory); Copy specs only
};

struct Plan {
  int rank = 0;
  int world = 1;
  int rounds = 0;
  uint64_t steps = 0;          // step counters advance by this much per run
  int64_t workspace_elems = 0; // highest workspace element used + 1
  std::vector<Op> ops;
  std::vector<Ref> srcs;

  std::string describe() const;  // human-readable listing (tests, docs)
};

inline uint64_t step_value(int round, int phase) { return 2ull * static_cast<uint64_t>(round) + phase + 1; }

// Derives rank `rank`'s plan. Throws std::invalid_argument if the workspace
// cannot hold even one aligned element per staged piece.
Plan make_plan(const Spec& spec, int rank, const PlanOptions& opt);

// NOTE [matched waits]: marks plans[rank]'s Waits matched and inserts its
// catch-up Waits before its unclean ops, given every rank's plan of the same
// Spec (plans[q].rank == q).
void mark_matched_waits(std::vector<Plan>* plans, int rank);

}  // namespace purlin::snac
