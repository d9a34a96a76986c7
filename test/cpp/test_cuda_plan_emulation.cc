// test_cuda_plan_emulation.cc — the plan kernel's protocol, run on the CPU.
//
// Every rank x block of plan_kernel.cuh becomes a thread that interprets the
// rank's lowered plan (lowering/device_plan.h) exactly as the kernel does:
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
// the interleavings. Hundreds of collectives of random kinds (the built-ins,
// asymmetric ones included, and the strided interleaved all-gather), sizes,
// in-place layouts and workspace sizes run on one "group" and every output is checked
// exactly (int32 sums). On top of that a happens-before race detector
// (vector clocks; flags, local barriers and kernel boundaries are the only
// synchronisation) checks every element access: a missing local barrier, a
// wrong epoch or an unsafe workspace reuse is reported as a race even when
// this run's timing happened to produce the right values. (Removing the
// LocalSync insertion or the Done wait makes it fail.)
//
// Line plans (NOTE [line plans], line_kernel.cuh) run in the same sequences:
// a small collective whose one-round push plan fits the line region (the
// host's choice, lines_wanted / plan_for in cuda_group_plans.cc, re-derived here and
// checked to be equal on every rank) runs the line kernel instead: Workspace
// refs go to one parity (lseq % 2) of the owner's line region, modelled per
// 16-byte line (two int32 and the flag, stored and loaded as one unit: a
// store is a release, a load that sees the flag acquires it), Wait / Signal
// are skipped, and the launch opens with the pbase wait (every peer finished
// the collective before last) instead of the Done wait. Every launch sets
// pbase = base at its end; line launches also advance lseq. The line region
// is race-checked like the workspace, so a parity reused while a peer may
// still read it (asymmetric collectives, plan kernels in between) is
// reported.
//
// Wide lines (NOTE [wide lines], wide_line_op.cuh): half of the line requests
// ask for the wide format; where the plan allows it (contiguous sources and
// destinations) it is laid out with whole-line pieces (kWideAlignBytes) in
// the wide-line region, lowered with Partition::WideLines, and run line by
// line over each block's whole lines: a 128-byte line is one unit of 30
// int32, stored and polled like a narrow line. Every wide access checks that
// its piece starts on a line (two writers in one line would be a torn line).
//
// Parity plans (NOTE [parity plans], plan_kernel.cuh): a region request whose
// collective is too large for lines but fits the parity region runs its
// one-round push plan with Workspace refs in one half (lseq % 2) of the
// owners' parity regions, opens with the pbase wait, skips Consumed
// signals and waits, and advances lseq. Call tags are modelled for every
// plan-kernel launch: block 0 writes its tag word into each peer (the
// call_tag slot, or ptag[lseq % 2] for parity plans) at the start and the
// first Staged wait on a peer reads it: a tag overwritten by the peer's next
// collective before it was read is a race (and a mismatch).
//
// Matched waits (NOTE [matched waits] in snac/plan.h): three in four
// plan-kernel collectives are planned with match_waits, and a Wait lowered
// with own_slot waits for (and acquires) the peer's slot of the waiting
// block only; the race detector then checks SNAC's claim that this block's
// accesses conflict only with that block's. Small workspaces give many
// rounds, so the catch-up before the last, shorter round runs too.
//
// Peer outputs (NOTE [peer outputs] in snac/plan.h): some all_gathers and
// broadcasts write straight into the peers' outputs. Before such a
// collective the "caller" writes its output (its earlier work, done before
// any block starts) and after it reads it: a peer writing before this rank
// said its output is free, or after it returned, is a race.
//
// Mutations (argv[2]) break the protocol on purpose and must make the run
// fail: no-reuse-wait (no pbase wait), one-parity, short-flag-period (flags
// repeat after 6 line collectives instead of 2^33), one-tag-slot (parity
// plans write the call_tag slot), relaxed-parity-done (a parity plan's Done
// orders nothing, as a line Done would: the next writer of the half races
// with this rank's reads; why parity plans keep the released Done),
// wide-unaligned (wide-line pieces aligned to 512 bytes instead of whole
// lines), all-own-slot (every Wait on the own slot, matched or not, but for
// the call-tag checks: the data races alone must show), no-peer-ready (peer-output
// writers do not wait for the destination's "output free"), tag-zero (a tagged
// wait takes a never-written stamp word, 0, for another call's: NOTE [tagged waits]).
//
// Worlds 1-3 run with three workspace sizes each, world 4 with one.
// What it does not cover: the CUDA code itself (ptx.cuh, copy.cuh,
// reduce.cuh, the 16-byte line accesses of flagged_line.cuh, the wide lines' 128-byte
// group stores and loads of wide_line.cuh and their hardware assumption, the call-tag
// half of the line flag), which the GPU tests (test/gpu/test_gpu_collectives.py)
// exercise.
// Build: g++ -std=c++17 -O2 -Icsrc csrc/lowering/*.cc csrc/atom/cuda/interned_names.cc csrc/atom/cuda/protocol/*.cc
//        csrc/snac/{planner,matched_waits,spec,collectives}.cc csrc/common/types.cc this.cc -pthread
// Run:   ./a.out [collectives per group, 150] [mutation]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "atom/cuda/call_tag.h"
#include "atom/cuda/device/plan_format.h"
#include "atom/cuda/interned_names.h"
#include "atom/cuda/protocol/launch_config.h"
#include "atom/cuda/signal_pad.h"
#include "backend/group/request.h"
#include "backend/group/symmetric_use.h"
#include "lowering/device_plan.h"
#include "lowering/protocol_choice.h"
#include "snac/collectives.h"

namespace cu = purlin::atom::cuda;
namespace lowering = purlin::lowering;
namespace pb = purlin::backend;
namespace snac = purlin::snac;
using purlin::RedOp;

namespace {

constexpr int kBlocks = 4;
constexpr int64_t kEsize = 4;                     // int32 elements
constexpr int64_t kLineElems = 8 / kEsize;        // payload elements of one 16-byte line (kLinePayload)
constexpr int64_t kWideElems = cu::kWidePayload / kEsize;  // payload elements of one 128-byte wide line
constexpr int64_t kLineMaxBytes = 2048;           // TORCH_PURLIN_CUDA_LINE_BYTES of every emulated group
constexpr int64_t kParityMaxBytes = 8192;         // TORCH_PURLIN_CUDA_PARITY_BYTES of every emulated group

// Deliberate protocol bugs (argv[2]): each must make the run fail.
enum class Mutation { None, NoReuseWait, OneParity, ShortFlagPeriod, OneTagSlot, RelaxedParityDone, WideUnaligned,
                       AllOwnSlot, NoPeerReady, TagZero };
Mutation g_mutation = Mutation::None;

int g_failed = 0;
int64_t g_launches = 0, g_line_launches = 0, g_wide_launches = 0, g_parity_launches = 0, g_ops = 0, g_syncs = 0;
int64_t g_peer_output_launches = 0;
int64_t g_own_waits = 0, g_catch_ups = 0;  // NOTE [matched waits]: own-slot Waits, catch-up Waits lowered
std::atomic<int64_t> g_races{0};
thread_local const char* t_case = "";  // the collective this emulated block runs (deadlock reports)
std::atomic<int64_t> g_off_line{0};  // wide-line accesses whose piece does not start on a line

// ---- happens-before race detector --------------------------------------------
// One vector clock per emulated block (thread t = rank * kBlocks + block).
using VC = std::vector<uint32_t>;

void join(VC& a, const VC& b) {
  for (size_t i = 0; i < a.size(); ++i) a[i] = std::max(a[i], b[i]);
}

// Releases on one flag slot: (value, clock of the releasing block). An
// acquire that needs value >= v takes the EARLIEST such release: a waiter may
// see exactly that one, so races possible under any schedule are reported.
// A target of 0 is met by the pad's initial value: it acquires nothing.
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
    if (target == 0) return;
    std::lock_guard<std::mutex> g(mu);
    for (const auto& h : history)
      if (h.first >= target) {
        join(vc, h.second);
        return;
      }
  }
};

