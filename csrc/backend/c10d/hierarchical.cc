// hierarchical.cc — collectives of a group that spans hosts, composed of a part
// within each host (purlin, natively: the host's own purlin group) and a part
// across hosts (the fallback engine, gloo for CPU tensors).
//
// NOTE [hierarchical collectives]
// A group of H hosts with L ranks each (GroupHosts::route sends uneven hosts,
// and ops without a form here, to the flat fallback). Rank (h, l) is the l-th
// rank of host h (NOTE [host map]: any placement of ranks, contiguous or not).
// Two kinds of subgroups, made once on first use through the parent's Store
// under their own prefixes: `within` = the purlin group of one host's L ranks
// (Specs, SNAC and the CPU Atom as for any purlin group), `across` = the
// engine's group of the H ranks of local index l.
//   all_reduce      pad to L equal chunks; within: reduce_scatter_tensor (rank
//                   l holds chunk l reduced over its host); across: all_reduce
//                   of that chunk; within: all_gather_into_tensor. Every rank
//                   sends 1/L of the tensor across hosts.
//   all_gather      across: all_gather of the input (rank (h, l) gets the
//                   inputs of ranks (*, l)); within: all_gather of those; then
//                   the blocks, ordered [l][h], are placed at their ranks.
//   reduce_scatter  the mirror: input blocks reordered [l][h]; within:
//                   reduce_scatter_tensor (rank l: blocks (l, *) reduced over
//                   the host); across: reduce_scatter (host h: block (l, h),
//                   now reduced over every rank: this rank's own).
//   broadcast       on the root's host: within: broadcast from the root; then
//                   across, from the root's host: broadcast of chunk l of L
//                   equal chunks; on the other hosts: within: all_gather of the
//                   chunks.
// Reductions. The within part reduces with the op itself, except AVG (SUM):
// PREMUL_SUM's factors are applied there, each once, by the rank that owns it.
// The across part combines partial results: SUM for SUM, AVG and PREMUL_SUM,
// the op itself for MIN, MAX and PRODUCT (for bool, whose SUM is "or" and
// PRODUCT "and": MAX and MIN). AVG divides once, at the end, by the world
// size. Integer results, and float sums of small integers, therefore equal the
// flat fallback's bit for bit; other float sums differ only by association
// (partial sums per host). Dtypes the engine lacks cross in a form it has:
// copies as bytes, int16 reductions widened to int32 and narrowed back (sums
// and products wrap modulo 2^16 either way; MIN and MAX are exact).
// Size. The hierarchical rows of the protocol table (hierarchical_rows in
// protocol_table.h) say from which size each family runs this way; below, and
// where one rank per host leaves nothing within a host to gain, ops run flat
// on the engine, except what gloo gets wrong or cannot run at all, which runs
// here at any size (also with one rank per host): PREMUL_SUM, int16, bool
// reductions (gloo's SUM leaves bytes of 2 in a bool) and strided views
// (gloo reads their storage, not their elements; this code stages them).
// Counters: the parts within hosts are the host group's own (counters() shows
// them as "<op> within hosts", native), each part across hosts counts one
// fallback call of "<op> across hosts", logged once with the reason.
// Arguments are checked on each rank alone, as the engine does (there is no
// cross-host arrival handshake); a size that differs between ranks fails in
// the part that first meets it, or waits out the timeout.
// CUDA tensors never come here: NCCL, the engine for them, is itself
// hierarchical across nodes (rings and trees over NVLink and the network).
#include <cstring>

#include <ATen/ATen.h>

#include "backend/c10d/completed_work.h"
#include "backend/c10d/group_hosts.h"
#include "backend/c10d/tensor_args.h"

