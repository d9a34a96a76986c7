// plan_kernel.h — host entry of the plan kernel: one launch of G blocks runs
// one rank's lowered SNAC plan (plan_format.h) on its symmetric workspace.
//
// Torch-free; prepare_plan() builds and checks a plan's parameters once,
// launch_prepared() checks and patches in each call's fields (NOTE [prebuilt
// kernel parameters]), then launches plan_kernel<T> (plan_kernel.cuh) for the
// element type. Copies work for any element size the backend hands over (1,
// 2, 4, 8, 16 bytes); reductions for float32/64, float16, bfloat16,
// int8/16/32/64 and uint8 (can_reduce()).
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

// The plan kernel's parameters (plan_kernel.cuh, line_kernel.cuh read them).
struct KernelParams {
  InlinePlan inl;
  const DevOp* ops;      // nullptr: use inl
  const DevRef* srcs;
  char* input;
  char* output;
  uint64_t* pad;         // this rank's signal pad (= its buffer)
  ErrorRecord* err;
  uint64_t steps;
  uint64_t timeout_ns;
  uint64_t call_sig;     // NOTE [call tags]
  int64_t input_pool_offset;  // NOTE [zero-copy sources]; -1: Input is not in the pool
  int64_t output_pool_offset; // NOTE [peer outputs]; -1: Output is not in the pool
  double scale;
  PadLayout layout;
  int n_ops;
  int n_srcs;            // NOTE [staged plan]; -1: not known (not staged)
  uint32_t local_syncs;
  int rank;
  int redop;
  uint32_t op_name;
  uint32_t reuse_phase;  // interned phase name of the Done wait
  uint32_t line_phase;   // interned phase name of a flagged-line poll
  int lines;             // kNarrowLines / kWideLines: run the plan over flagged lines (line_kernel.cuh)
  int parity;            // 1: a parity plan (NOTE [parity plans])
};

// NOTE [prebuilt kernel parameters] A plan's KernelParams are built once
//   (prepare_plan; the engine calls it when it caches the plan) and each
//   launch copies them and patches the call's fields, PlanCall. Those vary
//   between calls of one cached plan: the tensors; the dtype and reduce op
//   (plans are cached by element size, not dtype, and serve every reduce op);
//   the PREMUL_SUM scale; the pool offsets and the call tag hashing them (the
//   plan knows only whether the pool is used); the op's name (several names
//   share a plan); the timeout (the group's may change). Everything else
//   (the plan, the workspace, rank, launch shape) is the plan's; the checks
//   that read only its fields run once (a failure is raised by every launch).

// One call of a plan: the fields a launch patches into the prebuilt parameters.
struct PlanCall {
  void* input = nullptr;
  void* output = nullptr;
  DType dtype = DType::Float32;
  RedOp redop = RedOp::Sum;
  double scale = 1.0;            // this rank's PREMUL_SUM factor
  uint64_t timeout_ns = 0;
  uint32_t op_name = 0;          // intern_name(collective name)
  uint64_t call_sig = 0;         // NOTE [call tags] (plan_kernel.cuh): equal on every rank of a valid call
  int64_t input_pool_offset = -1;  // zero-copy plans: Input's byte offset in the symmetric pool
  int64_t output_pool_offset = -1; // peer-output plans (NOTE [peer outputs]): Output's byte offset in the pool
};

// A plan's launch: the plan, the memory it runs on, its launch shape, and one call.
struct PlanLaunch : PlanCall {
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
  void* self = nullptr;          // this rank's symmetric buffer (pad at 0)
  PadLayout layout;
  ErrorRecord* err = nullptr;    // device address of the host-mapped record
  int rank = 0;
  bool lines = false;            // run on flagged lines (NOTE [line plans], line_kernel.cuh)
  bool wide_lines = false;       // ... in the wide format (NOTE [wide lines]; lower_plan with Partition::WideLines)
  bool parity = false;           // a parity plan (NOTE [parity plans], plan_kernel.cuh)
  int blocks = 1;                // this launch's blocks, <= layout.blocks (launch_config.h)
  int threads = 512;
  bool overlap = false;          // NOTE [overlapped launch] (launch_typed.cuh); sm_90+ only
};

// A plan's prebuilt launch (NOTE [prebuilt kernel parameters]).
struct PreparedPlan {
  KernelParams params;           // the call's fields zero
  int blocks = 1, threads = 512;
  bool reduces = false, lines = false, wide_lines = false, parity = false, overlap = false;
  const char* refusal = nullptr; // the first of the plan's own checks that failed: every launch raises it
};

bool can_reduce(DType t);

// Builds the parameters of `l`'s plan; its PlanCall part is not read.
PreparedPlan prepare_plan(const PlanLaunch& l);

// Launches `p` for call `c` on `stream`; returns the launch error (cudaSuccess
// if queued). Throws std::invalid_argument on inconsistent arguments.
cudaError_t launch_prepared(const PreparedPlan& p, const PlanCall& c, cudaStream_t stream);

// prepare_plan(l), then launch_prepared for l's call (a plan launched once).
cudaError_t launch_plan(const PlanLaunch& l, cudaStream_t stream);

}  // namespace purlin::atom::cuda