// Shadow of one int32 element (or one flagged line): the last write and the reads since.
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

// ---- flagged lines (NOTE [flagged lines]) ------------------------------------
// The f0 half of line_flags() (flagged_line.cuh): seq % (2^32 - 1) + 1; the
// call-signature half (f1) adds nothing here. The mutation shortens the period.
uint32_t line_flag(uint64_t seq) {
  const uint64_t period = g_mutation == Mutation::ShortFlagPeriod ? 3 : 0xFFFFFFFFull;
  return static_cast<uint32_t>(seq % period + 1);
}

// One line: a narrow 16-byte line's kLineElems payload elements (each 8-byte
// half of the kernel's line carries the flag, so a matching flag proves the
// payload beside it) or a wide 128-byte line's kWideElems (NOTE [wide lines]:
// the line group's one-instruction store and load), and the flag, stored and
// loaded as one unit. A store is a release:
// a load that sees the flag acquires the writer's clock. `seq` is the
// emulator's own record of the line collective that wrote it (the kernel
// has only the flags), to name a stale or overwritten line.
struct Line {
  int32_t v[kWideElems] = {};  // narrow lines use the first kLineElems
  uint32_t flag = 0;   // cleared memory: never matches
  int64_t seq = -1;    // of the last store
  int64_t high = -1;   // of the latest collective that stored
  int16_t writer = -1;
  VC clock;
  Cell cell;           // race shadow of the whole line
};

std::mutex g_line_mu[256];
std::mutex& line_mu(const Line* l) { return g_line_mu[(reinterpret_cast<uintptr_t>(l) / sizeof(Line)) % 256]; }

// line_store: the tail of a partial line is zero-filled.
void line_store(Line& l, const int32_t* x, int64_t k, uint64_t seq, VC& vc, int t, const char* phase) {
  on_write(&l.cell, vc, t, phase);
  {
    std::lock_guard<std::mutex> g(line_mu(&l));
    for (int64_t j = 0; j < kWideElems; ++j) l.v[j] = j < k ? x[j] : 0;
    l.flag = line_flag(seq);
    l.seq = static_cast<int64_t>(seq);
    l.high = std::max(l.high, l.seq);
    l.writer = static_cast<int16_t>(t);
    l.clock = vc;
  }
  ++vc[t];
}

// line_wait: polls until the line carries this collective's flag (out: room
// for kWideElems). A line
// whose store of this collective was overwritten before this read (it would
// never match: a timeout on the GPU) or a stale line whose flag matches is
// reported, and taken.
void line_wait(Line& l, uint64_t seq, int32_t* out, VC& vc, int t, const char* phase) {
  const uint32_t flag = line_flag(seq);
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    {
      std::lock_guard<std::mutex> g(line_mu(&l));
      const bool lost = l.high >= static_cast<int64_t>(seq) && l.seq != static_cast<int64_t>(seq);
      if (l.flag == flag || lost) {
        if (lost) race("line overwritten before it was read", t, l.writer, phase);
        else if (l.seq != static_cast<int64_t>(seq)) race("stale line accepted (flag of an earlier collective)", t, l.writer, phase);
        std::memcpy(out, l.v, sizeof(l.v));
        join(vc, l.clock);
        break;
      }
    }
    std::this_thread::yield();
    if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(20)) {
      std::fprintf(stderr, "DEADLOCK in %s polling a flagged line (seq %llu)\n", t_case, (unsigned long long)seq);
      std::abort();
    }
  }
  on_read(&l.cell, vc, t, phase);
}

// ---- the group's memory -------------------------------------------------------
// NOTE [line plans] sizes (symmetric_workspace.cc): a parity holds every
// rank's contribution of the largest line collective plus alignment.
int64_t line_half_bytes(int world) {
  const int64_t payload = world * kLineMaxBytes + int64_t{world} * world * 512;
  return (payload * 2 + 4095) / 4096 * 4096;
}

// NOTE [wide lines]: the wide-line region's parity, 128 bytes per 120 of payload.
int64_t wide_half_bytes(int world) {
  const int64_t payload = world * kLineMaxBytes + int64_t{world} * world * cu::kWideAlignBytes;
  return ((payload + cu::kWidePayload - 1) / cu::kWidePayload * cu::kWideLineBytes + 4095) / 4096 * 4096;
}

// NOTE [parity plans] sizes (symmetric_workspace.cc), in int32 elements.
int64_t parity_half_elems(int world) {
  return (world * kParityMaxBytes + int64_t{world} * world * 512 + 4095) / 4096 * 4096 / kEsize;
}

constexpr int kTagSlots = 3;  // call_tag, ptag[0], ptag[1]

struct RankState {
  std::vector<int32_t> ws;                        // workspace: two slots
  std::vector<Cell> ws_cells;
  std::vector<Line> lines[2];                     // the line region's two parities
  std::vector<Line> wide[2];                      // the wide-line region's two parities
  std::vector<int32_t> par[2];                    // the parity region's two halves
  std::vector<Cell> par_cells[2];
  std::vector<uint64_t> tags;                     // [slot][from] (kTagSlots)
  std::vector<Cell> tag_cells;
  std::vector<std::atomic<uint64_t>> stamps;      // [slot][from] (kTagSlots): call stamps, polled racily (NOTE [tagged waits])
  std::vector<std::atomic<uint64_t>> flags;       // [kind][from][block]
  std::vector<std::atomic<uint64_t>> local;       // [block]
  std::vector<SyncSlot> flag_sync, local_sync;    // their release histories
  uint64_t base = 0, lbase = 0, pbase = 0, lseq = 0;  // the pad's epoch words
  std::mutex finish_mu;                           // the pad's `finished` counter
  int finished = 0;
  VC finish_acc;                                  // clocks of the blocks that ended
  RankState(int world, int64_t ws_elems, int64_t line_count, int64_t wide_count, int64_t par_elems)
      : ws(ws_elems), ws_cells(ws_elems), lines{std::vector<Line>(line_count), std::vector<Line>(line_count)},
        wide{std::vector<Line>(wide_count), std::vector<Line>(wide_count)},
        par{std::vector<int32_t>(par_elems), std::vector<int32_t>(par_elems)},
        par_cells{std::vector<Cell>(par_elems), std::vector<Cell>(par_elems)},
        tags(kTagSlots * world), tag_cells(kTagSlots * world), stamps(kTagSlots * world),
        flags(cu::kFlagKinds * world * kBlocks), local(kBlocks), flag_sync(cu::kFlagKinds * world * kBlocks),
        local_sync(kBlocks) {}
};

