"""Collectives named by layouts: a logical tensor, each rank's input and output
pieces of it, copy or reduce -> a validated, cached Spec.

A *layout* says which part of one logical tensor a rank holds and where each of
its elements lives in that rank's flat buffer:

    Shard(dim)                   the rank's share along `dim` (torch.chunk sizes,
    Shard(dim, sizes=[...])      or the given per-rank sizes, zeros allowed),
                                 stored contiguously;
    Replicate()                  the whole tensor, stored contiguously;
    Partial()                    (inputs of a reduction) a whole-size contribution;
    Piece(offsets, sizes, strides=None, offset=0)
                                 a box of the logical tensor (`offsets` / `sizes`
                                 per dim) stored at element offset + sum(i_k *
                                 strides[k]) of the buffer (row-major by default),
                                 as a CuTe layout shape:stride.

`inputs` and `outputs` are a placement or a Piece every rank shares, or one entry per rank:
None (holds nothing), a Piece, a placement, or a list of Pieces.

    spec = collective("ulysses", (S, H, D), inputs=Shard(0), outputs=Shard(1), world=W)
    torch_purlin.run_spec(spec, x, out)       # x: [S/W, H, D] -> out: [S, H/W, D]

With op=None every element an output piece holds comes from the one input piece
holding it; with op (a ReduceOp) it is the reduction over every rank whose input
holds it. The Spec's chunks are the cells of the grid cut by every piece's
boundaries, in row-major order of the logical tensor, sources and dests in rank
order (so a built-in restated gives the built-in's Spec); a cell that one 2-D
Region cannot express in some buffer becomes several chunks
(NOTE [lowering to regions]). Specs are cached by their arguments.
"""
import bisect
import functools
import itertools
import math
from dataclasses import dataclass
from typing import Optional, Tuple

import torch
import torch.distributed as dist

from . import _C

# A lowering beyond this many chunks is refused (a layout the 2-D regions cannot
# follow, e.g. a transposed piece, would move one element per chunk).
MAX_CHUNKS = 1 << 16


class LayoutError(ValueError):
    """A layout that does not name a collective; the message names the rank, the dim and what does not match."""


class TooManyChunks(LayoutError):
    """The lowering would need more chunks than allowed (max_chunks)."""


@dataclass(frozen=True)
class Shard:
    """The rank's share of the logical tensor along `dim`: torch.chunk sizes, or `sizes` (one per rank)."""
    dim: int
    sizes: Optional[Tuple[int, ...]] = None

    def __post_init__(self):
        if self.sizes is not None:
            object.__setattr__(self, "sizes", tuple(int(s) for s in self.sizes))


@dataclass(frozen=True)
class Replicate:
    """The whole logical tensor on every rank."""


@dataclass(frozen=True)
class Partial:
    """(Inputs of a reduction) a whole-size contribution on every rank."""


@dataclass(frozen=True)
class Piece:
    """A box of the logical tensor (`offsets`, `sizes` per dim) stored at element
    `offset + sum(i_k * strides[k])` of the rank's flat buffer (strides: row-major when None)."""
    offsets: Tuple[int, ...]
    sizes: Tuple[int, ...]
    strides: Optional[Tuple[int, ...]] = None
    offset: int = 0

    def __post_init__(self):
        object.__setattr__(self, "offsets", tuple(int(x) for x in self.offsets))
        object.__setattr__(self, "sizes", tuple(int(x) for x in self.sizes))
        if self.strides is None:
            strides, run = [], 1
            for s in reversed(self.sizes):
                strides.append(run)
                run *= max(s, 1)
            object.__setattr__(self, "strides", tuple(reversed(strides)))
        else:
            object.__setattr__(self, "strides", tuple(int(x) for x in self.strides))
        object.__setattr__(self, "offset", int(self.offset))


_REDOPS = {"SUM": _C.RedOp.SUM, "AVG": _C.RedOp.AVG, "PRODUCT": _C.RedOp.PRODUCT, "MIN": _C.RedOp.MIN,
           "MAX": _C.RedOp.MAX}


