// protocol_settings.cc — see protocol_settings.h.
#include "atom/cuda/protocol/protocol_settings.h"

#include "atom/cuda/device/plan_format.h"

namespace purlin::atom::cuda {

int64_t ProtocolSettings::line_slot_elems(int64_t esize, bool wide) const {
  const int64_t payload = wide ? layout.wide_half / kWideLineBytes * kWidePayload : layout.line_half / 2;
  return payload / esize;
}

namespace {

// One parity (half) of a region: every rank's contribution of the largest
// collective it serves plus the planner's alignment (`align` payload bytes)
// of each piece, stored as `stored` bytes per `payload` bytes of it, rounded
// up to 4 KiB.
int64_t region_half_bytes(int64_t world, int64_t max_bytes, int64_t align, int64_t stored, int64_t payload) {
  const int64_t bytes = world * max_bytes + world * world * align;
  return ((bytes + payload - 1) / payload * stored + 4095) / 4096 * 4096;
}

}  // namespace

void lay_out_regions(PadLayout* l, int64_t workspace_bytes, int64_t line_max, bool wide_lines, int64_t parity_max) {
  const int64_t world = l->world;
  if (line_max > 0) {
    l->line_half = region_half_bytes(world, line_max, kPartBytes, 2, 1);
    l->line_offset = l->pad_bytes() + workspace_bytes;
    if (wide_lines) {
      l->wide_half = region_half_bytes(world, line_max, kWideAlignBytes, kWideLineBytes, kWidePayload);
      l->wide_offset = l->line_offset + 2 * l->line_half;
    }
  }
  if (parity_max > 0) {
    l->parity_half = region_half_bytes(world, parity_max, kPartBytes, 1, 1);
    l->parity_offset = l->pad_bytes() + workspace_bytes + 2 * l->line_half + 2 * l->wide_half;
  }
}

ProtocolSettings make_protocol_settings(int world, int64_t workspace_bytes, int64_t line_max_bytes,
                                        int64_t parity_max_bytes, LineFormat format, const LaunchConfig& config) {
  ProtocolSettings s;
  s.world = world;
  s.workspace_bytes = workspace_bytes;
  s.line_max_bytes = line_max_bytes;
  s.parity_max_bytes = parity_max_bytes;
  s.line_format = format;
  s.layout = PadLayout{world, kMaxBlocks};
  lay_out_regions(&s.layout, workspace_bytes, line_max_bytes, format != LineFormat::Narrow, parity_max_bytes);
  s.config = config;
  return s;
}

}  // namespace purlin::atom::cuda