struct Group {
  int world;
  int64_t slot_elems;
  int64_t line_slot_elems;  // SymmetricWorkspace::line_slot_elems(esize, false)
  int64_t wide_slot_elems;  // SymmetricWorkspace::line_slot_elems(esize, true)
  int64_t parity_slot_elems;  // SymmetricWorkspace::parity_slot_elems
  std::vector<std::unique_ptr<RankState>> ranks;
  Group(int w, int64_t slot)
      : world(w), slot_elems(slot), line_slot_elems(line_half_bytes(w) / 2 / kEsize),
        wide_slot_elems(wide_half_bytes(w) / cu::kWideLineBytes * cu::kWidePayload / kEsize), parity_slot_elems(parity_half_elems(w)) {
    for (int r = 0; r < w; ++r)
      ranks.push_back(std::make_unique<RankState>(w, 2 * slot, line_half_bytes(w) / 16, wide_half_bytes(w) / cu::kWideLineBytes,
                                                  parity_half_elems(w)));
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
  bool peer_outputs = false;  // writes into the peers' outputs (NOTE [peer outputs])
  bool lines = false;      // runs the line kernel (NOTE [line plans])
  bool wide = false;       // ... on wide lines (NOTE [wide lines])
  bool parity = false;     // a parity plan (NOTE [parity plans])
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
        std::fprintf(stderr, "DEADLOCK in %s waiting for %s slot %d >= %llu\n", t_case, what, i, (unsigned long long)target);
        std::abort();
      }
    }
}

// NOTE [tagged waits] (plan_kernel.cuh): wait_all for a check-tag Wait,
// which also looks at the peer's call stamp (a relaxed, racy read by design)
// with the kernel's own test, stamp_of_other_call (call_tag.h): only a stamp
// of this collective's base that is not ours stops the wait. The kernel looks
// once the wait lasted kStampLookNs; this looks on every poll, a superset.
// Every call here is valid, so a stop is a false alarm: a failure.
void tagged_wait(std::atomic<uint64_t>* slots, int count, uint64_t target, const std::atomic<uint64_t>& stamp,
                 uint64_t mine, int r, int peer) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < count; ++i)
    while (slots[i].load(std::memory_order_acquire) < target) {
      const uint64_t seen = stamp.load(std::memory_order_relaxed);
      const bool other = g_mutation == Mutation::TagZero ? (seen >> 32) == (mine >> 32) && seen != mine
                                                         : cu::stamp_of_other_call(seen, mine);
      if (other) {
        std::printf("FAIL rank %d: a valid call's wait on rank %d took stamp %llx for another call's (its own: %llx)\n",
                    r, peer, (unsigned long long)seen, (unsigned long long)mine);
        ++g_failed;
        return;
      }
      std::this_thread::yield();
      if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(20)) {
        std::fprintf(stderr, "DEADLOCK in %s waiting for a tagged Staged slot %d >= %llu\n", t_case, i, (unsigned long long)target);
        std::abort();
      }
    }
}

// ---- one block of one launch ---------------------------------------------------
// What a block of rank r knows of its launch (read from the pad at its start).
struct BlockCtx {
  Group& g;
  int r, b, t;
  const Call& c;
  uint64_t base, lbase, lseq;
  VC& vc;
};

// Every peer's Done word >= target (NOTE [device reuse]; the line kernel's
// pbase wait, NOTE [line plans]).
void wait_done(BlockCtx& x, uint64_t target) {
  for (int q = 0; q < x.g.world; ++q)
    if (q != x.r) {  // one Done word per peer
      wait_all(&x.g.flag(x.r, cu::kDone, q, 0), 1, target, "Done");
      x.g.sync(x.r, cu::kDone, q, 0).acquire(target, x.vc);
    }
}

struct Ptr {
  int32_t* p;
  Cell* cell;
};

// An Input / Output / Workspace ref in ordinary memory (the plan kernel's buffer_of).
Ptr resolve(const BlockCtx& x, const cu::DevRef& ref) {
  switch (ref.buf) {
    case cu::kInput: {
      const Call& o = ref.rank == x.r ? x.c : x.c.all[ref.rank];  // a peer's input: zero-copy plans
      return {o.in + ref.offset, o.cells + (o.in - o.mem) + ref.offset};
    }
    case cu::kOutput: {
      const Call& o = ref.rank == x.r ? x.c : x.c.all[ref.rank];  // a peer's output: NOTE [peer outputs]
      return {o.out + ref.offset, o.cells + (o.out - o.mem) + ref.offset};
    }
    default:
      if (x.c.parity) {  // NOTE [parity plans]: one half of the owner's parity region
        const int half = g_mutation == Mutation::OneParity ? 0 : static_cast<int>(x.lseq & 1);
        RankState& o = *x.g.ranks[ref.rank];
        if (ref.offset < 0 || ref.offset >= static_cast<int64_t>(o.par[half].size())) {
          std::fprintf(stderr, "element %lld outside the parity region\n", (long long)ref.offset);
          std::abort();
        }
        return {o.par[half].data() + ref.offset, o.par_cells[half].data() + ref.offset};
      }
      return {x.g.ranks[ref.rank]->ws.data() + ref.offset, x.g.ranks[ref.rank]->ws_cells.data() + ref.offset};
  }
}

// The block's share of an op (NOTE [block partition]).
void share(const cu::DevOp& op, const BlockCtx& x, int64_t* lo, int64_t* hi) {
  const int64_t per = cu::part_size(op.n, x.c.blocks, kEsize);
  *lo = x.b * per;
  *hi = std::min(op.n, *lo + per);
}

// plan_kernel's Copy / Reduce.
void plan_data_op(BlockCtx& x, const cu::DevOp& op, std::mt19937& rng, bool slow, const char* phase) {
  int64_t lo, hi;
  share(op, x, &lo, &hi);
  if (lo >= hi) return;
  Ptr dst = resolve(x, op.dst);
  std::vector<Ptr> srcs;
  for (int k = 0; k < op.src_count; ++k) srcs.push_back(resolve(x, x.c.plan.srcs[op.src_begin + k]));
  const int64_t mid = lo + (hi - lo) / 2;  // a pause in the middle of the block's share
  for (int64_t i = lo; i < hi; ++i) {
    if (i == mid) pause(rng, slow);
    if (op.code == cu::kCopy && srcs[0].p == dst.p) continue;  // the kernel skips dst == src copies
    int32_t v = 0;
    for (size_t k = 0; k < srcs.size(); ++k) {
      on_read(srcs[k].cell + i, x.vc, x.t, phase);
      v = k == 0 ? srcs[k].p[i] : static_cast<int32_t>(static_cast<uint32_t>(v) + static_cast<uint32_t>(srcs[k].p[i]));
    }
    on_write(dst.cell + i, x.vc, x.t, phase);
    dst.p[i] = v;
  }
}

// The parity of the line regions this launch uses (NOTE [line plans]).
int line_parity(const BlockCtx& x) { return g_mutation == Mutation::OneParity ? 0 : static_cast<int>(x.lseq & 1); }

// The line region parity of this launch, at rank `rank`.
std::vector<Line>& line_region(const BlockCtx& x, int rank) { return x.g.ranks[rank]->lines[line_parity(x)]; }

// Line `index` of a region (narrow or wide); an index outside it aborts the run.
Line& checked_line(std::vector<Line>& region, int64_t index, const char* what) {
  if (index < 0 || index >= static_cast<int64_t>(region.size())) {
    std::fprintf(stderr, "%s %lld outside the region (%zu lines)\n", what, (long long)index, region.size());
    std::abort();
  }
  return region[index];
}

