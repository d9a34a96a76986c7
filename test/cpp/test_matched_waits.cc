// test_matched_waits.cc — NOTE [matched waits] (snac/plan.h) on the plans
// of large collectives as the CUDA datapath makes them (64 MB workspace,
// 512-byte alignment, bf16): which Waits are matched, where catch-ups go,
// how rounds are cut. The protocol itself (races, results) is checked by
// test_cuda_plan_emulation.cc; this pins what the plans look like.
// Build: g++ -std=c++17 -Icsrc csrc/snac/{planner,matched_waits,spec,collectives}.cc
//        csrc/common/types.cc this.cc
#include <cstdio>
#include <cstring>
#include <string>

#include "snac/collectives.h"
#include "snac/plan.h"
#include "expect.h"

using namespace purlin;

namespace {

void expect(bool ok, const std::string& what) { test::expect(ok, what, /*verbose=*/true); }

struct Counts {
  int waits = 0, matched = 0, catch_up = 0, rounds = 0;
};

Counts count(const snac::Plan& p) {
  Counts c;
  c.rounds = p.rounds;
  for (const snac::Op& op : p.ops) {
    if (op.code != snac::OpCode::Wait) continue;
    ++c.waits;
    c.matched += op.matched;
    c.catch_up += std::strncmp(op.phase, "catch up", 8) == 0;
  }
  return c;
}

snac::PlanOptions cuda_like(bool two_shot, bool push, bool match) {
  snac::PlanOptions o;
  o.align_elems = 256;                 // kPartBytes / 2
  o.slot_elems = (int64_t{64} << 20) / 2 / 2;  // half a 64 MB workspace, bf16
  o.reduce_algo = two_shot ? snac::ReduceAlgo::TwoShot : snac::ReduceAlgo::OneShot;
  o.push = push;
  o.match_waits = match;
  return o;
}

}  // namespace

int main() {
  for (int W : {2, 3, 8}) {
    const int64_t n = int64_t{256} << 19;  // 256 MB of bf16
    const std::string w = " W=" + std::to_string(W);
    // Power-of-two sizes: equal rounds, every Wait matched, no catch-up.
    const Counts ar = count(snac::make_plan(snac::all_reduce(W, n, RedOp::Sum), 1, cuda_like(true, false, true)));
    expect(ar.waits > 0 && ar.matched == ar.waits && ar.catch_up == 0,
           "all_reduce two-shot 256M" + w + ": " + std::to_string(ar.matched) + " of " + std::to_string(ar.waits) +
               " waits matched, " + std::to_string(ar.catch_up) + " catch-ups, " + std::to_string(ar.rounds) + " rounds");
    snac::PlanOptions pushed = cuda_like(true, false, true);
    pushed.push_reduced = true;  // NOTE [push]: phase 1 written into the readers' slots
    const Counts pr = count(snac::make_plan(snac::all_reduce(W, n, RedOp::Sum), 0, pushed));
    expect(pr.waits > 0 && pr.matched == pr.waits && pr.catch_up == 0,
           "all_reduce two-shot push-reduced 256M" + w + ": all matched, " + std::to_string(pr.rounds) + " rounds");
    const int64_t per_rank = int64_t{64} << 19;  // 64 MB of bf16 per rank: equal rounds at any W
    const Counts ag = count(snac::make_plan(snac::all_gather(W, per_rank), 0, cuda_like(false, true, true)));
    expect(ag.waits > 0 && ag.matched == ag.waits && ag.catch_up == 0, "all_gather push 64M per rank" + w + ": all matched");
    const Counts rs = count(snac::make_plan(snac::reduce_scatter(W, per_rank, RedOp::Sum), W - 1, cuda_like(false, false, true)));
    expect(rs.waits > 0 && rs.matched == rs.waits && rs.catch_up == 0, "reduce_scatter 64M per rank" + w + ": all matched");
    // Without the option: nothing matched, the same rounds as before (no search for even rounds).
    const Counts off = count(snac::make_plan(snac::all_reduce(W, n, RedOp::Sum), 1, cuda_like(true, false, false)));
    expect(off.matched == 0 && off.catch_up == 0 && off.rounds <= ar.rounds,
           "all_reduce two-shot 256M" + w + " without match_waits: " + std::to_string(off.rounds) + " rounds, none matched");
    // An odd size: the last round is shorter. The ops of rounds K - 3 and
    // K - 1 (its slot's neighbour) meet unmatched and run after catch-ups;
    // earlier rounds on that slot are ordered through round K - 3's writes.
    const int64_t odd = n + 12345;
    const Counts od = count(snac::make_plan(snac::all_reduce(W, odd, RedOp::Sum), 0, cuda_like(true, false, true)));
    expect(od.catch_up > 0 && od.catch_up < od.waits / 4,
           "all_reduce two-shot 256M+12345" + w + ": " + std::to_string(od.catch_up) + " catch-ups of " +
               std::to_string(od.waits) + " waits");
  }
  {  // A catch-up waits, on every slot, for the highest value waited for since the last one.
    snac::Plan p = snac::make_plan(snac::all_reduce(2, (int64_t{256} << 19) + 12345, RedOp::Sum), 0,
                                   cuda_like(true, false, true));
    bool ok = true, any = false;
    uint64_t highest[2][3] = {};
    for (const snac::Op& op : p.ops) {
      if (op.code != snac::OpCode::Wait) continue;
      uint64_t& h = highest[op.peer][static_cast<int>(op.flag)];
      if (std::strncmp(op.phase, "catch up", 8) == 0) {
        any = true;
        ok &= !op.matched && op.value == h;
      } else {
        ok &= op.matched;
        if (op.value > h) h = op.value;
      }
    }
    expect(any && ok, "catch-ups are unmatched and wait for the highest value waited for so far");
  }
  return purlin::test::test_summary("matched waits");
}
