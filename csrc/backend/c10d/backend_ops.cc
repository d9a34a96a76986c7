// backend_ops.cc — the c10d collective overrides of PurlinBackend.
//
// Each op: route to the fallback if it cannot run natively (same decision on
// every rank: it depends only on op, dtype and device), else build a flat
// Request, run it, and copy results back into list / non-contiguous outputs.
#include <ATen/ATen.h>

#include "backend/c10d/completed_work.h"
#include "backend/c10d/group_hosts.h"
#include "backend/cuda/cuda_engine.h"
#include "backend/c10d/purlin_backend.h"
#include "backend/c10d/tensor_args.h"

namespace purlin::backend {

namespace {
std::vector<at::Tensor> cat_lists(const std::vector<std::vector<at::Tensor>>& ls) {
  std::vector<at::Tensor> out;
  for (const auto& l : ls) out.insert(out.end(), l.begin(), l.end());
  return out;
}

Request request(CollOp op, const char* name, const at::Tensor& like) {
  Request rq;
  rq.op = op;
  rq.name = name;
  if (like.defined() && !to_dtype(like.scalar_type(), &rq.dtype)) rq.error = dtype_refusal(like.scalar_type());
  return rq;
}

void set_io(Request& rq, const at::Tensor& in, const at::Tensor& out) {
  if (in.defined()) {
    rq.in = in.data_ptr();
    rq.in_numel = in.numel();
  }
  if (out.defined()) {
    rq.out = out.data_ptr();
    rq.out_numel = out.numel();
  }
}

// A local argument error for every rank to report; the message is built only
// when the check fails (NOTE [eager host path]: a message built on every
// call cost allocations on every call).
#define PURLIN_REQUIRE(rq, ok, why)                    \
  do {                                                 \
    if (!(ok) && (rq).error.empty()) (rq).error = why; \
  } while (0)

void set_root(Request& rq, int64_t root, int world) {
  rq.root = static_cast<int>(root);
  PURLIN_REQUIRE(rq, root >= 0 && root < world,
                 "root rank " + std::to_string(root) + " is outside the group of " + std::to_string(world) + " ranks");
}

void require_same_dtype(Request& rq, const std::vector<at::Tensor>& ts) {
  std::string why = check_same_dtype(ts);
  if (!why.empty() && rq.error.empty()) rq.error = std::move(why);
}

// Bytes of a rank's side of an op (NOTE [protocol table]: the larger side decides).
int64_t bytes_of(const std::vector<at::Tensor>& ts) {
  int64_t n = 0;
  for (const auto& t : ts)
    if (t.defined() && t.layout() == c10::kStrided) n += static_cast<int64_t>(t.nbytes());  // sparse: no nbytes
  return n;
}

int64_t bytes_of(const std::vector<std::vector<at::Tensor>>& lists) {
  int64_t n = 0;
  for (const auto& l : lists) n += bytes_of(l);
  return n;
}

int64_t numel_of(const std::vector<at::Tensor>& ts) {
  int64_t n = 0;
  for (const auto& t : ts) n += t.numel();
  return n;
}
}  // namespace


// NOTE [groups spanning hosts]: in a group spanning hosts every collective runs as
// its GroupHosts call; an error inside a coalescing block is kept for the block's end.
template <class Call>
c10::intrusive_ptr<c10d::Work> PurlinBackend::spanning(Call&& call) {
  ++seq_;
  try {
    return coalesced(call());
  } catch (...) {
    if (!coalescing_) throw;
    // NOTE [coalescing]: raised by endCoalescing, after torch cleared its block.
    if (!block_error_) block_error_ = std::current_exception();
    return completed_work({});
  }
}

template <typename Fallback, typename Spanning, typename Native>
c10::intrusive_ptr<c10d::Work> PurlinBackend::collective(const char* op, const std::vector<at::Tensor>& tensors,
                                                         int64_t table_bytes, const c10d::ReduceOp* redop,
                                                         bool async_op, Fallback&& fallback, Spanning&& span,
                                                         Native&& native) {
  check_open(op);
  bool by_table = false, span_hosts = false;
  const std::string why = fallback_reason(op, tensors, table_bytes, &by_table, redop, &span_hosts);
  if (C10_UNLIKELY(span_hosts)) return spanning([&] { return span(*hosts_); });
  if (!why.empty()) return coalesced(fallback(fallback_for(op, tensors, why, by_table)));
  CudaOpScope cuda_scope(cuda_.get(), tensors, async_op);  // PURLIN-CUDA hook
  return native();
}

// Runs rq on the flat `in` / `out` and copies `out` back into `outs` (a no-op
// when `out` already is the single contiguous output).
c10::intrusive_ptr<c10d::Work> PurlinBackend::run_flat(Request& rq, const at::Tensor& in, const at::Tensor& out,
                                                       std::vector<at::Tensor>& outs) {
  set_io(rq, in, out);
  auto work = run_native(rq, outs);
  unflatten_into(out, outs);
  return work;
}

c10::intrusive_ptr<c10d::Work> PurlinBackend::allreduce(std::vector<at::Tensor>& tensors,
                                                        const c10d::AllreduceOptions& opts) {
  return collective(
      "all_reduce", tensors, bytes_of(tensors), &opts.reduceOp, opts.asyncOp,
      [&](c10d::Backend& b) { return b.allreduce(tensors, opts); },
      [&](GroupHosts& h) { return h.all_reduce(tensors, opts.reduceOp, "all_reduce"); },
      [&]() -> c10::intrusive_ptr<c10d::Work> {
    Request rq = request(CollOp::AllReduce, "all_reduce", tensors[0]);
    rq.one_buffer = true;  // c10d passes one tensor: the Input and the Output of every rank
    set_reduction(rq, opts.reduceOp);
    PURLIN_REQUIRE(rq, tensors.size() == 1, "expects one tensor per process");
    at::Tensor buf = flat_of(tensors[0]);
    set_io(rq, buf, buf);
    auto work = run_native(rq, tensors);
    unflatten_into(buf, tensors[0]);
    return work;
  });
}

c10::intrusive_ptr<c10d::Work> PurlinBackend::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                                  const c10d::AllreduceCoalescedOptions& opts) {
  return collective(
      "all_reduce_coalesced", tensors, bytes_of(tensors), &opts.reduceOp, opts.asyncOp,
      [&](c10d::Backend& b) { return b.allreduce_coalesced(tensors, opts); }, [&](GroupHosts& h) { return h.all_reduce(tensors, opts.reduceOp, "all_reduce_coalesced"); },
      [&]() -> c10::intrusive_ptr<c10d::Work> {
    Request rq = request(CollOp::AllReduce, "all_reduce_coalesced", tensors.empty() ? at::Tensor() : tensors[0]);
    rq.one_buffer = true;  // c10d passes one tensor: the Input and the Output of every rank
    set_reduction(rq, opts.reduceOp);
    PURLIN_REQUIRE(rq, check_same_dtype(tensors).empty(), check_same_dtype(tensors));
    at::Tensor buf = tensors.empty() ? at::Tensor() : flat_of(tensors);
    set_io(rq, buf, buf);
    auto work = run_native(rq, tensors);
    if (buf.defined()) unflatten_into(buf, tensors);
    return work;
  });
}

