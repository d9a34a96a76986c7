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

// NOTE [call shape from the Spec] What a call's ranks pass, and which
// in-place forms are safe, follow from the Spec's placements, never from the
// collective's name; one fact of the call is added, `one_buffer` (c10d's
// one-tensor ops), which a Spec cannot say. A custom call passes what the Spec
// describes (run_spec: its Input and Output cut to the Spec's sizes, and run
// from a copy of its Input where the two overlap in any other form than the
// ones below, NOTE [custom call buffers] in backend/group/request.cc), so the
// same rules hold for it; the description is therefore alike for a built-in
// and a custom Spec of its shape, except for one_buffer.
//  - A rank passes an Input where it is a source (of a non-empty input, unless
//    the Spec reads nothing anywhere) and an Output where it is a destination,
//    or both, as its one buffer, where either holds and one_buffer is set.
//  - Inputs lie at one pool offset unless a rank that passes an Output may
//    keep its Input inside it while another rank passes an Input only: the
//    first rank's Input is at a place of its Output the others cannot know
//    (gather's root: its block). Not so in a reduction aligned elementwise,
//    whose in-place form is Input == Output (reduce's root). (By regions
//    alone a Spec that moves nothing is aligned; a copy never counts as one.)
//  - Peers may write Outputs (copy Specs whose every rank passes one) where
//    every rank that is both read and written receives every chunk it is the
//    source of: its Input, inside its Output, lies where its own chunk lands,
//    which no peer writes (all_gather); a rank only read (broadcast's root) or
//    only written (its peers) holds nothing a peer write can spoil.
//  - own_block +1 where every rank's Input is its own chunk at block `rank` of
//    its Output (input_is_own_chunk at rank x its input size: all_gather), -1
//    where every rank's Output is its own chunk at block `rank` of its Input
//    (output_is_own_chunk at rank x its output size: reduce_scatter).
namespace {
bool contiguous_at(const Region& g, int64_t offset, int64_t n) {
  if (g.numel() != n) return false;
  return n == 0 || (g.offset == offset && (g.rows == 1 || g.stride == g.row_len));
}

bool meets(const Region& g, int64_t begin, int64_t end) {
  return g.numel() > 0 && begin < end && g.offset < end && g.extent_end() > begin;
}

}  // namespace

bool input_is_own_chunk(const Spec& spec, int rank, int64_t at) {
  if (spec.kind != OpKind::Copy) return false;
  const int64_t n = spec.input_numel[rank];
  int sourced = 0;
  bool lands = false, others_miss = true;
  for (const auto& ch : spec.chunks) {
    bool mine = false;
    for (const auto& s : ch.sources)
      if (s.rank == rank) {
        ++sourced;
        mine = contiguous_at(s.region, 0, n);
      }
    for (const auto& d : ch.dests) {
      if (d.rank != rank) continue;
      if (mine && contiguous_at(d.region, at, n)) lands = true;
      else if (meets(d.region, at, at + n)) others_miss = false;
    }
  }
  return sourced == 1 && lands && others_miss;
}

bool output_is_own_chunk(const Spec& spec, int rank, int64_t at) {
  const int64_t n = spec.output_numel[rank];
  int received = 0;
  bool reads_block = false, others_miss = true;
  for (const auto& ch : spec.chunks) {
    bool mine = false;
    for (const auto& d : ch.dests)
      if (d.rank == rank) {
        ++received;
        mine = ch.dests.size() == 1 && contiguous_at(d.region, 0, n);
      }
    for (const auto& s : ch.sources) {
      if (s.rank != rank) continue;
      if (mine && contiguous_at(s.region, at, n)) reads_block = true;
      else if (meets(s.region, at, at + n)) others_miss = false;
    }
  }
  return received == 1 && reads_block && others_miss;
}

CallDescription describe(const Spec& spec, bool one_buffer) {
  CallDescription d;
  d.traits = spec_traits(spec);
  const size_t W = static_cast<size_t>(spec.world);
  std::vector<char> src(W, 0), dst(W, 0), home(W, 1);
  for (const auto& ch : spec.chunks) {
    for (const auto& s : ch.sources) {
      src[s.rank] = 1;
      bool delivered = false;
      for (const auto& p : ch.dests) delivered |= p.rank == s.rank;
      if (!delivered) home[s.rank] = 0;
    }
    for (const auto& p : ch.dests) dst[p.rank] = 1;
  }
  bool reads_any = false;
  for (size_t r = 0; r < W; ++r) reads_any |= spec.input_numel[r] > 0;
  std::vector<char> has_in(W), has_out(W);
  for (size_t r = 0; r < W; ++r) {
    has_in[r] = src[r] && (spec.input_numel[r] > 0 || !reads_any);
    has_out[r] = dst[r];
    if (one_buffer) has_in[r] = has_out[r] = has_in[r] || has_out[r];
  }
  bool in_and_out = false, in_only = false, peer_writes_safe = true;
  d.inputs_everywhere = d.outputs_everywhere = true;
  for (size_t r = 0; r < W; ++r) {
    d.inputs_everywhere &= has_in[r] != 0;
    d.outputs_everywhere &= has_out[r] != 0;
    in_and_out |= has_in[r] && has_out[r];
    in_only |= has_in[r] && !has_out[r];
    peer_writes_safe &= !(src[r] && dst[r]) || home[r];
  }
  d.inputs_at_one_offset = !(in_and_out && in_only) || (d.traits.reduces && d.traits.elementwise_aligned);
  d.outputs_writable_by_peers = !d.traits.reduces && d.outputs_everywhere && peer_writes_safe;
  bool input_blocks = spec.world > 0, output_blocks = spec.world > 0;
  for (int r = 0; r < spec.world; ++r) {
    input_blocks &= input_is_own_chunk(spec, r, r * spec.input_numel[r]);
    output_blocks &= output_is_own_chunk(spec, r, r * spec.output_numel[r]);
  }
  d.own_block = input_blocks ? 1 : output_blocks ? -1 : 0;
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