Line& line_at(const BlockCtx& x, int rank, int64_t index) { return checked_line(line_region(x, rank), index, "line"); }

// line_kernel's load_unit: k elements e0.. of ref into v; a Workspace ref
// polls the lines that hold them (an unaligned start reads two lines).
void load_unit(BlockCtx& x, const cu::DevRef& ref, int64_t e0, int64_t k, int32_t* v, const char* phase) {
  if (ref.buf == cu::kWorkspace) {
    int32_t line[kWideElems];
    int64_t have = -1;
    for (int64_t j = 0; j < k; ++j) {
      const int64_t e = ref.offset + e0 + j;
      if (e / kLineElems != have) {
        have = e / kLineElems;
        line_wait(line_at(x, ref.rank, have), x.lseq, line, x.vc, x.t, phase);
      }
      v[j] = line[e % kLineElems];
    }
    return;
  }
  const Ptr src = resolve(x, ref);
  for (int64_t j = 0; j < k; ++j) {
    on_read(src.cell + e0 + j, x.vc, x.t, phase);
    v[j] = src.p[e0 + j];
  }
}

// line_kernel's store_unit: a Workspace write is one flagged line store at
// the line of its first element (writes start on a line: NOTE [line plans]).
void store_unit(BlockCtx& x, const cu::DevRef& ref, int64_t e0, int64_t k, const int32_t* v, const char* phase) {
  if (ref.buf == cu::kWorkspace) {
    line_store(line_at(x, ref.rank, (ref.offset + e0) * kEsize >> 3), v, k, x.lseq, x.vc, x.t, phase);
    return;
  }
  const Ptr dst = resolve(x, ref);
  for (int64_t j = 0; j < k; ++j) {
    on_write(dst.cell + e0 + j, x.vc, x.t, phase);
    dst.p[e0 + j] = v[j];
  }
}

// ---- wide lines (NOTE [wide lines], wide_line_op.cuh) ---------------------------
Line& wide_at(const BlockCtx& x, int rank, const cu::DevRef& ref, int64_t e0) {
  if (ref.offset * kEsize % cu::kWidePayload != 0) ++g_off_line;  // the piece must start on a line
  const int64_t index = (ref.offset * kEsize + e0 * kEsize) / cu::kWidePayload;
  return checked_line(x.g.ranks[rank]->wide[line_parity(x)], index, "wide line");
}

// k elements e0.. (one line's, e0 on a line) of ref into v.
void wide_load(BlockCtx& x, const cu::DevRef& ref, int64_t e0, int64_t k, int32_t* v, const char* phase) {
  if (ref.buf == cu::kWorkspace) {
    int32_t line[kWideElems];
    line_wait(wide_at(x, ref.rank, ref, e0), x.lseq, line, x.vc, x.t, phase);
    std::copy(line, line + k, v);
    return;
  }
  load_unit(x, ref, e0, k, v, phase);
}

void wide_store(BlockCtx& x, const cu::DevRef& ref, int64_t e0, int64_t k, const int32_t* v, const char* phase) {
  if (ref.buf == cu::kWorkspace) {
    line_store(wide_at(x, ref.rank, ref, e0), v, k, x.lseq, x.vc, x.t, phase);
    return;
  }
  store_unit(x, ref, e0, k, v, phase);
}

// line_kernel's per-op work: Copy / Reduce in units of one line's elements,
// narrow (line_op: the block's part_size share, kLineElems per unit) or wide
// (wide_op: the block's whole lines, wide_part_size; kWideElems per unit).
void unit_data_op(BlockCtx& x, const cu::DevOp& op, std::mt19937& rng, bool slow, const char* phase) {
  const bool wide = x.c.wide;
  const int64_t unit = wide ? kWideElems : kLineElems;
  int64_t lo, hi;
  if (wide) {
    const int64_t per = cu::wide_part_size(op.n, x.c.blocks, kEsize);
    lo = x.b * per;
    hi = std::min(op.n, lo + per);
  } else {
    share(op, x, &lo, &hi);
  }
  auto load = [&](const cu::DevRef& ref, int64_t e0, int64_t k, int32_t* v) {
    if (wide) wide_load(x, ref, e0, k, v, phase);
    else load_unit(x, ref, e0, k, v, phase);
  };
  const int64_t mid = lo + (hi - lo) / 2 / unit * unit;
  for (int64_t e0 = lo; e0 < hi; e0 += unit) {
    if (e0 == mid) pause(rng, slow);
    const int64_t k = std::min(unit, hi - e0);
    int32_t acc[kWideElems], v[kWideElems];
    load(x.c.plan.srcs[op.src_begin], e0, k, acc);
    for (int s = 1; s < op.src_count; ++s) {
      load(x.c.plan.srcs[op.src_begin + s], e0, k, v);
      for (int64_t j = 0; j < k; ++j)
        acc[j] = static_cast<int32_t>(static_cast<uint32_t>(acc[j]) + static_cast<uint32_t>(v[j]));
    }
    if (wide) wide_store(x, op.dst, e0, k, acc, phase);
    else store_unit(x, op.dst, e0, k, acc, phase);
  }
}

// end_launch: the last block to finish advances the epochs and raises Done.
void end_launch(BlockCtx& x) {
  RankState& me = *x.g.ranks[x.r];
  std::lock_guard<std::mutex> lk(me.finish_mu);
  if (me.finish_acc.empty()) me.finish_acc.assign(x.vc.size(), 0);
  join(me.finish_acc, x.vc);
  if (++me.finished < x.c.blocks) return;
  me.finished = 0;
  join(x.vc, me.finish_acc);
  me.finish_acc.assign(x.vc.size(), 0);
  const uint64_t next = x.base + x.c.plan.steps + 1;
  me.pbase = x.base;
  me.base = next;
  me.lbase = x.lbase + x.c.plan.local_syncs;
  if (x.c.lines || x.c.parity) ++me.lseq;
  for (int q = 0; q < x.g.world; ++q)
    if (q != x.r) {
      if (g_mutation == Mutation::RelaxedParityDone && x.c.parity) {  // a Done that orders nothing
        VC none(x.vc.size(), 0);
        x.g.sync(q, cu::kDone, x.r, 0).release(next, none, x.t);
      } else {
        x.g.sync(q, cu::kDone, x.r, 0).release(next, x.vc, x.t);
      }
      x.g.flag(q, cu::kDone, x.r, 0).store(next, std::memory_order_release);
    }
}