def redop_of(op):
    """The native reduction of `op`: a torch.distributed ReduceOp, a RedOp or its name ("sum", ...)."""
    if isinstance(op, _C.RedOp):
        return op
    name = op.upper() if isinstance(op, str) else getattr(op, "name", None)
    if name is None:
        for n in _REDOPS:
            if op == getattr(dist.ReduceOp, n):
                name = n
    if name not in _REDOPS:
        raise LayoutError(f"reduce op {op!r} is not supported by custom collectives (sum, avg, product, min, max)")
    return _REDOPS[name]


def collective(name, shape, inputs, outputs, world, op=None, max_chunks=MAX_CHUNKS):
    """The Spec of the collective that moves (op=None) or reduces (op) the logical
    tensor of `shape` from the `inputs` layout into the `outputs` layout over
    `world` ranks. Raises LayoutError naming the rank, the dim and what is wrong."""
    shape = tuple(int(s) for s in shape)
    redop = None if op is None else redop_of(op)
    return _build(str(name), shape, _key(inputs), _key(outputs), int(world), redop, int(max_chunks))


def _key(side):
    # Hashable form of a layout argument (the cache key).
    if isinstance(side, (Shard, Replicate, Partial, Piece)):
        return side
    return tuple(tuple(e) if isinstance(e, (list, tuple)) else e for e in side)


@functools.lru_cache(maxsize=256)
def _build(name, shape, inputs, outputs, world, redop, max_chunks):
    if world < 1:
        raise LayoutError(f"collective '{name}': world size {world} must be >= 1")
    for d, s in enumerate(shape):
        if s < 0:
            raise LayoutError(f"collective '{name}': dim {d} of the logical shape {shape} is negative")
    ins = _pieces(name, "input", inputs, shape, world, redop)
    outs = _pieces(name, "output", outputs, shape, world, redop)
    for side, per_rank in (("input", ins), ("output", outs)):
        for r, ps in enumerate(per_rank):
            _check_disjoint(name, side, r, ps, shape)
    _check_storage(name, outs)
    return _chunks(name, shape, ins, outs, world, redop, max_chunks)


def _pieces(name, side, arg, shape, world, redop):
    """Per rank, its list of Pieces (validated against `shape`)."""
    n = len(shape)
    if isinstance(arg, (Shard, Replicate, Partial, Piece)):
        entries = [arg] * world
    else:
        if len(arg) != world:
            raise LayoutError(f"collective '{name}': {side}s name {len(arg)} ranks, the world has {world}")
        entries = list(arg)
    out = []
    for r, e in enumerate(entries):
        where = f"collective '{name}': rank {r}'s {side}"
        if isinstance(e, Partial):
            if side == "output":
                raise LayoutError(f"{where}: Partial() describes inputs of a reduction, not outputs")
            if redop is None:
                raise LayoutError(f"{where}: Partial() needs a reduce op (op=...)")
            e = Piece((0,) * n, shape)
        elif isinstance(e, Replicate):
            if side == "input" and redop is not None:
                raise LayoutError(f"{where}: Replicate() inputs hold equal values; a reduction of them "
                                  "takes Partial() inputs")
            e = Piece((0,) * n, shape)
        elif isinstance(e, Shard):
            e = _shard_piece(where, e, shape, world, r)
        ps = [] if e is None else list(e) if isinstance(e, tuple) else [e]
        for i, p in enumerate(ps):
            if not isinstance(p, Piece):
                raise LayoutError(f"{where}: entry {i} is {p!r}, not a Piece")
            _check_piece(f"{where} piece {i}", p, shape)
        out.append(ps)
    return out


