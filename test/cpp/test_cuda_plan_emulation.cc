// test_cuda_plan_emulation.cc — the plan kernel's protocol, run on the CPU.
//
// Every rank x block of plan_kernel.cuh becomes a thread that interprets the
// rank's lowered plan (atom/cuda/device_plan.h) exactly as the kernel does:
// the same block partition (part_size), Wait/Signal on per-block flag slots,
// LocalSync, the Done handshake that opens and closes every collective (NOTE
// [device reuse]: the last block to finish raises Done) and the rank's epochs.
// Every collective launches its own number of blocks (1..kBlocks, as
// launch_config picks by size); zero-copy plans (NOTE [zero-copy]) read peers'
// inputs in place, and after each of those the "caller" overwrites its input,
// so a missing Release wait shows up as a race; push plans (NOTE [push])
// write into peers' workspaces. Each thread runs the whole
// sequence of collectives like a stream: its rank's blocks meet between
// collectives (a kernel boundary), ranks do not (no host handshake on GPUs).
// Random pauses, and blocks that are made slow for a whole collective, shake
// the interleavings. Hundreds of collectives of random kinds, sizes, in-place
// layouts and workspace sizes run on one "group" and every output is checked
// exactly (int32 sums). On top of that a happens-before race detector
// (vector clocks; flags, local barriers and kernel boundaries are the only
// synchronisation) checks every element access: a missing local barrier, a
// wrong epoch or an unsafe workspace reuse is reported as a race even when
// this run's timing happened to produce the right values. (Removing the
// LocalSync insertion or the Done wait makes it fail.)
//
// What it does not cover: the CUDA code itself (ptx.cuh, copy.cuh,
// reduce.cuh), which the GPU tests (test/test_gpu_collectives.py) exercise.
// Build: g++ -std=c++17 -O2 -Icsrc -x c++ csrc/atom/cuda/device_plan.cu -x none
//        csrc/snac/{planner,spec,collectives}.cc csrc/common/types.cc this.cc -pthread
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "atom/cuda/device_plan.h"
#include "atom/cuda/signal_pad.h"
#include "snac/collectives.h"

namespace cu = purlin::atom::cuda;
namespace snac = purlin::snac;
using purlin::RedOp;

namespace {

constexpr int kBlocks = 4;
constexpr int64_t kEsize = 4;  // int32 elements

int g_failed = 0;
int64_t g_launches = 0, g_ops = 0, g_syncs = 0;
std::atomic<int64_t> g_races{0};

// ---- happens-before race detector --------------------------------------------
// One vector clock per emulated block (thread t = rank * kBlocks + block).
using VC = std::vector<uint32_t>;

void join(VC& a, const VC& b) {
  for (size_t i = 0; i < a.size(); ++i) a[i] = std::max(a[i], b[i]);
}

// Releases on one flag slot: (value, clock of the releasing block). An
// acquire that needs value >= v takes the EARLIEST such release: a waiter may
// see exactly that one, so races possible under any schedule are reported.
struct SyncSlot {
  std::mutex mu;
  std::vector<std::pair<uint64_t, VC>> history;

