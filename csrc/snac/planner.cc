// planner.cc — derives a rank's SNAC plan from a Spec (see NOTEs in plan.h).
//
// Every rank derives the *global* round structure (who stages what where, who
// reads whom) from the spec alone, then keeps the ops that are its own. So
// every Wait a rank emits is matched by a Signal its peer emits for the same
// (round, phase): the relation "d reads s" is computed once and used for both.
#include <algorithm>
#include <set>
#include <sstream>
#include <stdexcept>

#include "snac/plan.h"

namespace purlin::snac {

namespace {

int64_t align_up(int64_t x, int64_t a) { return (x + a - 1) / a * a; }

// Cut point k of [0, L) into K nearly equal parts, on a multiple of `a`
// (except the end): rounds and two-shot slices then start at aligned elements
// wherever the chunk does, so the Atom's vector paths serve every piece.
// (Unaligned cuts made 256 MB in-place all_reduce 1.6x slower on 2x H200:
// its direct own reads fell back to scalar loads.)
int64_t cut(int64_t L, int64_t k, int64_t K, int64_t a) { return k >= K ? L : L * k / K / a * a; }

// Cut point k of a chunk of L elements into K rounds: rounds of one aligned
// size, the last one shorter, so that rounds j and j + 2 lay the same pieces
// on the same slot (NOTE [matched waits]). Trailing rounds may be empty.
int64_t round_cut(int64_t L, int64_t k, int64_t K, int64_t a) {
  if (k >= K) return L;
  const int64_t size = align_up((L + K - 1) / K, a);
  return std::min(L, k * size);
}

// One consumable unit of a round: elements [a, b) of a chunk. For two-shot
// chunks there is one Piece per owner; `owner` is -1 otherwise.
struct Piece {
  int chunk;
  int64_t a, b;
  int owner;                     // two-shot owner (a dest rank) or -1
  std::vector<int64_t> staged;   // per source index: workspace offset, or -1 if not staged
  int64_t scratch = -1;          // two-shot: owner's workspace offset of the reduced slice
  std::vector<std::vector<int64_t>> pushed = {};  // push: [source index][reader] offset in the reader's workspace, or -1
  std::vector<bool> copied = {};  // per source index: the source writes its staged copy (else only reserved)
  std::vector<int64_t> reduced_at = {};  // push_reduced: [reader] offset of the owner's slice in the reader's workspace, or -1
};

struct Round {
  std::vector<Piece> pieces;
  std::vector<int64_t> used;     // per rank: workspace elements used in its slot
  // reads[p][d] = set of ranks d reads from in phase p (d never reads itself here).
  std::vector<std::vector<std::set<int>>> reads;
  bool two_shot = false;
};

class Planner {
 public:
  Planner(const Spec& s, const PlanOptions& o) : spec_(s), opt_(o), W_(s.world) {}

  bool two_shot(const Chunk& c) const {
    return spec_.kind == OpKind::Reduce && opt_.reduce_algo == ReduceAlgo::TwoShot && c.dests.size() > 1;
  }

  // Ranks that consume piece p's source contributions (phase 0).
  std::vector<int> consumers(const Piece& p) const {
    if (p.owner >= 0) return {p.owner};
    std::vector<int> out;
    for (const auto& d : spec_.chunks[p.chunk].dests) out.push_back(d.rank);
    return out;
  }