c10::intrusive_ptr<c10d::Work> PurlinBackend::reduce(std::vector<at::Tensor>& tensors,
                                                     const c10d::ReduceOptions& opts) {
  return collective(
      "reduce", tensors, bytes_of(tensors), &opts.reduceOp, opts.asyncOp,
      [&](c10d::Backend& b) { return b.reduce(tensors, opts); }, [&](GroupHosts& h) { return h.reduce(tensors, opts); },
      [&]() -> c10::intrusive_ptr<c10d::Work> {
    Request rq = request(CollOp::Reduce, "reduce", tensors[0]);
    set_reduction(rq, opts.reduceOp);
    set_root(rq, opts.rootRank, getSize());
    at::Tensor buf = flat_of(tensors[0]);
    set_io(rq, buf, getRank() == rq.root ? buf : at::Tensor());
    auto work = run_native(rq, tensors);
    if (getRank() == rq.root) unflatten_into(buf, tensors[0]);
    return work;
  });
}

c10::intrusive_ptr<c10d::Work> PurlinBackend::broadcast(std::vector<at::Tensor>& tensors,
                                                        const c10d::BroadcastOptions& opts) {
  return collective(
      "broadcast", tensors, bytes_of(tensors), nullptr, opts.asyncOp,
      [&](c10d::Backend& b) { return b.broadcast(tensors, opts); },
      [&](GroupHosts& h) { return h.broadcast(tensors, opts); },
      [&]() -> c10::intrusive_ptr<c10d::Work> {
    Request rq = request(CollOp::Broadcast, "broadcast", tensors[0]);
    rq.one_buffer = true;  // c10d passes one tensor: the Input and the Output of every rank
    set_root(rq, opts.rootRank, getSize());
    at::Tensor buf = flat_of(tensors[0]);
    set_io(rq, buf, buf);
    auto work = run_native(rq, tensors);
    unflatten_into(buf, tensors[0]);
    return work;
  });
}

