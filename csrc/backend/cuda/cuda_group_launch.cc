// cuda_group_launch.cc — CudaGroup::launch: the plan kernel's launch (its
// parameters prebuilt per plan, patched per call), the copy-engine Atom's
// (with its zero-copy sources), and the per-protocol launch counts; the order
// of the launches across streams is launch_order.h's.
#ifdef PURLIN_WITH_CUDA

#include <algorithm>

#include "atom/cuda/host/cuda_check.h"
#include "atom/cuda/interned_names.h"
#include "backend/cuda/cuda_group.h"
#include "lowering/copy_engine_plan.h"
#include "snac/executor.h"

namespace purlin::backend {

// In-place all_gather by its layout, alike on every rank (rank 0's input
// starts where its output does: alias Same there, Shifted elsewhere): the
// own-block form where Input is block `rank` of Output (CallDescription::own_block).
static bool in_place_all_gather(const Request& rq, const snac::CallDescription& call, int rank, int world) {
  const size_t bytes = static_cast<size_t>(rq.in_numel) * dtype_size(rq.dtype);
  return call.own_block > 0 && rq.out_numel == rq.in_numel * world &&
         static_cast<const char*>(rq.in) == static_cast<const char*>(rq.out) + static_cast<size_t>(rank) * bytes;
}

// NOTE [copy-engine zero-copy]: the copy engines only pull, so a copy
// collective whose output is in the pool (where the kernel would write into
// the peers' outputs, NOTE [peer outputs]) reads the peers' inputs instead
// when those are in the pool too: in-place all_gather (rank q's input is
// slot q of its output: nobody else writes it) and in-place broadcast (only
// the root's buffer is read), or any input in a pool block of its own. Every
// rank judges alike by the contract of torch_purlin.empty (pool tensors on
// every rank, at the same offsets), which the call check enforces.
bool CudaGroup::ce_sources_in_pool(const Request& rq, const CachedPlan& c, const PoolUse& pu,
                                   int64_t* in_offset) const {
  if (in_place_all_gather(rq, c.call, rank_, world_)) {
    *in_offset = pu.out_offset;  // rank q's input: out_offset + q * its bytes
    return true;
  }
  if (!pu.reads_allowed) return false;      // NOTE [zero-copy in place] (symmetric_use.cc)
  if (alias_of(rq) == cu::IoAlias::Same) {  // in-place broadcast: the input is the pool output
    *in_offset = pu.out_offset;
    return true;
  }
  const int64_t esize = static_cast<int64_t>(dtype_size(rq.dtype));
  *in_offset = pool_->offset_of(rq.in, std::max<int64_t>(1, rq.in_numel * esize));
  return *in_offset >= 0;
}

// The copy-engine Atom runs the pull plan through snac::execute, as the CPU
// engine runs the CPU Atom (NOTE [copy-engine barriers] in ce_atom.h).
void CudaGroup::launch_copy_engine(const Request& rq, const CachedPlan& c, int64_t in_offset, cudaStream_t stream) {
  const snac::Plan& plan = c.choice.pull_plan;
  cu::CeCall call;
  call.moves = plan.rounds != 0;
  call.steps = plan.steps;
  call.op_name = rq.name;
  call.timeout_ns = static_cast<uint64_t>(timeout_.count()) * 1000000ull;
  call.stream = stream;
  // NOTE [copy-engine call check]: what the kernel's call tag covers, and the place of the inputs.
  uint64_t sig = c.choice.sig;
  void* const* peer_inputs = nullptr;
  if (in_offset >= 0) {
    const bool slots = in_place_all_gather(rq, c.call, rank_, world_);  // rank q's input is its output's slot q
    const int64_t stride = slots ? rq.in_numel * static_cast<int64_t>(dtype_size(rq.dtype)) : 0;
    ce_peer_inputs_.resize(static_cast<size_t>(world_));
    for (int q = 0; q < world_; ++q) ce_peer_inputs_[q] = pool_->base_of(q) + in_offset + q * stride;
    peer_inputs = ce_peer_inputs_.data();
    sig ^= static_cast<uint64_t>(in_offset + 1) * 0x100000001b3ull ^ (slots ? 0x5100000000000000ull : 0);
  }
  call.plan_refusal = lowering::copy_engine_refusal(plan, rank_, world_, static_cast<int64_t>(ce_->workspace_bytes()),
                                                    static_cast<int64_t>(dtype_size(rq.dtype)), peer_inputs != nullptr);
  ce_check(rq, sig);
  const char* protocol = in_offset >= 0 ? "copy-engine+zero-copy" : "copy-engine";
  last_ = LastLaunch{protocol, 0, 0, false};
  count_launch(rq.name, &*protocol_names_.insert(protocol).first);
  const std::string err = ce_->enqueue(call, [&](uint64_t step_base) {
    snac::ExecArgs a;
    a.input = rq.in;
    a.output = rq.out;
    a.peer_inputs = peer_inputs;
    a.dtype = rq.dtype;
    a.step_base = step_base;
    a.site = atom::WaitSite{rq.name, "", 0};
    snac::execute(plan, *ce_, a);
  });
  if (!err.empty()) {
    channel_.mark_broken(err);
    throw std::runtime_error(error_prefix(rq.name, rank_) + err);
  }
}

// Every field of the plan kernel's launch but the call's (NOTE [prebuilt kernel parameters]).
cu::PreparedPlan CudaGroup::prepare_kernel(const lowering::ProtocolChoice& ch, const cu::DevicePlanRef& dev,
                                           const cu::InlinePlan* inl) const {
  cu::PlanLaunch l;
  l.ops = dev.ops;
  l.srcs = dev.srcs;
  l.inline_plan = inl;
  l.n_ops = static_cast<int>(ch.lowered.ops.size());
  l.n_srcs = static_cast<int>(ch.lowered.srcs.size());
  l.steps = ch.lowered.steps;
  l.local_syncs = ch.lowered.local_syncs;
  l.reduces = ch.reduces;
  l.self = ws_->self();
  l.layout = ws_->layout();
  l.err = ws_->error_device();
  l.rank = rank_;
  l.threads = ch.threads;
  l.blocks = ch.blocks;
  l.lines = ch.lines;
  l.wide_lines = ch.wide;
  l.parity = ch.parity;
  l.overlap = overlap_;
  return cu::prepare_plan(l);
}

void CudaGroup::launch(Request& rq, cudaStream_t stream) {
  // What this rank found before (group_channel.h), then its device error record: what its kernels
  // found, or their view of the group's break (NOTE [group health]), then a break no kernel met here.
  if (!channel_.found().empty()) channel_.throw_unusable(rq.name);
  const std::string err = read_error(*ws_, timeout_, check_calls_, break_reason_);
  if (!err.empty()) {
    channel_.mark_broken(err);
    throw std::runtime_error(err);
  }
  channel_.begin_call(rq.name);
  if (!local_error_.empty()) settle_local_error(rq);
  // Every rank's arguments: exchanged on every all_to_all (its splits) and,
  // with NOTE [checked calls], on every collective; else this rank's own,
  // made by plan_for() only when its plan is not memoized. An exchange
  // carries this rank's argument error too, so every rank raises it.
  std::vector<PeerMeta> all;
  const bool exchanged = sizes_per_rank(rq) || check_calls_;
  if (exchanged) all = peer_meta(rq);
  if (!rq.error.empty()) {
    const std::string what = error_prefix(rq.name, rank_) + rq.error;
    if (!exchanged) local_error_ = what;  // the peers did not see it: NOTE [one-sided local errors]
    throw std::invalid_argument(what);
  }
  // NOTE [zero-copy]: an input in the symmetric pool is read in place by the
  // peers (who must pass theirs at the same offset: NOTE [call tags]).
  // Small collectives run on flagged lines, mid-sized ones as parity plans,
  // when their plan qualifies (NOTE [line plans], [parity plans]; the Atom's
  // protocol choice decides on the Spec); the pool is not tried for them. A
  // region request that does not qualify returns the workspace plan, used as
  // it is unless the call uses the pool (NOTE [symmetric use is rank-invariant]).
  // PREMUL_SUM never runs in a region (peers would read the scale word without a barrier): asked
  // for here, so that the memo and the cache keep its plans apart (NOTE [protocol choice]).
  const CachedPlan* cp = &plan_for(rq, all, SymmetricUse{}, rq.redop != RedOp::PremulSum);
  PoolUse pu;
  if (!(cp->choice.lines || cp->choice.parity)) {
    pu = pool_use(rq, all);
    if (pu.use.read_peer_inputs || pu.use.write_peer_outputs) cp = &plan_for(rq, all, pu.use, false);
  }
  const CachedPlan& c = *cp;
  const lowering::ProtocolChoice& ch = c.choice;
  if (ch.plan.rounds == 0) return;  // nothing moves on any rank
  // The caller (CudaEngine::run) holds a CUDAGuard on this group's device.
  order_.order_after_last(stream);  // NOTE [stream order]
  // Pure copies of at least TORCH_PURLIN_CUDA_CE_BYTES go to the copy
  // engines (no SMs), except during graph capture (NOTE [copy-engine graphs]).
  if (ce_ && !ch.lines && !ch.parity && !ch.reduces && ch.spec_bytes >= ce_bytes_ && ce_->refusal(stream).empty()) {
    const CachedPlan* ce_plan = &c;
    int64_t in_offset = pu.in_offset;  // rank 0's input offset; every rank's, but in place all_gather's
    if (pu.out_offset >= 0 && ce_sources_in_pool(rq, c, pu, &in_offset)) {
      SymmetricUse pull;
      pull.read_peer_inputs = true;
      ce_plan = &plan_for(rq, all, pull, false);  // NOTE [copy-engine zero-copy]: pull, not write
    }
    if (pu.out_offset < 0 || ce_plan != &c) {
      launch_copy_engine(rq, *ce_plan, in_offset, stream);
      return;
    }
  }
  // NOTE [prebuilt kernel parameters]: the call's fields; the plan's are in c.kernel.
  cu::PlanCall call;
  call.input = rq.in;
  call.output = rq.out;
  call.dtype = rq.dtype;
  call.redop = rq.redop;
  call.scale = rq.scale;
  call.timeout_ns = static_cast<uint64_t>(timeout_.count()) * 1000000ull;
  if (rq.name != last_name_) {  // NOTE [eager host path]: names are literals; intern each run of one once
    last_name_ = rq.name;
    last_name_id_ = cu::intern_name(rq.name);
  }
  call.op_name = last_name_id_;
  call.call_sig = lowering::call_signature(ch.sig, pu.in_offset, pu.out_offset);
  call.input_pool_offset = pu.in_offset;
  call.output_pool_offset = pu.out_offset;
  last_.protocol = ch.protocol;  // assigned in place: no allocation once the string has room
  last_.blocks = ch.blocks;
  last_.threads = ch.threads;
  last_.overlapped = overlap_;
  count_launch(rq.name, c.protocol_name);
  const cudaError_t e = cu::launch_prepared(c.kernel, call, stream);
  if (e != cudaSuccess) throw std::runtime_error(error_prefix(rq.name, rank_) + cu::cuda_error_text(e, "launching the plan kernel"));
}

void CudaGroup::count_launch(const char* name, const std::string* protocol) {
  ++launches_[{name, protocol}];
}

ProtocolCounts CudaGroup::protocol_counts() const {
  ProtocolCounts out;
  for (const auto& [key, n] : launches_)
    out[static_cast<const char*>(key.first)][*static_cast<const std::string*>(key.second)] += n;
  return out;
}

}  // namespace purlin::backend

#endif  // PURLIN_WITH_CUDA