// The body of plan_kernel<int32_t> (or line_kernel<int32_t>) for block b of rank r.
void run_block(Group& g, int r, int b, const Call& c, std::mt19937& rng, bool slow, VC& vc) {
  RankState& me = *g.ranks[r];
  const int G = c.blocks;
  BlockCtx x{g, r, b, r * kBlocks + b, c, me.base, me.lbase, me.lseq, vc};
  const uint64_t pbase = me.pbase;
  const bool region = c.lines || c.parity;
  if (!region) wait_done(x, x.base);
  else if (g_mutation != Mutation::NoReuseWait) wait_done(x, pbase);  // NOTE [line plans], [parity plans]
  // NOTE [call tags]: block 0 publishes its tag (call_tag.h; one signature
  // for every call: valid calls agree) in each peer's slot; parity plans use
  // ptag[lseq % 2]. NOTE [tagged waits]: and its call stamp beside it.
  const int tag_slot = c.parity && g_mutation != Mutation::OneTagSlot ? 1 + static_cast<int>(x.lseq & 1) : 0;
  const uint64_t my_tag = cu::call_tag(0x5eedull, x.base);
  const uint64_t my_stamp = cu::call_stamp(0x5eedull, x.base);
  if (!c.lines && b == 0)
    for (int q = 0; q < g.world; ++q)
      if (q != r) {
        RankState& peer = *g.ranks[q];
        const size_t at = static_cast<size_t>(tag_slot) * g.world + r;
        on_write(&peer.tag_cells[at], vc, x.t, "start: publish the call tag");
        peer.tags[at] = my_tag;
        peer.stamps[at].store(my_stamp, std::memory_order_relaxed);
      }
  auto acquire_all = [&](int at, int kind, int from, uint64_t target) {
    for (int k = 0; k < G; ++k) g.sync(at, kind, from, k).acquire(target, vc);
  };
  for (const cu::DevOp& op : c.plan.ops) {
    pause(rng, slow);
    const char* phase = cu::interned_name(op.phase);
    if (c.lines && (op.code == cu::kWait || op.code == cu::kSignal)) {  // NOTE [line-carried ops]
      std::printf("FAIL rank %d: a line plan kept a %s op (drop_line_carried_ops)\n", r,
                  op.code == cu::kWait ? "Wait" : "Signal");
      ++g_failed;
      continue;
    }
    switch (op.code) {
      case cu::kWait:
        if (c.parity && op.flag == cu::kConsumed) break;  // one round (NOTE [parity plans])
        {
          const bool own = op.own_slot || (g_mutation == Mutation::AllOwnSlot && !op.check_tag);  // NOTE [matched waits]
          std::atomic<uint64_t>* slots = &g.flag(r, op.flag, op.peer, own ? b : 0);
          if (op.check_tag)  // NOTE [tagged waits]: the peer's stamp is polled while waiting
            tagged_wait(slots, own ? 1 : G, x.base + op.value,
                        me.stamps[static_cast<size_t>(tag_slot) * g.world + op.peer], my_stamp, r, op.peer);
          else
            wait_all(slots, own ? 1 : G, x.base + op.value, own ? "Staged/Consumed (own slot)" : "Staged/Consumed");
          if (own) g.sync(r, op.flag, op.peer, b).acquire(x.base + op.value, vc);
          else acquire_all(r, op.flag, op.peer, x.base + op.value);
        }
        if (op.check_tag) {
          const size_t at = static_cast<size_t>(tag_slot) * g.world + op.peer;
          on_read(&me.tag_cells[at], vc, x.t, "consume: check the call tag");
          const uint64_t seen = me.tags[at];
          if (seen != my_tag) {
            std::printf("FAIL rank %d: call tag of rank %d is %llx, expected %llx (overwritten)\n", r, op.peer,
                        (unsigned long long)seen, (unsigned long long)my_tag);
            ++g_failed;
          }
        }
        break;
      case cu::kSignal:
        if (c.parity && op.flag == cu::kConsumed) break;
        g.sync(op.peer, op.flag, r, b).release(x.base + op.value, vc, x.t);
        g.flag(op.peer, op.flag, r, b).store(x.base + op.value, std::memory_order_release);
        break;
      case cu::kLocalSync:
        me.local_sync[b].release(x.lbase + op.value, vc, x.t);
        me.local[b].store(x.lbase + op.value, std::memory_order_release);
        wait_all(me.local.data(), G, x.lbase + op.value, "local");
        for (int k = 0; k < G; ++k) me.local_sync[k].acquire(x.lbase + op.value, vc);
        break;
      case cu::kCopy:
      case cu::kReduce:
        if (c.lines) unit_data_op(x, op, rng, slow, phase);
        else plan_data_op(x, op, rng, slow, phase);
        break;
    }
  }
  end_launch(x);
}

// ---- collectives ---------------------------------------------------------------
enum class Kind { AllReduce, AllGather, ReduceScatter, Broadcast, AllToAll, Reduce, Gather, Scatter, Interleaved };
constexpr int kKinds = 9;
enum class Layout { Disjoint, InPlace };  // InPlace: the c10d in-place form of the op

struct Case {
  Kind kind;
  Layout layout;
  int64_t n;
  bool two_shot;
  int root;
  std::vector<std::vector<int64_t>> splits;
  int blocks = kBlocks;
  bool in_pool = false, out_pool = false;  // the tensors are in the symmetric pool (every rank alike)
  bool zero_copy = false;     // as run: peers read the inputs in place (NOTE [zero-copy])
  bool peer_outputs = false;  // as run: writers copy into the peers' outputs (NOTE [peer outputs])
  bool push = false;    // NOTE [push]
  bool push_reduced = false;  // NOTE [push]: two-shot phase 1 pushes (zero-copy plans too)
  bool lines = false;   // the host tries a region: flagged lines (NOTE [line plans]), else a parity plan
  bool wide = false;    // ... and the group's line format is wide (NOTE [wide lines]); as run: on wide lines
  bool parity = false;  // as run: a parity plan (NOTE [parity plans])
  bool matched = false; // plan-kernel plans made with match_waits (NOTE [matched waits])
  int64_t rows = 1, row_len = 0;  // Interleaved: n = rows * row_len
};

std::string name_of(const Case& c) {
  static const char* kinds[] = {"all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all",
                                "reduce",     "gather",     "scatter",        "interleaved_all_gather"};
  return std::string(kinds[static_cast<int>(c.kind)]) + (c.layout == Layout::InPlace ? " in-place" : "") +
         (c.two_shot ? " two-shot" : "") + (c.zero_copy ? " zero-copy" : "") + (c.peer_outputs ? " peer-outputs" : "") + (c.push ? " push" : "") + (c.push_reduced ? " push-reduced" : "") +
         (c.lines ? (c.wide ? " wide-lines" : " lines") : "") + (c.parity ? " parity" : "") + (c.matched ? " matched" : "") + " n=" + std::to_string(c.n) + " blocks=" + std::to_string(c.blocks);
}

snac::Spec spec_of(const Case& cs, int W) {
  switch (cs.kind) {
    case Kind::AllReduce: return snac::all_reduce(W, cs.n, RedOp::Sum);
    case Kind::AllGather: return snac::all_gather(W, cs.n);
    case Kind::ReduceScatter: return snac::reduce_scatter(W, cs.n, RedOp::Sum);
    case Kind::Broadcast: return snac::broadcast(W, cs.n, cs.root);
    case Kind::AllToAll: return snac::all_to_all(W, cs.splits);
    case Kind::Reduce: return snac::reduce(W, cs.n, RedOp::Sum, cs.root);
    case Kind::Gather: return snac::gather(W, cs.n, cs.root);
    case Kind::Scatter: return snac::scatter(W, cs.n, cs.root);
    case Kind::Interleaved: return snac::interleaved_all_gather(W, cs.rows, cs.row_len);
  }
  return {};
}

// The wide-line plan with pieces aligned to 512 bytes instead of whole lines:
// only for the wide-unaligned mutation (the product's choice, protocol_choice.cc,
// aligns them to lines).
bool unaligned_wide_plan(const Group& g, const snac::Spec& spec, int r, snac::PlanOptions opt, snac::Plan* plan) {
  opt.push = true;
  opt.read_peer_inputs = false;
  opt.match_waits = false;
  opt.reduce_algo = snac::ReduceAlgo::OneShot;
  opt.align_elems = cu::kPartBytes / kEsize;
  opt.slot_elems = g.wide_slot_elems / opt.align_elems * opt.align_elems;
  try {
    *plan = snac::make_plan(spec, r, opt);
  } catch (const std::invalid_argument&) {
    return false;
  }
  return plan->rounds == 1;
}

