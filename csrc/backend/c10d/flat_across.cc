// flat_across.cc — the flat forms of a group that spans hosts (NOTE [groups
// spanning hosts] in spanning_ops.cc): the engine's group of every rank moves
// bytes only (any dtype, any split), and purlin's own CPU reduction
// (atom/cpu/reduce_cpu.h) combines what arrives, in ascending rank order, as
// one host's purlin group does. Every tensor here is 1-D and contiguous, its
// size agreed on every rank (NOTE [call agreement]).
#include <ATen/ATen.h>

#include "atom/cpu/reduce_cpu.h"
#include "backend/c10d/group_hosts.h"
#include "backend/c10d/spanning_util.h"

namespace purlin::backend {

void reduce_rows(at::Tensor& dst, const at::Tensor& rows, const Reduction& red, RedOp redop, bool scaled) {
  const int k = static_cast<int>(rows.size(0));
  const int64_t n = dst.numel();
  if (n == 0) return;
  std::vector<const void*> srcs(static_cast<size_t>(k));
  for (int q = 0; q < k; ++q) srcs[q] = rows[q].data_ptr();
  atom::cpu::reduce_cpu(dst.data_ptr(), srcs.data(), scaled ? red.factors.data() : nullptr, k, n, red.dtype, redop);
}

void GroupHosts::flat_reduce_scatter(const char* op, at::Tensor& out, const at::Tensor& in, const Reduction& red) {
  const int64_t n = out.numel();
  if (n == 0) return;  // every rank alike (agreed)
  at::Tensor got = at::empty({world_, n}, out.options());
  at::Tensor in_bytes = as_bytes(in), got_bytes = as_bytes(got);
  std::vector<int64_t> none;
  flat().alltoall_base(got_bytes, in_bytes, none, none, c10d::AllToAllOptions())->wait();  // block j to rank j
  count_flat(op);
  reduce_rows(out, got, red, red.redop, red.redop == RedOp::PremulSum);
}

void GroupHosts::flat_all_gather(const char* op, at::Tensor& out, const at::Tensor& in) {
  if (in.numel() == 0) return;
  at::Tensor out_bytes = as_bytes(out), in_bytes = as_bytes(in);
  flat()._allgather_base(out_bytes, in_bytes, c10d::AllgatherOptions())->wait();
  count_flat(op);
}

void GroupHosts::flat_all_reduce(const char* op, at::Tensor& buf, const Reduction& red) {
  const int64_t n = buf.numel(), chunk = (n + world_ - 1) / world_;
  if (n == 0) return;
  // Reduce-scatter of world equal chunks (the last padded), then all_gather of the reduced chunks.
  at::Tensor padded = buf;
  if (chunk * world_ != n) {
    padded = at::zeros({chunk * world_}, buf.options());
    padded.narrow(0, 0, n).copy_(buf);
  }
  at::Tensor mine = at::empty({chunk}, buf.options());
  flat_reduce_scatter(op, mine, padded, red);
  at::Tensor out_bytes = as_bytes(padded), in_bytes = as_bytes(mine);
  flat()._allgather_base(out_bytes, in_bytes, c10d::AllgatherOptions())->wait();
  if (!padded.is_same(buf)) buf.copy_(padded.narrow(0, 0, n));
}

void GroupHosts::flat_all_to_all(const char* op, at::Tensor& out, const at::Tensor& in,
                                 const std::vector<int64_t>& sends, const std::vector<int64_t>& expects) {
  const int64_t es = static_cast<int64_t>(in.element_size());
  std::vector<int64_t> in_split, out_split;
  for (int64_t s : sends) in_split.push_back(s * es);
  for (int64_t e : expects) out_split.push_back(e * es);
  at::Tensor in_bytes = as_bytes(in), out_bytes = as_bytes(out);
  flat().alltoall_base(out_bytes, in_bytes, out_split, in_split, c10d::AllToAllOptions())->wait();
  count_flat(op);
}

void GroupHosts::flat_broadcast(const char* op, at::Tensor& buf, int root) {
  if (buf.numel() == 0) return;
  std::vector<at::Tensor> x{as_bytes(buf)};
  c10d::BroadcastOptions b;
  b.rootRank = root;
  flat().broadcast(x, b)->wait();
  count_flat(op);
}

void GroupHosts::flat_gather(const char* op, at::Tensor& out, const at::Tensor& in, int root) {
  if (in.numel() == 0) return;
  std::vector<at::Tensor> inputs{as_bytes(in)};
  std::vector<std::vector<at::Tensor>> outputs;
  if (rank_ == root) outputs.push_back(list_of_rows(as_bytes(out), world_));
  c10d::GatherOptions g;
  g.rootRank = root;
  flat().gather(outputs, inputs, g)->wait();
  count_flat(op);
}

void GroupHosts::flat_scatter(const char* op, at::Tensor& out, const at::Tensor& in, int root) {
  if (out.numel() == 0) return;
  std::vector<at::Tensor> outputs{as_bytes(out)};
  std::vector<std::vector<at::Tensor>> inputs;
  if (rank_ == root) inputs.push_back(list_of_rows(as_bytes(in), world_));
  c10d::ScatterOptions s;
  s.rootRank = root;
  flat().scatter(outputs, inputs, s)->wait();
  count_flat(op);
}

}  // namespace purlin::backend
