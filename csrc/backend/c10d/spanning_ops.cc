// spanning_ops.cc — every collective of a group that spans hosts: its
// arguments agreed, its tensors packed, then the flat or hierarchical form.
//
// NOTE [groups spanning hosts]
// A group whose ranks span hosts (NOTE [host map]) does what the same group
// does on one host: every op and dtype purlin serves natively there, with the
// same results and the same errors. Each collective is agreed first (NOTE
// [call agreement]: a bad argument raises on every rank before any data
// moves), packs its tensors into 1-D contiguous ones, and runs hierarchically
// (NOTE [hierarchical collectives]) where hosts hold equal numbers of ranks, at
// least two each, and the hierarchical rows say so for its size, else flat
// (flat_across.cc: the engine moves bytes; reductions reduce-scatter the bytes,
// combine them with purlin's CPU reduction in ascending rank order and
// all_gather the result). The engine (gloo) never reduces, so purlin's
// semantics hold across hosts and the flat forms give one host's result bit for
// bit. What purlin serves nowhere raises purlin's error on every rank; what it
// leaves to the fallback on one host runs flat on it. Counters: a flat call
// counts one fallback call; a hierarchical one its parts.
// Details: docs/DESIGN.md, "Groups spanning hosts".
#include <cstring>

#include <ATen/ATen.h>

#include "backend/c10d/completed_work.h"
#include "backend/c10d/group_hosts.h"
#include "backend/c10d/spanning_util.h"
#include "backend/c10d/tensor_args.h"

namespace purlin::backend {

namespace {

int64_t op_index(const char* op) {
  const auto& names = Fallback::op_names();
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == op) return static_cast<int64_t>(i);
  return -1;
}

// Records `why` as this rank's argument error unless one is recorded already.
void require(CallDescriptor& d, bool ok, const std::string& why) {
  if (!ok && d.error.empty()) d.error = why;
}

std::vector<int64_t> counts_of(const std::vector<at::Tensor>& ts) {
  std::vector<int64_t> c;
  for (const auto& t : ts) c.push_back(t.numel());
  return c;
}

int64_t sum_of(const std::vector<int64_t>& v) {
  int64_t s = 0;
  for (int64_t x : v) s += x;
  return s;
}

// The elements of `ts` in order, packed (one tensor: packed(ts[0]), a view where it can be).
at::Tensor packed_all(const std::vector<at::Tensor>& ts) {
  if (ts.size() == 1) return packed(ts[0]);
  std::vector<at::Tensor> parts;
  for (const auto& t : ts) parts.push_back(t.reshape({-1}));
  return at::cat(parts);
}

// A packed tensor to receive `t`'s elements: t's own memory where it can be, else a new one.
at::Tensor out_for(const at::Tensor& t) {
  return t.is_contiguous() && t.numel() > 1 ? t.view({-1}) : at::empty({t.numel()}, t.options());
}

std::vector<at::Tensor> cat_lists(const std::vector<std::vector<at::Tensor>>& ls) {
  std::vector<at::Tensor> out;
  for (const auto& l : ls) out.insert(out.end(), l.begin(), l.end());
  return out;
}

}  // namespace

CallDescriptor GroupHosts::describe(const char* op, const at::Tensor* like, const c10d::ReduceOp* redop,
                                    Reduction* red) const {
  CallDescriptor d(world_);
  d.op = op_index(op);
  DType dtype = DType::Float32;
  if (like && like->defined()) {
    d.dtype = static_cast<int64_t>(like->scalar_type());
    require(d, to_dtype(like->scalar_type(), &dtype), dtype_refusal(like->scalar_type()));
  }
  if (redop) {
    d.redop = static_cast<int64_t>(redop->op_);
    Request rq;
    rq.dtype = dtype;
    set_reduction(rq, *redop);
    require(d, rq.error.empty(), rq.error);
    red->dtype = dtype;
    red->redop = rq.redop;
    red->op = *redop;
    d.factor = rq.scale;
  }
  return d;
}