// One collective as every rank calls it: plans, memory, inputs.
struct Prepared {
  Case cs;  // as run: lines set when it runs on lines
  std::vector<std::vector<int32_t>> mem, inputs;
  std::vector<std::vector<Cell>> cells;
  std::vector<Call> calls;
  std::vector<int64_t> outputs_numel;
  snac::Spec custom;  // the interleaved all-gather's Spec (Request::custom points at it)
  std::string name;   // name_of(cs) as run
};

// The rank's Input / Output in its memory: c10d's in-place forms where the
// collective has one (else disjoint).
void place_io(const Case& cs, const snac::Spec& spec, int r, int32_t* mem, int32_t** in, int32_t** out) {
  const int64_t n = cs.n;
  *in = mem;
  *out = mem + spec.input_numel[r];
  if (cs.layout != Layout::InPlace) return;
  switch (cs.kind) {
    case Kind::AllReduce: case Kind::Broadcast: case Kind::Reduce: *out = *in; break;  // the same tensor
    case Kind::AllGather: *in = *out + r * n; break;                                  // input is the output's block r
    case Kind::ReduceScatter: *out = *in + r * n; break;                              // output is the input's block r
    case Kind::Gather: if (r == cs.root) *in = *out + r * n; break;                   // the root's block, staged
    case Kind::Scatter: if (r == cs.root) *out = *in + r * n; break;
    case Kind::AllToAll: case Kind::Interleaved: break;
  }
}

pb::CollOp coll_op_of(Kind k) {
  switch (k) {
    case Kind::AllReduce: return pb::CollOp::AllReduce;
    case Kind::AllGather: return pb::CollOp::AllGather;
    case Kind::ReduceScatter: return pb::CollOp::ReduceScatter;
    case Kind::Broadcast: return pb::CollOp::Broadcast;
    case Kind::AllToAll: return pb::CollOp::AllToAll;
    case Kind::Reduce: return pb::CollOp::Reduce;
    case Kind::Gather: return pb::CollOp::Gather;
    case Kind::Scatter: return pb::CollOp::Scatter;
    case Kind::Interleaved: return pb::CollOp::Custom;
  }
  return pb::CollOp::Custom;
}

// The group's settings as the product agrees them (NOTE [protocol choice]),
// with the case's line format, block count and push / matched-wait options.
cu::ProtocolSettings settings_of(const Group& g, const Case& cs) {
  cu::LaunchConfig config = cu::launch_config_portable(cu::DeviceInfo{9, 0, kBlocks});
  config.fixed_blocks = config.max_blocks = cs.blocks;
  cu::ProtocolSettings s = cu::make_protocol_settings(g.world, 2 * g.slot_elems * kEsize, kLineMaxBytes,
                                                      kParityMaxBytes, cs.wide ? cu::LineFormat::Wide
                                                                               : cu::LineFormat::Narrow, config);
  s.push_copies = s.push_reductions = cs.push;
  s.push_reduced = cs.push_reduced;
  s.match_waits = cs.matched;
  return s;
}

