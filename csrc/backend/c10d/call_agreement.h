// call_agreement.h — a collective's arguments, agreed by every rank of a group
// that spans hosts before any of its data moves.
//
// NOTE [call agreement]
// On one host a rank's bad argument is known to every rank within one
// exchange of the group channel; across hosts nothing is shared but the engine
// (gloo), which has no such exchange: a rank that passes a different size
// leaves its peers waiting out the timeout inside a transfer, and the group is
// out of step afterwards. So every collective of a group that spans hosts
// starts with one all_gather, on the engine, of a CallDescriptor per rank: a
// fixed number of bytes for the group (its size depends only on the world
// size), so the exchange itself can never mismatch. It holds the op, dtype,
// reduce op, root, the element counts that must be equal on every rank, the
// elements the rank sends to and expects from each peer (copies among ranks:
// all_to_all, gather, scatter, all_gather lists), the PREMUL_SUM factor (each
// rank's own: the reduction applies every rank's), and the rank's own
// argument error, if any. Every rank compares all of them alike and raises
// the same error, naming the ranks and their values, before any data moves:
// the group is still in step and stays usable. A barrier is this exchange
// alone. A rank that never calls leaves the others waiting here, the one wait
// that torch's abort of the group ends (the engine's later waits, once every
// rank is known to have called with the same arguments, end at its timeout).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/Backend.hpp>

namespace purlin::backend {

struct CallDescriptor {
  explicit CallDescriptor(int world) : sends(world, 0), expects(world, 0) {}

  int64_t op = -1;         // index in Fallback::op_names()
  int64_t dtype = -1;      // at::ScalarType, -1: no tensor
  int64_t redop = -1;      // c10d::ReduceOp::RedOpType, -1: not a reduction
  int64_t root = -1;       // -1: no root
  int64_t elements = -1;   // the count every rank must pass alike (-1: none)
  int64_t tensors = -1;    // tensors per rank that must match (coalesced lists), -1: none
  int64_t layout = 0;      // a digest of the coalesced tensors' element counts, alike on every rank
  bool pairs = false;      // sends / expects are compared pairwise
  double factor = 1.0;     // PREMUL_SUM
  std::vector<int64_t> sends, expects;  // elements to / from each rank (when pairs)
  std::string error;       // this rank's own argument error ("" if none)
};

// Every rank's descriptor, in rank order.
struct AgreedCall {
  std::vector<CallDescriptor> ranks;
  double factor(int r) const { return ranks[static_cast<size_t>(r)].factor; }
};

// The all_gather of `mine` on `engine` (a group of the same ranks); throws, on every rank alike,
// when the descriptors disagree or a rank reported an error. `who`: "purlin <op> on rank r: ".
// `legend`: appended to errors (global ranks of a renumbered group). The wait ends at the engine's
// timeout, or within about a millisecond once `aborted` is set (NOTE [shutdown and abort]: gloo's
// own waits cannot be aborted).
AgreedCall agree_on_call(c10d::Backend& engine, const CallDescriptor& mine, const std::string& who,
                         const std::string& legend, const std::atomic<bool>& aborted);

// A digest of element counts, for CallDescriptor::layout.
int64_t layout_digest(const std::vector<int64_t>& counts);

}  // namespace purlin::backend