c10::intrusive_ptr<c10d::Work> PurlinBackend::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                              const c10d::AllgatherOptions& opts) {
  std::vector<at::Tensor> all{output, input};
  return collective(
      "all_gather_into_tensor", all, bytes_of({output}), nullptr, opts.asyncOp,
      [&](c10d::Backend& b) { return b._allgather_base(output, input, opts); },
      [&](GroupHosts& h) { return h.all_gather_into_tensor(output, input); },
      [&]() -> c10::intrusive_ptr<c10d::Work> {
    Request rq = request(CollOp::AllGather, "all_gather_into_tensor", input);
    require_same_dtype(rq, all);
    PURLIN_REQUIRE(rq, output.numel() == input.numel() * getSize(),
                   "output has " + std::to_string(output.numel()) + " elements, expected world size x input = " +
                       std::to_string(input.numel() * getSize()));
    at::Tensor in = flat_of(input);
    std::vector<at::Tensor> outs{output};
    at::Tensor out = flat_out_for(outs, output.numel(), in);
    return run_flat(rq, in, out, outs);
  });
}

c10::intrusive_ptr<c10d::Work> PurlinBackend::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                        std::vector<at::Tensor>& inputs,
                                                        const c10d::AllgatherOptions& opts) {
  std::vector<at::Tensor> all = cat_lists(outputs);
  all.insert(all.end(), inputs.begin(), inputs.end());
  return collective(
      "all_gather", all, bytes_of(outputs), nullptr, opts.asyncOp,
      [&](c10d::Backend& b) { return b.allgather(outputs, inputs, opts); },
      [&](GroupHosts& h) { return h.all_gather(outputs, inputs); },
      [&]() -> c10::intrusive_ptr<c10d::Work> {
    Request rq = request(CollOp::AllGather, "all_gather", inputs[0]);
    PURLIN_REQUIRE(rq, inputs.size() == 1 && outputs.size() == 1, "expects one input and one output list per process");
    require_same_dtype(rq, all);
    PURLIN_REQUIRE(rq, static_cast<int>(outputs[0].size()) == getSize(),
                   "output list has " + std::to_string(outputs[0].size()) + " tensors, expected the world size " +
                       std::to_string(getSize()));
    for (const auto& o : outputs[0])
      PURLIN_REQUIRE(rq, o.numel() == inputs[0].numel(), "output tensors must have as many elements as the input");
    at::Tensor in = flat_of(inputs[0]);
    at::Tensor out = flat_out_for(outputs[0], inputs[0].numel() * getSize(), in);  // NOTE [list buffers]
    return run_flat(rq, in, out, outputs[0]);
  });
}