// Every rank's Request as the c10d layer makes it (a reduce's or gather's
// peers pass no output, a scatter's no input), run through the product's own
// steps (CudaGroup::launch): the region plan, then the pool's use
// (symmetric_use), then the Atom's choice (choose_protocol). Every rank must
// come to the same call tag and blocks (test_plan_symmetry.cc sweeps this).
Prepared prepare(const Group& g, const Case& cs, std::mt19937& rng) {
  const int W = g.world;
  Prepared p;
  p.custom = spec_of(cs, W);
  const snac::Spec& spec = p.custom;
  p.cs = cs;
  p.mem.resize(W);
  p.cells.resize(W);
  p.inputs.resize(W);
  p.calls.resize(W);
  p.outputs_numel.assign(spec.output_numel.begin(), spec.output_numel.end());
  const cu::ProtocolSettings settings = settings_of(g, cs);
  std::vector<pb::Request> rqs(W);
  for (int r = 0; r < W; ++r) {
    const int64_t ni = spec.input_numel[r], no = spec.output_numel[r];
    std::uniform_int_distribution<int32_t> val(-1000, 1000);
    p.inputs[r].resize(ni);
    for (auto& v : p.inputs[r]) v = val(rng);
    p.mem[r].assign(ni + no + 8, -7777777);
    int32_t *in, *out;
    place_io(cs, spec, r, p.mem[r].data(), &in, &out);
    std::copy(p.inputs[r].begin(), p.inputs[r].end(), in);
    pb::Request& rq = rqs[r];
    rq.op = coll_op_of(cs.kind);
    rq.dtype = purlin::DType::Int32;
    rq.root = cs.root;
    rq.custom = cs.kind == Kind::Interleaved ? &p.custom : nullptr;
    if (cs.kind == Kind::AllToAll)
      for (int q = 0; q < W; ++q) {
        rq.in_splits.push_back(cs.splits[r][q]);
        rq.out_splits.push_back(cs.splits[q][r]);
      }
    if (ni > 0) rq.in = in, rq.in_numel = ni;
    if (no > 0) rq.out = out, rq.out_numel = no;
    if (cs.kind == Kind::Broadcast) {  // c10d: one buffer of n elements as input and output, on every rank
      rq.in = rq.out = in;
      rq.in_numel = rq.out_numel = cs.n;
      rq.one_buffer = true;
    }
    p.cells[r].resize(p.mem[r].size());
    p.calls[r].in = in;
    p.calls[r].out = out;
    p.calls[r].mem = p.mem[r].data();
    p.calls[r].cells = p.cells[r].data();
    p.calls[r].all = p.calls.data();
  }
  std::vector<pb::PeerMeta> all;
  for (int r = 0; r < W; ++r) {
    const auto blob = pb::encode_meta(rqs[r], W);
    all.push_back(pb::decode_meta(blob.data(), W));
  }
  std::vector<lowering::ProtocolChoice> ch(W);
  std::vector<lowering::CallFacts> facts(W);
  std::vector<uint64_t> tags(W);
  for (int r = 0; r < W; ++r) {
    const pb::Request& rq = rqs[r];
    int64_t shift = 0;
    lowering::CallFacts& f = facts[r];
    f.esize = kEsize;
    f.two_shot = cs.two_shot;
    const snac::CallDescription call = pb::describe_call(rq, spec);
    f.direct_local = pb::direct_local_reads(rq, call, r);
    f.alias = static_cast<cu::IoAlias>(pb::io_alias(rq, &shift));
    f.shift = shift;
    f.region = cs.lines;  // the host tries a region
    ch[r] = lowering::choose_protocol(spec, f, settings, r, 0);
    int64_t in_off = -1, out_off = -1;
    if (!ch[r].lines && !ch[r].parity) {  // then the pool: every rank's memory is its pool
      const bool in_pool = cs.in_pool && rq.in_numel > 0, out_pool = cs.out_pool && rq.out_numel > 0;
      const pb::SymmetricUse use = pb::symmetric_use(rq, call, cs.two_shot, in_pool, out_pool);
      if (use.read_peer_inputs || use.write_peer_outputs) {
        f.region = false;
        f.read_peer_inputs = use.read_peer_inputs;
        f.write_peer_outputs = use.write_peer_outputs;
        ch[r] = lowering::choose_protocol(spec, f, settings, r, 0);
        in_off = use.read_peer_inputs ? p.calls[r].in - p.calls[r].mem : -1;
        out_off = use.write_peer_outputs ? p.calls[r].out - p.calls[r].mem : -1;
      }
    }
    tags[r] = lowering::call_signature(ch[r].sig, in_off, out_off);
  }
  for (int r = 1; r < W; ++r)
    if ((ch[r].plan.rounds == 0) != (ch[0].plan.rounds == 0) || ch[r].plan.steps != ch[0].plan.steps) {  // one epoch
      std::printf("FAIL %s world=%d: rank %d's plan has %d rounds (%llu steps), rank 0's %d (%llu)\n", name_of(cs).c_str(), W, r,
                  ch[r].plan.rounds, (unsigned long long)ch[r].plan.steps, ch[0].plan.rounds, (unsigned long long)ch[0].plan.steps);
      ++g_failed;
      break;
    }
  for (int r = 1; r < W; ++r)
    if (tags[r] != tags[0] || ch[r].blocks != ch[0].blocks) {  // the choice must be rank-invariant
      std::printf("FAIL %s world=%d: rank %d chose %s, rank 0 %s\n", name_of(cs).c_str(), W, r,
                  ch[r].protocol.c_str(), ch[0].protocol.c_str());
      ++g_failed;
      break;
    }
  if (std::getenv("EMU_DEBUG")) std::fprintf(stderr, "prepare W=%d %s -> %s blocks %d rounds %d\n", W, name_of(cs).c_str(), ch[0].protocol.c_str(), ch[0].blocks, ch[0].plan.rounds);
  p.cs.lines = ch[0].lines;
  p.cs.wide = ch[0].wide;
  p.cs.parity = ch[0].parity;
  p.cs.two_shot = ch[0].two_shot;
  p.cs.push = ch[0].push;
  p.cs.push_reduced = ch[0].push_reduced;
  p.cs.matched = ch[0].match_waits;
  p.cs.zero_copy = facts[0].read_peer_inputs;
  p.cs.peer_outputs = facts[0].write_peer_outputs;
  p.name = name_of(p.cs) + " world=" + std::to_string(W);
  for (int r = 0; r < W; ++r) {
    snac::Plan plan = ch[r].plan;
    bool relower = false;
    if (ch[r].wide && g_mutation == Mutation::WideUnaligned) relower = unaligned_wide_plan(g, spec, r, snac::PlanOptions{}, &plan);
    if (facts[r].write_peer_outputs && g_mutation == Mutation::NoPeerReady) {  // writers do not wait for "output free"
      plan.ops.erase(std::remove_if(plan.ops.begin(), plan.ops.end(),
                                    [](const snac::Op& op) {
                                      return op.code == snac::OpCode::Wait && op.value == snac::step_value(0, 0);
                                    }),
                     plan.ops.end());
      relower = true;
    }
    p.calls[r].plan = ch[r].lowered;
    if (relower) {
      p.calls[r].plan = lowering::lower_plan(plan, ch[r].blocks, kEsize, facts[r].alias, facts[r].shift,
                                       ch[r].wide ? cu::Partition::WideLines : cu::Partition::Parts);
      if (ch[r].lines) lowering::drop_line_carried_ops(&p.calls[r].plan);
    }
    p.calls[r].blocks = ch[r].blocks;
    p.calls[r].zero_copy = facts[r].read_peer_inputs;
    p.calls[r].peer_outputs = facts[r].write_peer_outputs;
    p.calls[r].lines = ch[r].lines;
    p.calls[r].wide = ch[r].wide;
    p.calls[r].parity = ch[r].parity;
    g_ops += static_cast<int64_t>(p.calls[r].plan.ops.size());
    g_syncs += p.calls[r].plan.local_syncs;
    for (const cu::DevOp& op : p.calls[r].plan.ops) {
      g_own_waits += op.code == cu::kWait && op.own_slot;
      g_catch_ups += op.code == cu::kWait && std::strncmp(cu::interned_name(op.phase), "catch up", 8) == 0;
    }
  }
  return p;
}

// What rank r's output must hold (nothing for ranks without one).
std::vector<int32_t> expected(const Prepared& p, int W, int r) {
  const Case& cs = p.cs;
  const int64_t n = cs.n;
  std::vector<int32_t> want;
  auto sum_block = [&](int64_t at) {  // elements [at, at + n) reduced over the ranks
    want.assign(n, 0);
    for (int s = 0; s < W; ++s)
      for (int64_t i = 0; i < n; ++i) want[i] += p.inputs[s][at + i];
  };
  auto append = [&](int s, int64_t at, int64_t len) {
    want.insert(want.end(), p.inputs[s].begin() + at, p.inputs[s].begin() + at + len);
  };
  switch (cs.kind) {
    case Kind::AllReduce: sum_block(0); break;
    case Kind::AllGather:
      for (int s = 0; s < W; ++s) append(s, 0, n);
      break;
    case Kind::ReduceScatter: sum_block(r * n); break;
    case Kind::Broadcast:
      if (r == cs.root && cs.layout == Layout::Disjoint) break;  // the root's output is not written
      want = r == cs.root ? p.inputs[r] : p.inputs[cs.root];
      break;
    case Kind::AllToAll:
      for (int s = 0; s < W; ++s) {
        int64_t off = 0;
        for (int d = 0; d < r; ++d) off += cs.splits[s][d];
        append(s, off, cs.splits[s][r]);
      }
      break;
    case Kind::Reduce:
      if (r == cs.root) sum_block(0);
      break;
    case Kind::Gather:
      for (int s = 0; r == cs.root && s < W; ++s) append(s, 0, n);
      break;
    case Kind::Scatter: append(cs.root, r * n, n); break;
    case Kind::Interleaved:  // output row (i * W + s) = rank s's row i
      for (int64_t i = 0; i < cs.rows; ++i)
        for (int s = 0; s < W; ++s) append(s, i * cs.row_len, cs.row_len);
      break;
  }
  return want;
}

