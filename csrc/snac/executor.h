// executor.h — runs a SNAC plan on a host-driven Atom (CPU shared memory).
//
// Hardware-independent: it resolves the plan's named buffers to addresses and
// calls the Atom's copy / reduce / signal / wait in plan order. Device Atoms
// that run a plan inside one kernel interpret the same Plan themselves.
#pragma once

#include <cstdint>

#include "atom/atom.h"
#include "snac/plan.h"

namespace purlin::snac {

struct ExecArgs {
  void* input = nullptr;    // this rank's flat input
  void* output = nullptr;   // this rank's flat output
  DType dtype = DType::Float32;
  RedOp redop = RedOp::Sum;
  const double* scales = nullptr;  // PREMUL_SUM: factor of each rank's input, indexed by rank
  uint64_t step_base = 0;   // added to every flag value (NOTE [epochs])
  atom::WaitSite site;      // op name + sequence number for timeout messages
};

void execute(const Plan& plan, atom::HostAtom& atom, const ExecArgs& args);

}  // namespace purlin::snac
