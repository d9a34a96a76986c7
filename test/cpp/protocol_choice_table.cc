// protocol_choice_table.cc — prints the protocol every built-in collective
// gets, CPU and CUDA, as one text table: the guard of the choice rules
// (test/cpp/golden/protocol_choice.txt holds the table of today's rules;
// test_cuda_plan_host.py recomputes it and compares).
//
// NOTE [golden protocol table] The choice of protocol must not change by
//   accident when the code that makes it moves: a refactoring that keeps the
//   table byte-identical kept every decision. A row per call: the collective
//   and its call description (the Spec's traits and the call's shape, which
//   a custom Spec of the same shape shares), the world, the bytes per rank,
//   plain or pool tensors, in place or not, the root; then the CPU engine's
//   choice (one- or two-shot, direct local reads per rank, rounds) and the
//   CUDA engine's (protocol, blocks, threads, rounds, the copy-engine pull
//   plan and its zero-copy form, NCCL by the protocol table). Settings: the
//   registry's defaults (common/env.cc), an sm_90 device of 132 SMs whose
//   NVLink was confirmed (TORCH_PURLIN_CUDA_LINE_FORMAT=auto keeps wide
//   lines). A change that means to change a decision regenerates the table
//   (`./protocol_choice_table > test/cpp/golden/protocol_choice.txt`) and
//   the diff shows every decision it changed.
//
// Build: as test_plan_symmetry.cc, plus csrc/backend/group/protocol_table.cc and csrc/common/env.cc.
#include <cstdio>
#include <string>
#include <vector>

#include "atom/cuda/protocol/launch_config.h"
#include "backend/group/protocol_table.h"
#include "builtin_calls.h"
#include "common/env.h"
#include "snac/plan.h"
#include "snac/spec_traits.h"

using namespace purlin;
using namespace purlin::backend;
using namespace purlin::test;
namespace cu = purlin::atom::cuda;