  Round layout(int j, int K) const {
    Round R;
    R.used.assign(W_, 0);
    R.reads.assign(2, std::vector<std::set<int>>(W_));
    std::vector<int64_t> cursor(W_, (j % 2) * opt_.slot_elems);
    for (size_t c = 0; c < spec_.chunks.size(); ++c) {
      const Chunk& ch = spec_.chunks[c];
      const int64_t L = ch.numel();
      const int64_t a = round_cut(L, j, K, opt_.align_elems), b = round_cut(L, j + 1, K, opt_.align_elems);
      if (a == b || ch.dests.empty()) continue;
      if (two_shot(ch)) {
        R.two_shot = true;
        const int64_t D = static_cast<int64_t>(ch.dests.size());
        for (int64_t k = 0; k < D; ++k) {
          const int64_t sa = a + cut(b - a, k, D, opt_.align_elems), sb = a + cut(b - a, k + 1, D, opt_.align_elems);
          if (sa != sb) R.pieces.push_back(Piece{static_cast<int>(c), sa, sb, ch.dests[k].rank, {}, -1});
        }
      } else {
        R.pieces.push_back(Piece{static_cast<int>(c), a, b, -1, {}, -1});
      }
    }
    for (Piece& p : R.pieces) {
      const Chunk& ch = spec_.chunks[p.chunk];
      const std::vector<int> cons = consumers(p);
      for (const auto& src : ch.sources) {
        bool peers_read_staged = false, own_reader = false;
        std::vector<int64_t> pushed(opt_.push ? W_ : 0, -1);
        for (int d : cons) {
          if (d != src.rank) {
            R.reads[0][d].insert(src.rank);
            if (opt_.read_peer_inputs) continue;
            if (!opt_.push) {
              peers_read_staged = true;
              continue;
            }
            pushed[d] = align_up(cursor[d], opt_.align_elems);  // NOTE [push]: in the reader's slot
            cursor[d] = pushed[d] + (p.b - p.a);
          } else {
            own_reader = true;
          }
        }
        p.pushed.push_back(std::move(pushed));
        // NOTE [rank-invariant layout] The place for a source's own reading is
        // reserved whether or not that source reads its input directly
        // (direct_local is each rank's own choice: in-place on one rank,
        // out-of-place on another is a valid call), so every rank derives the
        // same offsets for every workspace.
        int64_t off = -1;
        if (peers_read_staged || own_reader) {
          off = align_up(cursor[src.rank], opt_.align_elems);
          cursor[src.rank] = off + (p.b - p.a);
        }
        p.staged.push_back(off);
        p.copied.push_back(peers_read_staged || (own_reader && !opt_.direct_local));
      }
    }
    for (Piece& p : R.pieces) {
      if (p.owner < 0) continue;
      p.scratch = align_up(cursor[p.owner], opt_.align_elems);
      cursor[p.owner] = p.scratch + (p.b - p.a);
      if (opt_.push_reduced) p.reduced_at.assign(W_, -1);
      for (const auto& d : spec_.chunks[p.chunk].dests) {
        if (d.rank == p.owner) continue;
        R.reads[1][d.rank].insert(p.owner);
        if (!opt_.push_reduced) continue;
        p.reduced_at[d.rank] = align_up(cursor[d.rank], opt_.align_elems);  // NOTE [push]: in the reader's slot
        cursor[d.rank] = p.reduced_at[d.rank] + (p.b - p.a);
      }
    }
    for (int r = 0; r < W_; ++r) R.used[r] = cursor[r] - (j % 2) * opt_.slot_elems;
    return R;
  }

  bool fits(int K) const {
    for (int j = 0; j < K; ++j) {
      Round R = layout(j, K);
      for (int64_t u : R.used)
        if (u > opt_.slot_elems) return false;
    }
    return true;
  }

  int choose_rounds() const {
    int64_t need = 0;
    bool any = false;
    Round one = layout(0, 1);
    for (int64_t u : one.used) need = std::max(need, u);
    for (const auto& ch : spec_.chunks) any |= ch.numel() > 0 && !ch.dests.empty();
    if (!any) return 0;
    if (opt_.slot_elems <= 0 && need > 0) throw std::invalid_argument("SNAC: workspace has no room");
    int K = static_cast<int>(std::max<int64_t>(1, (need + opt_.slot_elems - 1) / std::max<int64_t>(1, opt_.slot_elems)));
    for (int tries = 0; !fits(K); ++tries) {
      if (tries > 64) throw std::invalid_argument("SNAC: workspace too small for spec '" + spec_.name + "'");
      K += std::max(1, K / 8);
    }
    // NOTE [matched waits]: up to twice as many rounds if that cuts every
    // chunk into equal aligned rounds (no shorter last round, so no op meets
    // a differently cut one: 256 MB all_reduce two-shot takes 16 rounds, not 13).
    for (int k = K; opt_.match_waits && k <= 2 * K; ++k)
      if (even_rounds(k) && fits(k)) return k;
    return K;
  }

