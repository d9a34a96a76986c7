// tensor_args.cc — see tensor_args.h.
#include "backend/c10d/tensor_args.h"

#include <algorithm>

#include <ATen/ATen.h>

namespace purlin::backend {

bool to_dtype(at::ScalarType t, DType* out) {
  switch (t) {
    case at::kFloat: *out = DType::Float32; return true;
    case at::kDouble: *out = DType::Float64; return true;
    case at::kHalf: *out = DType::Float16; return true;
    case at::kBFloat16: *out = DType::BFloat16; return true;
    case at::kChar: *out = DType::Int8; return true;
    case at::kShort: *out = DType::Int16; return true;
    case at::kInt: *out = DType::Int32; return true;
    case at::kLong: *out = DType::Int64; return true;
    case at::kByte: *out = DType::UInt8; return true;
    case at::kBool: *out = DType::Bool; return true;
    case at::kComplexFloat: *out = DType::Complex64; return true;
    case at::kComplexDouble: *out = DType::Complex128; return true;
    default: return false;
  }
}

bool gloo_takes(at::ScalarType t, const c10d::ReduceOp* redop) {
  switch (t) {  // ProcessGroupGloo's types
    case at::kFloat: case at::kDouble: case at::kHalf: case at::kBFloat16:
      return !(redop && bitwise_reduction(*redop));
    case at::kChar: case at::kByte: case at::kInt: case at::kLong: case at::kBool:
      return true;
    default:
      return false;
  }
}

std::string dtype_refusal(at::ScalarType t) {
  return std::string("dtype ") + c10::toString(t) + " is not supported on CPU tensors: not natively (float32, " +
         "float64, float16, bfloat16, int8, int16, int32, int64, uint8, bool, complex64, complex128) and not by " +
         "the gloo fallback";
}

bool bitwise_reduction(const c10d::ReduceOp& op) {
  return op.op_ == c10d::ReduceOp::BAND || op.op_ == c10d::ReduceOp::BOR || op.op_ == c10d::ReduceOp::BXOR;
}

void set_reduction(Request& rq, const c10d::ReduceOp& op) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM: rq.redop = RedOp::Sum; break;
    case c10d::ReduceOp::AVG: rq.redop = RedOp::Avg; break;
    case c10d::ReduceOp::PRODUCT: rq.redop = RedOp::Product; break;
    case c10d::ReduceOp::MIN: rq.redop = RedOp::Min; break;
    case c10d::ReduceOp::MAX: rq.redop = RedOp::Max; break;
    case c10d::ReduceOp::PREMUL_SUM: {
      rq.redop = RedOp::PremulSum;
      auto* s = dynamic_cast<c10d::NCCLPreMulSumSupplement*>(op.supplement_.get());
      if (!s) {
        rq.error = "PREMUL_SUM without a factor";
      } else if (s->tensor_factor.defined()) {
        rq.scale = s->tensor_factor.to(at::kCPU).to(at::kDouble).item<double>();
      } else {
        rq.scale = s->double_factor;
      }
      break;
    }
    case c10d::ReduceOp::BAND:
    case c10d::ReduceOp::BOR:
    case c10d::ReduceOp::BXOR: {  // here only where gloo does not take the dtype (gloo_takes)
      const char* name = op.op_ == c10d::ReduceOp::BAND ? "BAND" : op.op_ == c10d::ReduceOp::BOR ? "BOR" : "BXOR";
      if (rq.error.empty())
        rq.error = std::string(name) + " on " + dtype_name(rq.dtype) + ": bitwise reduce ops run on the gloo " +
                   "fallback, which takes them on int8, uint8, int32, int64 and bool tensors only";
      return;
    }
    default:
      rq.error = "reduce op " + std::to_string(static_cast<int>(op.op_)) + " is not supported";
      return;
  }
  const char* why = nullptr;
  if (rq.error.empty() && !reduction_supported(rq.dtype, rq.redop, &why))
    rq.error = std::string(redop_name(rq.redop)) + " on " + dtype_name(rq.dtype) + ": " + why;
}

