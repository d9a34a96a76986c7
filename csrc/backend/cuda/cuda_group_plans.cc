// cuda_group_plans.cc — CudaGroup's plans: the symmetric-memory use of a call
// (backend/group/symmetric_use.h), the Atom's protocol choice for it
// (lowering/protocol_choice.h), kept in the plan cache and its memo
// (cuda_plan_cache.h).
#ifdef PURLIN_WITH_CUDA

#include <algorithm>
#include <cstdio>
#include <memory>

#include "backend/cuda/cuda_group.h"
#include "backend/group/symmetric_use.h"

namespace purlin::backend {

// request.h's classification, in the device lowering's terms.
cu::IoAlias CudaGroup::alias_of(const Request& rq, int64_t* shift) {
  static_assert(static_cast<int>(cu::IoAlias::Same) == static_cast<int>(IoAlias::Same) &&
                static_cast<int>(cu::IoAlias::Overlap) == static_cast<int>(IoAlias::Overlap) &&
                static_cast<int>(cu::IoAlias::Shifted) == static_cast<int>(IoAlias::Shifted));
  return static_cast<cu::IoAlias>(io_alias(rq, shift));
}

// NOTE [symmetric use is rank-invariant] (backend/group/symmetric_use.h).
// The Spec-dependent half of the rule is memoized like the plans (NOTE
// [eager host path]): an FSDP2 step's pool all-gathers build no Spec.
CudaGroup::PoolUse CudaGroup::pool_use(const Request& rq, std::vector<PeerMeta>& all) {
  PoolUse u;
  if (!pool_) return u;
  const int64_t esize = static_cast<int64_t>(dtype_size(rq.dtype));
  const int64_t in = rq.in_numel > 0 ? pool_->offset_of(rq.in, rq.in_numel * esize) : -1;
  const int64_t out = rq.out_numel > 0 ? pool_->offset_of(rq.out, rq.out_numel * esize) : -1;
  if (in < 0 && out < 0) return u;
  const cu::IoAlias alias = alias_of(rq);
  const bool memoizable = !sizes_per_rank(rq) && !rq.custom;
  UseMemo& m = use_memo_;
  if (!(memoizable && m.valid && m.name == rq.name && m.dtype == rq.dtype && m.root == rq.root &&
        m.in_numel == rq.in_numel && m.out_numel == rq.out_numel && m.alias == alias)) {
    if (all.empty()) all = peer_meta(rq);
    const snac::CallDescription call = describe_call(rq, build_spec(rq, all));
    const bool two = runs_two_shot(call, esize, world_, two_shot_bytes_);  // NOTE [protocol table]
    m = UseMemo{true, rq.name, rq.dtype, rq.root, rq.in_numel, rq.out_numel, alias, two,
                symmetric_use(rq, call, two, true, false).read_peer_inputs,
                symmetric_use(rq, call, two, false, true).write_peer_outputs};
  }
  u.reads_allowed = m.zero_copy;
  u.use.write_peer_outputs = out >= 0 && m.peer_outputs;
  u.use.read_peer_inputs = !u.use.write_peer_outputs && in >= 0 && m.zero_copy;
  if (u.use.write_peer_outputs) u.out_offset = out;
  else if (u.use.read_peer_inputs) u.in_offset = in;
  return u;
}

const CachedPlan& CudaGroup::plan_for(const Request& rq, std::vector<PeerMeta>& all, SymmetricUse use, bool region) {
  int64_t shift = 0;
  const cu::IoAlias alias = alias_of(rq, &shift);
  // NOTE [eager host path]: the same call as the last one of this kind.
  if (const CachedPlan* memo = plans_.memoized(rq, use, region, alias, shift)) return *memo;
  const CachedPlan& c = plan_for_key(rq, all, use, region, alias, shift);
  plans_.memoize(rq, use, region, alias, shift, c);
  return c;
}

// The cache key holds every fact choose_protocol reads (NOTE [protocol choice]): the Spec's inputs
// (plan_key: op, element size, root, sizes, splits, custom hash), the aliasing, the pool's use and
// the region request (PREMUL_SUM asks for none); two-shot and direct local reads follow from them and
// the call's description.
const CachedPlan& CudaGroup::plan_for_key(const Request& rq, std::vector<PeerMeta>& all, SymmetricUse use,
                                          bool region, cu::IoAlias alias, int64_t shift) {
  if (all.empty()) all = peer_meta(rq);
  std::string key = plan_key(rq, all);  // built on a memo miss: appended in place
  key += 'a';
  key += static_cast<char>('0' + static_cast<int>(alias));
  if (use.read_peer_inputs) key += "/z";
  if (use.write_peer_outputs) key += "/o";
  if (region) key += "/R";
  key += "/s";
  key += std::to_string(shift);
  if (const CachedPlan* cached = plans_.find(key)) return *cached;  // NOTE [plan caches] (plan_cache.h)
  const snac::Spec spec = build_spec(rq, all);
  const snac::CallDescription call = describe_call(rq, spec);
  lowering::CallFacts facts;
  facts.esize = static_cast<int64_t>(dtype_size(rq.dtype));
  facts.scale_per_rank = rq.redop == RedOp::PremulSum;
  facts.region = region;
  facts.two_shot = runs_two_shot(call, facts.esize, world_, two_shot_bytes_);  // NOTE [protocol table]
  facts.read_peer_inputs = use.read_peer_inputs;
  facts.write_peer_outputs = use.write_peer_outputs;
  facts.direct_local = direct_local_reads(rq, call, rank_);  // NOTE [direct local reads]
  facts.alias = alias;
  facts.shift = shift;
  auto c = std::make_unique<CachedPlan>();
  c->call = call;
  c->choice = lowering::choose_protocol(spec, facts, settings_, rank_, static_cast<uint64_t>(rq.dtype));
  c->protocol_name = &*protocol_names_.insert(c->choice.protocol).first;
  c->inline_plan = cu::fits_inline(c->choice.lowered);
  if (c->inline_plan) {
    const auto inl = std::make_unique<cu::InlinePlan>();
    cu::to_inline(c->choice.lowered, inl.get());
    c->kernel = prepare_kernel(c->choice, cu::DevicePlanRef{}, inl.get());  // a copy of inl goes into the parameters
  } else {
    c->kernel = prepare_kernel(c->choice, store_plans_->upload(c->choice.lowered), nullptr);
  }
  if (debug_) {
    const lowering::ProtocolChoice& p = c->choice;
    std::fprintf(stderr,
                 "[purlin] rank %d: new CUDA plan for %s (%s, %d blocks, %zu device ops, %u local barriers, %d own-slot "
                 "waits, %s): %s",
                 rank_, spec.name.c_str(), p.protocol.c_str(), p.blocks, p.lowered.ops.size(), p.lowered.local_syncs,
                 static_cast<int>(std::count_if(p.lowered.ops.begin(), p.lowered.ops.end(),
                                                [](const cu::DevOp& o) { return o.code == cu::kWait && o.own_slot; })),
                 c->inline_plan ? "inline" : "device", p.plan.describe().c_str());
  }
  return plans_.insert(std::move(key), std::move(c));  // forgets the memo if it dropped plans
}

}  // namespace purlin::backend

#endif  // PURLIN_WITH_CUDA