AgreedCall GroupHosts::agree(const char* op, const CallDescriptor& d, Reduction* red) {
  AgreedCall call;
  try {
    call = agree_on_call(flat(), d, who(op), ctx_->legend(), aborted_);
  } catch (...) {
    if (aborted_) fallback_.abandon();  // its all_gather is still in flight (NOTE [call agreement])
    throw;
  }
  if (red) {
    red->factors.clear();
    for (int r = 0; r < world_; ++r) red->factors.push_back(call.factor(r));
  }
  return call;
}

c10::intrusive_ptr<c10d::Work> GroupHosts::all_reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOp& op,
                                                      const char* name) {
  Reduction red;
  CallDescriptor d = describe(name, tensors.empty() ? nullptr : &tensors[0], &op, &red);
  require(d, std::strcmp(name, "all_reduce") != 0 || tensors.size() == 1, "expects one tensor per process");
  require(d, check_same_dtype(tensors).empty(), check_same_dtype(tensors));
  const std::vector<int64_t> counts = counts_of(tensors);
  d.elements = sum_of(counts);
  d.tensors = static_cast<int64_t>(tensors.size());
  d.layout = layout_digest(counts);
  agree(name, d, &red);
  if (d.elements == 0) return completed_work(tensors);
  at::Tensor buf = packed_all(tensors);
  if (hierarchical(name, static_cast<int64_t>(buf.nbytes())))
    hier_all_reduce(name, buf, red);
  else
    flat_all_reduce(name, buf, red);
  unflatten_into(buf, tensors);
  return completed_work(tensors);
}

c10::intrusive_ptr<c10d::Work> GroupHosts::reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) {
  constexpr const char* op = "reduce";
  Reduction red;
  CallDescriptor d = describe(op, tensors.empty() ? nullptr : &tensors[0], &opts.reduceOp, &red);
  require(d, tensors.size() == 1, "expects one tensor per process");
  d.root = opts.rootRank;
  require(d, opts.rootRank >= 0 && opts.rootRank < world_,
          "root rank " + std::to_string(opts.rootRank) + " is outside the group of " + std::to_string(world_) + " ranks");
  d.elements = tensors.empty() ? 0 : tensors[0].numel();
  agree(op, d, &red);
  if (d.elements == 0) return completed_work(tensors);
  at::Tensor buf = packed(tensors[0]);
  if (rank_ != opts.rootRank && buf.data_ptr() == tensors[0].data_ptr()) buf = buf.clone();  // inputs stay
  flat_all_reduce(op, buf, red);
  if (rank_ == opts.rootRank) unflatten_into(buf, tensors[0]);
  return completed_work(tensors);
}

c10::intrusive_ptr<c10d::Work> GroupHosts::broadcast(std::vector<at::Tensor>& tensors,
                                                     const c10d::BroadcastOptions& opts) {
  constexpr const char* op = "broadcast";
  CallDescriptor d = describe(op, tensors.empty() ? nullptr : &tensors[0], nullptr, nullptr);
  require(d, tensors.size() == 1, "expects one tensor per process");
  d.root = opts.rootRank;
  require(d, opts.rootRank >= 0 && opts.rootRank < world_,
          "root rank " + std::to_string(opts.rootRank) + " is outside the group of " + std::to_string(world_) + " ranks");
  d.elements = tensors.empty() ? 0 : tensors[0].numel();
  agree(op, d, nullptr);
  if (d.elements == 0) return completed_work(tensors);
  at::Tensor buf = packed(tensors[0]);
  flat_broadcast(op, buf, static_cast<int>(opts.rootRank));
  unflatten_into(buf, tensors[0]);
  return completed_work(tensors);
}

c10::intrusive_ptr<c10d::Work> GroupHosts::all_gather_into_tensor(at::Tensor& output, const at::Tensor& input) {
  constexpr const char* op = "all_gather_into_tensor";
  CallDescriptor d = describe(op, &input, nullptr, nullptr);
  require(d, check_same_dtype({output, input}).empty(), check_same_dtype({output, input}));
  require(d, output.numel() == input.numel() * world_,
          "output has " + std::to_string(output.numel()) + " elements, expected world size x input = " +
              std::to_string(input.numel() * world_));
  d.elements = input.numel();
  agree(op, d, nullptr);
  if (d.elements == 0) return completed_work({output});
  at::Tensor in = packed(input), out = out_for(output);
  if (hierarchical(op, static_cast<int64_t>(out.nbytes())))
    hier_all_gather(op, out, in);
  else
    flat_all_gather(op, out, in);
  unflatten_into(out, output);
  return completed_work({output});
}

