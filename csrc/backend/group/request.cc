// request.cc — metadata blobs, cross-rank argument checks and Spec building.
#include "backend/group/request.h"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <sstream>

#include "snac/collectives.h"

namespace purlin::backend {

const char* coll_op_name(CollOp op) {
  static const char* names[] = {"all_reduce", "reduce", "broadcast", "all_gather", "reduce_scatter",
                                "all_to_all", "gather", "scatter",   "barrier",    "custom"};
  return op < CollOp::kCount ? names[static_cast<int>(op)] : "?";
}

namespace {
constexpr uint32_t kMagic = 0x50524c4e;  // "PRLN"
constexpr size_t kErrBytes = 200;

// NOTE [metadata blob] One 48-byte line of fixed fields, then the split
// sizes (2W int64) only when the call has them, then the error text only when
// there is one. A call writes and its peers read just those bytes: the
// blob's lines cross cores on every call (arrival), so an all_reduce moves
// one line each way instead of the whole slot (meta_blob_bytes, the most a
// blob can take, sizes the slot).
struct Header {
  uint32_t magic;
  uint8_t op, dtype, redop, has_splits;
  int32_t root;
  int32_t error_len;
  double scale;
  int64_t in_numel, out_numel;
  uint64_t custom_hash;
};
static_assert(sizeof(Header) <= 64, "the fixed fields fit one cache line");

std::string rank_str(int r) { return "rank " + std::to_string(r); }
size_t splits_bytes(int world) { return 2 * sizeof(int64_t) * static_cast<size_t>(world); }
}  // namespace

size_t meta_blob_bytes(int world) { return sizeof(Header) + splits_bytes(world) + kErrBytes; }

std::vector<std::byte> encode_meta(const Request& rq, int world) {
  Header h{};
  h.magic = kMagic;
  h.op = static_cast<uint8_t>(rq.op);
  h.dtype = static_cast<uint8_t>(rq.dtype);
  h.redop = static_cast<uint8_t>(rq.redop);
  h.has_splits = !rq.in_splits.empty();
  h.root = rq.root;
  h.scale = rq.scale;
  h.in_numel = rq.in_numel;
  h.out_numel = rq.out_numel;
  h.custom_hash = rq.custom ? spec_hash(*rq.custom) : 0;
  h.error_len = static_cast<int32_t>(std::min(rq.error.size(), kErrBytes - 1));
  const size_t split_at = sizeof h, error_at = split_at + (h.has_splits ? splits_bytes(world) : 0);
  std::vector<std::byte> blob(error_at + static_cast<size_t>(h.error_len));
  std::memcpy(blob.data(), &h, sizeof h);
  if (h.has_splits) {
    int64_t* splits = reinterpret_cast<int64_t*>(blob.data() + split_at);
    for (int r = 0; r < world; ++r) {
      splits[r] = r < static_cast<int>(rq.in_splits.size()) ? rq.in_splits[r] : 0;
      splits[world + r] = r < static_cast<int>(rq.out_splits.size()) ? rq.out_splits[r] : 0;
    }
  }
  std::memcpy(blob.data() + error_at, rq.error.data(), static_cast<size_t>(h.error_len));
  return blob;
}

PeerMeta decode_meta(const std::byte* blob, int world) {
  Header h;
  std::memcpy(&h, blob, sizeof h);
  PeerMeta m;
  m.op = static_cast<CollOp>(h.op);
  m.dtype = static_cast<DType>(h.dtype);
  m.redop = static_cast<RedOp>(h.redop);
  m.root = h.root;
  m.scale = h.scale;
  m.in_numel = h.in_numel;
  m.out_numel = h.out_numel;
  m.custom_hash = h.custom_hash;
  if (h.magic != kMagic || h.error_len < 0 || h.error_len >= static_cast<int32_t>(kErrBytes)) {
    m.error = "corrupt collective metadata (bad magic or error length)";
    return m;
  }
  const std::byte* at = blob + sizeof h;
  if (h.has_splits) {
    const int64_t* splits = reinterpret_cast<const int64_t*>(at);
    m.in_splits.assign(splits, splits + world);
    m.out_splits.assign(splits + world, splits + 2 * world);
    at += splits_bytes(world);
  }
  m.error.assign(reinterpret_cast<const char*>(at), static_cast<size_t>(h.error_len));
  return m;
}

std::string check_agreement(const std::vector<PeerMeta>& all, int me) {
  const int W = static_cast<int>(all.size());
  if (!all[me].error.empty()) return all[me].error;
  for (int r = 0; r < W; ++r)
    if (!all[r].error.empty()) return rank_str(r) + " reported: " + all[r].error;
  const PeerMeta& a = all[me];  // runs on every call: streams only when something disagrees
  for (int r = 0; r < W; ++r) {
    const PeerMeta& b = all[r];
    if (b.op != a.op)
      return "mismatched collectives: " + rank_str(r) + " called " + coll_op_name(b.op) + " while " +
             rank_str(me) + " called " + coll_op_name(a.op) + " (collectives called in different orders)";
    if (b.op == CollOp::Barrier) continue;
    if (b.dtype != a.dtype)
      return rank_str(r) + " passed dtype " + dtype_name(b.dtype) + ", " + rank_str(me) + " passed " +
             dtype_name(a.dtype);
    if (b.redop != a.redop)
      return rank_str(r) + " passed reduce op " + redop_name(b.redop) + ", " + rank_str(me) + " passed " +
             redop_name(a.redop);
    if (b.root != a.root)
      return rank_str(r) + " passed root " + std::to_string(b.root) + ", " + rank_str(me) + " passed root " +
             std::to_string(a.root);
    if (b.custom_hash != a.custom_hash) return rank_str(r) + " passed a different custom spec";
  }
  auto mismatch = [&](const char* what, int r, int64_t got, int64_t want) {
    std::ostringstream why;
    why << rank_str(r) << " has " << what << " of " << got << " elements, expected " << want << " (from "
        << rank_str(0) << ")";
    return why.str();
  };
  const int root = a.root;
  switch (a.op) {
    case CollOp::AllReduce:
    case CollOp::Reduce:
    case CollOp::Broadcast:
    case CollOp::AllGather:
    case CollOp::Gather:
      for (int r = 1; r < W; ++r)
        if (all[r].in_numel != all[0].in_numel) return mismatch("an input", r, all[r].in_numel, all[0].in_numel);
      break;
    case CollOp::ReduceScatter:
    case CollOp::Scatter:
      for (int r = 1; r < W; ++r)
        if (all[r].out_numel != all[0].out_numel)
          return mismatch("an output", r, all[r].out_numel, all[0].out_numel);
      break;
    case CollOp::AllToAll:
      for (int s = 0; s < W; ++s)
        for (int d = 0; d < W; ++d)
          if (all[s].in_splits[d] != all[d].out_splits[s]) {
            std::ostringstream why;
            why << rank_str(s) << " sends " << all[s].in_splits[d] << " elements to " << rank_str(d) << " but "
                << rank_str(d) << " expects " << all[d].out_splits[s] << " from it (split sizes disagree)";
            return why.str();
          }
      break;
    default: break;
  }
  (void)root;
  return "";
}

snac::Spec build_spec(const Request& rq, const std::vector<PeerMeta>& all) {
  const int W = static_cast<int>(all.size());
  const PeerMeta& r0 = all[0];
  switch (rq.op) {
    case CollOp::AllReduce: return snac::all_reduce(W, r0.in_numel, rq.redop);
    case CollOp::Reduce: return snac::reduce(W, r0.in_numel, rq.redop, rq.root);
    case CollOp::Broadcast: return snac::broadcast(W, r0.in_numel, rq.root);
    case CollOp::AllGather: return snac::all_gather(W, r0.in_numel);
    case CollOp::ReduceScatter: return snac::reduce_scatter(W, r0.out_numel, rq.redop);
    case CollOp::Gather: return snac::gather(W, r0.in_numel, rq.root);
    case CollOp::Scatter: return snac::scatter(W, r0.out_numel, rq.root);
    case CollOp::AllToAll: {
      std::vector<std::vector<int64_t>> splits(W);
      for (int s = 0; s < W; ++s) splits[s] = all[s].in_splits;
      return snac::all_to_all(W, splits);
    }
    case CollOp::Barrier: return snac::barrier(W);
    case CollOp::Custom: return *rq.custom;
    default: break;
  }
  return snac::barrier(W);
}

snac::CallDescription describe_call(const Request& rq, const snac::Spec& spec) {
  return snac::describe(spec, rq.one_buffer);  // NOTE [call shape from the Spec] (snac/spec_traits.cc)
}

// Built on every call (the plan caches' key): appended with to_chars, not a
// stream, whose construction alone cost about a microsecond per call.
std::string plan_key(const Request& rq, const std::vector<PeerMeta>& all) {
  std::string k;
  k.reserve(96);
  auto add = [&k](auto v, char sep) {
    char buf[24];
    const auto end = std::to_chars(buf, buf + sizeof buf, v).ptr;
    k.append(buf, end);
    k.push_back(sep);
  };
  const PeerMeta& r0 = all[0];
  add(static_cast<int>(rq.op), '/');
  add(dtype_size(rq.dtype), '/');
  add(rq.root, '/');
  add(r0.in_numel, '/');
  add(r0.out_numel, '/');
  add(r0.custom_hash, '/');
  if (rq.op == CollOp::AllToAll)
    for (const auto& m : all)
      for (int64_t s : m.in_splits) add(s, ',');
  return k;
}

IoAlias io_alias(const Request& rq, int64_t* shift) {
  const size_t es = dtype_size(rq.dtype);
  const auto a = reinterpret_cast<uintptr_t>(rq.in), b = reinterpret_cast<uintptr_t>(rq.out);
  const uintptr_t an = static_cast<uintptr_t>(rq.in_numel) * es, bn = static_cast<uintptr_t>(rq.out_numel) * es;
  if (shift) *shift = 0;
  if (!an || !bn || a + an <= b || b + bn <= a) return IoAlias::Disjoint;
  if (a == b) return IoAlias::Same;
  const uintptr_t d = a > b ? a - b : b - a;
  if (d % es != 0) return IoAlias::Overlap;
  if (shift) *shift = (a > b ? 1 : -1) * static_cast<int64_t>(d / es);
  return IoAlias::Shifted;
}

// NOTE [direct local reads] A rank may read its own contributions straight
// from Input (instead of staging them) when no op of its plan can overwrite
// them before they are read:
//  - Input and Output are disjoint;
//  - the same buffer, for elementwise-aligned Specs (SpecTraits::
//    elementwise_aligned: all_reduce, reduce, broadcast): each output element
//    is written by the op that reads the same input element, or later
//    (two-shot phase 1), never earlier, and Atom reduce reads every source
//    before storing (dst may alias a source);
//  - the own-block in-place forms (CallDescription::own_block): c10d's
//    in-place all_gather (Input is block `rank` of Output: the copy of the own
//    block is a no-op, every other write misses Input) and in-place
//    reduce_scatter (Output is block `rank` of Input: the reduction of that
//    block reads it before storing over it; other blocks are read only by the
//    staging of this rank's contributions, which no write precedes).
// Any other overlap stages everything.
bool direct_local_reads(const Request& rq, const snac::CallDescription& call, int rank) {
  int64_t shift = 0;
  switch (io_alias(rq, &shift)) {
    case IoAlias::Disjoint: return true;
    case IoAlias::Same: return rq.in_numel == rq.out_numel && call.traits.elementwise_aligned;
    case IoAlias::Shifted:
      if (call.own_block > 0) return shift == static_cast<int64_t>(rank) * rq.in_numel;
      if (call.own_block < 0) return shift == -static_cast<int64_t>(rank) * rq.out_numel;
      return false;
    case IoAlias::Overlap: return false;
  }
  return false;
}

// NOTE [custom call buffers] A custom call (run_spec) passes an input and an
// output tensor on every rank, at least as large as its Spec's there. Its
// Request holds what the Spec reads and writes: both cut to the Spec's sizes
// for the rank, so a rank the Spec reads nothing from passes no Input and one
// it writes nothing to no Output, as c10d's scatter, reduce and gather pass
// none. The call shape the engines judge (snac::describe, NOTE [call shape
// from the Spec]) is then the Spec's, as for a built-in of its shape; only
// one_buffer, a promise of c10d's one-tensor API, is never made (two tensors,
// whatever they alias). A rank's tensors may overlap only in the forms the
// Spec makes safe (Input == Output of a Spec aligned elementwise; Input or
// Output the rank's own chunk of the other, snac::input_is_own_chunk /
// output_is_own_chunk); any other overlap runs from a copy of
// the Input, as in-place all_to_all of uneven splits does, for peers may
// write Outputs (CallDescription::outputs_writable_by_peers) and plans of
// several rounds write Output before later rounds read Input.
void cut_to_spec(Request& rq, const snac::Spec& spec, int rank) {
  rq.in_numel = std::min(rq.in_numel, spec.input_numel[rank]);
  rq.out_numel = std::min(rq.out_numel, spec.output_numel[rank]);
}

bool custom_input_copied(const Request& rq, const snac::Spec& spec, int rank) {
  int64_t shift = 0;
  const IoAlias alias = io_alias(rq, &shift);
  if (alias == IoAlias::Disjoint) return false;
  if (alias == IoAlias::Overlap) return true;
  if (shift >= 0 && snac::input_is_own_chunk(spec, rank, shift)) return false;
  if (shift <= 0 && snac::output_is_own_chunk(spec, rank, -shift)) return false;
  return !(alias == IoAlias::Same && rq.in_numel == rq.out_numel && snac::spec_traits(spec).elementwise_aligned);
}

std::string error_prefix(const char* op, int rank) {
  return std::string("purlin ") + op + " on rank " + std::to_string(rank) + ": ";
}

}  // namespace purlin::backend