c10::intrusive_ptr<c10d::Work> PurlinBackend::allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                              std::vector<at::Tensor>& inputs,
                                                                              const c10d::AllgatherOptions& opts) {
  std::vector<at::Tensor> all = outputs;
  all.insert(all.end(), inputs.begin(), inputs.end());
  return collective(
      "all_gather_into_tensor_coalesced", all, bytes_of(outputs), nullptr, opts.asyncOp,
      [&](c10d::Backend& b) { return b.allgather_into_tensor_coalesced(outputs, inputs, opts); }, [&](GroupHosts& h) { return h.all_gather_into_tensor_coalesced(outputs, inputs); },
      [&]() -> c10::intrusive_ptr<c10d::Work> {
    Request rq = request(CollOp::AllGather, "all_gather_into_tensor_coalesced", inputs.empty() ? at::Tensor() : inputs[0]);
    require_same_dtype(rq, all);
    PURLIN_REQUIRE(rq, outputs.size() == inputs.size(), "needs as many outputs as inputs");
    for (size_t i = 0; i < inputs.size() && i < outputs.size(); ++i)
      PURLIN_REQUIRE(rq, outputs[i].numel() == inputs[i].numel() * getSize(),
                     "output " + std::to_string(i) + " must hold world size x its input's elements");
    // Gather the concatenated inputs, then split rank r's block among outputs.
    at::Tensor in = inputs.empty() ? at::Tensor() : flat_of(inputs);
    const int64_t T = numel_of(inputs);
    at::Tensor out = in.defined() ? call_buffer(T * getSize(), in, 1) : at::Tensor();
    set_io(rq, in, out);
    auto work = run_native(rq, outputs);
    if (rq.error.empty() && out.defined()) {
      at::Tensor blocks = out.view({getSize(), T});
      int64_t off = 0;
      for (size_t i = 0; i < inputs.size(); ++i) {
        const int64_t n = inputs[i].numel();
        outputs[i].view({getSize(), n}).copy_(blocks.narrow(1, off, n));
        off += n;
      }
    }
    return work;
  });
}

c10::intrusive_ptr<c10d::Work> PurlinBackend::allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                                  std::vector<at::Tensor>& inputs,
                                                                  const c10d::AllgatherOptions& opts) {
  std::vector<at::Tensor> all = cat_lists(outputs);
  all.insert(all.end(), inputs.begin(), inputs.end());
  return collective(
      "all_gather_coalesced", all, bytes_of(outputs), nullptr, opts.asyncOp,
      [&](c10d::Backend& b) { return b.allgather_coalesced(outputs, inputs, opts); }, [&](GroupHosts& h) { return h.all_gather_coalesced(outputs, inputs); },
      [&]() -> c10::intrusive_ptr<c10d::Work> {
    // outputs[r][i] receives rank r's inputs[i].
    std::vector<at::Tensor> flat_outs;
    bool ok = static_cast<int>(outputs.size()) == getSize();
    for (size_t r = 0; ok && r < outputs.size(); ++r) {
      ok = outputs[r].size() == inputs.size();
      for (size_t i = 0; ok && i < inputs.size(); ++i) ok = outputs[r][i].numel() == inputs[i].numel();
    }
    Request rq = request(CollOp::AllGather, "all_gather_coalesced", inputs.empty() ? at::Tensor() : inputs[0]);
    PURLIN_REQUIRE(rq, ok, "outputs must be world size lists shaped like the inputs");
    require_same_dtype(rq, all);
    at::Tensor in = inputs.empty() ? at::Tensor() : flat_of(inputs);
    at::Tensor out = in.defined() ? call_buffer(numel_of(inputs) * getSize(), in, 1) : at::Tensor();
    set_io(rq, in, out);
    auto work = run_native(rq, all);
    if (out.defined()) {
      std::vector<at::Tensor> flat_list = cat_lists(outputs);
      unflatten_into(out, flat_list);
    }
    return work;
  });
}