  // Whether K rounds cut every chunk into equal aligned pieces.
  bool even_rounds(int K) const {
    for (const auto& ch : spec_.chunks) {
      const int64_t L = ch.numel();
      if (L > 0 && !ch.dests.empty() && (L % K != 0 || (L / K) % opt_.align_elems != 0)) return false;
    }
    return true;
  }

  // Emits copy/reduce ops for elements [a, b) of a chunk, from `srcs` regions
  // into `dst` region. A region index into `refs` gives the buffer and owner.
  void transfer(Plan& plan, OpCode code, int64_t a, int64_t b, const std::vector<Ref>& refs,
                const std::vector<Region>& regions, const char* phase) const {
    std::vector<const Region*> rp;
    for (const auto& r : regions) rp.push_back(&r);
    for (const Span& s : common_spans(rp, a, b)) {
      Op op;
      op.code = code;
      op.n = s.len;
      op.dst = refs[0];
      op.dst.offset = s.offsets[0];
      op.src_begin = static_cast<int32_t>(plan.srcs.size());
      op.src_count = static_cast<int32_t>(refs.size() - 1);
      op.phase = phase;
      for (size_t k = 1; k < refs.size(); ++k) {
        Ref r = refs[k];
        r.offset = s.offsets[k];
        plan.srcs.push_back(r);
      }
      plan.ops.push_back(op);
    }
  }

  // Ref + region of source k of piece p as read by `reader`.
  void source_of(const Piece& p, size_t k, int reader, Ref* ref, Region* reg) const {
    const Placement& src = spec_.chunks[p.chunk].sources[k];
    const bool own = src.rank == reader;
    if (opt_.push && p.pushed[k][reader] >= 0) {  // NOTE [push]: the source wrote it here
      *ref = Ref{Buf::Workspace, reader, 0, src.rank};
      *reg = Region::contiguous(p.pushed[k][reader] - p.a, p.b);
    } else if ((own && opt_.direct_local) || (!own && opt_.read_peer_inputs) || p.staged[k] < 0) {
      *ref = Ref{Buf::Input, src.rank, 0};  // own input read directly, or a peer's (read_peer_inputs)
      *reg = src.region;
    } else {
      *ref = Ref{Buf::Workspace, src.rank, 0};
      *reg = Region::contiguous(p.staged[k] - p.a, p.b);  // element e lives at staged + (e - a)
    }
  }

  static void signal(Plan& plan, Flag f, int peer, uint64_t v, const char* phase) {
    Op op;
    op.code = OpCode::Signal;
    op.flag = f;
    op.peer = peer;
    op.value = v;
    op.phase = phase;
    plan.ops.push_back(op);
  }
  static void wait(Plan& plan, Flag f, int peer, uint64_t v, const char* phase) {
    Op op;
    op.code = OpCode::Wait;
    op.flag = f;
    op.peer = peer;
    op.value = v;
    op.phase = phase;
    plan.ops.push_back(op);
  }