def _shard_piece(where, s, shape, world, r):
    n = len(shape)
    if not -n <= s.dim < n:
        raise LayoutError(f"{where}: Shard dim {s.dim} is outside the logical tensor's {n} dims")
    d = s.dim % n
    if s.sizes is None:
        step = -(-shape[d] // world) if world else 0
        sizes = [max(0, min(step, shape[d] - k * step)) for k in range(world)]
    else:
        sizes = list(s.sizes)
        if len(sizes) != world or any(x < 0 for x in sizes):
            raise LayoutError(f"{where}: Shard({d}) sizes {sizes} must be {world} non-negative sizes")
        if sum(sizes) != shape[d]:
            raise LayoutError(f"{where}: Shard({d}) sizes sum to {sum(sizes)}, dim {d} of the logical tensor "
                              f"has {shape[d]}")
    start = sum(sizes[:r])
    return Piece(tuple(start if k == d else 0 for k in range(n)),
                 tuple(sizes[r] if k == d else shape[k] for k in range(n)))


def _check_piece(where, p, shape):
    n = len(shape)
    if not len(p.offsets) == len(p.sizes) == len(p.strides) == n:
        raise LayoutError(f"{where}: offsets {p.offsets}, sizes {p.sizes} and strides {p.strides} must each "
                          f"have {n} entries (the logical tensor's dims)")
    if p.offset < 0:
        raise LayoutError(f"{where}: storage offset {p.offset} is negative")
    for d in range(n):
        if p.sizes[d] < 0 or p.offsets[d] < 0 or p.offsets[d] + p.sizes[d] > shape[d]:
            raise LayoutError(f"{where}: dim {d} spans [{p.offsets[d]}, {p.offsets[d] + p.sizes[d]}), outside "
                              f"the logical tensor's [0, {shape[d]})")
        if p.strides[d] < 1 and p.sizes[d] > 1:
            raise LayoutError(f"{where}: dim {d} has stride {p.strides[d]}; strides must be positive")


def _numel(sizes):
    return math.prod(sizes)


def _check_disjoint(name, side, r, ps, shape):
    # Two pieces of one rank holding the same logical element: the rank would be
    # a source twice (inputs) or receive one element twice (outputs).
    for i, j in itertools.combinations(range(len(ps)), 2):
        a, b = ps[i], ps[j]
        lo = [max(a.offsets[d], b.offsets[d]) for d in range(len(shape))]
        hi = [min(a.offsets[d] + a.sizes[d], b.offsets[d] + b.sizes[d]) for d in range(len(shape))]
        if all(l < h for l, h in zip(lo, hi)):
            raise LayoutError(f"collective '{name}': rank {r}'s {side} pieces {i} and {j} overlap: both hold the "
                              f"logical elements from {tuple(lo)} to {tuple(h - 1 for h in hi)}")


def _extent(p):
    if _numel(p.sizes) == 0:
        return p.offset, p.offset
    return p.offset, p.offset + sum((s - 1) * t for s, t in zip(p.sizes, p.strides)) + 1


def _check_storage(name, outs):
    # NOTE [one place per output element] Two output elements of a rank stored at
    # one address would leave one of them unwritten. A piece whose dims, ordered
    # by stride, each step past the previous ones' extent is self-disjoint; pieces
    # whose storage extents are disjoint are disjoint; only pieces whose extents
    # interleave are compared element by element.
    for r, ps in enumerate(outs):
        for i, p in enumerate(ps):
            dims = sorted((t, s) for s, t in zip(p.sizes, p.strides) if s > 1)
            reach = 1
            for t, s in dims:
                if t < reach:
                    raise LayoutError(f"collective '{name}': rank {r}'s output piece {i}: strides {p.strides} store "
                                      f"several elements of sizes {p.sizes} at one place")
                reach = t * (s - 1) + reach
        spans = sorted(_extent(p) for p in ps if _numel(p.sizes))
        if any(b0 < a1 for (_, a1), (b0, _) in zip(spans, spans[1:])):
            seen = torch.zeros(max(e for _, e in spans), dtype=torch.int32)
            for p in ps:
                seen.as_strided(p.sizes, p.strides, p.offset).add_(1)
            if int(seen.max()) > 1:
                raise LayoutError(f"collective '{name}': rank {r}'s output pieces store two elements at one place "
                                  f"(element {int((seen > 1).nonzero()[0])} of its buffer)")


# NOTE [lowering to regions] A cell (a box of the logical tensor inside one piece
# of every rank touching it) is walked in row-major order in every buffer; a
# Region is `rows` runs of `row_len` contiguous elements `stride` apart. Per
# buffer, the cell's dims (those of size > 1) merge from the innermost while a
# dim's stride is the merged run's extent; the cell is one Region there when at
# most two merged dims remain, the inner one of stride 1 (or one dim of any
# stride, as rows of one element). Otherwise the outermost dims are enumerated
# (the fewest that make every buffer's remainder one Region), one chunk each.
def _region(sizes, strides, dims, base):
    merged = []  # (size, stride), innermost first
    for d in reversed(dims):
        if merged and strides[d] == merged[-1][0] * merged[-1][1]:
            merged[-1] = (merged[-1][0] * sizes[d], merged[-1][1])
        else:
            merged.append((sizes[d], strides[d]))
    if not merged:
        return (base, 1, 1, 1)
    if len(merged) == 1:
        s, t = merged[0]
        return (base, 1, s, s) if t == 1 else (base, s, 1, t)
    if len(merged) == 2 and merged[0][1] == 1 and merged[1][1] >= merged[0][0]:
        return (base, merged[1][0], merged[0][0], merged[1][1])
    return None


def _lower(lo, sizes, places):
    """Chunks (as lists of (rank, region tuple) per place) of the cell at `lo` of `sizes`."""
    dims = [d for d in range(len(sizes)) if sizes[d] > 1]
    bases = [p.offset + sum((lo[d] - p.offsets[d]) * p.strides[d] for d in range(len(sizes))) for _, p in places]
    for k in range(len(dims) + 1):
        if all(_region(sizes, p.strides, dims[k:], 0) is not None for _, p in places):
            break
    outer = dims[:k]
    out = []
    for idx in itertools.product(*(range(sizes[d]) for d in outer)):
        out.append([_region(sizes, p.strides, dims[k:], b + sum(i * p.strides[d] for i, d in zip(idx, outer)))
                    for (_, p), b in zip(places, bases)])
    return out


def _chunks(name, shape, ins, outs, world, redop, max_chunks):
    n = len(shape)
    cuts = [{0, shape[d]} for d in range(n)]
    for per_rank in (ins, outs):
        for ps in per_rank:
            for p in ps:
                for d in range(n):
                    cuts[d].update((p.offsets[d], p.offsets[d] + p.sizes[d]))
    cuts = [sorted(c) for c in cuts]

    def cover(per_rank):
        cells = {}
        for r, ps in enumerate(per_rank):
            for p in ps:
                ranges = [range(bisect.bisect_left(cuts[d], p.offsets[d]),
                                bisect.bisect_left(cuts[d], p.offsets[d] + p.sizes[d])) for d in range(n)]
                for cell in itertools.product(*ranges):
                    cells.setdefault(cell, []).append((r, p))
        return cells

    srcs, dsts = cover(ins), cover(outs)
    chunks = []
    for cell in sorted(dsts):
        lo = tuple(cuts[d][cell[d]] for d in range(n))
        sizes = tuple(cuts[d][cell[d] + 1] - cuts[d][cell[d]] for d in range(n))
        if _numel(sizes) == 0:
            continue
        sources = sorted(srcs.get(cell, []), key=lambda e: e[0])
        dests = sorted(dsts[cell], key=lambda e: e[0])
        if not sources:
            raise LayoutError(f"collective '{name}': gap: logical element {lo} is in rank {dests[0][0]}'s output "
                              "but in no rank's input")
        if redop is None and len(sources) > 1:
            raise LayoutError(f"collective '{name}': overlap: ranks {sources[0][0]} and {sources[1][0]} both hold "
                              f"logical element {lo} in their inputs; a copy takes each element from one rank "
                              "(or pass op= to reduce)")
        places = sources + dests
        for regions in _lower(lo, sizes, places):
            chunks.append(_C.Chunk(
                sources=[_C.Placement(r, _C.Region(*g)) for (r, _), g in zip(sources, regions)],
                dests=[_C.Placement(r, _C.Region(*g)) for (r, _), g in zip(dests, regions[len(sources):])]))
            if len(chunks) > max_chunks:
                raise TooManyChunks(f"collective '{name}': the layouts need more than {max_chunks} chunks (pieces "
                                    "whose strides do not run row-major split into one chunk per row)")
    try:
        if redop is None:
            return _C.Spec(name=name, kind=_C.OpKind.COPY, world=world, chunks=chunks)
        return _C.Spec(name=name, kind=_C.OpKind.REDUCE, world=world, chunks=chunks, redop=redop)
    except ValueError as e:
        raise LayoutError(str(e)) from None
