// purlin_floor.cu — purlin's own CUDA datapath without torch: two processes
// (one per GPU) set up a real SymmetricWorkspace (CUDA IPC), derive SNAC
// plans with the planner, lower them as CudaGroup::plan_for does for line
// plans, and time graphs of launch_plan() back to back. Next to
// nvlink_floor.cu (the same protocol stripped of everything but the lines),
// the difference is what purlin's kernels cost above the floor, and runtime
// variants (threads, overlapped launch, line format) locate it without torch,
// NCCL or a bench in the way (benchmarks/results/cuda_h200x2_20261130h_probes.md).
//
//   nvcc -std=c++17 -O3 -arch=sm_90 -Icsrc -DPURLIN_WITH_CUDA benchmarks/probes/purlin_floor.cu \
//        csrc/atom/cuda/{interned_names,host/symmetric_workspace,host/workspace_probe,host/ipc_peers,\
//        host/nvlink_probe,protocol/launch_config,protocol/launch_config_sm90,protocol/protocol_settings}.cc \
//        csrc/atom/cuda/device/plan_kernel*.cu csrc/lowering/device_plan.cc \
//        csrc/snac/*.cc csrc/common/*.cc -o /tmp/purlin_floor -ldl
//   /tmp/purlin_floor [ops per graph, default 20] [only the cases whose name contains this]
//   (one GPU: both ranks share it; run under CUDA MPS, NOTE [shared GPU])
#include <cuda_runtime.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "atom/cuda/device/plan_kernel.h"
#include "atom/cuda/host/symmetric_workspace.h"
#include "atom/cuda/interned_names.h"
#include "lowering/device_plan.h"
#include "snac/collectives.h"
#include "snac/plan.h"
#include "snac/spec.h"
#include "probe_util.cuh"

namespace cu = purlin::atom::cuda;
namespace snac = purlin::snac;
using purlin::DType;
using purlin::RedOp;

#define CHECK PROBE_CHECK

namespace {

struct Exchange {  // SymmetricWorkspace's setup exchange, through the shared page
  int len[2];
  char blob[2][8192];
};

struct Case {
  const char* name;
  const char* op;     // all_reduce, broadcast, all_gather
  int64_t bytes;      // per rank (all_gather: input per rank)
  int threads;        // 0: the launch shape's (as blocks)
  bool overlap;
  int blocks = 0;     // 0: the launch config's narrow_line_shape / wide_line_shape
  bool wide = false;  // wide lines (needs the wide region: not under a shared GPU)
};

// bf16 helpers for the check (inputs are small integers: sums are exact).
uint16_t to_bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return static_cast<uint16_t>(u >> 16);
}
float from_bf16(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

}  // namespace

