// collectives.cc — built-in collectives as layouts + an operation.
#include "snac/collectives.h"

namespace purlin::snac {

namespace {
Spec make(const char* name, OpKind kind, int world, RedOp op = RedOp::Sum) {
  Spec s;
  s.name = name;
  s.kind = kind;
  s.redop = op;
  s.world = world;
  return s;
}
Placement at(int rank, int64_t offset, int64_t n) { return Placement{rank, Region::contiguous(offset, n)}; }
}  // namespace

Spec all_reduce(int world, int64_t n, RedOp op) {
  Spec s = make("all_reduce", OpKind::Reduce, world, op);
  Chunk c;
  for (int r = 0; r < world; ++r) {
    c.sources.push_back(at(r, 0, n));
    c.dests.push_back(at(r, 0, n));
  }
  s.chunks.push_back(c);
  s.finalize();
  return s;
}

Spec reduce(int world, int64_t n, RedOp op, int root) {
  Spec s = make("reduce", OpKind::Reduce, world, op);
  Chunk c;
  for (int r = 0; r < world; ++r) c.sources.push_back(at(r, 0, n));
  c.dests.push_back(at(root, 0, n));
  s.chunks.push_back(c);
  s.finalize();
  return s;
}

Spec broadcast(int world, int64_t n, int root) {
  Spec s = make("broadcast", OpKind::Copy, world);
  Chunk c;
  c.sources.push_back(at(root, 0, n));
  for (int r = 0; r < world; ++r)
    if (r != root) c.dests.push_back(at(r, 0, n));
  s.chunks.push_back(c);
  s.finalize();
  return s;
}

Spec all_gather(int world, int64_t n) {
  Spec s = make("all_gather", OpKind::Copy, world);
  for (int src = 0; src < world; ++src) {
    Chunk c;
    c.sources.push_back(at(src, 0, n));
    for (int d = 0; d < world; ++d) c.dests.push_back(at(d, src * n, n));
    s.chunks.push_back(c);
  }
  s.finalize();
  return s;
}

Spec reduce_scatter(int world, int64_t n, RedOp op) {
  Spec s = make("reduce_scatter", OpKind::Reduce, world, op);
  for (int d = 0; d < world; ++d) {
    Chunk c;
    for (int src = 0; src < world; ++src) c.sources.push_back(at(src, d * n, n));
    c.dests.push_back(at(d, 0, n));
    s.chunks.push_back(c);
  }
  s.finalize();
  return s;
}

Spec all_to_all(int world, const std::vector<std::vector<int64_t>>& splits) {
  Spec s = make("all_to_all", OpKind::Copy, world);
  std::vector<int64_t> out_off(world, 0);
  for (int src = 0; src < world; ++src) {
    int64_t in_off = 0;
    for (int d = 0; d < world; ++d) {
      const int64_t n = splits[src][d];
      Chunk c;
      c.sources.push_back(at(src, in_off, n));
      c.dests.push_back(at(d, out_off[d], n));
      s.chunks.push_back(c);
      in_off += n;
      out_off[d] += n;
    }
  }
  s.finalize();
  return s;
}

Spec gather(int world, int64_t n, int root) {
  Spec s = make("gather", OpKind::Copy, world);
  for (int src = 0; src < world; ++src) {
    Chunk c;
    c.sources.push_back(at(src, 0, n));
    c.dests.push_back(at(root, src * n, n));
    s.chunks.push_back(c);
  }
  s.finalize();
  return s;
}

Spec scatter(int world, int64_t n, int root) {
  Spec s = make("scatter", OpKind::Copy, world);
  for (int d = 0; d < world; ++d) {
    Chunk c;
    c.sources.push_back(at(root, d * n, n));
    c.dests.push_back(at(d, 0, n));
    s.chunks.push_back(c);
  }
  s.finalize();
  return s;
}

Spec barrier(int world) {
  Spec s = make("barrier", OpKind::Copy, world);
  s.finalize();
  return s;
}

Spec interleaved_all_gather(int world, int64_t rows, int64_t row_len) {
  Spec s = make("interleaved_all_gather", OpKind::Copy, world);
  for (int src = 0; src < world; ++src) {
    Chunk c;
    c.sources.push_back(at(src, 0, rows * row_len));
    for (int d = 0; d < world; ++d)
      c.dests.push_back(Placement{d, Region{src * row_len, rows, row_len, world * row_len}});
    s.chunks.push_back(c);
  }
  s.finalize();
  return s;
}

}  // namespace purlin::snac