c10::intrusive_ptr<c10d::Work> GroupHosts::all_gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                      std::vector<at::Tensor>& inputs) {
  constexpr const char* op = "all_gather";
  CallDescriptor d = describe(op, inputs.empty() ? nullptr : &inputs[0], nullptr, nullptr);
  require(d, inputs.size() == 1 && outputs.size() == 1, "expects one input and one output list per process");
  if (!d.error.empty()) agree(op, d, nullptr);  // raises
  std::vector<at::Tensor> all = outputs[0];
  all.push_back(inputs[0]);
  require(d, check_same_dtype(all).empty(), check_same_dtype(all));
  require(d, static_cast<int>(outputs[0].size()) == world_,
          "output list has " + std::to_string(outputs[0].size()) + " tensors, expected the world size " +
              std::to_string(world_));
  for (const auto& o : outputs[0])
    require(d, o.numel() == inputs[0].numel(), "output tensors must have as many elements as the input");
  d.elements = inputs[0].numel();
  agree(op, d, nullptr);
  if (d.elements == 0) return completed_work(outputs[0]);
  at::Tensor in = packed(inputs[0]), out = at::empty({world_ * d.elements}, in.options());
  if (hierarchical(op, static_cast<int64_t>(out.nbytes())))
    hier_all_gather(op, out, in);
  else
    flat_all_gather(op, out, in);
  unflatten_into(out, outputs[0]);
  return completed_work(outputs[0]);
}

c10::intrusive_ptr<c10d::Work> GroupHosts::all_gather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                                std::vector<at::Tensor>& inputs) {
  constexpr const char* op = "all_gather_coalesced";
  CallDescriptor d = describe(op, inputs.empty() ? nullptr : &inputs[0], nullptr, nullptr);
  std::vector<at::Tensor> flat_outs = cat_lists(outputs), all = flat_outs;
  all.insert(all.end(), inputs.begin(), inputs.end());
  require(d, check_same_dtype(all).empty(), check_same_dtype(all));
  bool ok = static_cast<int>(outputs.size()) == world_;
  for (size_t r = 0; ok && r < outputs.size(); ++r) {
    ok = outputs[r].size() == inputs.size();
    for (size_t i = 0; ok && i < inputs.size(); ++i) ok = outputs[r][i].numel() == inputs[i].numel();
  }
  require(d, ok, "outputs must be world size lists shaped like the inputs");
  const std::vector<int64_t> counts = counts_of(inputs);
  d.elements = sum_of(counts);
  d.tensors = static_cast<int64_t>(inputs.size());
  d.layout = layout_digest(counts);
  agree(op, d, nullptr);
  if (d.elements == 0) return completed_work(flat_outs);
  at::Tensor in = packed_all(inputs), out = at::empty({world_ * d.elements}, in.options());
  flat_all_gather(op, out, in);
  unflatten_into(out, flat_outs);
  return completed_work(flat_outs);
}

c10::intrusive_ptr<c10d::Work> GroupHosts::all_gather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                            std::vector<at::Tensor>& inputs) {
  constexpr const char* op = "all_gather_into_tensor_coalesced";
  CallDescriptor d = describe(op, inputs.empty() ? nullptr : &inputs[0], nullptr, nullptr);
  std::vector<at::Tensor> all = outputs;
  all.insert(all.end(), inputs.begin(), inputs.end());
  require(d, check_same_dtype(all).empty(), check_same_dtype(all));
  require(d, outputs.size() == inputs.size(), "needs as many outputs as inputs");
  for (size_t i = 0; i < inputs.size() && i < outputs.size(); ++i)
    require(d, outputs[i].numel() == inputs[i].numel() * world_,
            "output " + std::to_string(i) + " must hold world size x its input's elements");
  const std::vector<int64_t> counts = counts_of(inputs);
  d.elements = sum_of(counts);
  d.tensors = static_cast<int64_t>(inputs.size());
  d.layout = layout_digest(counts);
  agree(op, d, nullptr);
  if (d.elements == 0) return completed_work(outputs);
  at::Tensor in = packed_all(inputs), out = at::empty({world_ * d.elements}, in.options());
  flat_all_gather(op, out, in);
  at::Tensor blocks = out.view({world_, d.elements});
  int64_t off = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    outputs[i].copy_(blocks.narrow(1, off, counts[i]).reshape(outputs[i].sizes()));
    off += counts[i];
  }
  return completed_work(outputs);
}

