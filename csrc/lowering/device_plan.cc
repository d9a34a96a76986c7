// device_plan.cc — see device_plan.h.
#include "lowering/device_plan.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "atom/cuda/interned_names.h"
#include "atom/cuda/signal_pad.h"

namespace purlin::lowering {

using namespace purlin::atom::cuda;  // the plan format and its limits (kMaxBlocks, kMaxWorld)

namespace {

// One local memory range touched by an op (NOTE [local barriers]).
struct Access {
  int buf;          // 0: Input, 1: Output, 2: own Workspace
  int64_t lo, hi;   // elements
  int64_t per;      // the op's partition size; lo is also the op's element 0
  bool write;
};

class Tracker {
 public:
  Tracker(int rank, int blocks, int64_t esize, IoAlias alias, int64_t shift, Partition partition)
      : rank_(rank), blocks_(blocks), esize_(esize), alias_(alias), shift_(alias == IoAlias::Shifted ? shift : 0),
        partition_(partition) {}

  // The access of one Copy/Reduce ref; false if it is not local memory.
  bool access(const snac::Ref& r, int64_t n, bool write, Access* a) const {
    int buf = 0;
    int64_t at = r.offset;
    const bool one_base = alias_ == IoAlias::Same || alias_ == IoAlias::Shifted;  // comparable offsets
    switch (r.buf) {
      case snac::Buf::Input:
        if (r.rank != rank_) return false;  // a peer's input (zero-copy plans): not this rank's memory
        buf = one_base ? 1 : 0;
        at += shift_;                        // in Output's coordinates (0 unless Shifted)
        break;
      case snac::Buf::Output:
        if (r.rank != rank_) return false;  // a peer's output (NOTE [peer outputs]): not this rank's memory
        buf = 1;
        break;
      case snac::Buf::Workspace:
        if (r.rank != rank_) return false;
        buf = 2;
        break;
    }
    const int64_t per =
        partition_ == Partition::WideLines ? wide_part_size(n, blocks_, esize_) : part_size(n, blocks_, esize_);
    *a = Access{buf, at, at + n, per, write};
    return n > 0;
  }

  bool conflict(const Access& x, const Access& y) const {
    if (!x.write && !y.write) return false;
    if (x.buf != y.buf)  // Input vs Output: unrelated unless they overlap in some unknown way
      return alias_ == IoAlias::Overlap && x.buf < 2 && y.buf < 2;
    if (x.hi <= y.lo || y.hi <= x.lo) return false;  // disjoint ranges
    return !(x.lo == y.lo && x.per == y.per);        // same origin and partition: same block per element
  }

  // True if `mine` conflicts with anything since the last barrier.
  bool needs_barrier(const std::vector<Access>& mine) const {
    for (const Access& x : mine)
      for (const Access& y : history_)
        if (conflict(x, y)) return true;
    return false;
  }

  void add(const std::vector<Access>& mine) { history_.insert(history_.end(), mine.begin(), mine.end()); }
  void clear() { history_.clear(); }
  size_t size() const { return history_.size(); }

 private:
  int rank_, blocks_;
  int64_t esize_;
  IoAlias alias_;
  int64_t shift_;
  Partition partition_;
  std::vector<Access> history_;
};

DevRef dev_ref(const snac::Ref& r) {
  DevRef d{};
  d.offset = r.offset;
  d.rank = r.rank;
  d.buf = static_cast<uint8_t>(r.buf);  // snac::Buf has DevBuf's numbers
  d.origin = static_cast<int16_t>(r.origin >= 0 ? r.origin : r.rank);
  return d;
}

constexpr size_t kMaxHistory = 4096;  // beyond this a barrier is cheaper than the scan

}  // namespace

void drop_line_carried_ops(DevicePlan* plan) {
  std::vector<DevOp> kept;
  kept.reserve(plan->ops.size());
  for (const DevOp& op : plan->ops)
    if (op.code != kWait && op.code != kSignal) kept.push_back(op);
  plan->ops = std::move(kept);
}

DevicePlan lower_plan(const snac::Plan& plan, int blocks, int64_t esize, IoAlias alias, int64_t shift,
                      Partition partition) {
  if (blocks < 1 || blocks > kMaxBlocks) throw std::invalid_argument("purlin: bad block count for a CUDA plan");
  if (esize <= 0 || kPartBytes % esize != 0) throw std::invalid_argument("purlin: bad element size for a CUDA plan");
  if (plan.world > kMaxWorld)
    throw std::invalid_argument("purlin: the CUDA datapath supports at most " + std::to_string(kMaxWorld) + " ranks");
  DevicePlan out;
  out.rounds = plan.rounds;
  out.steps = plan.steps;
  Tracker tr(plan.rank, blocks, esize, alias, shift, partition);
  std::vector<Access> mine;
  std::vector<bool> tag_checked(static_cast<size_t>(plan.world), false);
  for (const snac::Op& op : plan.ops) {
    DevOp d{};
    d.phase = intern_name(op.phase);
    switch (op.code) {
      case snac::OpCode::Wait:
      case snac::OpCode::Signal:
        d.code = op.code == snac::OpCode::Wait ? kWait : kSignal;
        d.flag = static_cast<uint8_t>(op.flag);  // snac::Flag has FlagKind's numbers
        d.peer = op.peer;
        d.value = op.value;
        // NOTE [call tags]: the first Staged wait for each peer checks its tag, before this rank reads
        // anything the peer staged or (NOTE [peer outputs]) writes into the peer's output.
        if (op.code == snac::OpCode::Wait && op.flag == snac::Flag::Staged && !tag_checked[op.peer]) {
          d.check_tag = 1;
          tag_checked[op.peer] = true;
        }
        // NOTE [matched waits]; a tag check reads what block 0 published.
        d.own_slot = op.code == snac::OpCode::Wait && op.matched && !d.check_tag && partition == Partition::Parts;
        out.ops.push_back(d);
        continue;
      case snac::OpCode::Copy:
      case snac::OpCode::Reduce: break;
    }
    d.code = op.code == snac::OpCode::Copy ? kCopy : kReduce;
    d.n = op.n;
    d.dst = dev_ref(op.dst);
    d.src_begin = static_cast<int32_t>(out.srcs.size());
    d.src_count = static_cast<int16_t>(op.src_count);
    if (d.code == kReduce) out.max_srcs = std::max(out.max_srcs, op.src_count);
    mine.clear();
    Access a;
    if (tr.access(op.dst, op.n, true, &a)) mine.push_back(a);
    for (int k = 0; k < op.src_count; ++k) {
      const snac::Ref& s = plan.srcs[op.src_begin + k];
      out.srcs.push_back(dev_ref(s));
      if (tr.access(s, op.n, false, &a)) mine.push_back(a);
    }
    if (tr.needs_barrier(mine) || tr.size() > kMaxHistory) {
      DevOp sync{};
      sync.code = kLocalSync;
      sync.value = ++out.local_syncs;
      sync.phase = intern_name("local barrier: blocks of this rank meet");
      out.ops.push_back(sync);
      tr.clear();
    }
    tr.add(mine);
    out.ops.push_back(d);
  }
  return out;
}

}  // namespace purlin::lowering
