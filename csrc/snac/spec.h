// spec.h — the Semantics layer: a collective named by layouts and an operation.
//
// A collective is a set of logical *chunks*. Each chunk has
//   - sources: the (rank, region of that rank's input) holding a contribution,
//   - dests:   the (rank, region of that rank's output) that receive the result,
// and the collective's operation says what a destination receives:
//   Copy   — the chunk has exactly one source; every dest gets a copy of it.
//   Reduce — every source contributes; every dest gets the elementwise reduction
//            of all sources, combined in ascending source order (so every dest
//            gets bit-identical values).
// Regions are 2-D strided views in elements: `rows` rows of `row_len` elements,
// row i starting at offset + i*stride. A chunk's elements are numbered row-major
// through each of its regions, so a strided output (interleaved all-gather) is a
// plain spec. No torch types here: this header is shared by every layer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/types.h"

namespace purlin::snac {

using purlin::RedOp;

enum class OpKind : uint8_t { Copy = 0, Reduce = 1 };

struct Region {
  int64_t offset = 0;   // first element
  int64_t rows = 1;     // number of rows
  int64_t row_len = 0;  // elements per row
  int64_t stride = 0;   // elements between row starts (>= row_len when rows > 1)

  int64_t numel() const { return rows * row_len; }
  // Element one past the last one touched (for bounds checks).
  int64_t extent_end() const { return rows == 0 || row_len == 0 ? offset : offset + (rows - 1) * stride + row_len; }
  static Region contiguous(int64_t offset, int64_t n) { return Region{offset, 1, n, n}; }
};

struct Placement {
  int rank = 0;
  Region region;
};

struct Chunk {
  std::vector<Placement> sources;
  std::vector<Placement> dests;
  int64_t numel() const;
};

struct Spec {
  std::string name;   // "all_reduce", or a user's name for a custom collective
  OpKind kind = OpKind::Copy;
  RedOp redop = RedOp::Sum;  // meaningful when kind == Reduce
  int world = 1;
  std::vector<Chunk> chunks;
  // Elements each rank's input / output must hold (derived by finalize()).
  std::vector<int64_t> input_numel;
  std::vector<int64_t> output_numel;

  // Checks the spec is well formed (throws std::invalid_argument naming the
  // chunk and what is wrong) and derives input_numel / output_numel.
  void finalize();
};

// A maximal run of elements that is contiguous in every region of a group of
// regions walked in lock-step: element `first` of the chunk maps to
// offsets[k] in region k, for `len` consecutive elements.
// The most elements any one rank sends (as a source) or receives (as a
// destination) in `spec`: a size every rank derives alike, unlike its own
// tensor sizes (a scatter's root holds W blocks of input, its peers none).
int64_t max_rank_elems(const Spec& spec);
// The elements of `spec`'s largest chunk: the most one op of a one-round plan
// moves (rank-invariant, as max_rank_elems).
int64_t max_chunk_elems(const Spec& spec);

struct Span {
  int64_t first;
  int64_t len;
  std::vector<int64_t> offsets;
};

// Walks elements [begin, end) of a chunk through `regions` (all of numel >=
// end) and returns the contiguous runs common to all of them.
std::vector<Span> common_spans(const std::vector<const Region*>& regions, int64_t begin, int64_t end);

}  // namespace purlin::snac