int main(int argc, char** argv) {
  const int n_ops = argc > 1 ? std::atoi(argv[1]) : 20;
  setvbuf(stdout, nullptr, _IONBF, 0);
  int rank = 0, gen = 0;
  const int world = 2;
  pid_t child = 0;
  auto* sh = probe::fork_pair<Exchange>(&rank, &child);
  using probe::barrier;
  CHECK(cudaSetDevice(probe::device_for(rank)));
  auto exchange = [&](const std::string&, const std::string& mine) {
    if (mine.size() > sizeof sh->extra.blob[0]) {
      std::fprintf(stderr, "setup exchange: %zu bytes do not fit\n", mine.size());
      std::_Exit(1);
    }
    std::memcpy(sh->extra.blob[rank], mine.data(), mine.size());
    sh->extra.len[rank] = static_cast<int>(mine.size());
    barrier(sh, rank, gen);
    std::vector<std::string> all{std::string(sh->extra.blob[0], sh->extra.len[0]),
                                 std::string(sh->extra.blob[1], sh->extra.len[1])};
    barrier(sh, rank, gen);
    return all;
  };
  cu::SymmetricWorkspace::Options opt;
  opt.rank = rank;
  opt.world = world;
  opt.device = probe::device_for(rank);
  opt.share_gpu = true;  // one GPU: both ranks on it (NOTE [shared GPU])
  opt.workspace_bytes = 64 << 20;
  opt.line_max_bytes = 1 << 20;
  opt.parity_max_bytes = 0;
  opt.line_format = cu::LineFormat::Auto;
  std::string why;
  auto ws = cu::SymmetricWorkspace::create(opt, exchange, &why);
  if (!ws) {
    std::fprintf(stderr, "rank %d: no workspace: %s\n", rank, why.c_str());
    std::_Exit(1);
  }
  const int64_t esize = 2;  // bf16
  char* buf = nullptr;
  CHECK(cudaMalloc(&buf, 8 << 20));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  constexpr int kReps = 30;
  const int T = ws->threads();
  const Case cases[] = {
      {"all_reduce 1K", "all_reduce", 1 << 10, 0, true},      {"all_reduce 1K pdl=0", "all_reduce", 1 << 10, 0, false},
      {"all_reduce 1K 512thr", "all_reduce", 1 << 10, 512, true}, {"all_reduce 4K", "all_reduce", 4 << 10, 0, true},
      {"all_reduce 16K", "all_reduce", 16 << 10, 0, true},    {"all_reduce 64K", "all_reduce", 64 << 10, 0, true},
      // 2026-11-30: the 64K launch shape (blocks x threads, one line per thread unless noted) and wide lines.
      {"all_reduce 64K 16x512", "all_reduce", 64 << 10, 512, true, 16},
      {"all_reduce 64K 8x1024", "all_reduce", 64 << 10, 1024, true, 8},
      {"all_reduce 64K 32x256", "all_reduce", 64 << 10, 256, true, 32},
      {"all_reduce 64K 64x128", "all_reduce", 64 << 10, 128, true, 64},
      {"all_reduce 64K wide", "all_reduce", 64 << 10, 0, true, 0, true},
      {"all_reduce 64K wide 64x128", "all_reduce", 64 << 10, 128, true, 64, true},
      {"all_reduce 256K", "all_reduce", 256 << 10, 0, true},  {"all_reduce 256K wide", "all_reduce", 256 << 10, 0, true, 0, true},
      {"all_reduce 256K wide 128x128", "all_reduce", 256 << 10, 128, true, 128, true},
      {"all_reduce 256K wide 128x256", "all_reduce", 256 << 10, 256, true, 128, true},
      {"all_reduce 128K", "all_reduce", 128 << 10, 0, true},  {"all_reduce 128K wide", "all_reduce", 128 << 10, 0, true, 0, true},
      {"all_reduce 128K wide 64x256", "all_reduce", 128 << 10, 256, true, 64, true},
      {"all_reduce 1M wide", "all_reduce", 1 << 20, 0, true, 0, true},
      {"all_reduce 1M wide 128x1024", "all_reduce", 1 << 20, 1024, true, 128, true},
      {"all_gather 256K", "all_gather", 256 << 10, 0, true},  {"all_gather 256K wide", "all_gather", 256 << 10, 0, true, 0, true},
      {"all_reduce 1M", "all_reduce", 1 << 20, 0, true},      {"broadcast 1K", "broadcast", 1 << 10, 0, true},
      {"all_gather 1K", "all_gather", 1 << 10, 0, true},       {"broadcast 64K", "broadcast", 64 << 10, 0, true},
      {"all_gather 64K", "all_gather", 64 << 10, 0, true},
      // What a launch's block count costs at a fixed size (added in 2026-11-30, not run yet;
      // `_p_probes.md` table A: 1K on 1 block 3.23 us, 4K on 4 blocks 3.78, 16K on 16 4.08):
      // blocks beyond the data's own have no lines but still take part in end_launch's
      // last-block count.
      {"all_reduce 1K 2x128", "all_reduce", 1 << 10, 128, true, 2},
      {"all_reduce 1K 4x128", "all_reduce", 1 << 10, 128, true, 4},
      {"all_reduce 4K 1x512", "all_reduce", 4 << 10, 512, true, 1},
      {"all_reduce 16K 2x1024", "all_reduce", 16 << 10, 1024, true, 2},
      {"all_reduce 16K 4x512", "all_reduce", 16 << 10, 512, true, 4},
  };
  if (rank == 0)
    std::printf("# purlin_floor: purlin's line plans, 2 processes (CUDA IPC), bf16, %d launches per graph, time per "
                "launch (us), median of %d queued replays, max over ranks; workspace: %d threads, %s lines\n"
                "%-24s %8s %8s %8s %9s %8s %s\n",
                n_ops, kReps - 1, T, ws->line_format() == cu::LineFormat::Wide ? "wide" : "narrow (auto)", "case",
                "median", "min", "max", "grid", "#wrong", "protocol");
  const char* only = argc > 2 ? argv[2] : nullptr;  // run only the cases whose name contains this
  for (const Case& c : cases) {
    if (only && !std::strstr(c.name, only)) continue;
    const int64_t n = c.bytes / esize;
    const bool reduces = std::strcmp(c.op, "all_reduce") == 0;
    const bool gather = std::strcmp(c.op, "all_gather") == 0;
    const snac::Spec spec = reduces ? snac::all_reduce(world, n, RedOp::Sum)
                            : gather ? snac::all_gather(world, n)
                                     : snac::broadcast(world, n, 0);
    // As CudaGroup::plan_for for a line plan: one-round one-shot push plan in one parity of the line region.
    const int64_t lbytes = snac::max_rank_elems(spec) * esize;
    snac::PlanOptions o;
    o.direct_local = true;
    o.reduce_algo = snac::ReduceAlgo::OneShot;
    o.push = true;
    const bool wide = c.wide || (ws->line_format() == cu::LineFormat::Wide && lbytes > (256 << 10));
    if (wide && ws->layout().wide_offset <= 0) {
      if (rank == 0) std::printf("%-24s (no wide-line region: %s)\n", c.name, ws->wide_refusal().c_str());
      continue;
    }
    o.align_elems = (wide ? cu::kWideAlignBytes : cu::kPartBytes) / esize;
    o.slot_elems = ws->line_slot_elems(esize, wide) / o.align_elems * o.align_elems;
    const snac::Plan plan = snac::make_plan(spec, rank, o);
    if (plan.rounds != 1) {
      std::fprintf(stderr, "%s: %d rounds, not a line plan\n", c.name, plan.rounds);
      std::_Exit(1);
    }
    // As CudaGroup::plan_for: NOTE [narrow line shape], [wide line shape].
    const cu::LaunchShape shape = wide ? ws->launch_config().wide_line_shape(snac::max_chunk_elems(spec) * esize)
                                       : ws->launch_config().narrow_line_shape(lbytes);
    const int blocks = c.blocks ? c.blocks : shape.blocks;
    const int threads = c.threads ? c.threads : shape.threads;
    if (rank == 0 && &c == &cases[0]) std::printf("# rank 0's plan for %s:\n%s", c.name, plan.describe().c_str());
    cu::DevicePlan dp = purlin::lowering::lower_plan(plan, blocks, esize, reduces || !gather ? cu::IoAlias::Same : cu::IoAlias::Disjoint,
                                       0, wide ? cu::Partition::WideLines : cu::Partition::Parts);
    static const bool keep_carried = std::getenv("PF_KEEP_CARRIED") && std::atoi(std::getenv("PF_KEEP_CARRIED")) == 1;
    if (!keep_carried) purlin::lowering::drop_line_carried_ops(&dp);  // NOTE [line-carried ops], as CudaGroup::plan_for
    cu::InlinePlan inl;
    cu::to_inline(dp, &inl);
    // PF_DEVICE_PLAN=1: the plan from device memory (as plan_store.h keeps large ones), not the parameters;
    // kInlineSrcs sources are allocated (run_purlin_floor.sh's smplan_any copies that many).
    static const bool device_plan = std::getenv("PF_DEVICE_PLAN") && std::atoi(std::getenv("PF_DEVICE_PLAN")) == 1;
    cu::DevOp* d_ops = nullptr;
    cu::DevRef* d_srcs = nullptr;
    if (device_plan) {
      CHECK(cudaMalloc(&d_ops, sizeof inl.ops));
      CHECK(cudaMalloc(&d_srcs, sizeof inl.srcs));
      CHECK(cudaMemcpy(d_ops, inl.ops, sizeof inl.ops, cudaMemcpyHostToDevice));
      CHECK(cudaMemcpy(d_srcs, inl.srcs, sizeof inl.srcs, cudaMemcpyHostToDevice));
    }
    char* in = buf;
    char* out = gather ? buf + (4 << 20) : buf;
    cu::PlanLaunch l;
    l.inline_plan = device_plan ? nullptr : &inl;
    l.ops = d_ops;
    l.srcs = d_srcs;
    l.n_ops = static_cast<int>(dp.ops.size());
    l.n_srcs = static_cast<int>(dp.srcs.size());
    l.steps = dp.steps;
    l.local_syncs = dp.local_syncs;
    l.reduces = reduces;
    l.input = in;
    l.output = out;
    l.self = ws->self();
    l.layout = ws->layout();
    l.err = ws->error_device();
    l.rank = rank;
    l.dtype = DType::BFloat16;
    l.redop = RedOp::Sum;
    l.timeout_ns = 20000000000ull;
    l.op_name = cu::intern_name(c.op);
    l.threads = threads;
    l.blocks = blocks;
    l.lines = true;
    l.wide_lines = wide;
    l.call_sig = 0x5157ull;
    l.overlap = c.overlap;
    // Check once eagerly: inputs rank + 1 + i % 5 (small integers), the result exact.
    std::vector<uint16_t> host(n), got(gather ? 2 * n : n);
    for (int64_t i = 0; i < n; ++i) host[i] = to_bf16(static_cast<float>(rank + 1 + i % 5));
    // On s, then synchronized: a pageable cudaMemcpy may return before its DMA lands, and s (non-blocking)
    // does not wait for the legacy stream, so the check's launch could read stale input (1M #wrong, 2026-11-30).
    CHECK(cudaMemcpyAsync(in, host.data(), n * esize, cudaMemcpyHostToDevice, s));
    CHECK(cudaStreamSynchronize(s));
    barrier(sh, rank, gen);
    CHECK(cu::launch_plan(l, s));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaMemcpy(got.data(), out, got.size() * esize, cudaMemcpyDeviceToHost));
    int wrong = 0;
    for (int64_t i = 0; i < static_cast<int64_t>(got.size()); ++i) {
      const int64_t j = i % n;
      const float want = reduces ? static_cast<float>(3 + 2 * (j % 5))
                         : gather ? static_cast<float>(i / n + 1 + j % 5)
                                  : static_cast<float>(1 + j % 5);
      wrong += from_bf16(got[i]) != want;
    }
    const probe::Spread t = probe::time_graph_pair(sh, rank, gen, s, n_ops, kReps, [&] { CHECK(cu::launch_plan(l, s)); });
    sh->wrong[rank] = wrong;
    barrier(sh, rank, gen);
    if (rank == 0)
      std::printf("%-24s %8.2f %8.2f %8.2f %4dx%-4d %8d %s\n", c.name, t.median, t.lo, t.hi, blocks, threads,
                  sh->wrong[0] + sh->wrong[1], wide ? "wide lines" : "lines");
    // run_purlin_floor.sh's `stamps` build leaves clock64() stamps of the last launch at output + 2 MiB.
    long long st[22] = {};
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaMemcpy(st, out + (2 << 20), sizeof st, cudaMemcpyDeviceToHost));
    if (rank == 0 && st[0] != 0) {
      std::printf("  stamps (cycles since entry): griddep_wait %lld, state+reuse wait %lld, ops", st[1] - st[0],
                  st[2] - st[0]);
      for (int i = 0; i < st[12] && i < 8; ++i) std::printf(" %lld", st[3 + i] - st[0]);
      std::printf(", end_launch %lld (SM %lld)\n", st[11] - st[0], st[13]);
      if (st[14] != 0 || st[15] != 0)  // state_stamps: inside the launch-state phase
        std::printf("  state phase (cycles since entry): thread 0's state loads landed %lld, the reuse poll's loads "
                    "landed %lld, barrier entered %lld\n",
                    st[14] ? st[14] - st[0] : 0, st[15] ? st[15] - st[0] : 0, st[21] ? st[21] - st[0] : 0);
      if (st[18] != 0 || st[20] != 0)  // stamps_op: the last Reduce / Copy element of block 0's thread 0
        std::printf("  in ops (cycles since entry): reduce after src0 %lld, after src1.. %lld, after store %lld; "
                    "copy after load %lld, after store %lld\n",
                    st[16] ? st[16] - st[0] : 0, st[17] ? st[17] - st[0] : 0, st[18] ? st[18] - st[0] : 0,
                    st[19] ? st[19] - st[0] : 0, st[20] ? st[20] - st[0] : 0);
    }
    CHECK(cudaMemset(out + (2 << 20), 0, sizeof st));
    barrier(sh, rank, gen);
  }
  CHECK(cudaStreamSynchronize(s));
  ws.reset();
  if (rank == 1) std::_Exit(0);
  int status = 0;
  waitpid(child, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
