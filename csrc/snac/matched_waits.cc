// matched_waits.cc — which Waits a worker may make on its own slot (NOTE
// [matched waits] in plan.h): the Workspace accesses of every rank's plan,
// their conflicting pairs, and the catch-up Waits before each of a rank's
// unclean ops.
#include <algorithm>
#include <map>
#include <tuple>
#include <utility>
#include <vector>

#include "snac/plan.h"

namespace purlin::snac {

namespace {

// One Workspace access of one Copy / Reduce op.
struct WsAccess {
  int32_t owner;  // whose Workspace
  int32_t rank;   // whose plan
  int32_t op;     // index in that plan's ops
  int32_t round;  // the op's round
  int64_t lo, n;  // elements [lo, lo + n); n is also the op's element count
  bool write;
};

// Rounds of the writes cut exactly like (owner, lo, n), sorted.
using WriteRounds = std::map<std::tuple<int32_t, int64_t, int64_t>, std::vector<int32_t>>;

// Whether a write cut like `a` lies in a round strictly between a's and b's
// (a's round earlier): then the pair (a, b) is ordered through it.
bool overwritten_between(const WriteRounds& writes, const WsAccess& a, int32_t later) {
  if (a.round < 0 || later <= a.round + 1) return false;
  auto it = writes.find({a.owner, a.lo, a.n});
  if (it == writes.end()) return false;
  auto r = std::upper_bound(it->second.begin(), it->second.end(), a.round);
  return r != it->second.end() && *r < later;
}

void collect(const Plan& plan, std::vector<WsAccess>* out) {
  for (size_t i = 0; i < plan.ops.size(); ++i) {
    const Op& op = plan.ops[i];
    if ((op.code != OpCode::Copy && op.code != OpCode::Reduce) || op.n <= 0) continue;
    auto add = [&](const Ref& r, bool write) {
      if (r.buf == Buf::Workspace)
        out->push_back(WsAccess{r.rank, plan.rank, static_cast<int32_t>(i), op.round, r.offset, op.n, write});
    };
    add(op.dst, true);
    for (int k = 0; k < op.src_count; ++k) add(plan.srcs[op.src_begin + k], false);
  }
}

// Marks unclean[rank][op] for both ops of every unmatched conflicting pair.
void find_unclean(std::vector<WsAccess>& acc, std::vector<std::vector<bool>>* unclean) {
  WriteRounds writes;
  for (const WsAccess& a : acc)
    if (a.write && a.round >= 0) writes[{a.owner, a.lo, a.n}].push_back(a.round);
  for (auto& [key, rounds] : writes) std::sort(rounds.begin(), rounds.end());
  std::sort(acc.begin(), acc.end(), [](const WsAccess& a, const WsAccess& b) {
    return a.owner != b.owner ? a.owner < b.owner : a.lo < b.lo;
  });
  // Every overlapping pair is seen once: from the access that starts first
  // (or first in this order), scanning the ones that start inside it.
  for (size_t i = 0; i < acc.size(); ++i) {
    const WsAccess& x = acc[i];
    for (size_t j = i + 1; j < acc.size() && acc[j].owner == x.owner && acc[j].lo < x.lo + x.n; ++j) {
      const WsAccess& y = acc[j];
      if (!x.write && !y.write) continue;
      if (x.rank == y.rank && x.op == y.op) continue;
      if (x.rank == y.rank && x.owner == x.rank) continue;  // local barriers order these
      if (x.lo == y.lo && x.n == y.n) continue;             // matched: worker b meets worker b
      if (x.round >= 0 && y.round >= 0 &&                   // ordered through a write between them
          (x.round < y.round ? overwritten_between(writes, x, y.round) : overwritten_between(writes, y, x.round)))
        continue;
      (*unclean)[x.rank][x.op] = true;
      (*unclean)[y.rank][y.op] = true;
    }
  }
}

}  // namespace

void mark_matched_waits(std::vector<Plan>* plans, int rank) {
  std::vector<WsAccess> acc;
  std::vector<std::vector<bool>> unclean(plans->size());
  for (const Plan& p : *plans) {
    collect(p, &acc);
    unclean[p.rank].assign(p.ops.size(), false);
  }
  find_unclean(acc, &unclean);

  Plan& plan = (*plans)[rank];
  std::vector<Op> ops;
  ops.reserve(plan.ops.size() + 2 * plans->size());
  // (peer, flag) -> highest value waited for so far, and the value the last
  // catch-up waited for on every slot.
  std::map<std::pair<int, int>, std::pair<uint64_t, uint64_t>> waited;
  for (size_t i = 0; i < plan.ops.size(); ++i) {
    Op op = plan.ops[i];
    if (unclean[rank][i]) {
      // This op runs in the all-slot protocol's state: wait on every slot
      // for what own-slot Waits since the last catch-up waited for.
      for (auto& [key, values] : waited) {
        if (values.first <= values.second) continue;
        Op w;
        w.code = OpCode::Wait;
        w.peer = key.first;
        w.flag = static_cast<Flag>(key.second);
        w.value = values.first;
        w.phase = "catch up: wait for every worker of the peer";
        w.round = op.round;
        ops.push_back(w);
        values.second = values.first;
      }
    }
    if (op.code == OpCode::Wait) {
      op.matched = true;
      uint64_t& v = waited[{op.peer, static_cast<int>(op.flag)}].first;
      v = std::max(v, op.value);
    }
    ops.push_back(op);
  }
  plan.ops = std::move(ops);
}

}  // namespace purlin::snac
