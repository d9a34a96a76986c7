// builtin_calls.h — every rank's Request of a built-in collective as the c10d
// layer builds it (backend/c10d/backend_ops.cc: a reduce's peers pass no
// output, a scatter's no input, in-place forms per op), with its tensors in a
// fake symmetric pool or in plain memory, and the CUDA protocol choice each
// rank makes for it by CudaGroup::launch's steps (the region plan first, then
// the pool's use, then the Atom's choice and the call tag). Shared by
// test_plan_symmetry.cc and protocol_choice_table.cc. Torch-free.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "backend/group/protocol_table.h"
#include "backend/group/request.h"
#include "backend/group/symmetric_use.h"
#include "lowering/protocol_choice.h"

namespace purlin::test {

using namespace purlin::backend;
namespace cu = purlin::atom::cuda;

inline const char* op_name(CollOp op) { return coll_op_name(op); }

// Fake addresses: each rank's pool and plain memory (never dereferenced).
inline uintptr_t pool_base(int r) { return (uintptr_t{1} << 40) * (r + 1); }
inline uintptr_t plain_base(int r) { return (uintptr_t{1} << 44) * (r + 1); }
constexpr int64_t kPoolBytes = int64_t{1} << 36;

enum class Form { OutOfPlace, InPlace };

struct Case {
  CollOp op;
  int root = 0;
  int64_t n = 0;       // elements per rank (c10d's count)
  bool uneven = false;  // all_to_all with uneven splits
  Form form = Form::OutOfPlace;
  bool pool = false;
  DType dtype = DType::Float32;
};

inline bool rooted(CollOp op) {
  return op == CollOp::Reduce || op == CollOp::Broadcast || op == CollOp::Gather || op == CollOp::Scatter;
}

// The built-in calls the sweeps cover at world W, in one order: op, root (0 and W - 1 for rooted
// ops), even and (all_to_all) uneven splits, bytes per rank (float32), plain and pool, out of
// place and in place.
template <class F>
void for_each_case(int W, const std::vector<CollOp>& ops, const std::vector<int64_t>& sizes, F&& fn) {
  for (CollOp op : ops)
    for (int root : {0, W - 1}) {
      if (root != 0 && !rooted(op)) continue;
      for (bool uneven : {false, true}) {
        if (uneven && op != CollOp::AllToAll) continue;
        for (int64_t bytes : sizes)
          for (bool pool : {false, true})
            for (Form form : {Form::OutOfPlace, Form::InPlace}) {
              Case c;
              c.op = op;
              c.root = root;
              c.n = bytes / 4;
              c.uneven = uneven;
              c.pool = pool;
              c.form = form;
              fn(c);
            }
      }
    }
}

inline std::string describe(const Case& c, int W) {
  return std::string(op_name(c.op)) + (c.uneven ? " uneven" : "") + " W=" + std::to_string(W) + " n=" +
         std::to_string(c.n) + " root=" + std::to_string(c.root) + (c.form == Form::InPlace ? " in-place" : "") +
         (c.pool ? " pool" : " plain") + " " + dtype_name(c.dtype);
}

inline std::vector<std::vector<int64_t>> splits_of(const Case& c, int W) {
  std::vector<std::vector<int64_t>> s(W, std::vector<int64_t>(W, c.n));
  // Uneven: a circulant (each rank sends and receives as many elements in all, as an in-place call
  // needs, but in other slot sizes, so its input and output slots start at other offsets).
  if (c.uneven)
    for (int a = 0; a < W; ++a)
      for (int b = 0; b < W; ++b) s[a][b] = c.n == 0 ? 0 : (c.n * (1 + ((b - a + W) % W) % 3)) / 2 + ((b - a + W) % W == 1);
  return s;
}

// Rank r's Request as backend_ops.cc builds it, and where its Input and Output
// lie in the rank's memory (element offsets from the memory's start; -1: none).
struct RankCall {
  Request rq;
  int64_t in_at = -1, out_at = -1;
};

inline RankCall make_call(const Case& c, int W, int r) {
  const int64_t es = static_cast<int64_t>(dtype_size(c.dtype));
  RankCall k;
  Request& rq = k.rq;
  rq.op = c.op;
  rq.name = op_name(c.op);
  rq.dtype = c.dtype;
  rq.root = c.root;
  int64_t in_n = 0, out_n = 0;
  bool has_in = true, has_out = true;
  const auto sp = splits_of(c, W);
  switch (c.op) {
    case CollOp::AllReduce: case CollOp::Broadcast: in_n = out_n = c.n; rq.one_buffer = true; break;
    case CollOp::Reduce: in_n = out_n = c.n; has_out = r == c.root; break;
    case CollOp::AllGather: in_n = c.n; out_n = W * c.n; break;
    case CollOp::ReduceScatter: in_n = W * c.n; out_n = c.n; break;
    case CollOp::Gather: in_n = c.n; out_n = W * c.n; has_out = r == c.root; break;
    case CollOp::Scatter: in_n = W * c.n; out_n = c.n; has_in = r == c.root; break;
    case CollOp::AllToAll:
      for (int q = 0; q < W; ++q) {
        rq.in_splits.push_back(sp[r][q]);
        rq.out_splits.push_back(sp[q][r]);
        in_n += sp[r][q];
        out_n += sp[q][r];
      }
      break;
    default: break;
  }
  // Element offsets of Input and Output in the rank's memory, alike on every
  // rank (pool tensors of one role share their offset): the c10d in-place forms.
  int64_t in_at = has_in ? 64 : -1;
  int64_t out_at = has_out ? 64 + 4 * W * c.n + 64 : -1;
  const bool in_place = c.form == Form::InPlace;
  bool copied_input = false;
  switch (c.op) {
    case CollOp::AllReduce: case CollOp::Broadcast: out_at = in_at; break;  // always one buffer
    case CollOp::Reduce: if (has_out) out_at = in_at; break;                // the root's buffer
    case CollOp::AllGather: if (in_place) in_at = out_at + r * c.n; break;  // input: the output's block r
    case CollOp::ReduceScatter: if (in_place) out_at = in_at + r * c.n; break;
    case CollOp::Gather: if (in_place && has_out) in_at = out_at + r * c.n; break;
    case CollOp::Scatter: if (in_place && has_in) out_at = in_at + r * c.n; break;
    case CollOp::AllToAll:
      // NOTE [in-place all_to_all] (backend_ops.cc): in place when the slots agree, else from a copy
      // of the input (plain memory, at another place than the output).
      if (in_place && rq.in_splits == rq.out_splits) out_at = in_at;
      if (in_place && rq.in_splits != rq.out_splits) copied_input = true;
      break;
    default: break;
  }
  const uintptr_t base = c.pool ? pool_base(r) : plain_base(r);
  if (has_in) {
    rq.in = reinterpret_cast<void*>((copied_input ? plain_base(r) : base) + static_cast<uintptr_t>(in_at * es));
    rq.in_numel = in_n;
  }
  if (has_out) {
    rq.out = reinterpret_cast<void*>(base + static_cast<uintptr_t>(out_at * es));
    rq.out_numel = out_n;
  }
  k.in_at = has_in ? in_at : -1;
  k.out_at = has_out ? out_at : -1;
  return k;
}

// Every rank's metadata as its peers read it.
inline std::vector<PeerMeta> metas(const std::vector<Request>& rqs) {
  const int W = static_cast<int>(rqs.size());
  std::vector<PeerMeta> all;
  for (const Request& rq : rqs) {
    const auto blob = encode_meta(rq, W);
    all.push_back(decode_meta(blob.data(), W));
  }
  return all;
}

// Every rank's call of `c` at world W, and (into *all) every rank's metadata as its peers read it.
inline std::vector<RankCall> calls_of(const Case& c, int W, std::vector<PeerMeta>* all) {
  std::vector<RankCall> calls;
  std::vector<Request> rqs;
  for (int r = 0; r < W; ++r) {
    calls.push_back(make_call(c, W, r));
    rqs.push_back(calls.back().rq);
  }
  *all = metas(rqs);
  return calls;
}

// SymmetricPool::offset_of for the fake pool of rank r.
inline int64_t pool_offset(int r, const void* p, int64_t n_bytes) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  if (n_bytes <= 0 || a < pool_base(r) || a + n_bytes > pool_base(r) + kPoolBytes) return -1;
  return static_cast<int64_t>(a - pool_base(r));
}

