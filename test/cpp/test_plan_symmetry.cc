// test_plan_symmetry.cc — every rank of an identical call derives the same
// CUDA call signature, and the plans they derive run correctly together.
//
// NOTE [symmetric use is rank-invariant] (backend/group/symmetric_use.h) and
// NOTE [protocol choice] (lowering/protocol_choice.h): a GPU
// collective has no host handshake, so each rank chooses its plan alone; two
// ranks that choose differently for the same call meet a call-tag error (or a
// wrong result, if their plans happen to fit together). This test builds
// every rank's Request for every built-in collective as the c10d layer does
// (backend/c10d/backend_ops.cc: a reduce's peers pass no output, a scatter's
// no input, in-place forms per op), with its tensors in the symmetric pool or
// not, in place or not, at every root, at sizes in every protocol class
// (empty, flagged lines, parity plans, workspace plans, pipelined rounds), for
// worlds 2-8, and runs each rank through the same steps as
// CudaGroup::launch (backend/cuda/cuda_group_launch.cc): the region plan
// first, then the pool's use (symmetric_use), then the Atom's choice
// (choose_protocol) and the call tag (call_signature). Every rank's tag and
// block count must match rank 0's; then the SNAC plans the ranks chose are
// run together by a simulation (any interleaving a seed picks; a Wait
// proceeds once its flag reached its value) on integer data, and every output
// element must equal the Spec's result (copies exact, sums exact).
//
// Requests and choices: builtin_calls.h.
// Build: g++ -std=c++17 -O2 -Icsrc csrc/snac/{planner,matched_waits,spec,spec_traits,collectives}.cc
//        csrc/common/types.cc csrc/backend/group/{request,symmetric_use}.cc
//        csrc/lowering/*.cc csrc/atom/cuda/interned_names.cc csrc/atom/cuda/protocol/*.cc this.cc
// Run:   ./a.out [max world, 8]
#include <algorithm>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "atom/cuda/protocol/launch_config.h"
#include "builtin_calls.h"
#include "expect.h"
#include "snac/collectives.h"
#include "snac/plan.h"

using namespace purlin;
using namespace purlin::backend;
using namespace purlin::test;
namespace cu = purlin::atom::cuda;

namespace {

// Small settings so that every protocol class appears at small sizes: lines
// to 4K per rank, parity plans to 64K, a 256K workspace (128K slots), two-shot
// all_reduce from 64K.
constexpr int64_t kLineMax = 4 << 10, kParityMax = 64 << 10, kWorkspace = 256 << 10, kTwoShot = 64 << 10;

// ---- the SNAC simulation ------------------------------------------------------
// Every rank's memory is one array of int64 (Input and Output where make_call
// put them, aliasing as they do), plus a workspace; flags per (rank, kind, from).
struct SimRank {
  std::vector<int64_t> mem, ws;
  std::map<std::pair<int, int>, uint64_t> flags;  // (kind, from) -> highest value raised
  size_t pc = 0;
};

int64_t value_of(int r, int64_t i) { return (r + 1) * 1000003 + i * 7 % 1009 - 500; }

// Runs every rank's plan; returns "" or what went wrong.
std::string simulate(const snac::Spec& spec, const std::vector<RankCall>& calls, const std::vector<Chosen>& ch,
                     std::mt19937& rng) {
  const int W = spec.world;
  std::vector<SimRank> R(W);
  int64_t mem_n = 0;
  for (int r = 0; r < W; ++r)
    mem_n = std::max({mem_n, calls[r].in_at + calls[r].rq.in_numel, calls[r].out_at + calls[r].rq.out_numel});
  for (int r = 0; r < W; ++r) {
    R[r].mem.assign(static_cast<size_t>(mem_n), -7777777);
    int64_t ws_n = 0;
    for (const auto& p : ch) ws_n = std::max(ws_n, p.choice.plan.workspace_elems);
    R[r].ws.assign(static_cast<size_t>(std::max<int64_t>(ws_n, 1)), -1);
    for (int64_t i = 0; i < calls[r].rq.in_numel; ++i) R[r].mem[calls[r].in_at + i] = value_of(r, i);
  }
  auto at = [&](const snac::Ref& ref, int self, int64_t i) -> int64_t& {
    const int owner = ref.rank >= 0 ? ref.rank : self;
    if (ref.buf == snac::Buf::Workspace) return R[owner].ws.at(static_cast<size_t>(ref.offset + i));
    const int64_t base = ref.buf == snac::Buf::Input ? calls[owner].in_at : calls[owner].out_at;
    return R[owner].mem.at(static_cast<size_t>(base + ref.offset + i));
  };
  std::vector<int> live(W);
  for (int r = 0; r < W; ++r) live[r] = r;
  int stuck = 0;
  while (!live.empty()) {
    const size_t pick = rng() % live.size();
    const int r = live[pick];
    const snac::Plan& plan = ch[r].choice.plan;
    if (R[r].pc >= plan.ops.size()) {
      live.erase(live.begin() + static_cast<long>(pick));
      stuck = 0;
      continue;
    }
    const snac::Op& op = plan.ops[R[r].pc];
    if (op.code == snac::OpCode::Wait) {
      if (R[r].flags[{static_cast<int>(op.flag), op.peer}] < op.value) {
        if (++stuck > 100000) return "deadlock: rank " + std::to_string(r) + " waits at op " + std::to_string(R[r].pc);
        continue;
      }
    } else if (op.code == snac::OpCode::Signal) {
      uint64_t& f = R[op.peer].flags[{static_cast<int>(op.flag), r}];
      f = std::max(f, op.value);
    } else {
      std::vector<int64_t> acc(static_cast<size_t>(op.n));
      for (int k = 0; k < op.src_count; ++k) {
        const snac::Ref& src = plan.srcs[op.src_begin + k];
        for (int64_t i = 0; i < op.n; ++i) {
          const int64_t v = at(src, r, i);
          acc[i] = k == 0 ? v : acc[i] + v;
        }
      }
      for (int64_t i = 0; i < op.n; ++i) at(op.dst, r, i) = acc[i];
    }
    ++R[r].pc;
    stuck = 0;
  }
  // Every destination element holds the Spec's result.
  for (const auto& chunk : spec.chunks) {
    for (const auto& d : chunk.dests) {
      for (int64_t e = 0; e < chunk.numel(); ++e) {
        int64_t want = 0;
        for (size_t k = 0; k < chunk.sources.size(); ++k) {
          const auto& s = chunk.sources[k];
          const int64_t si = s.region.offset + (e / s.region.row_len) * s.region.stride + e % s.region.row_len;
          want += value_of(s.rank, si);
        }
        const int64_t di = d.region.offset + (e / d.region.row_len) * d.region.stride + e % d.region.row_len;
        const int64_t got = R[d.rank].mem[calls[d.rank].out_at + di];
        if (got != want)
          return "rank " + std::to_string(d.rank) + " output element " + std::to_string(di) + " holds " +
                 std::to_string(got) + ", expected " + std::to_string(want);
      }
    }
  }
  return "";
}

int64_t g_cases = 0, g_simulated = 0;
std::map<std::string, int64_t> g_protocols;

void check(const Case& c, int W, const cu::ProtocolSettings& s, std::mt19937& rng, bool simulate_data) {
  std::vector<PeerMeta> all;
  const std::vector<RankCall> calls = calls_of(c, W, &all);
  const std::string why = check_agreement(all, 0);
  expect(why.empty(), describe(c, W) + ": the arguments disagree: " + why);
  if (!why.empty()) return;
  std::vector<Chosen> ch;
  for (int r = 0; r < W; ++r) ch.push_back(choose(s, calls[r].rq, all, r, kTwoShot));
  ++g_cases;
  ++g_protocols[ch[0].choice.protocol];
  bool same = true;
  for (int r = 1; r < W; ++r) {
    if (ch[r].tag != ch[0].tag || ch[r].choice.blocks != ch[0].choice.blocks) {
      std::printf("FAIL %s: rank %d chose %s (%d blocks, tag %llx), rank 0 %s (%d blocks, tag %llx)\n",
                  describe(c, W).c_str(), r, ch[r].choice.protocol.c_str(), ch[r].choice.blocks,
                  static_cast<unsigned long long>(ch[r].tag), ch[0].choice.protocol.c_str(), ch[0].choice.blocks,
                  static_cast<unsigned long long>(ch[0].tag));
      ++purlin::test::failures();
      same = false;
      break;
    }
  }
  if (!same || !simulate_data) return;
  const snac::Spec spec = build_spec(calls[0].rq, all);
  const std::string bad = simulate(spec, calls, ch, rng);
  expect(bad.empty(), describe(c, W) + " (" + ch[0].choice.protocol + "): " + bad);
  ++g_simulated;
}

}  // namespace