namespace {

std::string default_of(const char* name) {
  const env::Var* v = env::find(name);
  if (!v) {
    std::fprintf(stderr, "%s is not registered\n", name);
    std::exit(2);
  }
  return v->default_value;
}

int64_t default_bytes(const char* name) { return env::parse_bytes(default_of(name), name); }

// The c10d op whose row of TORCH_PURLIN_CUDA_NCCL_FROM a built-in's tensor form consults, and
// its larger side in bytes (backend_ops.cc's table_bytes; -1: the op never consults the table).
int64_t nccl_table_bytes(const Case& c, int W, const char** c10d_name) {
  const int64_t es = static_cast<int64_t>(dtype_size(c.dtype));
  switch (c.op) {
    case CollOp::AllReduce: *c10d_name = "all_reduce"; return c.n * es;
    case CollOp::Reduce: *c10d_name = "reduce"; return c.n * es;
    case CollOp::Broadcast: *c10d_name = "broadcast"; return c.n * es;
    case CollOp::AllGather: *c10d_name = "all_gather_into_tensor"; return W * c.n * es;
    case CollOp::ReduceScatter: *c10d_name = "reduce_scatter_tensor"; return W * c.n * es;
    case CollOp::AllToAll: *c10d_name = "all_to_all_single"; return c.uneven ? -1 : W * c.n * es;
    default: *c10d_name = coll_op_name(c.op); return -1;
  }
}

// The call description of rank 0's call: the Spec's traits and the call's shape.
std::string description(const snac::CallDescription& s) {
  const snac::SpecTraits& t = s.traits;
  std::string d = t.reduces ? "reduce" : "copy";
  d += t.every_rank_reads_input ? ",all-read" : ",some-read";
  d += t.every_rank_writes_output ? ",all-write" : ",some-write";
  if (t.inputs_unwritten_while_read) d += ",inputs-unwritten";
  if (!s.inputs_everywhere) d += ",in-some";
  if (!s.outputs_everywhere) d += ",out-some";
  if (!s.inputs_at_one_offset) d += ",in-offsets-differ";
  if (s.outputs_writable_by_peers) d += ",out-peer-writable";
  return d;
}

// NOTE [copy-engine zero-copy] (cuda_group_launch.cc): the copy engines' form of a call whose
// copy plan they could run: "pull" (their own staged pull plan), "pull+zero-copy" (reading the
// peers' inputs in the pool), "-" (a kernel runs it: regions, reductions, peer outputs that
// cannot turn into pulls). As CudaGroup::launch decides once spec_bytes reaches
// TORCH_PURLIN_CUDA_CE_BYTES (off by default).
std::string copy_engine_form(const Request& rq, const std::vector<PeerMeta>& all, const lowering::ProtocolChoice& p,
                             int W) {
  if (p.lines || p.parity || p.reduces || p.plan.rounds == 0) return "-";
  const int64_t es = static_cast<int64_t>(dtype_size(rq.dtype));
  const int64_t out = rq.out_numel > 0 ? pool_offset(0, rq.out, rq.out_numel * es) : -1;
  const int64_t in = rq.in_numel > 0 ? pool_offset(0, rq.in, rq.in_numel * es) : -1;
  const snac::CallDescription call = describe_call(rq, build_spec(rq, all));
  const bool two = false;  // copies never run two-shot
  const bool reads_allowed = symmetric_use(rq, call, two, true, false).read_peer_inputs;
  const bool peer_outputs = out >= 0 && symmetric_use(rq, call, two, false, true).write_peer_outputs;
  const bool zero_copy = !peer_outputs && in >= 0 && reads_allowed;
  if (!peer_outputs) return zero_copy ? "pull+zero-copy" : "pull";
  // Output in the pool: the kernel would write into the peers' outputs; the copy engines pull
  // from the peers' inputs instead where those are in the pool too, else the kernel runs it.
  const bool in_place_ag = call.own_block > 0 && rq.out_numel == rq.in_numel * W &&
                           static_cast<const char*>(rq.in) == static_cast<const char*>(rq.out);
  if (in_place_ag) return "pull+zero-copy";
  if (!reads_allowed) return "-";
  if (io_alias(rq) == IoAlias::Same) return "pull+zero-copy";
  return in >= 0 ? "pull+zero-copy" : "-";
}

std::string bits(const std::vector<bool>& v) {
  std::string s;
  for (bool b : v) s += b ? '1' : '0';
  return s;
}

void row(const Case& c, int W, const cu::ProtocolSettings& s, int64_t cpu_two_shot, int64_t cpu_ws,
         int64_t cpu_round, int64_t cuda_two_shot, const NcclTable& nccl) {
  std::vector<PeerMeta> all;
  const std::vector<RankCall> calls = calls_of(c, W, &all);
  const Request& rq0 = calls[0].rq;
  const snac::Spec spec = build_spec(rq0, all);
  const snac::CallDescription call = describe_call(rq0, spec);
  const int64_t es = static_cast<int64_t>(dtype_size(c.dtype));
  const std::string root = rooted(c.op) ? " root=" + std::to_string(c.root) : "";
  std::printf("%s%s W=%d bytes=%lld %s %s%s [%s]", op_name(c.op), c.uneven ? "-uneven" : "", W,
              static_cast<long long>(c.n * es), c.pool ? "pool" : "plain",
              c.form == Form::InPlace ? "in-place" : "out-of-place", root.c_str(), description(call).c_str());
  // The CPU engine (CpuEngine::plan_for): two-shot by its threshold, direct local reads per rank.
  std::vector<bool> direct(W);
  for (int r = 0; r < W; ++r) direct[r] = direct_local_reads(calls[r].rq, describe_call(calls[r].rq, spec), r);
  if (!c.pool) {
    const bool two = runs_two_shot(call, es, W, cpu_two_shot);
    snac::PlanOptions opt;
    opt.align_elems = std::max<int64_t>(1, 64 / es);
    opt.slot_elems = cpu_slot_elems(cpu_ws, cpu_round, es, opt.align_elems);
    opt.direct_local = direct[0];
    opt.reduce_algo = two ? snac::ReduceAlgo::TwoShot : snac::ReduceAlgo::OneShot;
    const snac::Plan plan = snac::make_plan(spec, 0, opt);
    std::printf(" | cpu %s direct=%s rounds=%d", two ? "two-shot" : "one-shot", bits(direct).c_str(), plan.rounds);
  }
  // The CUDA engine (CudaGroup::launch, rank 0; test_plan_symmetry.cc checks that every rank agrees).
  const char* c10d_name = "";
  const int64_t tb = nccl_table_bytes(c, W, &c10d_name);
  const int64_t from = nccl.from(c10d_name);
  const bool on_nccl = tb >= 0 && from > 0 && tb >= from;
  const Chosen ch = choose(s, rq0, all, 0, cuda_two_shot);
  const lowering::ProtocolChoice& p = ch.choice;
  std::printf(" | cuda %s blocks=%d threads=%d rounds=%d ce=%s%s\n", p.protocol.c_str(), p.blocks, p.threads,
              p.plan.rounds, copy_engine_form(rq0, all, p, W).c_str(),
              on_nccl ? " nccl" : "");
}

}  // namespace