// What one rank chose, by CudaGroup::launch's steps.
struct Chosen {
  lowering::ProtocolChoice choice;
  uint64_t tag = 0;
};

inline Chosen choose(const cu::ProtocolSettings& s, const Request& rq, const std::vector<PeerMeta>& all, int r,
              int64_t two_shot_bytes) {
  const snac::Spec spec = build_spec(rq, all);
  const int64_t es = static_cast<int64_t>(dtype_size(rq.dtype));
  const snac::CallDescription call = describe_call(rq, spec);
  const bool two = runs_two_shot(call, es, static_cast<int>(all.size()), two_shot_bytes);
  int64_t shift = 0;
  lowering::CallFacts f;
  f.esize = es;
  f.two_shot = two;
  f.direct_local = direct_local_reads(rq, call, r);
  f.alias = static_cast<cu::IoAlias>(io_alias(rq, &shift));
  f.shift = shift;
  f.region = true;  // the region plan first
  Chosen c;
  c.choice = lowering::choose_protocol(spec, f, s, r, static_cast<uint64_t>(rq.dtype));
  int64_t in_off = -1, out_off = -1;
  if (!c.choice.lines && !c.choice.parity) {  // then the pool
    const int64_t in = rq.in_numel > 0 ? pool_offset(r, rq.in, rq.in_numel * es) : -1;
    const int64_t out = rq.out_numel > 0 ? pool_offset(r, rq.out, rq.out_numel * es) : -1;
    const SymmetricUse use = symmetric_use(rq, call, two, in >= 0, out >= 0);
    if (use.read_peer_inputs || use.write_peer_outputs) {
      f.region = false;
      f.read_peer_inputs = use.read_peer_inputs;
      f.write_peer_outputs = use.write_peer_outputs;
      c.choice = lowering::choose_protocol(spec, f, s, r, static_cast<uint64_t>(rq.dtype));
      in_off = use.read_peer_inputs ? in : -1;
      out_off = use.write_peer_outputs ? out : -1;
    }
  }
  c.tag = lowering::call_signature(c.choice.sig, in_off, out_off);
  return c;
}

}  // namespace purlin::test