at::Tensor flat_of(const at::Tensor& t) {
  // NOTE [eager host path]: no view of a contiguous tensor (a dispatched op per call).
  return t.is_contiguous() ? t : t.contiguous().view({-1});
}

namespace {

// NOTE [list buffers]: the CPU tensors of `ts` as one flat view, where they are
// contiguous and lie end to end in one storage, in order; undefined otherwise.
at::Tensor adjacent_view(const std::vector<at::Tensor>& ts) {
  if (ts.empty() || !ts[0].defined() || !ts[0].device().is_cpu()) return {};
  const at::Tensor& t0 = ts[0];
  const auto* base = static_cast<const char*>(t0.data_ptr());
  const int64_t es = static_cast<int64_t>(t0.element_size());
  int64_t total = 0;
  for (const auto& t : ts) {
    if (!t.defined() || t.numel() == 0 || !t.is_contiguous() || t.scalar_type() != t0.scalar_type() ||
        !t.device().is_cpu() || !t.storage().is_alias_of(t0.storage()) ||
        static_cast<const char*>(t.data_ptr()) != base + total * es)
      return {};
    total += t.numel();
  }
  return t0.as_strided({total}, {1}, t0.storage_offset());
}

}  // namespace

at::Tensor call_buffer(int64_t numel, const at::Tensor& like, int slot) {
  if (!like.device().is_cpu()) return at::empty({numel}, like.options());
  thread_local at::Tensor scratch[2];  // NOTE [list buffers]: bytes, grown, never given out whole
  at::Tensor& buf = scratch[slot & 1];
  const int64_t bytes = numel * static_cast<int64_t>(like.element_size());
  if (!buf.defined() || buf.numel() < bytes) buf = at::empty({std::max<int64_t>(bytes, 2 * (buf.defined() ? buf.numel() : 0))}, at::kByte);
  return buf.narrow(0, 0, bytes).view(like.scalar_type());
}

at::Tensor flat_of(const std::vector<at::Tensor>& ts) {
  if (ts.size() == 1) return flat_of(ts[0]);
  if (at::Tensor v = adjacent_view(ts); v.defined()) return v;
  std::vector<at::Tensor> parts;
  int64_t numel = 0;
  for (const auto& t : ts) {
    parts.push_back(t.reshape({-1}));
    numel += t.numel();
  }
  if (ts.empty() || !ts[0].device().is_cpu()) return at::cat(parts);
  at::Tensor flat = call_buffer(numel, ts[0], 0);
  at::cat_out(flat, parts);
  return flat;
}

at::Tensor flat_out_for(const std::vector<at::Tensor>& ts, int64_t numel, const at::Tensor& like) {
  if (ts.size() == 1 && ts[0].is_contiguous() && ts[0].numel() == numel) return ts[0];
  if (at::Tensor v = adjacent_view(ts); v.defined() && v.numel() == numel && v.scalar_type() == like.scalar_type())
    return v;
  return call_buffer(numel, like, 1);
}

void unflatten_into(const at::Tensor& flat, at::Tensor& t) {
  if (t.is_contiguous() && flat.data_ptr() == t.data_ptr()) return;
  t.copy_(flat.reshape(t.sizes()));
}

void unflatten_into(const at::Tensor& flat, std::vector<at::Tensor>& ts) {
  if (ts.size() == 1 && ts[0].is_contiguous() && flat.data_ptr() == ts[0].data_ptr()) return;
  if (!ts.empty() && flat.data_ptr() == ts[0].data_ptr() && adjacent_view(ts).defined()) return;  // the view
  const at::Tensor flat1 = flat.reshape({-1});  // flat_of may return a contiguous tensor of any shape
  int64_t off = 0;
  for (auto& t : ts) {
    t.copy_(flat1.narrow(0, off, t.numel()).view(t.sizes()));
    off += t.numel();
  }
}

std::string check_same_dtype(const std::vector<at::Tensor>& ts) {
  for (const auto& t : ts)
    if (t.scalar_type() != ts[0].scalar_type())
      return std::string("tensors have different dtypes (") + c10::toString(t.scalar_type()) + " and " +
             c10::toString(ts[0].scalar_type()) + ")";
  return "";
}

}  // namespace purlin::backend