c10::intrusive_ptr<c10d::Work> PurlinBackend::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                   const c10d::ReduceScatterOptions& opts) {
  std::vector<at::Tensor> all{output, input};
  return collective(
      "reduce_scatter_tensor", all, bytes_of({input}), &opts.reduceOp, opts.asyncOp,
      [&](c10d::Backend& b) { return b._reduce_scatter_base(output, input, opts); },
      [&](GroupHosts& h) { return h.reduce_scatter_tensor(output, input, opts.reduceOp); },
      [&]() -> c10::intrusive_ptr<c10d::Work> {
    Request rq = request(CollOp::ReduceScatter, "reduce_scatter_tensor", input);
    set_reduction(rq, opts.reduceOp);
    require_same_dtype(rq, all);
    PURLIN_REQUIRE(rq, input.numel() == output.numel() * getSize(),
                   "input has " + std::to_string(input.numel()) + " elements, expected world size x output = " +
                       std::to_string(output.numel() * getSize()));
    at::Tensor in = flat_of(input);
    std::vector<at::Tensor> outs{output};
    at::Tensor out = flat_out_for(outs, output.numel(), in);
    return run_flat(rq, in, out, outs);
  });
}

c10::intrusive_ptr<c10d::Work> PurlinBackend::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                             std::vector<std::vector<at::Tensor>>& inputs,
                                                             const c10d::ReduceScatterOptions& opts) {
  std::vector<at::Tensor> all = cat_lists(inputs);
  all.insert(all.end(), outputs.begin(), outputs.end());
  return collective(
      "reduce_scatter", all, bytes_of(inputs), &opts.reduceOp, opts.asyncOp,
      [&](c10d::Backend& b) { return b.reduce_scatter(outputs, inputs, opts); },
      [&](GroupHosts& h) { return h.reduce_scatter(outputs, inputs, opts.reduceOp); },
      [&]() -> c10::intrusive_ptr<c10d::Work> {
    Request rq = request(CollOp::ReduceScatter, "reduce_scatter", outputs[0]);
    set_reduction(rq, opts.reduceOp);
    PURLIN_REQUIRE(rq, outputs.size() == 1 && inputs.size() == 1, "expects one output and one input list per process");
    require_same_dtype(rq, all);
    PURLIN_REQUIRE(rq, static_cast<int>(inputs[0].size()) == getSize(), "input list must have world size tensors");
    for (const auto& t : inputs[0])
      PURLIN_REQUIRE(rq, t.numel() == outputs[0].numel(), "input tensors must have as many elements as the output");
    at::Tensor in = flat_of(inputs[0]);
    std::vector<at::Tensor> outs{outputs[0]};
    at::Tensor out = flat_out_for(outs, outputs[0].numel(), in);
    return run_flat(rq, in, out, outs);
  });
}

c10::intrusive_ptr<c10d::Work> PurlinBackend::reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                              std::vector<at::Tensor>& inputs,
                                                                              const c10d::ReduceScatterOptions& opts) {
  std::vector<at::Tensor> all = outputs;
  all.insert(all.end(), inputs.begin(), inputs.end());
  return collective(
      "reduce_scatter_tensor_coalesced", all, bytes_of(inputs), &opts.reduceOp, opts.asyncOp,
      [&](c10d::Backend& b) { return b.reduce_scatter_tensor_coalesced(outputs, inputs, opts); }, [&](GroupHosts& h) { return h.reduce_scatter_tensor_coalesced(outputs, inputs, opts.reduceOp); },
      [&]() -> c10::intrusive_ptr<c10d::Work> {
    Request rq = request(CollOp::ReduceScatter, "reduce_scatter_tensor_coalesced", inputs.empty() ? at::Tensor() : inputs[0]);
    set_reduction(rq, opts.reduceOp);
    require_same_dtype(rq, all);
    PURLIN_REQUIRE(rq, outputs.size() == inputs.size(), "needs as many outputs as inputs");
    for (size_t i = 0; i < inputs.size() && i < outputs.size(); ++i)
      PURLIN_REQUIRE(rq, inputs[i].numel() == outputs[i].numel() * getSize(),
                     "input " + std::to_string(i) + " must hold world size x its output's elements");
    if (!rq.error.empty() || inputs.empty()) return run_native(rq, outputs);
    // Regroup so rank r's block is contiguous: [r][tensor i][n_i].
    const int64_t T = numel_of(outputs);
    std::vector<at::Tensor> per_tensor;
    for (size_t i = 0; i < inputs.size(); ++i) per_tensor.push_back(inputs[i].reshape({getSize(), -1}));
    at::Tensor in = at::cat(per_tensor, 1).contiguous().view({-1});
    at::Tensor out = flat_out_for(outputs, T, in);
    return run_flat(rq, in, out, outputs);
  });
}

