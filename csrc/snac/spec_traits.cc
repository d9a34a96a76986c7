// spec_traits.cc — see spec_traits.h.
#include "snac/spec_traits.h"

#include <vector>

namespace purlin::snac {

namespace {
bool same_region(const Region& a, const Region& b) {
  return a.offset == b.offset && a.rows == b.rows && a.row_len == b.row_len && a.stride == b.stride;
}
}  // namespace

SpecTraits spec_traits(const Spec& spec) {
  const size_t W = static_cast<size_t>(spec.world);
  std::vector<char> reads(W, 0), writes(W, 0), read_by_peer(W, 0);
  for (const auto& ch : spec.chunks) {
    if (ch.numel() == 0) continue;
    for (const auto& s : ch.sources) {
      reads[s.rank] = 1;
      for (const auto& d : ch.dests)
        if (d.rank != s.rank) read_by_peer[s.rank] = 1;
    }
    for (const auto& d : ch.dests) writes[d.rank] = 1;
  }
  SpecTraits t;
  for (const auto& ch : spec.chunks) {
    t.reduces_to_several_ranks |= spec.kind == OpKind::Reduce && ch.sources.size() > 1 && ch.dests.size() > 1;
    for (const auto* side : {&ch.sources, &ch.dests})
      for (const auto& p : *side) t.elementwise_aligned &= same_region(p.region, ch.sources.empty() ? p.region
                                                                                                   : ch.sources[0].region);
    for (const auto& d : ch.dests) {
      bool source_here = false;
      for (const auto& s : ch.sources) source_here |= s.rank == d.rank;
      t.elementwise_aligned &= source_here || !reads[d.rank];
    }
  }
  t.reduces = spec.kind == OpKind::Reduce;
  t.max_rank_elems = max_rank_elems(spec);
  t.every_rank_reads_input = t.every_rank_writes_output = t.inputs_unwritten_while_read = true;
  for (size_t r = 0; r < W; ++r) {
    t.every_rank_reads_input &= reads[r] != 0;
    t.every_rank_writes_output &= writes[r] != 0;
    t.inputs_unwritten_while_read &= !(read_by_peer[r] && writes[r]);
  }
  return t;
}

CallDescription describe(const Spec& spec) {
  CallDescription d;
  d.traits = spec_traits(spec);
  return d;
}

uint64_t spec_hash(const Spec& s) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](int64_t v) {
    h ^= static_cast<uint64_t>(v);
    h *= 1099511628211ull;
  };
  mix(s.world);
  mix(static_cast<int64_t>(s.kind));
  mix(static_cast<int64_t>(s.redop));
  for (char c : s.name) mix(c);
  for (const auto& ch : s.chunks) {
    for (const auto* side : {&ch.sources, &ch.dests}) {
      mix(static_cast<int64_t>(side->size()));
      for (const auto& p : *side) {
        mix(p.rank);
        mix(p.region.offset);
        mix(p.region.rows);
        mix(p.region.row_len);
        mix(p.region.stride);
      }
    }
  }
  return h;
}

}  // namespace purlin::snac
