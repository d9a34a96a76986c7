// protocol_settings.h — what a CUDA group agreed at setup that every
// protocol choice reads (NOTE [protocol choice] in lowering/protocol_choice.h):
// the world, the workspace, the flagged-line and parity regions and their
// places after the pad, the line format and the architecture's launch table.
// Torch-free and CUDA-runtime-free.
#pragma once

#include <cstdint>

#include "atom/cuda/protocol/launch_config.h"
#include "atom/cuda/signal_pad.h"

namespace purlin::atom::cuda {

// Which flagged lines a group runs (TORCH_PURLIN_CUDA_LINE_FORMAT): narrow
// only, wide wherever a plan allows, or auto (wide where they measured
// faster: NOTE [wide lines]). Numbered for the setup exchange.
enum class LineFormat : int { Narrow = 0, Wide = 1, Auto = 2 };

// The group's settings the choice depends on, agreed at setup (the same on every rank).
struct ProtocolSettings {
  int world = 1;
  int64_t workspace_bytes = 0;   // both slots of the workspace
  int64_t line_max_bytes = 0;    // per-rank bytes up to which line plans may run; 0: none
  int64_t parity_max_bytes = 0;  // ... parity plans; 0: none
  LineFormat line_format = LineFormat::Narrow;
  PadLayout layout;              // the regions' sizes (line_half, wide_half, parity_half)
  LaunchConfig config;           // the architecture's table (blocks by size, wide-line sizes)
  // NOTE [push], NOTE [matched waits]: the product always pushes and matches
  // (every measurement favoured both); the emulator also runs without.
  bool push_copies = true, push_reductions = true, push_reduced = true;
  bool match_waits = true;

  // Payload elements of `esize` bytes one parity of the (wide-)line region holds.
  int64_t line_slot_elems(int64_t esize, bool wide) const;
  // Elements one half of the parity region holds.
  int64_t parity_slot_elems(int64_t esize) const { return layout.parity_half / esize; }
};

// NOTE [line plans], [wide lines], [parity plans]: the regions' places and
// sizes after the pad and a workspace of `workspace_bytes`. Each parity (half)
// holds every rank's contribution of the largest collective it serves plus the
// planner's alignment of each piece: two parities of narrow lines (16 bytes
// per 8 of payload), a wide-line region too unless the format is narrow (128
// per 120), then two halves of plain data for parity plans, apart from the line
// regions (plain data there could pass for a line). 0 bytes: no region.
void lay_out_regions(PadLayout* layout, int64_t workspace_bytes, int64_t line_max_bytes, bool wide_lines,
                     int64_t parity_max_bytes);

// The settings of a group agreed on these values (tests, probes; the workspace
// makes its own at setup).
ProtocolSettings make_protocol_settings(int world, int64_t workspace_bytes, int64_t line_max_bytes,
                                        int64_t parity_max_bytes, LineFormat format, const LaunchConfig& config);

}  // namespace purlin::atom::cuda