c10::intrusive_ptr<c10d::Work> PurlinBackend::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                            std::vector<int64_t>& output_split_sizes,
                                                            std::vector<int64_t>& input_split_sizes,
                                                            const c10d::AllToAllOptions& opts) {
  std::vector<at::Tensor> all{output, input};
  // With split sizes the ranks' sizes may differ: no protocol table then.
  return collective(
      "all_to_all_single", all, input_split_sizes.empty() && output_split_sizes.empty() ? bytes_of({input}) : int64_t{-1},
      nullptr, opts.asyncOp,
      [&](c10d::Backend& b) { return b.alltoall_base(output, input, output_split_sizes, input_split_sizes, opts); },
      [&](GroupHosts& h) { return h.all_to_all_single(output, input, output_split_sizes, input_split_sizes); },
      [&]() -> c10::intrusive_ptr<c10d::Work> {
    Request rq = request(CollOp::AllToAll, "all_to_all_single", input);
    require_same_dtype(rq, all);
    const int W = getSize();
    auto splits = [&](const at::Tensor& t, const std::vector<int64_t>& rows, const char* side) {
      std::vector<int64_t> out(W, 0);
      const int64_t dim0 = t.dim() > 0 ? t.size(0) : 1;
      const int64_t row = dim0 > 0 ? t.numel() / dim0 : 0;
      if (rows.empty()) {
        PURLIN_REQUIRE(rq, dim0 % W == 0, std::string(side) + " dim 0 (" + std::to_string(dim0) + ") is not divisible by the world size");
        for (auto& s : out) s = dim0 / W * row;
      } else {
        PURLIN_REQUIRE(rq, static_cast<int>(rows.size()) == W, std::string(side) + " split sizes must have world size entries");
        int64_t sum = 0;
        for (int r = 0; r < W && r < static_cast<int>(rows.size()); ++r) {
          PURLIN_REQUIRE(rq, rows[r] >= 0, std::string(side) + " split sizes must be non-negative");
          out[r] = rows[r] * row;
          sum += rows[r];
        }
        PURLIN_REQUIRE(rq, sum == dim0, std::string(side) + " split sizes sum to " + std::to_string(sum) + " but dim 0 is " + std::to_string(dim0));
      }
      return out;
    };
    rq.in_splits = splits(input, input_split_sizes, "input");
    rq.out_splits = splits(output, output_split_sizes, "output");
    at::Tensor in = flat_of(input);
    // NOTE [in-place all_to_all] One buffer as input and output with other
    // input than output slots (uneven splits): a plan of several rounds would
    // write output slots over input pieces of later rounds not yet staged, so
    // the call runs from a copy of its input. (Equal slots are safe in place:
    // round j writes only what round j staged. test/cpp/test_plan_symmetry.cc.)
    if (rq.in_splits != rq.out_splits && input.numel() > 0 && output.numel() > 0 &&
        output.data_ptr() == input.data_ptr())
      in = input.contiguous().clone();
    std::vector<at::Tensor> outs{output};
    at::Tensor out = flat_out_for(outs, output.numel(), in);
    return run_flat(rq, in, out, outs);
  });
}

