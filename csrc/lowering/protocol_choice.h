// protocol_choice.h — the choice of protocol and launch shape for one call on
// the CUDA Atom: flagged lines (narrow or wide), a parity plan, or a
// workspace plan; push or pull, one- or two-shot, matched waits; blocks and
// threads; the SNAC plan, its lowered form and the call's signature.
//
// NOTE [protocol choice] The backend hands the Atom a Spec and what it
//   decided about the call (two-shot by its threshold, the symmetric-memory
//   use of backend/group/symmetric_use.h, this rank's aliasing); the lowering
//   picks everything that depends on the Atom's hardware here, from the
//   group's agreed settings and the architecture's table
//   (atom/cuda/protocol/protocol_settings.h, launch_config_<arch>.cc). Every choice that changes what a peer
//   sees (the protocol, the blocks that partition every op, the rounds)
//   depends only on the Spec, the group's agreed settings and the call's
//   rank-invariant facts, never on this rank's own tensor sizes or aliasing
//   (a scatter's root holds W blocks of input, its peers none): the sizes
//   come from snac::max_rank_elems. The signature hashes every such choice;
//   the kernel compares it between ranks before reading a peer's data (NOTE
//   [call tags]). test/cpp/test_plan_symmetry.cc derives every rank's choice
//   for every built-in collective and checks that they agree.
// Torch-free and CUDA-runtime-free: host code the emulator and the plan
// tests compile with the host compiler.
#pragma once

#include <cstdint>
#include <string>

#include "atom/cuda/device/plan_format.h"
#include "atom/cuda/protocol/protocol_settings.h"
#include "snac/plan.h"
#include "snac/spec.h"

namespace purlin::lowering {

namespace cu = purlin::atom::cuda;

// One call as this rank makes it.
struct CallFacts {
  int64_t esize = 4;
  bool scale_per_rank = false;     // PREMUL_SUM: peers would read the scale word without a barrier: no regions
  bool region = true;              // lines / parity plans may serve the call (no pool use was asked for)
  bool two_shot = false;           // the group's threshold says two-shot (reductions of several dests)
  bool read_peer_inputs = false;   // NOTE [zero-copy] (symmetric_use.h decided it)
  bool write_peer_outputs = false; // NOTE [peer outputs]
  // This rank's own facts: they change only its own plan, never what a peer sees.
  bool direct_local = true;        // NOTE [direct local reads]
  cu::IoAlias alias = cu::IoAlias::Disjoint;
  int64_t shift = 0;
};

struct ProtocolChoice {
  snac::Plan plan;          // the SNAC plan run (before lowering)
  cu::DevicePlan lowered;   // ... lowered for the launch's blocks
  snac::Plan pull_plan;     // copy specs on a workspace plan: the pull plan the copy-engine Atom runs
  bool has_pull_plan = false;
  bool reduces = false;
  bool lines = false, wide = false, parity = false;
  bool two_shot = false, push = false, push_reduced = false, match_waits = false;
  int64_t spec_bytes = 0;   // bytes the Spec moves (rank-invariant)
  int blocks = 1, threads = 512;
  uint64_t sig = 0;         // NOTE [call tags]: every choice a peer must share, and the Spec and dtype
  std::string protocol;     // last_launch()'s name: "one-shot+lines", "copy+zero-copy", ...
};

// The call tag a launch compares between ranks (NOTE [call tags]): the
// choice's signature and the pool offsets of the tensors read or written in
// place (-1: none), which every rank must pass alike.
inline uint64_t call_signature(uint64_t sig, int64_t input_pool_offset, int64_t output_pool_offset) {
  return sig ^ (input_pool_offset >= 0 ? static_cast<uint64_t>(input_pool_offset) * 0x100000001b3ull : 0) ^
         (output_pool_offset >= 0 ? static_cast<uint64_t>(output_pool_offset) * 0x9E3779B97F4A7C15ull : 0);
}

// `dtype_code` goes into the signature (the backend's dtype number).
ProtocolChoice choose_protocol(const snac::Spec& spec, const CallFacts& call, const cu::ProtocolSettings& settings,
                               int rank, uint64_t dtype_code);

}  // namespace purlin::lowering