  void emit_round(Plan& plan, int r, int j, const Round& R, const Round* two_back, const Round* two_ahead) const {
    // Reuse: readers of this slot two rounds ago must have acked.
    if (two_back && (opt_.push || opt_.push_reduced)) {
      // NOTE [push]: this rank writes into d's slot, which holds what ANY
      // source pushed there in round j - 2: wait until d finished that round
      // (d acks every future pusher at its end, see below).
      const int L = two_back->two_shot ? 1 : 0;
      for (int d = 0; d < W_; ++d)
        if (d != r && ((opt_.push && R.reads[0][d].count(r)) || (opt_.push_reduced && R.reads[1][d].count(r))))
          wait(plan, Flag::Consumed, d, step_value(j - 2, L), "stage: wait for the reader to free its slot");
    }
    if (two_back) {
      for (int d = 0; d < W_; ++d) {
        int last = -1;
        for (int p = 0; p < 2; ++p)
          if (two_back->reads[p][d].count(r)) last = p;
        if (last >= 0) wait(plan, Flag::Consumed, d, step_value(j - 2, last), "stage: wait for readers to free the slot");
      }
    }
    // Stage.
    for (const Piece& p : R.pieces) {
      const Chunk& ch = spec_.chunks[p.chunk];
      for (size_t k = 0; k < ch.sources.size(); ++k) {
        if (ch.sources[k].rank != r) continue;
        if (p.staged[k] >= 0 && p.copied[k])
          transfer(plan, OpCode::Copy, p.a, p.b, {Ref{Buf::Workspace, r, 0}, Ref{Buf::Input, r, 0}},
                   {Region::contiguous(p.staged[k] - p.a, p.b), ch.sources[k].region}, "stage");
        for (int d = 0; opt_.push && d < W_; ++d)
          if (p.pushed[k][d] >= 0)
            transfer(plan, OpCode::Copy, p.a, p.b, {Ref{Buf::Workspace, d, 0}, Ref{Buf::Input, r, 0}},
                     {Region::contiguous(p.pushed[k][d] - p.a, p.b), ch.sources[k].region}, "stage: push to reader");
      }
    }
    // Notify phase 0.
    for (int d = 0; d < W_; ++d)
      if (R.reads[0][d].count(r)) signal(plan, Flag::Staged, d, step_value(j, 0), "notify");
    // Consume phase 0.
    for (int s : R.reads[0][r]) wait(plan, Flag::Staged, s, step_value(j, 0), "consume: wait for staged data");
    for (const Piece& p : R.pieces) {
      const Chunk& ch = spec_.chunks[p.chunk];
      const Placement* mine = nullptr;
      for (const auto& d : ch.dests)
        if (d.rank == r) mine = &d;
      const bool consume = p.owner >= 0 ? p.owner == r : mine != nullptr;
      if (!consume) continue;
      std::vector<Ref> refs;
      std::vector<Region> regs;
      if (p.owner >= 0) {
        refs.push_back(Ref{Buf::Workspace, r, 0});
        regs.push_back(Region::contiguous(p.scratch - p.a, p.b));
      } else {
        refs.push_back(Ref{Buf::Output, r, 0});
        regs.push_back(mine->region);
      }
      for (size_t k = 0; k < ch.sources.size(); ++k) {
        Ref ref;
        Region reg;
        source_of(p, k, r, &ref, &reg);
        refs.push_back(ref);
        regs.push_back(reg);
      }
      transfer(plan, spec_.kind == OpKind::Reduce ? OpCode::Reduce : OpCode::Copy, p.a, p.b, refs, regs,
               p.owner >= 0 ? "consume: reduce owned slice" : "consume");
    }
    for (int s : R.reads[0][r]) signal(plan, Flag::Consumed, s, step_value(j, 0), "consume: ack");
    if (!R.two_shot) return free_slot_for_pushers(plan, r, j, R, two_ahead);
    // Phase 1 (two-shot): owners' reduced slices are copied to the other
    // dests: pulled from the owner's scratch, or pushed by the owner into
    // the readers' slots (push_reduced).
    for (const Piece& p : R.pieces) {
      if (p.owner != r || !opt_.push_reduced) continue;
      for (const auto& d : spec_.chunks[p.chunk].dests)
        if (d.rank != r)
          transfer(plan, OpCode::Copy, p.a, p.b, {Ref{Buf::Workspace, d.rank, 0}, Ref{Buf::Workspace, r, 0}},
                   {Region::contiguous(p.reduced_at[d.rank] - p.a, p.b), Region::contiguous(p.scratch - p.a, p.b)},
                   "stage reduced slice: push to reader");
    }
    for (int d = 0; d < W_; ++d)
      if (R.reads[1][d].count(r)) signal(plan, Flag::Staged, d, step_value(j, 1), "notify reduced slice");
    for (int o : R.reads[1][r]) wait(plan, Flag::Staged, o, step_value(j, 1), "consume: wait for reduced slice");
    for (const Piece& p : R.pieces) {
      if (p.owner < 0) continue;
      for (const auto& d : spec_.chunks[p.chunk].dests) {
        if (d.rank != r) continue;
        if (opt_.push_reduced && p.owner != r)  // the owner wrote it into this rank's slot
          transfer(plan, OpCode::Copy, p.a, p.b, {Ref{Buf::Output, r, 0}, Ref{Buf::Workspace, r, 0, p.owner}},
                   {d.region, Region::contiguous(p.reduced_at[r] - p.a, p.b)}, "consume reduced slice");
        else
          transfer(plan, OpCode::Copy, p.a, p.b, {Ref{Buf::Output, r, 0}, Ref{Buf::Workspace, p.owner, 0}},
                   {d.region, Region::contiguous(p.scratch - p.a, p.b)}, "consume reduced slice");
      }
    }
    for (int o : R.reads[1][r]) signal(plan, Flag::Consumed, o, step_value(j, 1), "consume reduced slice: ack");
    free_slot_for_pushers(plan, r, j, R, two_ahead);
  }