c10::intrusive_ptr<c10d::Work> GroupHosts::reduce_scatter_tensor(at::Tensor& output, const at::Tensor& input,
                                                                 const c10d::ReduceOp& redop) {
  constexpr const char* op = "reduce_scatter_tensor";
  Reduction red;
  CallDescriptor d = describe(op, &input, &redop, &red);
  require(d, check_same_dtype({output, input}).empty(), check_same_dtype({output, input}));
  require(d, input.numel() == output.numel() * world_,
          "input has " + std::to_string(input.numel()) + " elements, expected world size x output = " +
              std::to_string(output.numel() * world_));
  d.elements = output.numel();
  agree(op, d, &red);
  if (d.elements == 0) return completed_work({output});
  at::Tensor in = packed(input), out = out_for(output);
  if (hierarchical(op, static_cast<int64_t>(in.nbytes())))
    hier_reduce_scatter(op, out, in, red);
  else
    flat_reduce_scatter(op, out, in, red);
  unflatten_into(out, output);
  return completed_work({output});
}

c10::intrusive_ptr<c10d::Work> GroupHosts::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                          std::vector<std::vector<at::Tensor>>& inputs,
                                                          const c10d::ReduceOp& redop) {
  constexpr const char* op = "reduce_scatter";
  Reduction red;
  CallDescriptor d = describe(op, outputs.empty() ? nullptr : &outputs[0], &redop, &red);
  require(d, outputs.size() == 1 && inputs.size() == 1, "expects one output and one input list per process");
  if (!d.error.empty()) agree(op, d, &red);  // raises
  std::vector<at::Tensor> all = inputs[0];
  all.push_back(outputs[0]);
  require(d, check_same_dtype(all).empty(), check_same_dtype(all));
  require(d, static_cast<int>(inputs[0].size()) == world_, "input list must have world size tensors");
  for (const auto& t : inputs[0])
    require(d, t.numel() == outputs[0].numel(), "input tensors must have as many elements as the output");
  d.elements = outputs[0].numel();
  agree(op, d, &red);
  if (d.elements == 0) return completed_work(outputs);
  at::Tensor in = packed_all(inputs[0]), out = out_for(outputs[0]);
  if (hierarchical(op, static_cast<int64_t>(in.nbytes())))
    hier_reduce_scatter(op, out, in, red);
  else
    flat_reduce_scatter(op, out, in, red);
  unflatten_into(out, outputs[0]);
  return completed_work(outputs);
}

c10::intrusive_ptr<c10d::Work> GroupHosts::reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                           std::vector<at::Tensor>& inputs,
                                                                           const c10d::ReduceOp& redop) {
  constexpr const char* op = "reduce_scatter_tensor_coalesced";
  Reduction red;
  CallDescriptor d = describe(op, inputs.empty() ? nullptr : &inputs[0], &redop, &red);
  std::vector<at::Tensor> all = outputs;
  all.insert(all.end(), inputs.begin(), inputs.end());
  require(d, check_same_dtype(all).empty(), check_same_dtype(all));
  require(d, outputs.size() == inputs.size(), "needs as many outputs as inputs");
  for (size_t i = 0; i < inputs.size() && i < outputs.size(); ++i)
    require(d, inputs[i].numel() == outputs[i].numel() * world_,
            "input " + std::to_string(i) + " must hold world size x its output's elements");
  const std::vector<int64_t> counts = counts_of(outputs);
  d.elements = sum_of(counts);
  d.tensors = static_cast<int64_t>(outputs.size());
  d.layout = layout_digest(counts);
  agree(op, d, &red);
  if (d.elements == 0) return completed_work(outputs);
  // Regrouped so rank r's block is contiguous: [r][tensor i][n_i].
  std::vector<at::Tensor> per_tensor;
  for (const auto& t : inputs) per_tensor.push_back(t.reshape({world_, -1}));
  at::Tensor in = at::cat(per_tensor, 1).contiguous().view({-1});
  at::Tensor out = at::empty({d.elements}, in.options());
  if (hierarchical(op, static_cast<int64_t>(in.nbytes())))
    hier_reduce_scatter(op, out, in, red);
  else
    flat_reduce_scatter(op, out, in, red);
  unflatten_into(out, outputs);
  return completed_work(outputs);
}

