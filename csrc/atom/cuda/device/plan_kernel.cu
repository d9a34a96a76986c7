// plan_kernel.cu — prepare_plan(), launch_prepared(), launch_plan(): checks,
// parameter packing and the choice of plan_kernel<T> (instantiated in
// plan_kernel_{float,int,copy}.cu).
#include <cstring>
#include <stdexcept>
#include <string>

#include "atom/cuda/device/launch_typed.cuh"
#include "atom/cuda/interned_names.h"

namespace purlin::atom::cuda {

PURLIN_EXTERN_PLAN_KERNEL(float)
PURLIN_EXTERN_PLAN_KERNEL(double)
PURLIN_EXTERN_PLAN_KERNEL(__half)
PURLIN_EXTERN_PLAN_KERNEL(__nv_bfloat16)
PURLIN_EXTERN_PLAN_KERNEL(int8_t)
PURLIN_EXTERN_PLAN_KERNEL(int16_t)
PURLIN_EXTERN_PLAN_KERNEL(int32_t)
PURLIN_EXTERN_PLAN_KERNEL(int64_t)
PURLIN_EXTERN_PLAN_KERNEL(uint8_t)
PURLIN_EXTERN_PLAN_KERNEL(Pod16)

bool fits_inline(const DevicePlan& p) {
  return p.ops.size() <= static_cast<size_t>(kInlineOps) && p.srcs.size() <= static_cast<size_t>(kInlineSrcs);
}

void to_inline(const DevicePlan& p, InlinePlan* out) {
  if (!fits_inline(p)) throw std::invalid_argument("purlin: plan too large to pass inline");
  std::memset(static_cast<void*>(out), 0, sizeof *out);
  std::memcpy(out->ops, p.ops.data(), p.ops.size() * sizeof(DevOp));
  std::memcpy(out->srcs, p.srcs.data(), p.srcs.size() * sizeof(DevRef));
}

bool can_reduce(DType t) {
  switch (t) {
    case DType::Float32: case DType::Float64: case DType::Float16: case DType::BFloat16:
    case DType::Int8: case DType::Int16: case DType::Int32: case DType::Int64: case DType::UInt8:
      return true;
    default:
      return false;
  }
}

namespace {

cudaError_t launch_reducing(DType t, const KernelParams& k, int blocks, int threads, cudaStream_t s, bool overlap) {
  switch (t) {
    case DType::Float32: return launch_typed<float>(k, blocks, threads, s, overlap);
    case DType::Float64: return launch_typed<double>(k, blocks, threads, s, overlap);
    case DType::Float16: return launch_typed<__half>(k, blocks, threads, s, overlap);
    case DType::BFloat16: return launch_typed<__nv_bfloat16>(k, blocks, threads, s, overlap);
    case DType::Int8: return launch_typed<int8_t>(k, blocks, threads, s, overlap);
    case DType::Int16: return launch_typed<int16_t>(k, blocks, threads, s, overlap);
    case DType::Int32: return launch_typed<int32_t>(k, blocks, threads, s, overlap);
    case DType::Int64: return launch_typed<int64_t>(k, blocks, threads, s, overlap);
    case DType::UInt8: return launch_typed<uint8_t>(k, blocks, threads, s, overlap);
    default: throw std::invalid_argument(std::string("purlin: no CUDA reduction for ") + dtype_name(t));
  }
}

// Copy-only plans need the element size alone.
cudaError_t launch_copying(size_t esize, const KernelParams& k, int blocks, int threads, cudaStream_t s, bool overlap) {
  switch (esize) {
    case 1: return launch_typed<uint8_t>(k, blocks, threads, s, overlap);
    case 2: return launch_typed<int16_t>(k, blocks, threads, s, overlap);
    case 4: return launch_typed<int32_t>(k, blocks, threads, s, overlap);
    case 8: return launch_typed<int64_t>(k, blocks, threads, s, overlap);
    case 16: return launch_typed<Pod16>(k, blocks, threads, s, overlap);
    default: throw std::invalid_argument("purlin: no CUDA copy for elements of " + std::to_string(esize) + " bytes");
  }
}

[[noreturn]] void bad(const std::string& why) { throw std::invalid_argument("purlin launch_plan: " + why); }

// The first of the plan's own checks that fails (NOTE [prebuilt kernel parameters]), or nullptr.
const char* plan_refusal(const PlanLaunch& l) {
  if (l.layout.blocks != kMaxBlocks) return "the pad must have kMaxBlocks flag slots per peer";
  if (l.blocks < 1 || l.blocks > l.layout.blocks) return "block count out of range";
  if (l.layout.world < 1 || l.layout.world > kMaxWorld || l.rank < 0 || l.rank >= l.layout.world)
    return "rank / world out of range";
  if (l.threads < kMaxWorld || l.threads > 1024 || l.threads % 32 != 0 || l.threads < l.layout.world)
    return "thread count must be a multiple of 32 in [128, 1024]";
  if (!l.self || !l.err) return "no workspace";
  if (!l.ops && !l.inline_plan) return "no plan";
  if (l.ops && !l.srcs) return "device plan without sources";
  if (l.inline_plan && !l.ops && l.n_ops > kInlineOps) return "inline plan too long";
  if (l.n_srcs < -1 || (l.inline_plan && !l.ops && l.n_srcs > kInlineSrcs)) return "source count out of range";
  return nullptr;
}

}  // namespace

PreparedPlan prepare_plan(const PlanLaunch& l) {
  static_assert(sizeof(KernelParams) <= 4000, "plan kernel parameters must stay under 4 KB");
  PreparedPlan p;
  KernelParams& k = p.params;
  std::memset(static_cast<void*>(&k), 0, sizeof k);
  p.blocks = l.blocks;
  p.threads = l.threads;
  p.reduces = l.reduces;
  p.lines = l.lines;
  p.wide_lines = l.wide_lines;
  p.parity = l.parity;
  p.overlap = l.overlap;
  p.refusal = plan_refusal(l);
  if (p.refusal) return p;
  if (!l.ops) k.inl = *l.inline_plan;
  k.ops = l.ops;
  k.srcs = l.srcs;
  k.pad = static_cast<uint64_t*>(l.self);
  k.err = l.err;
  k.steps = l.steps;
  k.layout = l.layout;
  k.n_ops = l.n_ops;
  k.n_srcs = l.n_srcs;
  k.local_syncs = l.local_syncs;
  k.rank = l.rank;
  // Interned once, not per plan (intern_name locks and scans a table).
  static const uint16_t reuse_phase = intern_name("start: wait until every peer finished the previous collective");
  static const uint16_t line_reuse_phase = intern_name("start: wait until every peer finished the collective before last");
  static const uint16_t line_phase = intern_name("consume: wait for a flagged line");
  k.reuse_phase = l.lines || l.parity ? line_reuse_phase : reuse_phase;
  k.line_phase = line_phase;
  k.lines = !l.lines ? 0 : l.wide_lines ? kWideLines : kNarrowLines;
  k.parity = l.parity ? 1 : 0;
  return p;
}

cudaError_t launch_prepared(const PreparedPlan& p, const PlanCall& c, cudaStream_t stream) {
  if (p.refusal) bad(p.refusal);
  const PadLayout& layout = p.params.layout;
  if (p.reduces && !can_reduce(c.dtype)) bad(std::string("no CUDA reduction for ") + dtype_name(c.dtype));
  if (p.lines && (layout.line_offset <= 0 || dtype_size(c.dtype) > 8 || c.redop == RedOp::PremulSum))
    bad("this plan cannot run on flagged lines");
  if (p.wide_lines && (!p.lines || layout.wide_offset <= 0 || layout.wide_offset % kWideLineBytes != 0))
    bad("wide lines need a line plan and the wide-line region");
  if (p.parity && (p.lines || layout.parity_offset <= 0 || c.redop == RedOp::PremulSum))
    bad("this plan cannot run as a parity plan");
  // NOTE [prebuilt kernel parameters]: the plan's, then the call's fields.
  KernelParams k;
  std::memcpy(static_cast<void*>(&k), &p.params, sizeof k);
  k.input = static_cast<char*>(c.input);
  k.output = static_cast<char*>(c.output);
  k.timeout_ns = c.timeout_ns;
  k.call_sig = c.call_sig;
  k.input_pool_offset = c.input_pool_offset;
  k.output_pool_offset = c.output_pool_offset;
  k.scale = c.scale;
  k.redop = static_cast<int>(c.redop);
  k.op_name = c.op_name;
  return p.reduces ? launch_reducing(c.dtype, k, p.blocks, p.threads, stream, p.overlap)
                   : launch_copying(dtype_size(c.dtype), k, p.blocks, p.threads, stream, p.overlap);
}

cudaError_t launch_plan(const PlanLaunch& l, cudaStream_t stream) {
  const PreparedPlan p = prepare_plan(l);
  return launch_prepared(p, l, stream);
}

}  // namespace purlin::atom::cuda