  // NOTE [push]: at the end of round j, tell every rank that will push into
  // this rank's slot in round j + 2 that the slot is free, unless the last
  // ack of round j already told it.
  void free_slot_for_pushers(Plan& plan, int r, int j, const Round& R, const Round* two_ahead) const {
    if (!(opt_.push || opt_.push_reduced) || !two_ahead) return;
    const int L = R.two_shot ? 1 : 0;
    std::set<int> pushers;
    if (opt_.push) pushers = two_ahead->reads[0][r];
    if (opt_.push_reduced) pushers.insert(two_ahead->reads[1][r].begin(), two_ahead->reads[1][r].end());
    for (int s : pushers)
      if (!R.reads[L][r].count(s)) signal(plan, Flag::Consumed, s, step_value(j, L), "consume: free the slot for pushers");
  }

  // NOTE [peer outputs]: one round, Input straight into every destination's Output.
  Plan build_peer_outputs(int r) const {
    if (spec_.kind != OpKind::Copy) throw std::invalid_argument("SNAC: write_peer_outputs needs a Copy spec");
    Plan plan;
    plan.rank = r;
    plan.world = W_;
    std::set<int> writers, dests;  // who writes into r's Output; whose Output r writes into
    bool any = false;
    for (const auto& ch : spec_.chunks) {
      if (ch.numel() == 0 || ch.dests.empty()) continue;
      any = true;
      for (const auto& d : ch.dests) {
        if (ch.sources[0].rank == r && d.rank != r) dests.insert(d.rank);
        if (d.rank == r && ch.sources[0].rank != r) writers.insert(ch.sources[0].rank);
      }
    }
    if (!any) return plan;
    plan.rounds = 1;
    plan.steps = step_value(1, 0) - 1;
    // Both notices are Staged steps (1: output free, 2: written), so a writer's first wait for a peer
    // is a Staged wait, which the Atom checks against the peer's call tag (NOTE [call tags]): a peer
    // running another collective is refused before anything is written into it.
    const uint64_t free_v = step_value(0, 0), written_v = step_value(0, 1);
    for (int s : writers) signal(plan, Flag::Staged, s, free_v, "start: tell writers this output is free");
    for (int d : dests) wait(plan, Flag::Staged, d, free_v, "write: wait until the destination's output is free");
    for (const auto& ch : spec_.chunks) {
      if (ch.numel() == 0 || ch.sources[0].rank != r) continue;
      for (const auto& d : ch.dests)
        transfer(plan, OpCode::Copy, 0, ch.numel(), {Ref{Buf::Output, d.rank, 0}, Ref{Buf::Input, r, 0}},
                 {d.region, ch.sources[0].region}, d.rank == r ? "copy own chunk" : "write into the peer's output");
    }
    for (int d : dests) signal(plan, Flag::Staged, d, written_v, "notify: written");
    for (int s : writers) wait(plan, Flag::Staged, s, written_v, "end: wait for the writers");
    for (Op& op : plan.ops) op.round = 0;
    return plan;
  }

