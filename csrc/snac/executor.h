// executor.h — runs a SNAC plan on a host-driven Atom (CPU shared memory,
// the copy-engine Atom).
//
// Hardware-independent: it resolves the plan's named buffers to addresses and
// calls the Atom's copy / reduce / signal / wait in plan order. Device Atoms
// that run a plan inside one kernel interpret the same Plan themselves.
// A plan that names another rank's Input (NOTE [zero-copy]) or Output (NOTE
// [peer outputs]) needs that rank's buffer as mapped here: the peer tables;
// without them such a plan is refused (std::logic_error), never run on this
// rank's own buffer.
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
  // Every rank's flat input / output as mapped in this process, indexed by
  // rank (read_peer_inputs / write_peer_outputs plans); nullptr: none.
  void* const* peer_inputs = nullptr;
  void* const* peer_outputs = nullptr;
};

void execute(const Plan& plan, atom::HostAtom& atom, const ExecArgs& args);

}  // namespace purlin::snac
