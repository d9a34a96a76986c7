// hierarchical.cc — collectives of a group that spans hosts, composed of a part
// within each host (purlin, natively: the host's own purlin group) and a part
// across hosts (the engine, gloo for CPU tensors, moving bytes).
//
// NOTE [hierarchical collectives]
// A group of H hosts with L >= 2 ranks each (NOTE [groups spanning hosts] sends
// every other shape, and sizes below the hierarchical rows, to the flat forms)
// runs all_reduce, all_gather and reduce_scatter as a part within each host
// (`within`: the purlin group of the host's L ranks) and a part across hosts
// (`across`: the engine's group of the H ranks of one local index), so that
// every rank sends only 1/L of the data across hosts. Arguments were agreed
// before (NOTE [call agreement]); every tensor here is 1-D and contiguous.
// The engine only moves bytes: the across part combines the hosts' partial
// results with purlin's own CPU reduction in ascending host order, so purlin's
// semantics hold on every dtype, integer, MIN, MAX and bool results equal one
// host's, and float sums differ from one host's fold only by association (one
// rounding per host). AVG divides once, at the end; PREMUL_SUM's factors are
// applied within, once. CUDA tensors never come here (NCCL is hierarchical
// itself). Details: docs/DESIGN.md, "Hierarchical collectives".
#include <cstring>

#include <ATen/ATen.h>

#include "backend/c10d/completed_work.h"
#include "backend/c10d/group_hosts.h"
#include "backend/c10d/spanning_util.h"
#include "backend/c10d/tensor_args.h"

namespace purlin::backend {

namespace {

using c10d::ReduceOp;

// The within part's op: the user's (PREMUL_SUM keeps its factor), AVG as SUM.
ReduceOp within_op(const ReduceOp& op) { return op.op_ == ReduceOp::AVG ? ReduceOp(ReduceOp::SUM) : op; }

// The across part's op, combining the hosts' partial results of `redop`.
RedOp across_op(RedOp redop) { return redop == RedOp::Avg || redop == RedOp::PremulSum ? RedOp::Sum : redop; }

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

void GroupHosts::hier_all_reduce(const char* op, at::Tensor& buf, const Reduction& red) {
  const int64_t n = buf.numel(), L = per_host_, H = map_.count(), chunk = (n + L - 1) / L;
  at::Tensor padded = buf;
  if (chunk * L != n) {
    padded = at::zeros({chunk * L}, buf.options());  // the padding's result is dropped
    padded.narrow(0, 0, n).copy_(buf);
  }
  at::Tensor mine = at::empty({chunk}, buf.options());
  c10d::ReduceScatterOptions rs;
  rs.reduceOp = within_op(red.op);
  part(op, "within the host: reduce_scatter_tensor", [&] { within()._reduce_scatter_base(mine, padded, rs)->wait(); });
  at::Tensor partials = at::empty({H, chunk}, buf.options());
  part(op, "across hosts: all_gather_into_tensor", [&] {
    at::Tensor out = as_bytes(partials.view({-1})), in = as_bytes(mine);
    across()._allgather_base(out, in, c10d::AllgatherOptions())->wait();
  });
  count_across(op);
  reduce_rows(mine, partials, red, across_op(red.redop), false);
  if (red.redop == RedOp::Avg) mine.div_(world_);
  part(op, "within the host: all_gather_into_tensor", [&] {
    within()._allgather_base(padded, mine, c10d::AllgatherOptions())->wait();
  });
  if (!padded.is_same(buf)) buf.copy_(padded.narrow(0, 0, n));
}

void GroupHosts::hier_all_gather(const char* op, at::Tensor& out, const at::Tensor& in) {
  const int64_t n = in.numel(), H = map_.count(), L = per_host_;
  at::Tensor crossed = at::empty({H * n}, in.options());
  part(op, "across hosts: all_gather_into_tensor", [&] {
    at::Tensor bytes = as_bytes(crossed), in_bytes = as_bytes(in);
    across()._allgather_base(bytes, in_bytes, c10d::AllgatherOptions())->wait();
  });
  count_across(op);
  at::Tensor gathered = at::empty({L * H * n}, in.options());
  part(op, "within the host: all_gather_into_tensor", [&] {
    within()._allgather_base(gathered, crossed, c10d::AllgatherOptions())->wait();
  });
  out.view({world_, n}).index_copy_(0, by_local_, gathered.view({L * H, n}));
}

void GroupHosts::hier_reduce_scatter(const char* op, at::Tensor& out, const at::Tensor& in, const Reduction& red) {
  const int64_t n = out.numel(), H = map_.count();
  at::Tensor ordered = in.view({world_, n}).index_select(0, by_local_).view({-1});
  at::Tensor partial = at::empty({H * n}, in.options());
  c10d::ReduceScatterOptions rs;
  rs.reduceOp = within_op(red.op);
  part(op, "within the host: reduce_scatter_tensor", [&] { within()._reduce_scatter_base(partial, ordered, rs)->wait(); });
  at::Tensor partials = at::empty({H, n}, in.options());
  part(op, "across hosts: all_to_all_single", [&] {
    at::Tensor got = as_bytes(partials.view({-1})), sent = as_bytes(partial);
    std::vector<int64_t> none;
    across().alltoall_base(got, sent, none, none, c10d::AllToAllOptions())->wait();
  });
  count_across(op);
  reduce_rows(out, partials, red, across_op(red.redop), false);
  if (red.redop == RedOp::Avg) out.div_(world_);
}

}  // namespace purlin::backend