  void release(uint64_t v, VC& vc, int t) {
    {
      std::lock_guard<std::mutex> g(mu);
      history.emplace_back(v, vc);
    }
    ++vc[t];
  }
  void acquire(uint64_t target, VC& vc) {
    std::lock_guard<std::mutex> g(mu);
    for (const auto& h : history)
      if (h.first >= target) {
        join(vc, h.second);
        return;
      }
  }
};

// Shadow of one int32 element: the last write and the reads since.
struct Cell {
  int16_t wt = -1;
  uint32_t wc = 0;
  std::vector<std::pair<int16_t, uint32_t>> reads;
};

std::mutex g_stripes[1024];
std::mutex& stripe(const Cell* c) { return g_stripes[(reinterpret_cast<uintptr_t>(c) / sizeof(Cell)) % 1024]; }

void race(const char* what, int t, int other, const char* phase) {
  if (g_races.fetch_add(1) < 5)
    std::printf("RACE %s: block %d (rank %d) vs block %d (rank %d), op phase '%s'\n", what, t % kBlocks,
                t / kBlocks, other % kBlocks, other / kBlocks, phase);
}

void on_read(Cell* c, const VC& vc, int t, const char* phase) {
  std::lock_guard<std::mutex> g(stripe(c));
  if (c->wt >= 0 && c->wc > vc[c->wt]) race("write -> read", t, c->wt, phase);
  for (auto& r : c->reads)
    if (r.first == t) {
      r.second = vc[t];
      return;
    }
  c->reads.emplace_back(static_cast<int16_t>(t), vc[t]);
}

void on_write(Cell* c, const VC& vc, int t, const char* phase) {
  std::lock_guard<std::mutex> g(stripe(c));
  if (c->wt >= 0 && c->wc > vc[c->wt]) race("write -> write", t, c->wt, phase);
  for (const auto& r : c->reads)
    if (r.second > vc[r.first]) race("read -> write", t, r.first, phase);
  c->reads.clear();
  c->wt = static_cast<int16_t>(t);
  c->wc = vc[t];
}

struct RankState {
  std::vector<int32_t> ws;                        // workspace: two slots
  std::vector<Cell> ws_cells;
  std::vector<std::atomic<uint64_t>> flags;       // [kind][from][block]
  std::vector<std::atomic<uint64_t>> local;       // [block]
  std::vector<SyncSlot> flag_sync, local_sync;    // their release histories
  uint64_t base = 0, lbase = 0;                   // the pad's epoch words
  std::mutex finish_mu;                           // the pad's `finished` counter
  int finished = 0;
  VC finish_acc;                                  // clocks of the blocks that ended
  RankState(int world, int64_t ws_elems)
      : ws(ws_elems), ws_cells(ws_elems), flags(cu::kFlagKinds * world * kBlocks), local(kBlocks),
        flag_sync(cu::kFlagKinds * world * kBlocks), local_sync(kBlocks) {}
};

struct Group {
  int world;
  int64_t slot_elems;
  std::vector<std::unique_ptr<RankState>> ranks;
  Group(int w, int64_t slot) : world(w), slot_elems(slot) {
    for (int r = 0; r < w; ++r) ranks.push_back(std::make_unique<RankState>(w, 2 * slot));
  }
  static size_t slot(int world, int kind, int from, int block) {
    return (static_cast<size_t>(kind) * world + from) * kBlocks + block;
  }
  std::atomic<uint64_t>& flag(int at, int kind, int from, int block) { return ranks[at]->flags[slot(world, kind, from, block)]; }
  SyncSlot& sync(int at, int kind, int from, int block) { return ranks[at]->flag_sync[slot(world, kind, from, block)]; }
};

// One rank's call: its plan and its Input / Output (pointers into its memory).
struct Call {
  cu::DevicePlan plan;
  int blocks = kBlocks;    // this launch's block count (same on every rank)
  bool zero_copy = false;
  const Call* all = nullptr;  // every rank's call (peers' inputs); a vector buffer, stable under moves
  int32_t* in = nullptr;
  int32_t* out = nullptr;
  int32_t* mem = nullptr;  // the rank's memory (in and out point into it) and its shadow
  Cell* cells = nullptr;
};

void pause(std::mt19937& rng, bool slow) {
  const unsigned x = rng() % 64;
  if (slow) std::this_thread::sleep_for(std::chrono::microseconds(100 + rng() % 400));
  else if (x == 0) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 50));
  else if (x < 8) std::this_thread::yield();
}

