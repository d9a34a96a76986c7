// copy_engine_plan.cc — see copy_engine_plan.h.
#include "lowering/copy_engine_plan.h"

namespace purlin::lowering {

std::string copy_engine_refusal(const snac::Plan& p, int rank, int world, int64_t ws_bytes, int64_t esize,
                                bool peer_inputs) {
  if (p.rank != rank || p.world != world)
    return "plan of rank " + std::to_string(p.rank) + "/" + std::to_string(p.world) + " given to rank " +
           std::to_string(rank) + "/" + std::to_string(world);
  auto ref_ok = [&](const snac::Ref& r, int64_t n) {
    // A peer's Input only with the peer table (NOTE [copy-engine zero-copy]); never a peer's Output.
    if (r.buf == snac::Buf::Input) return r.rank == rank || (peer_inputs && r.rank >= 0 && r.rank < world);
    if (r.buf == snac::Buf::Output) return r.rank == rank;
    return r.rank >= 0 && r.rank < world && r.offset >= 0 && (r.offset + n) * esize <= ws_bytes;
  };
  for (const snac::Op& op : p.ops) {
    if (op.code == snac::OpCode::Reduce) return "the plan reduces; copy engines only copy";
    if (op.code == snac::OpCode::Copy) {
      if (op.dst.buf == snac::Buf::Workspace && op.dst.rank != rank)
        return "a push plan (writes into a peer's workspace); this Atom's waits do not flush remote data writes";
      bool ok = op.src_count == 1 && ref_ok(op.dst, op.n);
      for (int k = 0; ok && k < op.src_count; ++k) ok = ref_ok(p.srcs[op.src_begin + k], op.n);
      if (!ok) return "the plan reads or writes outside this rank's buffers, the workspaces and the peers' inputs";
    } else if (op.peer < 0 || op.peer >= world || op.peer == rank) {
      return "the plan waits for or signals rank " + std::to_string(op.peer);
    }
  }
  return "";
}

}  // namespace purlin::lowering
