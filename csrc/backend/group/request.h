// request.h — one native collective call, as the backend hands it to SNAC.
//
// The backend flattens c10d's tensor lists into one flat input and one flat
// output per rank; everything else about the call is here. Torch-free.
// A Request travels to every peer as a metadata blob during the arrival
// handshake (NOTE [arrival]), so every rank can check every rank's arguments
// and derive the same global Spec.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/types.h"
#include "snac/spec.h"
#include "snac/spec_traits.h"

namespace purlin::backend {

enum class CollOp : uint8_t {
  AllReduce = 0, Reduce, Broadcast, AllGather, ReduceScatter, AllToAll, Gather, Scatter, Barrier, Custom, kCount
};

const char* coll_op_name(CollOp op);

struct Request {
  CollOp op = CollOp::Barrier;
  const char* name = "barrier";   // user-facing op name, e.g. "all_gather_into_tensor"
  DType dtype = DType::Float32;
  RedOp redop = RedOp::Sum;
  int root = 0;
  double scale = 1.0;             // PREMUL_SUM factor of this rank
  void* in = nullptr;
  int64_t in_numel = 0;
  void* out = nullptr;
  int64_t out_numel = 0;
  std::vector<int64_t> in_splits;   // AllToAll: elements to each rank
  std::vector<int64_t> out_splits;  // AllToAll: elements from each rank
  const snac::Spec* custom = nullptr;
  // Every rank passes one buffer as its Input and its Output (c10d's
  // all_reduce and broadcast): a fact of the op's API, alike on every rank,
  // which the Spec cannot say (snac::describe's one_buffer).
  bool one_buffer = false;
  std::string error;                // a local argument error, reported to all ranks
};

// Metadata blob: fixed header followed by 2 * world int64 split sizes.
size_t meta_blob_bytes(int world);
std::vector<std::byte> encode_meta(const Request& rq, int world);

// A decoded peer blob.
struct PeerMeta {
  CollOp op;
  DType dtype;
  RedOp redop;
  int root;
  double scale;
  int64_t in_numel, out_numel;
  uint64_t custom_hash;
  std::string error;
  std::vector<int64_t> in_splits, out_splits;
};
PeerMeta decode_meta(const std::byte* blob, int world);

// Checks that all ranks' arguments agree; returns "" or the reason, naming
// the ranks involved. `me` is this rank (its own error comes first).
std::string check_agreement(const std::vector<PeerMeta>& all, int me);

// The global Spec of an agreed call.
snac::Spec build_spec(const Request& rq, const std::vector<PeerMeta>& all);

// The call's description (snac/spec_traits.h): what `spec` (the call's
// Spec, build_spec's) says about who passes which tensor and which in-place
// forms are safe, plus rq.one_buffer. Engines decide by it, never by the op
// (NOTE [symmetric use is rank-invariant]), so a custom Spec of a built-in's
// shape gets the built-in's description (NOTE [call shape from the Spec]).
snac::CallDescription describe_call(const Request& rq, const snac::Spec& spec);

// Whether every rank's sizes are its own (all_to_all's splits): exchanged on
// every call, never memoized.
inline bool sizes_per_rank(const Request& rq) { return !rq.in_splits.empty(); }

// Key identifying this rank's plan for an agreed call (for the plan cache).
std::string plan_key(const Request& rq, const std::vector<PeerMeta>& all);

using snac::spec_hash;  // snac/spec_traits.h

// How this rank's flat Input and Output relate in memory.
enum class IoAlias : uint8_t {
  Disjoint = 0,  // separate memory (or one of them empty)
  Same = 1,      // same start address
  Overlap = 2,   // overlapping otherwise
  Shifted = 3,   // overlapping, Input = Output + shift whole elements (shift != 0)
};
IoAlias io_alias(const Request& rq, int64_t* shift = nullptr);

// NOTE [direct local reads] in request.cc: whether rank `rank` may read its
// own contributions straight from Input (PlanOptions::direct_local).
bool direct_local_reads(const Request& rq, const snac::CallDescription& call, int rank);

// NOTE [custom call buffers] in request.cc: a custom call's Input and Output
// cut to what `spec` reads and writes on `rank` (run_spec, after its checks).
void cut_to_spec(Request& rq, const snac::Spec& spec, int rank);

// Whether that call runs from a copy of its Input: the two overlap in another
// form than those the call's description admits (NOTE [custom call buffers]).
bool custom_input_copied(const Request& rq, const snac::Spec& spec, int rank);

// "purlin <op> on rank <r>: " — how every engine error message starts.
std::string error_prefix(const char* op, int rank);

}  // namespace purlin::backend
