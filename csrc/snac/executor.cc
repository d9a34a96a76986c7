// executor.cc — plan interpreter for HostAtom.
#include "snac/executor.h"

#include <stdexcept>
#include <string>
#include <vector>

namespace purlin::snac {

namespace {
std::byte* peer_buffer(void* const* table, const Ref& r, int self, const char* what) {
  if (!table)
    throw std::logic_error("purlin: rank " + std::to_string(self) + "'s plan names rank " + std::to_string(r.rank) +
                           "'s " + what + " but the executor was given no peer table for it");
  return static_cast<std::byte*>(table[r.rank]);
}

std::byte* resolve(const Ref& r, atom::HostAtom& atom, const ExecArgs& a, size_t esize, int self) {
  std::byte* base = nullptr;
  switch (r.buf) {
    case Buf::Input:
      base = r.rank == self ? static_cast<std::byte*>(a.input) : peer_buffer(a.peer_inputs, r, self, "Input");
      break;
    case Buf::Output:
      base = r.rank == self ? static_cast<std::byte*>(a.output) : peer_buffer(a.peer_outputs, r, self, "Output");
      break;
    case Buf::Workspace: base = atom.workspace(r.rank); break;
  }
  return base + static_cast<size_t>(r.offset) * esize;
}
}  // namespace

void execute(const Plan& plan, atom::HostAtom& atom, const ExecArgs& args) {
  const size_t esize = dtype_size(args.dtype);
  std::vector<const void*> srcs;
  std::vector<double> scales;
  atom::WaitSite site = args.site;
  for (const Op& op : plan.ops) {
    switch (op.code) {
      case OpCode::Wait:
        site.phase = op.phase;
        atom.wait(op.peer, static_cast<atom::FlagKind>(op.flag), args.step_base + op.value, site);
        break;
      case OpCode::Signal:
        atom.signal(op.peer, static_cast<atom::FlagKind>(op.flag), args.step_base + op.value);
        break;
      case OpCode::Copy: {
        const Ref& s = plan.srcs[op.src_begin];
        std::byte* dst = resolve(op.dst, atom, args, esize, plan.rank);
        std::byte* src = resolve(s, atom, args, esize, plan.rank);
        if (dst != src) atom.copy(dst, src, static_cast<size_t>(op.n) * esize);
        break;
      }
      case OpCode::Reduce: {
        srcs.clear();
        scales.clear();
        for (int k = 0; k < op.src_count; ++k) {
          const Ref& s = plan.srcs[op.src_begin + k];
          srcs.push_back(resolve(s, atom, args, esize, plan.rank));
          if (args.scales) scales.push_back(args.scales[s.rank]);
        }
        atom.reduce(resolve(op.dst, atom, args, esize, plan.rank), srcs.data(), args.scales ? scales.data() : nullptr,
                    op.src_count, op.n, args.dtype, args.redop);
        break;
      }
    }
  }
}

}  // namespace purlin::snac