  Plan build(int rank) const {
    if (opt_.write_peer_outputs) return build_peer_outputs(rank);
    Plan plan;
    plan.rank = rank;
    plan.world = W_;
    const int K = choose_rounds();
    plan.rounds = K;
    plan.steps = step_value(K, 0) - 1;
    std::vector<Round> rounds;
    for (int j = 0; j < K; ++j) rounds.push_back(layout(j, K));
    for (int j = 0; j < K; ++j) {
      const size_t first = plan.ops.size();
      emit_round(plan, rank, j, rounds[j], j >= 2 ? &rounds[j - 2] : nullptr, j + 2 < K ? &rounds[j + 2] : nullptr);
      for (size_t i = first; i < plan.ops.size(); ++i) plan.ops[i].round = j;
      plan.workspace_elems = std::max(plan.workspace_elems, (j % 2) * opt_.slot_elems + rounds[j].used[rank]);
    }
    if (opt_.read_peer_inputs) {
      // Release (NOTE [zero-copy]): readers of this rank's input are done with it.
      for (int d = 0; d < W_; ++d) {
        int last = -1;
        for (int j = 0; j < K; ++j)
          if (rounds[j].reads[0][d].count(rank)) last = j;
        if (last >= 0) wait(plan, Flag::Consumed, d, step_value(last, 0), "release: wait until peers read this input");
      }
    }
    return plan;
  }

 private:
  const Spec& spec_;
  PlanOptions opt_;
  int W_;
};

}  // namespace

Plan make_plan(const Spec& spec, int rank, const PlanOptions& opt) {
  if (rank < 0 || rank >= spec.world) throw std::invalid_argument("SNAC: rank outside the world");
  PlanOptions o = opt;
  o.align_elems = std::max<int64_t>(1, o.align_elems);
  if (!o.match_waits || spec.world == 1) return Planner(spec, o).build(rank);
  // NOTE [matched waits]: every rank's plan; peers' with direct_local = false
  // (a superset of the Workspace accesses of either choice).
  PlanOptions peers = o;
  peers.direct_local = false;
  const Planner own(spec, o), others(spec, peers);
  std::vector<Plan> all;
  all.reserve(static_cast<size_t>(spec.world));
  for (int q = 0; q < spec.world; ++q) all.push_back(q == rank ? own.build(q) : others.build(q));
  mark_matched_waits(&all, rank);
  return std::move(all[static_cast<size_t>(rank)]);
}

std::string Plan::describe() const {
  static const char* bufs[] = {"in", "out", "ws"};
  static const char* codes[] = {"wait", "signal", "copy", "reduce"};
  std::ostringstream os;
  os << "plan rank " << rank << "/" << world << ": " << rounds << " rounds, " << ops.size() << " ops\n";
  for (const Op& op : ops) {
    os << "  " << codes[static_cast<int>(op.code)];
    if (op.code == OpCode::Wait || op.code == OpCode::Signal) {
      os << (op.flag == Flag::Staged ? " staged" : " consumed") << " peer=" << op.peer << " v=" << op.value
         << (op.matched ? " matched" : "");
    } else {
      os << " n=" << op.n << " " << bufs[static_cast<int>(op.dst.buf)] << op.dst.rank << "+" << op.dst.offset
         << " <-";
      for (int k = 0; k < op.src_count; ++k) {
        const Ref& s = srcs[op.src_begin + k];
        os << " " << bufs[static_cast<int>(s.buf)] << s.rank << "+" << s.offset;
      }
    }
    os << "  [" << op.phase << "]\n";
  }
  return os.str();
}

}  // namespace purlin::snac
