// spec.cc — validation of specs and the span walker over strided regions.
#include "snac/spec.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace purlin::snac {

int64_t Chunk::numel() const {
  if (!sources.empty()) return sources[0].region.numel();
  if (!dests.empty()) return dests[0].region.numel();
  return 0;
}

namespace {
[[noreturn]] void bad(const Spec& s, size_t c, const std::string& what) {
  throw std::invalid_argument("spec '" + s.name + "': chunk " + std::to_string(c) + ": " + what);
}

void check_region(const Spec& s, size_t c, const Region& r, const char* side) {
  if (r.offset < 0 || r.rows < 0 || r.row_len < 0)
    bad(s, c, std::string(side) + " region has a negative offset, rows or row_len");
  if (r.rows > 1 && r.stride < r.row_len)
    bad(s, c, std::string(side) + " region rows overlap (stride < row_len)");
}
}  // namespace

void Spec::finalize() {
  if (world < 1) throw std::invalid_argument("spec '" + name + "': world size must be >= 1");
  input_numel.assign(world, 0);
  output_numel.assign(world, 0);
  for (size_t c = 0; c < chunks.size(); ++c) {
    const Chunk& ch = chunks[c];
    if (ch.sources.empty()) bad(*this, c, "has no source");
    if (kind == OpKind::Copy && ch.sources.size() != 1) bad(*this, c, "a copy chunk needs exactly one source");
    const int64_t n = ch.numel();
    std::vector<bool> seen(world, false);
    for (const auto& p : ch.sources) {
      if (p.rank < 0 || p.rank >= world) bad(*this, c, "source rank " + std::to_string(p.rank) + " outside the world");
      if (seen[p.rank]) bad(*this, c, "rank " + std::to_string(p.rank) + " is a source twice");
      seen[p.rank] = true;
      check_region(*this, c, p.region, "source");
      if (p.region.numel() != n) bad(*this, c, "sources differ in element count");
      input_numel[p.rank] = std::max(input_numel[p.rank], p.region.extent_end());
    }
    std::fill(seen.begin(), seen.end(), false);
    for (const auto& p : ch.dests) {
      if (p.rank < 0 || p.rank >= world) bad(*this, c, "dest rank " + std::to_string(p.rank) + " outside the world");
      if (seen[p.rank]) bad(*this, c, "rank " + std::to_string(p.rank) + " is a dest twice");
      seen[p.rank] = true;
      check_region(*this, c, p.region, "dest");
      if (p.region.numel() != n) bad(*this, c, "dest element count differs from the sources'");
      output_numel[p.rank] = std::max(output_numel[p.rank], p.region.extent_end());
    }
  }
}

std::vector<Span> common_spans(const std::vector<const Region*>& regions, int64_t begin, int64_t end) {
  std::vector<Span> out;
  int64_t e = begin;
  while (e < end) {
    int64_t run = end - e;
    Span s{e, 0, {}};
    s.offsets.reserve(regions.size());
    for (const Region* r : regions) {
      const int64_t row = r->row_len == 0 ? 0 : e / r->row_len;
      const int64_t col = r->row_len == 0 ? 0 : e % r->row_len;
      s.offsets.push_back(r->offset + row * r->stride + col);
      // A region whose stride equals its row length is contiguous across rows.
      if (r->rows > 1 && r->stride != r->row_len) run = std::min(run, r->row_len - col);
    }
    s.len = run;
    out.push_back(std::move(s));
    e += run;
  }
  return out;
}

int64_t max_rank_elems(const Spec& spec) {
  std::vector<int64_t> src(static_cast<size_t>(spec.world), 0), dst(static_cast<size_t>(spec.world), 0);
  for (const auto& ch : spec.chunks) {
    for (const auto& p : ch.sources) src[p.rank] += ch.numel();
    for (const auto& p : ch.dests) dst[p.rank] += ch.numel();
  }
  int64_t most = 0;
  for (int r = 0; r < spec.world; ++r) most = std::max({most, src[r], dst[r]});
  return most;
}

int64_t max_chunk_elems(const Spec& spec) {
  int64_t most = 0;
  for (const auto& ch : spec.chunks) most = std::max(most, ch.numel());
  return most;
}

}  // namespace purlin::snac