int main() {
  const std::string cuda_two_shot = default_of("TORCH_PURLIN_CUDA_TWO_SHOT_BYTES");
  const std::string cpu_two_shot = default_of("TORCH_PURLIN_CPU_TWO_SHOT_BYTES");
  const int64_t cpu_ws = default_bytes("TORCH_PURLIN_CPU_WORKSPACE_BYTES");
  const int64_t cpu_round = default_bytes("TORCH_PURLIN_CPU_ROUND_BYTES");
  const int64_t cuda_ws = default_bytes("TORCH_PURLIN_CUDA_WORKSPACE_BYTES");
  const int64_t line_max = default_bytes("TORCH_PURLIN_CUDA_LINE_BYTES");
  const int64_t parity_max = default_bytes("TORCH_PURLIN_CUDA_PARITY_BYTES");
  const cu::LaunchConfig config = cu::launch_config_sm90(cu::DeviceInfo{9, 0, 132});
  std::printf("# The protocol of every built-in collective (NOTE [golden protocol table], "
              "test/cpp/protocol_choice_table.cc).\n");
  std::printf("# Defaults: CPU workspace %s, CPU rounds %s, CPU two-shot %s; CUDA workspace %s, lines to %s, parity to %s, "
              "line format %s (sm_90, 132 SMs, NVLink), two-shot %s, NCCL from %s.\n",
              default_of("TORCH_PURLIN_CPU_WORKSPACE_BYTES").c_str(), default_of("TORCH_PURLIN_CPU_ROUND_BYTES").c_str(),
              cpu_two_shot.c_str(),
              default_of("TORCH_PURLIN_CUDA_WORKSPACE_BYTES").c_str(),
              default_of("TORCH_PURLIN_CUDA_LINE_BYTES").c_str(), default_of("TORCH_PURLIN_CUDA_PARITY_BYTES").c_str(),
              default_of("TORCH_PURLIN_CUDA_LINE_FORMAT").c_str(), cuda_two_shot.c_str(),
              default_of("TORCH_PURLIN_CUDA_NCCL_FROM").c_str());
  std::printf("# collective W= bytes(per rank, c10d's count) plain|pool form [root=] [call description] "
              "| cpu algo direct(per rank) rounds | cuda protocol blocks threads rounds ce=copy-engine form [nccl]\n");
  const std::vector<CollOp> ops = {CollOp::AllReduce, CollOp::Reduce,  CollOp::Broadcast, CollOp::AllGather,
                                   CollOp::ReduceScatter, CollOp::AllToAll, CollOp::Gather,   CollOp::Scatter};
  // Bytes per rank: empty, one element, lines (narrow, wide), over the line limit, parity plans,
  // over the parity limit (one workspace slot), pipelined workspace rounds.
  const std::vector<int64_t> sizes = {0, 4, 4000, 256 << 10, (1 << 20) + 4096, 8 << 20, 20 << 20, 100 << 20};
  for (int W = 2; W <= 8; ++W) {
    const cu::ProtocolSettings s =
        cu::make_protocol_settings(W, cuda_ws, line_max, parity_max, cu::LineFormat::Auto, config);
    const int64_t cpu_two = bytes_for_world(cpu_two_shot, W, "TORCH_PURLIN_CPU_TWO_SHOT_BYTES");
    const int64_t cuda_two = bytes_for_world(cuda_two_shot, W, "TORCH_PURLIN_CUDA_TWO_SHOT_BYTES");
    const NcclTable nccl = NcclTable::parse(default_of("TORCH_PURLIN_CUDA_NCCL_FROM"), W);
    for_each_case(W, ops, sizes, [&](const Case& c) { row(c, W, s, cpu_two, cpu_ws, cpu_round, cuda_two, nccl); });
  }
  return 0;
}