// The kernel boundary between a rank's collectives: its blocks meet (and
// their clocks: everything before the boundary happens before what follows).
class RankBarrier {
 public:
  void arrive_and_wait(VC& vc, int t) {
    std::unique_lock<std::mutex> lk(mu_);
    if (acc_.empty()) acc_.assign(vc.size(), 0);
    join(acc_, vc);
    const uint64_t my = gen_;
    if (++count_ == kBlocks) {
      done_ = acc_;
      acc_.assign(vc.size(), 0);
      count_ = 0;
      ++gen_;
      cv_.notify_all();
    } else {
      cv_.wait(lk, [&] { return gen_ != my; });
    }
    join(vc, done_);
    ++vc[t];
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int count_ = 0;
  uint64_t gen_ = 0;
  VC acc_, done_;
};

void wait_all(std::atomic<uint64_t>* slots, int count, uint64_t target, const char* what) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < count; ++i)
    while (slots[i].load(std::memory_order_acquire) < target) {
      std::this_thread::yield();
      if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(20)) {
        std::fprintf(stderr, "DEADLOCK waiting for %s slot %d >= %llu\n", what, i, (unsigned long long)target);
        std::abort();
      }
    }
}

// The body of plan_kernel<int32_t> for block b of rank r.
void run_block(Group& g, int r, int b, const Call& c, std::mt19937& rng, bool slow, VC& vc) {
  RankState& me = *g.ranks[r];
  const int t = r * kBlocks + b;
  const int G = c.blocks;
  const uint64_t base = me.base, lbase = me.lbase;
  auto acquire_all = [&](int at, int kind, int from, uint64_t target) {
    for (int k = 0; k < G; ++k) g.sync(at, kind, from, k).acquire(target, vc);
  };
  for (int q = 0; q < g.world; ++q)
    if (q != r) {  // one Done word per peer
      wait_all(&g.flag(r, cu::kDone, q, 0), 1, base, "Done");
      g.sync(r, cu::kDone, q, 0).acquire(base, vc);
    }
  struct Ptr {
    int32_t* p;
    Cell* cell;
  };
  auto resolve = [&](const cu::DevRef& ref) -> Ptr {
    switch (ref.buf) {
      case cu::kInput: {
        const Call& o = ref.rank == r ? c : c.all[ref.rank];  // a peer's input: zero-copy plans
        return {o.in + ref.offset, o.cells + (o.in - o.mem) + ref.offset};
      }
      case cu::kOutput: return {c.out + ref.offset, c.cells + (c.out - c.mem) + ref.offset};
      default: return {g.ranks[ref.rank]->ws.data() + ref.offset, g.ranks[ref.rank]->ws_cells.data() + ref.offset};
    }
  };
  for (const cu::DevOp& op : c.plan.ops) {
    pause(rng, slow);
    const char* phase = cu::interned_name(op.phase);
    switch (op.code) {
      case cu::kWait:
        wait_all(&g.flag(r, op.flag, op.peer, 0), G, base + op.value, "Staged/Consumed");
        acquire_all(r, op.flag, op.peer, base + op.value);
        break;
      case cu::kSignal:
        g.sync(op.peer, op.flag, r, b).release(base + op.value, vc, t);
        g.flag(op.peer, op.flag, r, b).store(base + op.value, std::memory_order_release);
        break;
      case cu::kLocalSync:
        me.local_sync[b].release(lbase + op.value, vc, t);
        me.local[b].store(lbase + op.value, std::memory_order_release);
        wait_all(me.local.data(), G, lbase + op.value, "local");
        for (int k = 0; k < G; ++k) me.local_sync[k].acquire(lbase + op.value, vc);
        break;
      case cu::kCopy:
      case cu::kReduce: {
        const int64_t per = cu::part_size(op.n, G, kEsize), lo = b * per, hi = std::min(op.n, lo + per);
        if (lo >= hi) break;
        Ptr dst = resolve(op.dst);
        std::vector<Ptr> srcs;
        for (int k = 0; k < op.src_count; ++k) srcs.push_back(resolve(c.plan.srcs[op.src_begin + k]));
        const int64_t mid = lo + (hi - lo) / 2;  // a pause in the middle of the block's share
        for (int64_t i = lo; i < hi; ++i) {
          if (i == mid) pause(rng, slow);
          if (op.code == cu::kCopy && srcs[0].p == dst.p) continue;  // the kernel skips dst == src copies
          int32_t v = 0;
          for (size_t k = 0; k < srcs.size(); ++k) {
            on_read(srcs[k].cell + i, vc, t, phase);
            v = k == 0 ? srcs[k].p[i] : static_cast<int32_t>(static_cast<uint32_t>(v) + static_cast<uint32_t>(srcs[k].p[i]));
          }
          on_write(dst.cell + i, vc, t, phase);
          dst.p[i] = v;
        }
        break;
      }
    }
  }
  // The last block to finish advances the epochs and raises Done.
  std::lock_guard<std::mutex> lk(me.finish_mu);
  if (me.finish_acc.empty()) me.finish_acc.assign(vc.size(), 0);
  join(me.finish_acc, vc);
  if (++me.finished < G) return;
  me.finished = 0;
  join(vc, me.finish_acc);
  me.finish_acc.assign(vc.size(), 0);
  const uint64_t next = base + c.plan.steps + 1;
  me.base = next;
  me.lbase = lbase + c.plan.local_syncs;
  for (int q = 0; q < g.world; ++q)
    if (q != r) {
      g.sync(q, cu::kDone, r, 0).release(next, vc, t);
      g.flag(q, cu::kDone, r, 0).store(next, std::memory_order_release);
    }
}