c10::intrusive_ptr<c10d::Work> GroupHosts::all_to_all_single(at::Tensor& output, const at::Tensor& input,
                                                             const std::vector<int64_t>& output_split_sizes,
                                                             const std::vector<int64_t>& input_split_sizes) {
  constexpr const char* op = "all_to_all_single";
  CallDescriptor d = describe(op, &input, nullptr, nullptr);
  require(d, check_same_dtype({output, input}).empty(), check_same_dtype({output, input}));
  const int W = world_;
  auto splits = [&](const at::Tensor& t, const std::vector<int64_t>& rows, const char* side) {
    std::vector<int64_t> out(W, 0);
    const int64_t dim0 = t.dim() > 0 ? t.size(0) : 1;
    const int64_t row = dim0 > 0 ? t.numel() / dim0 : 0;
    if (rows.empty()) {
      require(d, dim0 % W == 0,
              std::string(side) + " dim 0 (" + std::to_string(dim0) + ") is not divisible by the world size");
      for (auto& s : out) s = dim0 / W * row;
    } else {
      require(d, static_cast<int>(rows.size()) == W, std::string(side) + " split sizes must have world size entries");
      int64_t sum = 0;
      for (int r = 0; r < W && r < static_cast<int>(rows.size()); ++r) {
        require(d, rows[r] >= 0, std::string(side) + " split sizes must be non-negative");
        out[r] = rows[r] * row;
        sum += rows[r];
      }
      require(d, sum == dim0,
              std::string(side) + " split sizes sum to " + std::to_string(sum) + " but dim 0 is " + std::to_string(dim0));
    }
    return out;
  };
  d.sends = splits(input, input_split_sizes, "input");
  d.expects = splits(output, output_split_sizes, "output");
  d.pairs = true;
  agree(op, d, nullptr);
  at::Tensor in = packed(input);
  if (in.numel() > 0 && output.numel() > 0 && in.data_ptr() == output.data_ptr()) in = in.clone();  // in place
  at::Tensor out = out_for(output);
  flat_all_to_all(op, out, in, d.sends, d.expects);
  unflatten_into(out, output);
  return completed_work({output});
}

c10::intrusive_ptr<c10d::Work> GroupHosts::all_to_all(std::vector<at::Tensor>& outputs,
                                                      std::vector<at::Tensor>& inputs) {
  constexpr const char* op = "all_to_all";
  CallDescriptor d = describe(op, inputs.empty() ? nullptr : &inputs[0], nullptr, nullptr);
  std::vector<at::Tensor> all = outputs;
  all.insert(all.end(), inputs.begin(), inputs.end());
  require(d, check_same_dtype(all).empty(), check_same_dtype(all));
  require(d, static_cast<int>(inputs.size()) == world_ && static_cast<int>(outputs.size()) == world_,
          "input and output lists must have world size tensors");
  for (size_t j = 0; j < inputs.size() && j < d.sends.size(); ++j) d.sends[j] = inputs[j].numel();
  for (size_t j = 0; j < outputs.size() && j < d.expects.size(); ++j) d.expects[j] = outputs[j].numel();
  d.pairs = true;
  agree(op, d, nullptr);
  at::Tensor in = packed_all(inputs).clone();  // the lists may share memory with each other
  at::Tensor out = at::empty({sum_of(d.expects)}, in.options());
  flat_all_to_all(op, out, in, d.sends, d.expects);
  unflatten_into(out, outputs);
  return completed_work(outputs);
}