c10::intrusive_ptr<c10d::Work> PurlinBackend::alltoall(std::vector<at::Tensor>& outputs,
                                                       std::vector<at::Tensor>& inputs,
                                                       const c10d::AllToAllOptions& opts) {
  std::vector<at::Tensor> all = outputs;
  all.insert(all.end(), inputs.begin(), inputs.end());
  return collective(
      "all_to_all", all, int64_t{-1}, nullptr, opts.asyncOp,
      [&](c10d::Backend& b) { return b.alltoall(outputs, inputs, opts); }, [&](GroupHosts& h) { return h.all_to_all(outputs, inputs); },
      [&]() -> c10::intrusive_ptr<c10d::Work> {
    Request rq = request(CollOp::AllToAll, "all_to_all", inputs[0]);
    require_same_dtype(rq, all);
    PURLIN_REQUIRE(rq, static_cast<int>(inputs.size()) == getSize() && static_cast<int>(outputs.size()) == getSize(),
                   "input and output lists must have world size tensors");
    for (const auto& t : inputs) rq.in_splits.push_back(t.numel());
    for (const auto& t : outputs) rq.out_splits.push_back(t.numel());
    rq.in_splits.resize(getSize(), 0);
    rq.out_splits.resize(getSize(), 0);
    at::Tensor in = flat_of(inputs);
    at::Tensor out = flat_out_for(outputs, numel_of(outputs), in);  // NOTE [list buffers]
    return run_flat(rq, in, out, outputs);
  });
}

c10::intrusive_ptr<c10d::Work> PurlinBackend::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::GatherOptions& opts) {
  std::vector<at::Tensor> all = cat_lists(outputs);
  all.insert(all.end(), inputs.begin(), inputs.end());
  return collective(
      "gather", all, int64_t{-1}, nullptr, opts.asyncOp,
      [&](c10d::Backend& b) { return b.gather(outputs, inputs, opts); }, [&](GroupHosts& h) { return h.gather(outputs, inputs, opts); },
      [&]() -> c10::intrusive_ptr<c10d::Work> {
    Request rq = request(CollOp::Gather, "gather", inputs[0]);
    set_root(rq, opts.rootRank, getSize());
    require_same_dtype(rq, all);
    const bool root = getRank() == rq.root;
    if (root) {
      PURLIN_REQUIRE(rq, outputs.size() == 1 && static_cast<int>(outputs[0].size()) == getSize(),
                     "the root needs one output list of world size tensors");
      for (const auto& o : outputs.empty() ? std::vector<at::Tensor>{} : outputs[0])
        PURLIN_REQUIRE(rq, o.numel() == inputs[0].numel(), "output tensors must have as many elements as the input");
    }
    at::Tensor in = flat_of(inputs[0]);
    at::Tensor out = root ? flat_out_for(outputs[0], in.numel() * getSize(), in) : at::Tensor();  // NOTE [list buffers]
    set_io(rq, in, out);
    auto work = run_native(rq, root ? outputs[0] : std::vector<at::Tensor>{});
    if (root) unflatten_into(out, outputs[0]);
    return work;
  });
}

c10::intrusive_ptr<c10d::Work> PurlinBackend::scatter(std::vector<at::Tensor>& outputs,
                                                      std::vector<std::vector<at::Tensor>>& inputs,
                                                      const c10d::ScatterOptions& opts) {
  std::vector<at::Tensor> all = cat_lists(inputs);
  all.insert(all.end(), outputs.begin(), outputs.end());
  return collective(
      "scatter", all, int64_t{-1}, nullptr, opts.asyncOp,
      [&](c10d::Backend& b) { return b.scatter(outputs, inputs, opts); }, [&](GroupHosts& h) { return h.scatter(outputs, inputs, opts); },
      [&]() -> c10::intrusive_ptr<c10d::Work> {
    Request rq = request(CollOp::Scatter, "scatter", outputs[0]);
    set_root(rq, opts.rootRank, getSize());
    require_same_dtype(rq, all);
    const bool root = getRank() == rq.root;
    if (root) {
      PURLIN_REQUIRE(rq, inputs.size() == 1 && static_cast<int>(inputs[0].size()) == getSize(),
                     "the root needs one input list of world size tensors");
      for (const auto& t : inputs.empty() ? std::vector<at::Tensor>{} : inputs[0])
        PURLIN_REQUIRE(rq, t.numel() == outputs[0].numel(), "input tensors must have as many elements as the output");
    }
    at::Tensor in = root && rq.error.empty() ? flat_of(inputs[0]) : at::Tensor();
    std::vector<at::Tensor> outs{outputs[0]};
    at::Tensor out = flat_out_for(outs, outputs[0].numel(), outputs[0]);
    return run_flat(rq, in, out, outs);
  });
}