enum class Kind { AllReduce, AllGather, ReduceScatter, Broadcast, AllToAll };
enum class Layout { Disjoint, InPlace };  // InPlace: the c10d in-place form of the op

struct Case {
  Kind kind;
  Layout layout;
  int64_t n;
  bool two_shot;
  int root;
  std::vector<std::vector<int64_t>> splits;
  int blocks = kBlocks;
  bool zero_copy = false;
  bool push = false;  // NOTE [push]
};

std::string name_of(const Case& c) {
  static const char* kinds[] = {"all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all"};
  return std::string(kinds[static_cast<int>(c.kind)]) + (c.layout == Layout::InPlace ? " in-place" : "") +
         (c.two_shot ? " two-shot" : "") + (c.zero_copy ? " zero-copy" : "") + (c.push ? " push" : "") + " n=" + std::to_string(c.n) +
         " blocks=" + std::to_string(c.blocks);
}

// The engine's rule (cuda_group.cc, NOTE [zero-copy in place]).
bool zero_copy_allowed(Kind k, cu::IoAlias alias, bool two_shot) {
  if (alias == cu::IoAlias::Disjoint) return true;
  return alias == cu::IoAlias::Same && ((k == Kind::AllReduce && two_shot) || k == Kind::Broadcast);
}

// One collective as every rank calls it: plans, memory, inputs.
struct Prepared {
  Case cs;
  std::vector<std::vector<int32_t>> mem, inputs;
  std::vector<std::vector<Cell>> cells;
  std::vector<Call> calls;
};

