// protocol_choice.cc — see protocol_choice.h.
#include "lowering/protocol_choice.h"

#include <stdexcept>

#include "lowering/device_plan.h"
#include "snac/spec_traits.h"

namespace purlin::lowering {

using namespace purlin::atom::cuda;  // the settings, the plan format and the launch table

namespace {

// NOTE [wide lines]: whether a line plan of `spec` (`bytes` per rank, dense
// destinations) runs on wide lines: by the format, and for auto by the
// architecture's table (LaunchConfig::wide_*_above). Rank-invariant: the Spec only.
bool wide_line_plan(const ProtocolSettings& s, const snac::Spec& spec, int64_t bytes) {
  switch (s.line_format) {
    case LineFormat::Narrow: return false;
    case LineFormat::Wide: return true;
    case LineFormat::Auto: break;
  }
  if (spec.chunks.size() == 1) return bytes > s.config.wide_one_chunk_above;
  return bytes > (spec.kind == snac::OpKind::Reduce ? s.config.wide_reductions_above : s.config.wide_copies_above);
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
  if (o.slot_elems <= 0) return false;
  try {
    *plan = snac::make_plan(spec, rank, o);
  } catch (const std::invalid_argument&) {
    return false;
  }
  if (plan->rounds != 1) return false;
  *opt = o;
  return true;
}

bool dense(const snac::Region& r) { return r.rows <= 1 || r.stride == r.row_len; }

}  // namespace

ProtocolChoice choose_protocol(const snac::Spec& spec, const CallFacts& call, const ProtocolSettings& s, int rank,
                               uint64_t dtype_code) {
  const int64_t esize = call.esize;
  const bool zero_copy = call.read_peer_inputs, peer_outputs = call.write_peer_outputs;
  snac::PlanOptions opt;
  opt.align_elems = kPartBytes / esize;
  opt.slot_elems = s.workspace_bytes / 2 / esize / opt.align_elems * opt.align_elems;
  opt.direct_local = call.direct_local;  // NOTE [direct local reads]
  opt.read_peer_inputs = zero_copy;
  opt.write_peer_outputs = peer_outputs;  // NOTE [peer outputs]
  ProtocolChoice c;
  for (const auto& ch : spec.chunks) c.spec_bytes += ch.numel() * esize;
  c.reduces = spec.kind == snac::OpKind::Reduce;
  // NOTE [push]: measured on 2x H200, pushing is 3-9% faster for copies at
  // every size (cuda_h200x2_20261130b_push.md); for reductions it was mixed
  // before matched waits, and with them 1.14-1.34x faster at 1G
  // (cuda_h200x2_20261201q_large.md; small reductions run on lines and
  // parity plans, which push anyway).
  opt.push = !zero_copy && !peer_outputs && (c.reduces ? s.push_reductions : s.push_copies);
  // Regions (NOTE [line plans], [parity plans]): not for PREMUL_SUM (peers
  // would read the scale word without a barrier), not for calls that use the pool.
  const bool region = call.region && !zero_copy && !peer_outputs && !call.scale_per_rank && s.world > 1 &&
                      (s.line_max_bytes > 0 || s.parity_max_bytes > 0);
  // NOTE [line plans]: a one-round push plan of a spec with contiguous
  // sources, laid out in one parity of the line region. Every condition is
  // rank-invariant (the Spec, the agreed region), so all ranks choose alike.
  // NOTE [wide lines]: the group's wide format also needs contiguous
  // destinations (every op then covers whole pieces, so whole lines).
  bool contiguous = true, dense_dests = true;
  for (const auto& ch : spec.chunks) {
    for (const auto& src : ch.sources) contiguous &= dense(src.region);
    for (const auto& d : ch.dests) dense_dests &= dense(d.region);
  }
  const int64_t lbytes = snac::max_rank_elems(spec) * esize;  // rank-invariant
  if (region && contiguous && esize <= 8 && lbytes <= s.line_max_bytes) {
    if (dense_dests && wide_line_plan(s, spec, lbytes)) {
      snac::PlanOptions wide_opt = opt;
      wide_opt.align_elems = kWideAlignBytes / esize;
      c.wide = one_round_push_plan(spec, rank, s.line_slot_elems(esize, true), &wide_opt, &c.plan);
      if (c.wide) opt = wide_opt;
    }
    c.lines = c.wide || one_round_push_plan(spec, rank, s.line_slot_elems(esize, false), &opt, &c.plan);
  }
  // NOTE [parity plans]: else a one-round push plan in one half of the parity
  // region, also rank-invariant (the Spec, the agreed region).
  // NOTE [matched waits] (snac/plan.h): plan-kernel plans (parity and
  // workspace plans) let a block wait for its own slot where SNAC shows that
  // suffices; line plans have no waits, the copy-engine plan no blocks.
  opt.match_waits = s.match_waits && !c.lines;
  if (region && !c.lines && lbytes <= s.parity_max_bytes)
    c.parity = one_round_push_plan(spec, rank, s.parity_slot_elems(esize), &opt, &c.plan);
  // Otherwise the workspace plan.
  c.two_shot = !c.lines && !c.parity && call.two_shot && c.reduces;
  if (!c.lines && !c.parity) {
    opt.reduce_algo = c.two_shot ? snac::ReduceAlgo::TwoShot : snac::ReduceAlgo::OneShot;
    opt.push_reduced = c.two_shot && s.push_reduced;  // zero-copy plans too: the scratch is workspace either way
    c.plan = snac::make_plan(spec, rank, opt);
  }
  c.push = opt.push;
  c.push_reduced = opt.push_reduced;
  c.match_waits = opt.match_waits;
  c.threads = s.config.threads;
  if (c.lines) {  // NOTE [narrow line shape], [wide line shape]
    // Wide lines by the largest op (one chunk): with the rank's total, the
    // ops of several-chunk specs got 1 line a warp (all_gather / all_to_all /
    // reduce_scatter 1M 0.3-0.6 us slower in cuda_h200x2_20261130m).
    const LaunchShape shape =
        c.wide ? s.config.wide_line_shape(snac::max_chunk_elems(spec) * esize) : s.config.narrow_line_shape(lbytes);
    c.blocks = shape.blocks;
    c.threads = shape.threads;
  } else {
    c.blocks = s.config.blocks_for(c.spec_bytes);
  }
  if (!c.reduces && !peer_outputs && !c.lines && !c.parity) {
    // The copy-engine Atom runs pull plans only (NOTE [stream memop ordering]:
    // its waits do not flush remote data writes, and pull plans make none);
    // zero-copy plans pull from the peers' inputs (NOTE [copy-engine zero-copy]).
    c.has_pull_plan = true;
    if (opt.push) {
      snac::PlanOptions pull = opt;
      pull.push = false;
      pull.match_waits = false;
      c.pull_plan = snac::make_plan(spec, rank, pull);
    } else {
      c.pull_plan = c.plan;
    }
  }
  c.lowered = lower_plan(c.plan, c.blocks, esize, call.alias, call.shift,
                         c.wide ? Partition::WideLines : Partition::Parts);
  if (c.lines) drop_line_carried_ops(&c.lowered);  // NOTE [line-carried ops]
  // The options every rank must share are part of the signature (NOTE [call tags]).
  c.sig = snac::spec_hash(spec) ^ (dtype_code << 56) ^ (zero_copy ? 0x5a5a5a5a00000000ull : 0) ^
          (c.two_shot ? 0x2000000000ull : 0) ^ (c.push ? 0x4000000000ull : 0) ^ (c.lines ? 0x8000000000ull : 0) ^
          (c.parity ? 0x10000000000ull : 0) ^ (c.wide ? 0x20000000000ull : 0) ^
          (c.match_waits ? 0x40000000000ull : 0) ^  // matched plans may cut other rounds
          (c.push_reduced ? 0x80000000000ull : 0) ^ (peer_outputs ? 0x100000000000ull : 0) ^
          (static_cast<uint64_t>(c.blocks) << 20);
  c.protocol = std::string(c.reduces ? (c.two_shot ? "two-shot" : "one-shot") : "copy") +
               (zero_copy ? "+zero-copy" : "") + (peer_outputs ? "+peer-outputs" : "") +
               (c.wide ? "+wide-lines" : c.lines ? "+lines" : c.parity ? "+parity" : c.push ? "+push" : "") +
               (c.push_reduced ? "+push-reduced" : "");
  return c;
}

}  // namespace purlin::lowering