c10::intrusive_ptr<c10d::Work> PurlinBackend::barrier(const c10d::BarrierOptions& opts) {
  std::vector<at::Tensor> none;
  return collective(
      "barrier", none, int64_t{-1}, nullptr, opts.asyncOp,
      [&](c10d::Backend& b) { return b.barrier(opts); }, [&](GroupHosts& h) { return h.barrier(); },
      [&]() -> c10::intrusive_ptr<c10d::Work> {
    Request rq = request(CollOp::Barrier, "barrier", at::Tensor());
    return run_native(rq, {});
  });
}

c10::intrusive_ptr<c10d::Work> PurlinBackend::send(std::vector<at::Tensor>& tensors, int dst, int tag) {
  check_open("send");
  ++seq_;
  fallback_.count_fallback("send", "point-to-point ops are served by the fallback backend");
  return coalesced(fallback_backend(tensors[0].device()).send(tensors, dst, tag));
}

c10::intrusive_ptr<c10d::Work> PurlinBackend::recv(std::vector<at::Tensor>& tensors, int src, int tag) {
  check_open("recv");
  ++seq_;
  fallback_.count_fallback("recv", "point-to-point ops are served by the fallback backend");
  return coalesced(fallback_backend(tensors[0].device()).recv(tensors, src, tag));
}

c10::intrusive_ptr<c10d::Work> PurlinBackend::recvAnysource(std::vector<at::Tensor>& tensors, int tag) {
  check_open("recv_anysource");
  ++seq_;
  fallback_.count_fallback("recv_anysource", "point-to-point ops are served by the fallback backend");
  return coalesced(fallback_backend(tensors[0].device()).recvAnysource(tensors, tag));
}

c10::intrusive_ptr<c10d::Work> PurlinBackend::run_spec(const snac::Spec& spec, at::Tensor& input,
                                                       at::Tensor& output) {
  check_open("custom");
  std::vector<at::Tensor> all{input, output};
  const std::string why = fallback_reason(spec.name, all);
  TORCH_CHECK(why.empty(), "purlin custom collective '", spec.name, "' on rank ", getRank(), ": ", why);
  CudaOpScope cuda_scope(cuda_.get(), all, /*async_op=*/false);  // PURLIN-CUDA hook
  Request rq = request(CollOp::Custom, "custom", input);
  rq.custom = &spec;
  rq.redop = spec.redop;
  require_same_dtype(rq, all);
  PURLIN_REQUIRE(rq, input.numel() >= spec.input_numel[getRank()],
                 "input has " + std::to_string(input.numel()) + " elements, the spec reads " +
                     std::to_string(spec.input_numel[getRank()]));
  PURLIN_REQUIRE(rq, output.numel() >= spec.output_numel[getRank()],
                 "output has " + std::to_string(output.numel()) + " elements, the spec writes " +
                     std::to_string(spec.output_numel[getRank()]));
  at::Tensor in = flat_of(input);
  std::vector<at::Tensor> outs{output};
  at::Tensor out = output.is_contiguous() ? output.view({-1}) : output.contiguous().view({-1});
  set_io(rq, in, out);
  if (rq.error.empty()) {  // NOTE [custom call buffers] (backend/group/request.cc)
    cut_to_spec(rq, spec, getRank());
    if (custom_input_copied(rq, spec, getRank())) {
      in = in.reshape({-1}).narrow(0, 0, rq.in_numel).clone();
      rq.in = in.data_ptr();
    }
  }
  auto work = run_native(rq, outs);
  unflatten_into(out, outs);
  return work;
}

}  // namespace purlin::backend