void check(const Group& g, const Prepared& p) {
  for (int r = 0; r < g.world; ++r) {
    const std::vector<int32_t> want = expected(p, g.world, r);
    for (size_t i = 0; i < want.size(); ++i)
      if (p.calls[r].out[i] != want[i]) {
        std::printf("FAIL %s world=%d slot=%lld rank %d: element %zu is %d, expected %d (local barriers %u)\n",
                    name_of(p.cs).c_str(), g.world, (long long)g.slot_elems, r, i, p.calls[r].out[i], want[i],
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
          const Call& pc = p.calls[r];
          t_case = p.name.c_str();
          if (pc.peer_outputs) {
            // NOTE [peer outputs]: the caller used its output before the collective (stream order:
            // before any block starts); peers may write it only after this rank said it is free.
            if (b == 0)
              for (int64_t i = 0; i < static_cast<int64_t>(p.outputs_numel[r]); ++i)
                on_write(pc.cells + (pc.out - pc.mem) + i, vc, t, "caller's earlier use of its output");
            boundary[r].arrive_and_wait(vc, t);
          }
          if (b < p.calls[r].blocks) run_block(g, r, b, p.calls[r], rng, slow, vc);
          boundary[r].arrive_and_wait(vc, t);
          if (pc.peer_outputs && b == 0)  // ... and reads it once the collective returned
            for (int64_t i = 0; i < static_cast<int64_t>(p.outputs_numel[r]); ++i)
              on_read(pc.cells + (pc.out - pc.mem) + i, vc, t, "caller reads its output");
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
  for (const Prepared& p : seq) {
    g_launches += p.calls[0].plan.rounds > 0;
    g_line_launches += p.calls[0].plan.rounds > 0 && p.calls[0].lines;
    g_wide_launches += p.calls[0].plan.rounds > 0 && p.calls[0].wide;
    g_parity_launches += p.calls[0].plan.rounds > 0 && p.calls[0].parity;
    g_peer_output_launches += p.calls[0].plan.rounds > 0 && p.calls[0].peer_outputs;
  }
}

// A random collective. About 40% of those of a group of several ranks are
// region requests: small ones (flagged lines) and mid-sized ones (parity plans).
Case random_case(int world, std::mt19937& rng) {
  Case c;
  c.kind = static_cast<Kind>(rng() % kKinds);
  c.layout = rng() % 2 ? Layout::InPlace : Layout::Disjoint;
  // Runs of region collectives (2-5 in a row, mostly mid-sized: parity plans)
  // are where only the pbase wait guards a half (NOTE [parity plans]).
  static int burst = 0;
  if (burst == 0 && world > 1 && rng() % 8 == 0) burst = 2 + static_cast<int>(rng() % 4);
  const bool in_burst = burst > 0;
  if (in_burst) --burst;
  c.lines = in_burst || (world > 1 && rng() % 5 < 2);
  c.wide = c.lines && rng() % 2;  // wide lines where the plan allows (NOTE [wide lines])
  static const int64_t sizes[] = {0, 1, 5, 127, 128, 129, 700, 1000, 2049, 5000};
  static const int64_t small[] = {1, 2, 5, 64, 127, 128, 129, 255, 300, 512, 600, 700, 1000, 1500, 2048};
  static const int64_t mid[] = {520, 600, 700, 1000, 1024, 1500, 2048};
  c.n = in_burst && rng() % 4 != 0 ? mid[rng() % 7] : c.lines ? small[rng() % 15] : sizes[rng() % 10];
  c.two_shot = c.kind == Kind::AllReduce && rng() % 2;
  c.blocks = 1 + static_cast<int>(rng() % kBlocks);
  c.in_pool = rng() % 3 == 0;
  c.push = rng() % 2 == 0;
  c.matched = rng() % 4 != 0;
  c.push_reduced = c.two_shot && rng() % 2;
  c.out_pool = rng() % 3 == 0;  // NOTE [peer outputs]: all_gather and broadcast write into pool outputs
  if (c.kind == Kind::AllToAll || c.kind == Kind::Interleaved) c.layout = Layout::Disjoint;  // no in-place form
  if (c.kind == Kind::Broadcast) c.layout = Layout::InPlace;  // c10d's only form: one buffer
  if (c.layout == Layout::InPlace) c.out_pool = c.in_pool;   // one tensor, in the pool or not
  c.root = static_cast<int>(rng() % world);
  c.splits.assign(world, std::vector<int64_t>(world, 0));
  for (auto& row : c.splits)
    for (auto& s : row) s = rng() % 4 == 0 ? 0 : static_cast<int64_t>(rng() % (c.lines ? 200 : 900));
  if (c.kind == Kind::Interleaved) {  // odd rows: unaligned line reads
    c.row_len = 1 + 2 * static_cast<int64_t>(rng() % 3);
    c.rows = 1 + c.n / c.row_len % 24;
    c.n = c.rows * c.row_len;
  }
  return c;
}

Mutation parse_mutation(const char* s) {
  const std::string m = s ? s : "";
  if (m == "no-reuse-wait") return Mutation::NoReuseWait;
  if (m == "one-parity") return Mutation::OneParity;
  if (m == "short-flag-period") return Mutation::ShortFlagPeriod;
  if (m == "one-tag-slot") return Mutation::OneTagSlot;
  if (m == "relaxed-parity-done") return Mutation::RelaxedParityDone;
  if (m == "wide-unaligned") return Mutation::WideUnaligned;
  if (m == "all-own-slot") return Mutation::AllOwnSlot;
  if (m == "no-peer-ready") return Mutation::NoPeerReady;
  if (m == "tag-zero") return Mutation::TagZero;
  if (!m.empty()) {
    std::fprintf(stderr, "unknown mutation '%s' (no-reuse-wait, one-parity, short-flag-period, one-tag-slot, "
                 "relaxed-parity-done, wide-unaligned, all-own-slot, no-peer-ready, tag-zero)\n", s);
    std::exit(2);
  }
  return Mutation::None;
}

}  // namespace

// NOTE [tagged waits]: the runs below have valid calls only (no stamp may
// stop a wait); the stamp test's positive answer is checked here.
void check_stamp_test() {
  const uint64_t base = 7, mine = cu::call_stamp(1, base);
  const bool right = cu::stamp_of_other_call(cu::call_stamp(2, base), mine) &&  // another call, this collective
                     !cu::stamp_of_other_call(mine, mine) &&                     // this call
                     !cu::stamp_of_other_call(cu::call_stamp(2, base - 3), mine) &&  // an older collective
                     !cu::stamp_of_other_call(0, cu::call_stamp(1, 0));          // never written, first collective
  if (!right) {
    std::printf("FAIL stamp_of_other_call misjudges a stamp\n");
    ++g_failed;
  }
}

int main(int argc, char** argv) {
  const int iters = argc > 1 ? std::atoi(argv[1]) : 150;
  g_mutation = parse_mutation(argc > 2 ? argv[2] : nullptr);
  check_stamp_test();
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
      for (int it = 0; it < iters; ++it) seq.push_back(prepare(g, random_case(world, rng), rng));
      run_sequence(g, seq, static_cast<unsigned>(rng()));
      for (const Prepared& p : seq) check(g, p);
      ran += iters;
    }
  }
  {  // world 4 (issue 5's smallest GPU kind is not lent: N > 2 is checked here), one workspace size
    Group g(4, 1024);
    std::vector<Prepared> seq;
    for (int it = 0; it < iters; ++it) seq.push_back(prepare(g, random_case(4, rng), rng));
    run_sequence(g, seq, static_cast<unsigned>(rng()));
    for (const Prepared& p : seq) check(g, p);
    ran += iters;
  }
  g_failed += static_cast<int>(g_races.load() > 0);
  if (g_off_line.load() > 0) {
    std::printf("FAIL %lld wide-line accesses in pieces that do not start on a line\n", (long long)g_off_line.load());
    ++g_failed;
  }
  std::printf("cuda plan emulation: %d collectives (%lld launched, %lld on flagged lines, %lld parity plans, "
              "%lld on wide lines, %lld into peer outputs, %lld ops, %lld local barriers, %lld own-slot waits, "
              "%lld catch-up waits), %lld races, %d failed\n",
              ran, (long long)g_launches, (long long)g_line_launches, (long long)g_parity_launches,
              (long long)g_wide_launches, (long long)g_peer_output_launches, (long long)g_ops, (long long)g_syncs,
              (long long)g_own_waits,
              (long long)g_catch_ups, (long long)g_races.load(), g_failed);
  return g_failed ? 1 : 0;
}