namespace purlin::backend {

namespace {

using c10d::ReduceOp;

// The within part's op: the user's (PREMUL_SUM keeps its factor), AVG as SUM.
ReduceOp within_op(const ReduceOp& op) { return op.op_ == ReduceOp::AVG ? ReduceOp(ReduceOp::SUM) : op; }

// The across part's op, combining the hosts' partial results of `op` on `dtype`.
ReduceOp across_op(const ReduceOp& op, at::ScalarType dtype) {
  switch (op.op_) {
    case ReduceOp::AVG:
    case ReduceOp::PREMUL_SUM: return ReduceOp(ReduceOp::SUM);
    case ReduceOp::SUM: return ReduceOp(dtype == at::kBool ? ReduceOp::MAX : ReduceOp::SUM);
    case ReduceOp::PRODUCT: return ReduceOp(dtype == at::kBool ? ReduceOp::MIN : ReduceOp::PRODUCT);
    default: return ReduceOp(op.op_);
  }
}

// A 1-D contiguous tensor of t's elements (t itself when it already is one).
at::Tensor flat1(const at::Tensor& t) { return t.is_contiguous() ? t.view({-1}) : t.contiguous().view({-1}); }

// What the engine reduces for `t`: int16 widened (gloo has none), else t itself.
at::Tensor engine_form(const at::Tensor& t) { return t.scalar_type() == at::kShort ? t.to(at::kInt) : t; }

}  // namespace

template <class F>
void GroupHosts::part(const char* op, const char* what, F&& fn) {
  try {
    fn();
  } catch (const c10::Error& e) {
    fail(op, what, e.what_without_backtrace());
  } catch (const std::exception& e) {
    fail(op, what, e.what());
  }
}

void GroupHosts::fail(const char* op, const char* what, const std::string& why) const {
  // The part's error names the subgroup's ranks: say which of this group's they are.
  const bool across = std::strncmp(what, "across", 6) == 0;
  const int n = across ? map_.count() : per_host_;
  std::string theirs, ours;
  for (int k = 0; k < n; ++k) {
    theirs += (k ? ", " : "") + std::to_string(k);
    ours += (k ? ", " : "") + std::to_string(across ? map_.hosts[k][local_] : map_.hosts[host_][k]);
  }
  TORCH_CHECK(false, error_prefix(op, rank_), "(a group spanning hosts; in its part ", what, ", whose ranks ", theirs,
              " are this group's ranks ", ours, ") ", why);
}

c10::intrusive_ptr<c10d::Work> GroupHosts::all_reduce(std::vector<at::Tensor>& tensors,
                                                       const c10d::AllreduceOptions& opts) {
  constexpr const char* op = "all_reduce";
  TORCH_CHECK(tensors.size() == 1, error_prefix(op, rank_), "expects one tensor per process");
  at::Tensor& t = tensors[0];
  const int64_t n = t.numel(), L = per_host_, chunk = (n + L - 1) / L;
  const bool in_place = t.is_contiguous() && chunk * L == n;
  at::Tensor buf;
  if (in_place) {
    buf = t.view({-1});
  } else {
    buf = at::empty({chunk * L}, t.options());
    buf.narrow(0, 0, n).copy_(t.reshape({-1}));
    buf.narrow(0, n, chunk * L - n).zero_();  // the padding's result is dropped
  }
  at::Tensor mine = at::empty({chunk}, buf.options());
  c10d::ReduceScatterOptions rs;
  rs.reduceOp = within_op(opts.reduceOp);
  part(op, "within the host: reduce_scatter_tensor", [&] { within()._reduce_scatter_base(mine, buf, rs)->wait(); });
  c10d::AllreduceOptions ar;
  ar.reduceOp = across_op(opts.reduceOp, t.scalar_type());
  part(op, "across hosts: all_reduce", [&] {
    std::vector<at::Tensor> x{engine_form(mine)};
    across().allreduce(x, ar)->wait();
    if (!x[0].is_same(mine)) mine.copy_(x[0]);
  });
  count_across(op);
  if (opts.reduceOp.op_ == ReduceOp::AVG) mine.div_(world_);
  part(op, "within the host: all_gather_into_tensor", [&] { within()._allgather_base(buf, mine)->wait(); });
  if (!in_place) t.copy_(buf.narrow(0, 0, n).view(t.sizes()));
  return completed_work(tensors);
}

c10::intrusive_ptr<c10d::Work> GroupHosts::all_gather(at::Tensor& output, const at::Tensor& input, const char* op) {
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), error_prefix(op, rank_), check_same_dtype({output, input}));
  TORCH_CHECK(output.numel() == input.numel() * world_, error_prefix(op, rank_), "output has ", output.numel(),
              " elements, expected world size x input = ", input.numel() * world_);
  const int64_t n = input.numel(), H = map_.count(), L = per_host_;
  at::Tensor crossed = at::empty({H * n}, input.options());
  part(op, "across hosts: all_gather_into_tensor", [&] {
    at::Tensor in = flat1(input).view(at::kByte), out = crossed.view(at::kByte);  // copies: any dtype as bytes
    across()._allgather_base(out, in)->wait();
  });
  count_across(op);
  at::Tensor gathered = at::empty({L * H * n}, input.options());
  part(op, "within the host: all_gather_into_tensor", [&] { within()._allgather_base(gathered, crossed)->wait(); });
  if (output.is_contiguous()) {
    output.view({world_, n}).index_copy_(0, by_local_, gathered.view({L * H, n}));
  } else {
    at::Tensor placed = at::empty({world_, n}, input.options());
    placed.index_copy_(0, by_local_, gathered.view({L * H, n}));
    output.copy_(placed.view(output.sizes()));
  }
  return completed_work({output});
}

c10::intrusive_ptr<c10d::Work> GroupHosts::all_gather_list(std::vector<std::vector<at::Tensor>>& outputs,
                                                           std::vector<at::Tensor>& inputs) {
  constexpr const char* op = "all_gather";
  TORCH_CHECK(inputs.size() == 1 && outputs.size() == 1, error_prefix(op, rank_),
              "expects one input and one output list per process");
  TORCH_CHECK(static_cast<int>(outputs[0].size()) == world_, error_prefix(op, rank_), "output list has ",
              outputs[0].size(), " tensors, expected the world size ", world_);
  for (const auto& o : outputs[0])
    TORCH_CHECK(o.numel() == inputs[0].numel(), error_prefix(op, rank_),
                "output tensors must have as many elements as the input");
  at::Tensor out = at::empty({inputs[0].numel() * world_}, inputs[0].options());
  all_gather(out, inputs[0], op);
  unflatten_into(out, outputs[0]);
  return completed_work(outputs[0]);
}