Prepared prepare(const Group& g, const Case& cs, std::mt19937& rng) {
  const int W = g.world;
  const int64_t n = cs.n;
  snac::Spec spec;
  switch (cs.kind) {
    case Kind::AllReduce: spec = snac::all_reduce(W, n, RedOp::Sum); break;
    case Kind::AllGather: spec = snac::all_gather(W, n); break;
    case Kind::ReduceScatter: spec = snac::reduce_scatter(W, n, RedOp::Sum); break;
    case Kind::Broadcast: spec = snac::broadcast(W, n, cs.root); break;
    case Kind::AllToAll: spec = snac::all_to_all(W, cs.splits); break;
  }
  Prepared p;
  p.cs = cs;
  p.mem.resize(W);
  p.cells.resize(W);
  p.inputs.resize(W);
  p.calls.resize(W);
  for (int r = 0; r < W; ++r) {
    const int64_t ni = spec.input_numel[r], no = spec.output_numel[r];
    std::uniform_int_distribution<int32_t> val(-1000, 1000);
    p.inputs[r].resize(ni);
    for (auto& v : p.inputs[r]) v = val(rng);
    p.mem[r].assign(ni + no + 8, -7777777);
    int32_t* in = p.mem[r].data();
    int32_t* out = p.mem[r].data() + ni;
    if (cs.layout == Layout::InPlace) {  // c10d's in-place forms
      switch (cs.kind) {
        case Kind::AllReduce: case Kind::Broadcast: out = in; break;  // the same tensor
        case Kind::AllGather: in = out + r * n; break;                // input is the output's block r
        case Kind::ReduceScatter: out = in + r * n; break;            // output is the input's block r
        case Kind::AllToAll: break;
      }
    }
    std::copy(p.inputs[r].begin(), p.inputs[r].end(), in);
    // The engine's classification (request.cc io_alias, NOTE [direct local
    // reads]): c10d's in-place forms are Same or Shifted, all read directly.
    cu::IoAlias alias = cu::IoAlias::Disjoint;
    int64_t shift = 0;
    if (cs.layout == Layout::InPlace && cs.kind != Kind::AllToAll) {
      alias = in == out ? cu::IoAlias::Same : cu::IoAlias::Shifted;
      shift = in - out;
    }
    snac::PlanOptions opt;
    opt.align_elems = cu::kPartBytes / kEsize;
    opt.slot_elems = g.slot_elems;
    opt.direct_local = true;
    opt.read_peer_inputs = cs.zero_copy && zero_copy_allowed(cs.kind, alias, cs.two_shot);
    opt.push = cs.push;
    opt.reduce_algo = cs.two_shot ? snac::ReduceAlgo::TwoShot : snac::ReduceAlgo::OneShot;
    p.calls[r].plan = cu::lower_plan(snac::make_plan(spec, r, opt), cs.blocks, kEsize, alias, shift);
    p.calls[r].blocks = cs.blocks;
    p.calls[r].zero_copy = opt.read_peer_inputs;
    p.cells[r].resize(p.mem[r].size());
    p.calls[r].in = in;
    p.calls[r].out = out;
    p.calls[r].mem = p.mem[r].data();
    p.calls[r].cells = p.cells[r].data();
    p.calls[r].all = p.calls.data();
    g_ops += static_cast<int64_t>(p.calls[r].plan.ops.size());
    g_syncs += p.calls[r].plan.local_syncs;
  }
  return p;
}

void check(const Group& g, const Prepared& p) {
  const int W = g.world;
  const Case& cs = p.cs;
  const int64_t n = cs.n;
  for (int r = 0; r < W; ++r) {
    std::vector<int32_t> want;
    switch (cs.kind) {
      case Kind::AllReduce:
        want.assign(n, 0);
        for (int s = 0; s < W; ++s)
          for (int64_t i = 0; i < n; ++i) want[i] += p.inputs[s][i];
        break;
      case Kind::AllGather:
        for (int s = 0; s < W; ++s) want.insert(want.end(), p.inputs[s].begin(), p.inputs[s].end());
        break;
      case Kind::ReduceScatter:
        want.assign(n, 0);
        for (int s = 0; s < W; ++s)
          for (int64_t i = 0; i < n; ++i) want[i] += p.inputs[s][r * n + i];
        break;
      case Kind::Broadcast:
        if (r == cs.root && cs.layout == Layout::Disjoint) continue;  // the root's output is not written
        want = r == cs.root ? p.inputs[r] : p.inputs[cs.root];
        break;
      case Kind::AllToAll:
        for (int s = 0; s < W; ++s) {
          int64_t off = 0;
          for (int d = 0; d < r; ++d) off += cs.splits[s][d];
          want.insert(want.end(), p.inputs[s].begin() + off, p.inputs[s].begin() + off + cs.splits[s][r]);
        }
        break;
    }
    for (size_t i = 0; i < want.size(); ++i)
      if (p.calls[r].out[i] != want[i]) {
        std::printf("FAIL %s world=%d slot=%lld rank %d: element %zu is %d, expected %d (local barriers %u)\n",
                    name_of(cs).c_str(), W, (long long)g.slot_elems, r, i, p.calls[r].out[i], want[i],
                    p.calls[r].plan.local_syncs);
        ++g_failed;
        break;
      }
  }
}

