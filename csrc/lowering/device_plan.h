// device_plan.h — a SNAC plan lowered for the plan kernel.
//
// lower_plan() turns snac::Plan into the flat POD ops the kernel interprets
// (atom/cuda/device/plan_format.h, NOTE [block partition] there), and adds
// what the CPU executor gets for free from running one thread:
//
// NOTE [local barriers] A rank's own ops can depend on each other across
//   blocks: an op may read (or overwrite) local memory that an earlier op of
//   this rank wrote (or read) with a different partition — e.g. round j+2
//   staging into the slot that round j's consume read with other offsets.
//   lower_plan() tracks the local ranges (Input, Output, own Workspace) each
//   op touches since the last barrier and inserts a LocalSync (all G blocks
//   of this rank meet) before the first op that conflicts with an earlier one
//   on a different block. Accesses with the same origin and partition are
//   owned by the same block and need nothing more than the __syncthreads the
//   kernel runs after every data op.
// Torch-free and CUDA-runtime-free.
#pragma once

#include <cstdint>

#include "atom/cuda/device/plan_format.h"
#include "snac/plan.h"

namespace purlin::lowering {

namespace cu = purlin::atom::cuda;

// Lowers rank plan.rank's plan for a launch of `blocks` blocks on elements of
// `esize` bytes; throws std::invalid_argument beyond kMaxBlocks / kMaxWorld.
// `shift` (IoAlias::Shifted only): Input element i is Output element i + shift.
// `partition` must be the one the launch's kernel uses (the local barriers
// depend on it).
cu::DevicePlan lower_plan(const snac::Plan& plan, int blocks, int64_t esize, cu::IoAlias alias, int64_t shift = 0,
                          cu::Partition partition = cu::Partition::Parts);

// NOTE [line-carried ops] A line kernel (line_kernel.cuh) carries Stage and
//   Notify in its flagged lines: a line plan's Wait and Signal ops do
//   nothing there. Dropping them on the host spares the kernel's op loop a
//   visit each, ~200 cycles apiece on H200 (the one-shot all_reduce has three
//   of its five ops so; benchmarks/results/cuda_h200x2_20261130m_probes.md). Only for plans run
//   by the line kernel: the plan kernel's flags are these ops.
void drop_line_carried_ops(cu::DevicePlan* plan);

}  // namespace purlin::lowering