c10::intrusive_ptr<c10d::Work> GroupHosts::reduce_scatter(at::Tensor& output, const at::Tensor& input,
                                                          const c10d::ReduceScatterOptions& opts, const char* op) {
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), error_prefix(op, rank_), check_same_dtype({output, input}));
  TORCH_CHECK(input.numel() == output.numel() * world_, error_prefix(op, rank_), "input has ", input.numel(),
              " elements, expected world size x output = ", output.numel() * world_);
  const int64_t n = output.numel(), H = map_.count();
  at::Tensor ordered = flat1(input).view({world_, n}).index_select(0, by_local_).view({-1});
  at::Tensor partial = at::empty({H * n}, input.options());
  c10d::ReduceScatterOptions within_rs;
  within_rs.reduceOp = within_op(opts.reduceOp);
  part(op, "within the host: reduce_scatter_tensor", [&] { within()._reduce_scatter_base(partial, ordered, within_rs)->wait(); });
  at::Tensor mine = output.is_contiguous() ? output.view({-1}) : at::empty({n}, input.options());
  c10d::ReduceScatterOptions across_rs;
  across_rs.reduceOp = across_op(opts.reduceOp, input.scalar_type());
  part(op, "across hosts: reduce_scatter_tensor", [&] {
    at::Tensor in = engine_form(partial), out = engine_form(mine);
    across()._reduce_scatter_base(out, in, across_rs)->wait();
    if (!out.is_same(mine)) mine.copy_(out);
  });
  count_across(op);
  if (opts.reduceOp.op_ == ReduceOp::AVG) mine.div_(world_);
  if (!output.is_contiguous()) output.copy_(mine.view(output.sizes()));
  return completed_work({output});
}

c10::intrusive_ptr<c10d::Work> GroupHosts::reduce_scatter_list(std::vector<at::Tensor>& outputs,
                                                               std::vector<std::vector<at::Tensor>>& inputs,
                                                               const c10d::ReduceScatterOptions& opts) {
  constexpr const char* op = "reduce_scatter";
  TORCH_CHECK(outputs.size() == 1 && inputs.size() == 1, error_prefix(op, rank_),
              "expects one output and one input list per process");
  TORCH_CHECK(static_cast<int>(inputs[0].size()) == world_, error_prefix(op, rank_),
              "input list must have world size tensors");
  for (const auto& t : inputs[0])
    TORCH_CHECK(t.numel() == outputs[0].numel(), error_prefix(op, rank_),
                "input tensors must have as many elements as the output");
  at::Tensor in = flat_of(inputs[0]);
  return reduce_scatter(outputs[0], in, opts, op);
}

c10::intrusive_ptr<c10d::Work> GroupHosts::broadcast(std::vector<at::Tensor>& tensors,
                                                     const c10d::BroadcastOptions& opts) {
  constexpr const char* op = "broadcast";
  TORCH_CHECK(tensors.size() == 1, error_prefix(op, rank_), "expects one tensor per process");
  TORCH_CHECK(opts.rootRank >= 0 && opts.rootRank < world_, error_prefix(op, rank_), "root rank ", opts.rootRank,
              " is outside the group of ", world_, " ranks");
  at::Tensor& t = tensors[0];
  const int root = static_cast<int>(opts.rootRank);
  const int root_host = map_.host_of[root];
  const int64_t n = t.numel(), L = per_host_, chunk = (n + L - 1) / L;
  at::Tensor buf = at::empty({chunk * L}, t.options());
  if (rank_ == root) {
    buf.narrow(0, 0, n).copy_(t.reshape({-1}));
    buf.narrow(0, n, chunk * L - n).zero_();
  }
  if (host_ == root_host) {
    c10d::BroadcastOptions b;
    b.rootRank = map_.local_of[root];
    part(op, "within the root's host: broadcast", [&] {
      std::vector<at::Tensor> x{buf};
      within().broadcast(x, b)->wait();
    });
  }
  at::Tensor mine = buf.narrow(0, local_ * chunk, chunk);
  part(op, "across hosts: broadcast", [&] {
    c10d::BroadcastOptions b;
    b.rootRank = root_host;
    std::vector<at::Tensor> x{mine.view(at::kByte)};  // a copy: any dtype as bytes
    across().broadcast(x, b)->wait();
  });
  count_across(op);
  if (host_ != root_host) {
    at::Tensor own = mine.clone();  // the gathered output must not alias its input
    part(op, "within the host: all_gather_into_tensor", [&] { within()._allgather_base(buf, own)->wait(); });
  }
  if (rank_ != root) t.copy_(buf.narrow(0, 0, n).view(t.sizes()));
  return completed_work(tensors);
}

}  // namespace purlin::backend
