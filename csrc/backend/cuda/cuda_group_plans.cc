// cuda_group_plans.cc — CudaGroup's choice of plan for a call: zero-copy and
// peer outputs, flagged lines, parity and workspace plans, one- or two-shot,
// push or pull, block counts; the plan cache and its memo.
#ifdef PURLIN_WITH_CUDA

#include <algorithm>
#include <cstdio>

#include "backend/cuda/cuda_group.h"

namespace purlin::backend {

// request.h's classification, in the device lowering's terms.
cu::IoAlias CudaGroup::alias_of(const Request& rq, int64_t* shift) {
  static_assert(static_cast<int>(cu::IoAlias::Same) == static_cast<int>(IoAlias::Same) &&
                static_cast<int>(cu::IoAlias::Overlap) == static_cast<int>(IoAlias::Overlap) &&
                static_cast<int>(cu::IoAlias::Shifted) == static_cast<int>(IoAlias::Shifted));
  return static_cast<cu::IoAlias>(io_alias(rq, shift));
}

// NOTE [zero-copy in place] Reading peers' inputs in place is safe when no
// rank overwrites an input a peer may still read: always when Input and
// Output are disjoint; for in-place broadcast (only the root's buffer is
// read, and nobody writes it); and for in-place two-shot all_reduce: rank d
// writes slice o of its output only after owner o's phase-1 Staged, i.e.
// after o finished reading slice o of every input, and o is the only reader
// of that slice. One-shot in place would overwrite an input every peer reads,
// so it stages. (test/cpp/test_cuda_plan_emulation.cc fails if this rule
// admits one-shot in place.) Gather and scatter never read in place: only
// their root may alias Input and Output, so its peers could not judge alike
// and the call tags would refuse a valid call.
bool CudaGroup::zero_copy_allowed(const Request& rq) const {
  if (rq.op == CollOp::Gather || rq.op == CollOp::Scatter) return false;
  const cu::IoAlias alias = alias_of(rq);
  if (alias == cu::IoAlias::Disjoint) return true;
  if (alias != cu::IoAlias::Same) return false;
  if (rq.op == CollOp::Broadcast) return true;
  return two_shot(rq);
}

// NOTE [peer outputs] (snac/plan.h): every rank's output in the symmetric
// pool at the same offset (the call tag checks it) lets copy collectives
// write straight into the peers' outputs. Only ops whose every rank has an
// output of the same size and may alias it any way it likes: all_gather (in
// place, the input is the rank's own slot, which nobody else writes) and
// broadcast (nobody reads a non-root's buffer). all_to_all in place would
// let a peer overwrite a slot this rank has yet to send, and a rank's alias
// is its own choice, so it is left out; gather and scatter have outputs on
// some ranks only.
bool CudaGroup::peer_outputs_allowed(const Request& rq) const {
  return (rq.op == CollOp::AllGather || rq.op == CollOp::Broadcast) && !rq.custom && rq.out_numel > 0;
}

// Whether a collective may run in a region (flagged lines, NOTE [line plans],
// or a parity plan, NOTE [parity plans]): no PREMUL_SUM (peers would read
// the scale word without a barrier). The size, the element size and the
// plan are judged by plan_for() on the Spec (snac::max_rank_elems), never by
// this rank's own tensor sizes, which differ between ranks (a scatter's root
// holds W blocks).
bool CudaGroup::region_wanted(const Request& rq) const {
  return world_ > 1 && (ws_->line_max_bytes() > 0 || ws_->parity_max_bytes() > 0) && rq.redop != RedOp::PremulSum;
}


// Whether an all_reduce runs two-shot (TORCH_PURLIN_CUDA_TWO_SHOT_BYTES). Every
// rank passes the same sizes to an all_reduce (the call tags check it).
bool CudaGroup::two_shot(const Request& rq) const {
  const int64_t bytes = std::max(rq.in_numel, rq.out_numel) * static_cast<int64_t>(dtype_size(rq.dtype));
  return rq.op == CollOp::AllReduce && world_ > 1 && bytes >= two_shot_bytes_;
}

namespace {

// NOTE [wide lines]: whether a line plan of `spec` (`bytes` per rank, dense
// destinations) runs on wide lines. Auto picks them where they measured
// faster on 2x H200: single-chunk specs (all_reduce, broadcast, reduce)
// above 128K per rank (session 11, with NOTE [wide line shape]:
// benchmarks/results/cuda_h200x2_20261130m_probes.md, table C: all_reduce
// 256K 5.20 us wide vs 5.64 narrow; 128K even, 64K narrow ahead);
// reductions of several chunks (reduce_scatter) above 256K and copies of
// several chunks (all_gather, all_to_all) above 512K, as measured before
// (cuda_h200x2_20261130f / g_probes.md; with wide lines from 128K the bench
// `cuda_h200x2_20261130m` had all_gather / reduce_scatter in place 0.2-0.4 us
// slower at 256K). Rank-invariant: the Spec only.
bool wide_line_plan(cu::LineFormat format, const snac::Spec& spec, int64_t bytes) {
  constexpr int64_t kAutoWideOneChunkAbove = 128 << 10;  // all_reduce, broadcast, reduce
  constexpr int64_t kAutoWideReduceAbove = 256 << 10;    // reduce_scatter
  constexpr int64_t kAutoWideCopiesAbove = 512 << 10;    // all_gather, all_to_all
  switch (format) {
    case cu::LineFormat::Narrow: return false;
    case cu::LineFormat::Wide: return true;
    case cu::LineFormat::Auto: break;
  }
  if (spec.chunks.size() == 1) return bytes > kAutoWideOneChunkAbove;
  return bytes > (spec.kind == snac::OpKind::Reduce ? kAutoWideReduceAbove : kAutoWideCopiesAbove);
}

// A region plan (NOTE [line plans], [parity plans]): the one-shot push plan of
// `spec` laid out in `region_elems` elements, if it needs one round only; then
// *opt takes its options. False when it needs more rounds or the region
// cannot hold even one aligned piece (the caller falls back to the workspace).
bool one_round_push_plan(const snac::Spec& spec, int rank, int64_t region_elems, snac::PlanOptions* opt,
                         snac::Plan* plan) {
  snac::PlanOptions o = *opt;
  o.reduce_algo = snac::ReduceAlgo::OneShot;
  o.push = true;
  o.slot_elems = region_elems / o.align_elems * o.align_elems;
  try {
    *plan = snac::make_plan(spec, rank, o);
  } catch (const std::invalid_argument&) {
    return false;
  }
  if (plan->rounds != 1) return false;
  *opt = o;
  return true;
}

}  // namespace

const CudaGroup::CachedPlan& CudaGroup::plan_for(const Request& rq, std::vector<PeerMeta>& all, bool zero_copy,
                                                   bool region, bool peer_outputs) {
  int64_t shift = 0;
  const cu::IoAlias alias = alias_of(rq, &shift);
  // NOTE [eager host path]: the same call as the last one of this kind.
  PlanMemo& memo = memo_[peer_outputs ? 4 : (zero_copy ? 2 : 0) + (region ? 1 : 0)];
  const bool memoizable = rq.op != CollOp::AllToAll && !rq.custom && rq.in_splits.empty() && rq.out_splits.empty();
  if (memoizable && memo.plan && memo.op == rq.op && memo.dtype == rq.dtype && memo.root == rq.root &&
      memo.in_numel == rq.in_numel && memo.out_numel == rq.out_numel && memo.alias == alias && memo.shift == shift)
    return *memo.plan;
  const CachedPlan& c = plan_for_key(rq, all, zero_copy, region, peer_outputs, alias, shift);
  if (memoizable) memo = PlanMemo{&c, rq.op, rq.dtype, rq.root, rq.in_numel, rq.out_numel, shift, alias};
  return c;
}

const CudaGroup::CachedPlan& CudaGroup::plan_for_key(const Request& rq, std::vector<PeerMeta>& all, bool zero_copy,
                                                       bool region, bool peer_outputs, cu::IoAlias alias,
                                                       int64_t shift) {
  if (all.empty()) all = peer_meta(rq);
  const int64_t esize = static_cast<int64_t>(dtype_size(rq.dtype));
  snac::PlanOptions opt;
  opt.align_elems = cu::kPartBytes / esize;
  opt.slot_elems = ws_->workspace_bytes() / 2 / esize / opt.align_elems * opt.align_elems;
  opt.direct_local = direct_local_reads(rq, rank_);  // NOTE [direct local reads]
  opt.read_peer_inputs = zero_copy;
  opt.write_peer_outputs = peer_outputs;  // NOTE [peer outputs]
  const bool two_wanted = two_shot(rq);
  std::string key = plan_key(rq, all);  // built on a memo miss: appended in place
  key += 'a';
  key += static_cast<char>('0' + static_cast<int>(alias));
  key += two_wanted ? "/2" : "/1";
  if (zero_copy) key += "/z";
  if (peer_outputs) key += "/o";
  if (region) key += "/R";
  key += "/s";
  key += std::to_string(shift);
  if (const CachedPlan* cached = plans_.find(key)) return *cached;  // NOTE [plan caches] (plan_cache.h)
  const snac::Spec spec = build_spec(rq, all);
  int64_t spec_bytes = 0;  // rank-invariant: every rank picks the same blocks and staging
  for (const auto& ch : spec.chunks) spec_bytes += ch.numel() * esize;
  // NOTE [push]: measured on 2x H200, pushing is 3-9% faster for copies at
  // every size (cuda_h200x2_20261130b_push.md); for reductions it was mixed
  // before matched waits, and with them 1.14-1.34x faster at 1G
  // (cuda_h200x2_20261201q_large.md; small reductions run on lines and
  // parity plans, which push anyway). TORCH_PURLIN_CUDA_PUSH=all by default.
  opt.push = !zero_copy && !peer_outputs && (spec.kind == snac::OpKind::Copy ? push_copies_ : push_reductions_);
  auto c = std::make_unique<CachedPlan>();
  // NOTE [line plans]: a one-round push plan of a spec with contiguous
  // sources, laid out in one parity of the line region. Every condition is
  // rank-invariant (the Spec, the agreed region), so all ranks choose alike.
  // NOTE [wide lines]: the group's wide format also needs contiguous
  // destinations (every op then covers whole pieces, so whole lines).
  auto dense = [](const snac::Region& r) { return r.rows <= 1 || r.stride == r.row_len; };
  bool contiguous = true, dense_dests = true;
  for (const auto& ch : spec.chunks) {
    for (const auto& src : ch.sources) contiguous &= dense(src.region);
    for (const auto& d : ch.dests) dense_dests &= dense(d.region);
  }
  snac::Plan plan;
  const int64_t lbytes = snac::max_rank_elems(spec) * esize;  // rank-invariant
  if (region && contiguous && esize <= 8 && lbytes <= ws_->line_max_bytes()) {
    // Wide lines where wanted and the plan fits their region, else narrow
    // lines: both steps depend on the Spec and the agreed regions only.
    if (dense_dests && wide_line_plan(ws_->line_format(), spec, lbytes)) {
      snac::PlanOptions wide_opt = opt;
      wide_opt.align_elems = cu::kWideAlignBytes / esize;
      c->wide = one_round_push_plan(spec, rank_, ws_->line_slot_elems(esize, true), &wide_opt, &plan);
      if (c->wide) opt = wide_opt;
    }
    c->lines = c->wide || one_round_push_plan(spec, rank_, ws_->line_slot_elems(esize, false), &opt, &plan);
  }
  // NOTE [parity plans]: else a one-round push plan in one half of the parity
  // region, also rank-invariant (the Spec, the agreed region).
  // NOTE [matched waits] (snac/plan.h): plan-kernel plans (parity and
  // workspace plans) let a block wait for its own slot where SNAC shows that
  // suffices; line plans have no waits, the copy-engine plan no blocks.
  opt.match_waits = match_waits_ && !c->lines;
  if (region && !c->lines && lbytes <= ws_->parity_max_bytes())
    c->parity = one_round_push_plan(spec, rank_, ws_->parity_slot_elems(esize), &opt, &plan);
  // Otherwise (also when a region was asked for but the plan does not
  // qualify) the workspace plan: a region request's cache entry serves the
  // call as it is.
  const bool two = !c->lines && !c->parity && two_wanted;
  if (!c->lines && !c->parity) {
    opt.reduce_algo = two ? snac::ReduceAlgo::TwoShot : snac::ReduceAlgo::OneShot;
    opt.push_reduced = two && push_reduced_;  // zero-copy plans too: the scratch is workspace either way
    plan = snac::make_plan(spec, rank_, opt);
  }
  c->spec_bytes = spec_bytes;
  const cu::LaunchConfig& config = ws_->launch_config();
  c->threads = ws_->threads();
  if (c->lines) {  // NOTE [narrow line shape], [wide line shape]
    // Wide lines by the largest op (one chunk): with the rank's total, the
    // ops of several-chunk specs got 1 line a warp (all_gather / all_to_all /
    // reduce_scatter 1M 0.3-0.6 us slower in cuda_h200x2_20261130m).
    const cu::LaunchShape shape = c->wide ? config.wide_line_shape(snac::max_chunk_elems(spec) * esize)
                                          : config.narrow_line_shape(lbytes);
    c->blocks = shape.blocks;
    c->threads = shape.threads;
  } else {
    c->blocks = config.blocks_for(spec_bytes);
  }
  if (spec.kind == snac::OpKind::Copy && !peer_outputs && !c->lines && !c->parity) {
    // The copy-engine Atom runs pull plans only (NOTE [stream memop ordering]:
    // its waits do not flush remote data writes, and pull plans make none);
    // zero-copy plans pull from the peers' inputs (NOTE [copy-engine zero-copy]).
    snac::PlanOptions pull = opt;
    pull.push = false;
    pull.match_waits = false;
    c->snac_plan = opt.push ? snac::make_plan(spec, rank_, pull) : plan;
  }
  c->plan = cu::lower_plan(plan, c->blocks, esize, alias, shift,
                           c->wide ? cu::Partition::WideLines : cu::Partition::Parts);
  if (c->lines) cu::drop_line_carried_ops(&c->plan);  // NOTE [line-carried ops]
  c->reduces = spec.kind == snac::OpKind::Reduce;
  // The options every rank must share are part of the signature (NOTE [call tags]).
  c->sig = spec_hash(spec) ^ (static_cast<uint64_t>(rq.dtype) << 56) ^ (zero_copy ? 0x5a5a5a5a00000000ull : 0) ^
           (two ? 0x2000000000ull : 0) ^ (opt.push ? 0x4000000000ull : 0) ^ (c->lines ? 0x8000000000ull : 0) ^
           (c->parity ? 0x10000000000ull : 0) ^ (c->wide ? 0x20000000000ull : 0) ^
           (opt.match_waits ? 0x40000000000ull : 0) ^  // matched plans may cut other rounds
           (opt.push_reduced ? 0x80000000000ull : 0) ^ (peer_outputs ? 0x100000000000ull : 0);
  c->protocol = std::string(c->reduces ? (two ? "two-shot" : "one-shot") : "copy") + (zero_copy ? "+zero-copy" : "") +
                (peer_outputs ? "+peer-outputs" : "") +
                (c->wide ? "+wide-lines" : c->lines ? "+lines" : c->parity ? "+parity" : opt.push ? "+push" : "") +
                (opt.push_reduced ? "+push-reduced" : "");
  c->protocol_name = &*protocol_names_.insert(c->protocol).first;
  if (cu::fits_inline(c->plan)) {
    c->inl = std::make_unique<cu::InlinePlan>();
    cu::to_inline(c->plan, c->inl.get());
  } else {
    c->dev = store_plans_->upload(c->plan);
  }
  if (debug_)
    std::fprintf(stderr,
                 "[purlin] rank %d: new CUDA plan for %s (%s, %d blocks, %zu device ops, %u local barriers, %d own-slot "
                 "waits, %s): %s",
                 rank_, spec.name.c_str(), c->protocol.c_str(), c->blocks, c->plan.ops.size(), c->plan.local_syncs,
                 static_cast<int>(std::count_if(c->plan.ops.begin(), c->plan.ops.end(),
                                                [](const cu::DevOp& o) { return o.code == cu::kWait && o.own_slot; })),
                 c->inl ? "inline" : "device", plan.describe().c_str());
  bool dropped = false;
  const CachedPlan& kept = plans_.insert(std::move(key), std::move(c), &dropped);
  if (dropped)
    for (PlanMemo& m : memo_) m = PlanMemo{};  // they may point at a dropped plan
  return kept;
}

}  // namespace purlin::backend

#endif  // PURLIN_WITH_CUDA