c10::intrusive_ptr<c10d::Work> GroupHosts::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                  std::vector<at::Tensor>& inputs, const c10d::GatherOptions& opts) {
  constexpr const char* op = "gather";
  CallDescriptor d = describe(op, inputs.empty() ? nullptr : &inputs[0], nullptr, nullptr);
  require(d, inputs.size() == 1, "expects one input tensor per process");
  d.root = opts.rootRank;
  require(d, opts.rootRank >= 0 && opts.rootRank < world_,
          "root rank " + std::to_string(opts.rootRank) + " is outside the group of " + std::to_string(world_) + " ranks");
  std::vector<at::Tensor> all = cat_lists(outputs);
  all.insert(all.end(), inputs.begin(), inputs.end());
  require(d, check_same_dtype(all).empty(), check_same_dtype(all));
  const bool root = rank_ == opts.rootRank;
  if (root) {
    require(d, outputs.size() == 1 && static_cast<int>(outputs[0].size()) == world_,
            "the root needs one output list of world size tensors");
    for (const auto& o : outputs.empty() ? std::vector<at::Tensor>{} : outputs[0])
      require(d, inputs.empty() || o.numel() == inputs[0].numel(),
              "output tensors must have as many elements as the input");
  }
  d.elements = inputs.empty() ? 0 : inputs[0].numel();
  agree(op, d, nullptr);
  if (d.elements == 0) return completed_work(root ? outputs[0] : std::vector<at::Tensor>{});
  at::Tensor in = packed(inputs[0]);
  at::Tensor out = root ? at::empty({world_ * d.elements}, in.options()) : at::Tensor();
  flat_gather(op, out, in, static_cast<int>(opts.rootRank));
  if (!root) return completed_work({});
  unflatten_into(out, outputs[0]);
  return completed_work(outputs[0]);
}

c10::intrusive_ptr<c10d::Work> GroupHosts::scatter(std::vector<at::Tensor>& outputs,
                                                   std::vector<std::vector<at::Tensor>>& inputs,
                                                   const c10d::ScatterOptions& opts) {
  constexpr const char* op = "scatter";
  CallDescriptor d = describe(op, outputs.empty() ? nullptr : &outputs[0], nullptr, nullptr);
  require(d, outputs.size() == 1, "expects one output tensor per process");
  d.root = opts.rootRank;
  require(d, opts.rootRank >= 0 && opts.rootRank < world_,
          "root rank " + std::to_string(opts.rootRank) + " is outside the group of " + std::to_string(world_) + " ranks");
  std::vector<at::Tensor> all = cat_lists(inputs);
  all.insert(all.end(), outputs.begin(), outputs.end());
  require(d, check_same_dtype(all).empty(), check_same_dtype(all));
  const bool root = rank_ == opts.rootRank;
  if (root) {
    require(d, inputs.size() == 1 && static_cast<int>(inputs[0].size()) == world_,
            "the root needs one input list of world size tensors");
    for (const auto& t : inputs.empty() ? std::vector<at::Tensor>{} : inputs[0])
      require(d, outputs.empty() || t.numel() == outputs[0].numel(),
              "input tensors must have as many elements as the output");
  }
  d.elements = outputs.empty() ? 0 : outputs[0].numel();
  agree(op, d, nullptr);
  if (d.elements == 0) return completed_work(outputs);
  at::Tensor in = root ? packed_all(inputs[0]) : at::Tensor();
  at::Tensor out = out_for(outputs[0]);
  flat_scatter(op, out, in, static_cast<int>(opts.rootRank));
  unflatten_into(out, outputs[0]);
  return completed_work(outputs);
}

c10::intrusive_ptr<c10d::Work> GroupHosts::barrier() {
  agree("barrier", describe("barrier", nullptr, nullptr, nullptr), nullptr);
  count_flat("barrier");
  return completed_work({});
}

}  // namespace purlin::backend