// Runs the collectives in order on every rank: one thread per (rank, block),
// like one kernel launch per collective on one stream per rank.
void run_sequence(Group& g, const std::vector<Prepared>& seq, unsigned seed) {
  std::vector<RankBarrier> boundary(g.world);
  std::vector<std::thread> threads;
  for (int r = 0; r < g.world; ++r)
    for (int b = 0; b < kBlocks; ++b)
      threads.emplace_back([&g, &seq, &boundary, r, b, seed]() {
        const int t = r * kBlocks + b;
        std::mt19937 rng(seed * 1000003u + static_cast<unsigned>(t));
        VC vc(static_cast<size_t>(g.world) * kBlocks, 0);
        vc[t] = 1;
        for (const Prepared& p : seq) {
          if (p.calls[r].plan.rounds == 0) continue;  // not launched (on any rank)
          const bool slow = rng() % 6 == 0;           // a straggler block for this collective
          if (b < p.calls[r].blocks) run_block(g, r, b, p.calls[r], rng, slow, vc);
          boundary[r].arrive_and_wait(vc, t);
          if (p.calls[r].zero_copy && b == 0) {
            // The caller reuses its input once the collective returned: every
            // peer must have finished reading it (the plan's Release waits).
            const Call& c = p.calls[r];
            const int64_t ni = static_cast<int64_t>(p.inputs[r].size());
            for (int64_t i = 0; i < ni; ++i) on_write(c.cells + (c.in - c.mem) + i, vc, t, "caller reuses its input");
          }
        }
      });
  for (auto& t : threads) t.join();
  for (const Prepared& p : seq) g_launches += p.calls[0].plan.rounds > 0;
}

}  // namespace

int main(int argc, char** argv) {
  const int iters = argc > 1 ? std::atoi(argv[1]) : 150;
  std::mt19937 rng(12345);
  int ran = 0;
  {  // W=1, pieces of 512 / 513 elements: only the local barriers order round 0's reads before round 2's staging
    Group g(1, 640);
    std::vector<Prepared> seq;
    for (int it = 0; it < 10; ++it) seq.push_back(prepare(g, Case{Kind::AllReduce, Layout::InPlace, 1538, false, 0, {}}, rng));
    run_sequence(g, seq, 99);
    for (const Prepared& p : seq) check(g, p);
    ran += 10;
  }
  for (int world : {1, 2, 3}) {
    for (int64_t slot : {int64_t{512}, int64_t{1024}, int64_t{1} << 20}) {
      Group g(world, slot);
      std::vector<Prepared> seq;
      for (int it = 0; it < iters; ++it) {
        Case c;
        c.kind = static_cast<Kind>(rng() % 5);
        c.layout = rng() % 2 ? Layout::InPlace : Layout::Disjoint;
        static const int64_t sizes[] = {0, 1, 5, 127, 128, 129, 700, 1000, 2049, 5000};
        c.n = sizes[rng() % 10];
        c.two_shot = c.kind == Kind::AllReduce && rng() % 2;
        c.blocks = 1 + static_cast<int>(rng() % kBlocks);
        c.zero_copy = rng() % 3 == 0;
        c.push = rng() % 2 == 0;
        c.root = static_cast<int>(rng() % world);
        c.splits.assign(world, std::vector<int64_t>(world, 0));
        for (auto& row : c.splits)
          for (auto& s : row) s = rng() % 4 == 0 ? 0 : static_cast<int64_t>(rng() % 900);
        seq.push_back(prepare(g, c, rng));
      }
      run_sequence(g, seq, static_cast<unsigned>(rng()));
      for (const Prepared& p : seq) check(g, p);
      ran += iters;
    }
  }
  g_failed += static_cast<int>(g_races.load() > 0);
  std::printf("cuda plan emulation: %d collectives (%lld launched, %lld ops, %lld local barriers), %lld races, %d failed\n",
              ran, (long long)g_launches, (long long)g_ops, (long long)g_syncs, (long long)g_races.load(), g_failed);
  return g_failed ? 1 : 0;
}