int main(int argc, char** argv) {
  const int max_world = argc > 1 ? std::atoi(argv[1]) : 8;
  std::mt19937 rng(20261204);
  const cu::LaunchConfig config = cu::launch_config_sm90(cu::DeviceInfo{9, 0, 132});
  const CollOp ops[] = {CollOp::AllReduce, CollOp::Reduce,  CollOp::Broadcast, CollOp::AllGather,
                        CollOp::ReduceScatter, CollOp::AllToAll, CollOp::Gather,   CollOp::Scatter};
  for (int W = 2; W <= max_world; ++W) {
    for (cu::LineFormat format : {cu::LineFormat::Narrow, cu::LineFormat::Wide}) {
      const cu::ProtocolSettings s = cu::make_protocol_settings(W, kWorkspace, kLineMax, kParityMax, format, config);
      for (DType dt : {DType::Float32, DType::BFloat16}) {
        const int64_t es = static_cast<int64_t>(dtype_size(dt));
        // Elements per rank: empty, one, lines (odd), parity plans, workspace plans, pipelined rounds.
        const int64_t sizes[] = {0, 1, 301, (kLineMax + 2000) / es, (kParityMax + 6000) / es,
                                 (3 * kWorkspace + 1234) / es};
        for (CollOp op : ops) {
          const bool rooted = op == CollOp::Reduce || op == CollOp::Broadcast || op == CollOp::Gather ||
                              op == CollOp::Scatter;
          for (int root = 0; root < (rooted ? W : 1); ++root)
            for (int64_t n : sizes)
              for (bool pool : {false, true})
                for (Form form : {Form::OutOfPlace, Form::InPlace})
                  for (bool uneven : {false, true}) {
                    if (uneven && op != CollOp::AllToAll) continue;
                    Case c;
                    c.op = op;
                    c.root = root;
                    c.n = n;
                    c.uneven = uneven;
                    c.form = form;
                    c.pool = pool;
                    c.dtype = dt;
                    // The data simulation where it stays quick: all sizes to world 4, the
                    // smaller ones beyond; the signatures everywhere.
                    const bool sim = format == cu::LineFormat::Narrow && (W <= 4 || n * W * W < 400000);
                    check(c, W, s, rng, sim);
                  }
        }
      }
    }
  }
  std::printf("%lld calls, %lld simulated; protocols:", static_cast<long long>(g_cases),
              static_cast<long long>(g_simulated));
  for (const auto& [name, count] : g_protocols) std::printf(" %s %lld;", name.c_str(), static_cast<long long>(count));
  std::printf("\n");
  return purlin::test::test_summary("test_plan_symmetry");
}
