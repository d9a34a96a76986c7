// collectives.h — every built-in collective written as a Spec.
//
// These builders are the whole definition of each collective's semantics:
// nothing downstream (SNAC, Atoms, backend) knows which collective it runs.
// Sizes are in elements. Buffers are flat; list-of-tensor c10d variants are
// flattened by the backend.
#pragma once

#include <cstdint>
#include <vector>

#include "snac/spec.h"

namespace purlin::snac {

// Every rank: n in -> n out, reduced over all ranks.
Spec all_reduce(int world, int64_t n, RedOp op);
// Every rank: n in; root: n out, reduced over all ranks.
Spec reduce(int world, int64_t n, RedOp op, int root);
// Root's n elements copied to every other rank (in place on the root).
Spec broadcast(int world, int64_t n, int root);
// Every rank: n in -> world*n out, rank r's block at r*n.
Spec all_gather(int world, int64_t n);
// Every rank: world*n in -> n out; rank r gets block r reduced over ranks.
Spec reduce_scatter(int world, int64_t n, RedOp op);
// splits[s][d] elements go from rank s to rank d; inputs are laid out by
// destination, outputs by source, each in rank order.
Spec all_to_all(int world, const std::vector<std::vector<int64_t>>& splits);
// Every rank: n in; root: world*n out.
Spec gather(int world, int64_t n, int root);
// Root: world*n in; every rank: n out.
Spec scatter(int world, int64_t n, int root);
// No data: only the arrival handshake synchronises.
Spec barrier(int world);

// Example of a user-defined collective (also exposed to Python): every rank
// contributes `rows` rows of `row_len` elements; every output interleaves the
// ranks' rows: output row (i*world + r) = rank r's row i.
Spec interleaved_all_gather(int world, int64_t rows, int64_t row_len);

}  // namespace purlin::snac
