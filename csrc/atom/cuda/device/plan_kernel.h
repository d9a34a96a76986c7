// plan_kernel.h — host entry of the plan kernel: one launch of G blocks runs
// one rank's lowered SNAC plan (plan_format.h) on its symmetric workspace.
//
// Torch-free; launch_plan() checks its arguments, then launches
// plan_kernel<T> (plan_kernel.cuh) for the element type. Copies work for any
// element size the backend hands over (1, 2, 4, 8, 16 bytes); reductions for
// float32/64, float16, bfloat16, int8/16/32/64 and uint8 (can_reduce()).
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "atom/cuda/device/plan_format.h"
#include "atom/cuda/signal_pad.h"
#include "common/types.h"

namespace purlin::atom::cuda {

// Small plans travel inside the kernel's parameters: nothing to upload or
// free, and a captured CUDA graph keeps them by value. Larger ones live in
// device memory (plan_store.h).
constexpr int kInlineOps = 40;
constexpr int kInlineSrcs = 48;
struct InlinePlan {
  DevOp ops[kInlineOps];
  DevRef srcs[kInlineSrcs];
};
bool fits_inline(const DevicePlan& p);
void to_inline(const DevicePlan& p, InlinePlan* out);

struct PlanLaunch {
  // The plan: `ops`/`srcs` in device memory, or else `inline_plan` (host).
  const DevOp* ops = nullptr;
  const DevRef* srcs = nullptr;
  const InlinePlan* inline_plan = nullptr;
  int n_ops = 0;
  int n_srcs = -1;               // entries of `srcs` / the inline plan's sources; -1: not known, the kernel
                                 // reads the plan in place (NOTE [staged plan])
  uint64_t steps = 0;
  uint32_t local_syncs = 0;
  bool reduces = false;          // the plan has Reduce ops
  // Memory.
  void* input = nullptr;
  void* output = nullptr;
  void* self = nullptr;          // this rank's symmetric buffer (pad at 0)
  PadLayout layout;
  ErrorRecord* err = nullptr;    // device address of the host-mapped record
  // The call.
  int rank = 0;
  DType dtype = DType::Float32;
  RedOp redop = RedOp::Sum;
  double scale = 1.0;            // this rank's PREMUL_SUM factor
  uint64_t timeout_ns = 0;
  uint32_t op_name = 0;          // intern_name(collective name)
  uint64_t call_sig = 0;         // NOTE [call tags] (plan_kernel.cuh): equal on every rank of a valid call
  int64_t input_pool_offset = -1;  // zero-copy plans: Input's byte offset in the symmetric pool
  int64_t output_pool_offset = -1; // peer-output plans (NOTE [peer outputs]): Output's byte offset in the pool
  bool lines = false;            // run on flagged lines (NOTE [line plans], line_kernel.cuh)
  bool wide_lines = false;       // ... in the wide format (NOTE [wide lines]; lower_plan with Partition::WideLines)
  bool parity = false;           // a parity plan (NOTE [parity plans], plan_kernel.cuh)
  int blocks = 1;                // this launch's blocks, <= layout.blocks (launch_config.h)
  int threads = 512;
  bool overlap = false;          // NOTE [overlapped launch] (launch_typed.cuh); sm_90+ only
};

bool can_reduce(DType t);

// Launches on `stream`; returns the launch error (cudaSuccess if queued).
// Throws std::invalid_argument on inconsistent arguments.
cudaError_t launch_plan(const PlanLaunch& l, cudaStream_t stream);

}  // namespace purlin::atom::cuda
