"""Collectives named by layouts (torch_purlin.layouts): every built-in restated as
layouts gives the built-in's Spec and plans at worlds 1..8; random layouts lowered to
Regions move the right elements (a Spec interpreter over flat buffers checks them
against the logical tensor); errors name the rank, the dim and what does not match.

    python -m pytest test/unit/test_layouts.py -q
"""
import itertools
import random

import pytest
import torch

import torch_purlin
from torch_purlin import Chunk, OpKind, Placement, RedOp, Region, Spec, make_plan, specs
from torch_purlin.layouts import LayoutError, Partial, Piece, Replicate, Shard, TooManyChunks, collective
from torch_purlin.app_collectives import _a2a_dims_spec, _moe_layouts  # noqa: E402


def restated(name, W, n, root=0, op=RedOp.SUM, splits=None):
    """The built-in `name` written as layouts."""
    at_root = [Replicate() if r == root else None for r in range(W)]
    if name == "all_reduce":
        return collective(name, (n,), Partial(), Replicate(), W, op=op)
    if name == "reduce":
        return collective(name, (n,), Partial(), at_root, W, op=op)
    if name == "broadcast":
        return collective(name, (n,), at_root, [None if r == root else Replicate() for r in range(W)], W)
    if name == "all_gather":
        return collective(name, (W * n,), Shard(0), Replicate(), W)
    if name == "reduce_scatter":
        return collective(name, (W * n,), Partial(), Shard(0), W, op=op)
    if name == "gather":
        return collective(name, (W * n,), Shard(0), at_root, W)
    if name == "scatter":
        return collective(name, (W * n,), at_root, Shard(0), W)
    if name == "barrier":
        return collective(name, (0,), Shard(0), Shard(0), W)
    if name == "interleaved_all_gather":
        return collective(name, (3, W, n), Shard(1), Replicate(), W)
    assert name == "all_to_all"
    # The logical tensor lists the blocks source-major; rank d's output holds
    # block (s, d) of every s, in source order.
    start = list(itertools.accumulate([splits[s][d] for s in range(W) for d in range(W)], initial=0))
    total = start[-1]
    ins = [Piece((start[s * W],), (sum(splits[s]),)) for s in range(W)]
    outs = []
    for d in range(W):
        ps, off = [], 0
        for s in range(W):
            ps.append(Piece((start[s * W + d],), (splits[s][d],), offset=off))
            off += splits[s][d]
        outs.append(ps)
    return collective(name, (total,), ins, outs, W)


def builtin(name, W, n, root=0, op=RedOp.SUM, splits=None):
    return {
        "all_reduce": lambda: specs.all_reduce(W, n, op), "reduce": lambda: specs.reduce(W, n, op, root),
        "broadcast": lambda: specs.broadcast(W, n, root), "all_gather": lambda: specs.all_gather(W, n),
        "reduce_scatter": lambda: specs.reduce_scatter(W, n, op), "gather": lambda: specs.gather(W, n, root),
        "scatter": lambda: specs.scatter(W, n, root), "barrier": lambda: specs.barrier(W),
        "all_to_all": lambda: specs.all_to_all(W, splits),
        "interleaved_all_gather": lambda: specs.interleaved_all_gather(W, 3, n),
    }[name]()


def regions(spec):
    """The Spec's chunks that move something, as tuples (a region whose rows abut is contiguous;
    a chunk without dests, as broadcast's at world 1, plans nothing)."""
    def reg(p):
        g = p.region
        if g.rows == 1 or g.stride == g.row_len:
            return (p.rank, g.offset, 1, g.numel(), None)
        return (p.rank, g.offset, g.rows, g.row_len, g.stride)
    return [(tuple(map(reg, c.sources)), tuple(map(reg, c.dests))) for c in spec.chunks if c.numel() and c.dests]


def plan_text(spec, rank, opts):
    try:
        return make_plan(spec, rank, **opts)["text"]
    except ValueError as e:  # a slot too small for the pieces of a round: the same refusal
        return str(e)


PLAN_OPTIONS = (
    dict(slot_elems=64),
    dict(slot_elems=16, align_elems=4, two_shot=True, push=True),
    dict(slot_elems=1 << 20, read_peer_inputs=True, two_shot=True),
    dict(slot_elems=8, direct_local=False),
)
BUILTINS = ("all_reduce", "reduce", "broadcast", "all_gather", "reduce_scatter", "all_to_all", "gather", "scatter",
            "barrier", "interleaved_all_gather")


@pytest.mark.parametrize("W", range(1, 9))
def test_builtins_restated_as_layouts_plan_alike(W):
    rng = random.Random(W)
    for name in BUILTINS:
        for n in (1, 7, 100):
            root = rng.randrange(W)
            op = rng.choice([RedOp.SUM, RedOp.MAX])
            splits = [[rng.choice([0, 1, n]) for _ in range(W)] for _ in range(W)]
            want, got = builtin(name, W, n, root, op, splits), restated(name, W, n, root, op, splits)
            what = f"{name} W={W} n={n} root={root}"
            assert (got.name, got.kind, got.redop, got.world) == (want.name, want.kind, want.redop, want.world), what
            assert regions(got) == regions(want), what
            if all(c.dests for c in want.chunks):
                assert (got.input_numel, got.output_numel) == (want.input_numel, want.output_numel), what
            for opts, r in itertools.product(PLAN_OPTIONS, range(W)):
                assert plan_text(got, r, opts) == plan_text(want, r, opts), (what, opts, r)


def test_specs_are_cached():
    a = collective("ag", (8, 3), Shard(0), Replicate(), 4)
    assert collective("ag", (8, 3), Shard(0), Replicate(), 4) is a
    assert collective("ag", (8, 3), [Shard(0)] * 4, Replicate(), 4) is not a  # another spelling, an equal Spec
    assert regions(collective("ag", (8, 3), [Shard(0)] * 4, Replicate(), 4)) == regions(a)


# ---------------------------------------------------------------- lowering, checked by a Spec interpreter

def interpret(spec, inputs, outputs):
    """Runs `spec` on flat per-rank tensors in one process (reductions: sum)."""
    def elems(buf, g):
        idx = torch.arange(g.row_len).repeat(g.rows) + (torch.arange(g.rows) * g.stride).repeat_interleave(g.row_len)
        return buf, g.offset + idx
    for c in spec.chunks:
        vals = [b[i] for b, i in (elems(inputs[p.rank], p.region) for p in c.sources)]
        val = vals[0] if spec.kind == OpKind.COPY else sum(vals[1:], vals[0].clone())
        for p in c.dests:
            buf, i = elems(outputs[p.rank], p.region)
            buf[i] = val


def store(logical, piece, size):
    """A flat buffer of `size` holding `piece` of `logical` at its strides (the rest -1)."""
    buf = torch.full((size,), -1, dtype=logical.dtype)
    box = logical[tuple(slice(o, o + s) for o, s in zip(piece.offsets, piece.sizes))]
    buf.as_strided(piece.sizes, piece.strides, piece.offset).copy_(box)
    return buf


def random_piece(rng, lo, sizes, offset):
    """A piece of the box stored at `offset` with dims in a random storage order (sometimes padded)."""
    order = list(range(len(sizes)))
    if rng.random() < 0.5:
        rng.shuffle(order)
    strides, run = [0] * len(sizes), 1
    for d in reversed(order):
        strides[d] = run
        run *= max(sizes[d], 1) + (rng.random() < 0.3)
    return Piece(lo, sizes, tuple(strides), offset)


def span(p):
    return p.offset + sum((s - 1) * t for s, t in zip(p.sizes, p.strides)) + 1 if all(p.sizes) else p.offset


@pytest.mark.parametrize("seed", range(40))
def test_random_layouts_move_the_right_elements(seed):
    rng = random.Random(seed)
    W = rng.randint(1, 5)
    n = rng.randint(1, 4)
    shape = tuple(rng.randint(1, 6) for _ in range(n))
    logical = torch.arange(1, math_prod(shape) + 1, dtype=torch.int64).view(shape)
    # Inputs: the logical tensor cut into W uneven boxes along a random dim (a copy), or whole (a sum).
    reduce = rng.random() < 0.3
    d_in = rng.randrange(n)
    cuts = sorted(rng.randint(0, shape[d_in]) for _ in range(W - 1))
    bounds = [0] + cuts + [shape[d_in]]
    ins = []
    for r in range(W):
        lo = tuple(0 if reduce or k != d_in else bounds[r] for k in range(n))
        sz = tuple(shape[k] if reduce or k != d_in else bounds[r + 1] - bounds[r] for k in range(n))
        ins.append(random_piece(rng, lo, sz, rng.randint(0, 3)))
    # Outputs: every rank gets a random box, in one or two pieces cut along another dim.
    outs = []
    for r in range(W):
        lo = tuple(rng.randint(0, s - 1) for s in shape)
        sz = tuple(rng.randint(1, s - o) for s, o in zip(shape, lo))
        d = rng.randrange(n)
        if sz[d] > 1 and rng.random() < 0.5:
            k = rng.randint(1, sz[d] - 1)
            a = random_piece(rng, lo, tuple(k if j == d else sz[j] for j in range(n)), 1)
            b_lo = tuple(lo[j] + k if j == d else lo[j] for j in range(n))
            b = random_piece(rng, b_lo, tuple(sz[j] - k if j == d else sz[j] for j in range(n)), span(a) + 2)
            outs.append([a, b])
        else:
            outs.append([random_piece(rng, lo, sz, 0)])
    spec = collective(f"random{seed}", shape, ins, outs, W, op=RedOp.SUM if reduce else None)
    inputs = [store(logical, p, span(p) + 1) for p in ins]
    outputs = [torch.full((max(span(p) for p in ps) + 1,), -1, dtype=torch.int64) for ps in outs]
    interpret(spec, inputs, outputs)
    for r, ps in enumerate(outs):
        want = torch.full_like(outputs[r], -1)
        for p in ps:
            factor = W if reduce else 1
            want.as_strided(p.sizes, p.strides, p.offset).copy_(
                factor * logical[tuple(slice(o, o + s) for o, s in zip(p.offsets, p.sizes))])
        assert torch.equal(outputs[r], want), (seed, r, ps)


def math_prod(xs):
    out = 1
    for x in xs:
        out *= x
    return out


def test_all_to_all_dims_is_w_squared_chunks_of_2d_regions():
    for W, (X, s, g) in itertools.product((2, 4, 8), [((4, 8, 3), 1, 0), ((8, 4, 3), 0, 1), ((2, 8, 5, 3), 2, 0),
                                                      ((8, 3), 0, 0), ((3, 8, 2), 1, 1)]):
        X = tuple(x * (W if k == s else 1) for k, x in enumerate(X))
        si = torch.empty(X).stride()
        Y = list(X)
        Y[s] //= W
        Y[g] *= W
        so = torch.empty(Y).stride()
        spec = _a2a_dims_spec(X, s, g, W, si, so, 1 << 20)
        assert len(spec.chunks) == W * W, (W, X, s, g)
        # The semantics, by the interpreter: output = cat_r chunk(input_r, W, s)[me] along g.
        xs = [torch.randint(1, 1000, X) for _ in range(W)]
        outs = [torch.zeros(Y, dtype=torch.int64) for _ in range(W)]
        interpret(spec, [x.view(-1) for x in xs], [o.view(-1) for o in outs])
        for me in range(W):
            assert torch.equal(outs[me], torch.cat([x.chunk(W, s)[me] for x in xs], g)), (W, X, s, g, me)


def test_moe_dispatch_layout_is_expert_major():
    W, E, H = 3, 6, 2
    g = torch.Generator().manual_seed(5)
    counts = torch.randint(0, 4, (W, E), generator=g)
    counts[1, 2] = 0
    xs = [torch.randint(1, 100, (int(counts[s].sum()), H), generator=g) for s in range(W)]
    L = E // W
    want = [torch.cat([xs[s][counts[s, :e].sum():counts[s, :e + 1].sum()] for l in range(L) for s in range(W)
                       for e in [d * L + l]]) for d in range(W)]
    outs = [torch.zeros_like(w) for w in want]
    shape, by_expert, expert_major = _moe_layouts("moe_dispatch", 0, counts, W, xs[0], outs[0])
    spec = collective("moe_dispatch", shape, by_expert, expert_major, W)
    interpret(spec, [x.view(-1) for x in xs], [o.view(-1) for o in outs])
    for d in range(W):
        assert torch.equal(outs[d], want[d]), d


def test_halo_exchange_of_the_guide():
    # docs/CUSTOM_COLLECTIVES.md example 3: rank r gets its rows with one halo row above and below.
    N, C, W, R = 8, 3, 4, 2
    outs = []
    for r in range(W):
        lo, hi = max(r * R - 1, 0), min(r * R + R + 1, N)
        outs.append(Piece((lo, 0), (hi - lo, C), offset=C if r == 0 else 0))
    spec = collective("halo_rows", (N, C), Shard(0), outs, W)
    assert len(spec.chunks) == 2 * W
    grid = torch.arange(1, N * C + 1).view(N, C)
    got = [torch.zeros(R + 2, C, dtype=torch.int64) for _ in range(W)]
    interpret(spec, [grid[r * R:(r + 1) * R].reshape(-1) for r in range(W)], [g.view(-1) for g in got])
    for r in range(W):
        want = torch.zeros(R + 2, C, dtype=torch.int64)
        lo, hi = max(r * R - 1, 0), min(r * R + R + 1, N)
        want[lo - (r * R - 1):lo - (r * R - 1) + hi - lo] = grid[lo:hi]
        assert torch.equal(got[r], want), r


def test_transposed_pieces_split_into_rows_and_are_bounded():
    # A transposed input piece has no stride-1 run along the logical rows: one chunk per row.
    spec = collective("t", (4, 6), [Piece((0, 0), (4, 6), strides=(1, 4))], Replicate(), 1)
    assert len(spec.chunks) == 4 and all(c.sources[0].region.row_len == 1 for c in spec.chunks)
    with pytest.raises(TooManyChunks, match="more than 3 chunks"):
        collective("t", (4, 6), [Piece((0, 0), (4, 6), strides=(1, 4))], Replicate(), 1, max_chunks=3)


# ---------------------------------------------------------------- errors

@pytest.mark.parametrize("call, match", [
    (lambda: collective("c", (8,), Replicate(), Replicate(), 2),
     r"overlap: ranks 0 and 1 both hold logical element \(0,\)"),
    (lambda: collective("c", (8,), [Piece((0,), (3,)), Piece((4,), (4,))], Replicate(), 2),
     r"gap: logical element \(3,\) is in rank 0's output but in no rank's input"),
    (lambda: collective("c", (8, 4), Shard(1, sizes=(1, 2)), Replicate(), 2),
     r"rank 0's input: Shard\(1\) sizes sum to 3, dim 1 of the logical tensor has 4"),
    (lambda: collective("c", (8, 4), [Piece((0, 0), (8, 5)), None], Replicate(), 2),
     r"rank 0's input piece 0: dim 1 spans \[0, 5\), outside the logical tensor's \[0, 4\)"),
    (lambda: collective("c", (8,), Shard(0), [[Piece((0,), (5,)), Piece((4,), (4,), offset=5)], None], 2),
     r"rank 0's output pieces 0 and 1 overlap: both hold the logical elements from \(4,\) to \(4,\)"),
    (lambda: collective("c", (8,), Shard(0), [[Piece((0,), (4,)), Piece((4,), (4,), offset=2)], None], 2),
     r"rank 0's output pieces store two elements at one place"),
    (lambda: collective("c", (4, 4), Shard(0), [Piece((0, 0), (4, 4), strides=(1, 2)), None], 2),
     r"rank 0's output piece 0: strides \(1, 2\) store several elements"),
    (lambda: collective("c", (8,), Partial(), Replicate(), 2), r"rank 0's input: Partial\(\) needs a reduce op"),
    (lambda: collective("c", (8,), Replicate(), Replicate(), 2, op="sum"), r"Replicate\(\) inputs hold equal values"),
    (lambda: collective("c", (8,), Partial(), Partial(), 2, op="sum"),
     r"rank 0's output: Partial\(\) describes inputs"),
    (lambda: collective("c", (8,), [Shard(0)], Replicate(), 2), r"inputs name 1 ranks, the world has 2"),
    (lambda: collective("c", (8,), Partial(), Replicate(), 2, op="band"), r"reduce op 'band' is not supported"),
])
def test_layout_errors_name_rank_dim_and_mismatch(call, match):
    with pytest.raises(LayoutError, match=match):
        call()


def test_spec_bindings_take_named_arguments():
    chunk = Chunk(sources=[Placement(rank=0, region=Region(offset=0, rows=1, row_len=4))],
                  dests=[Placement(rank=1, region=Region(offset=2, rows=2, row_len=2, stride=3))])
    copy = Spec(name="c", kind=OpKind.COPY, world=2, chunks=[chunk])
    assert copy.redop is None and copy.output_numel == [0, 7]
    with pytest.raises(ValueError, match="a copy Spec takes no reduce op"):
        Spec(name="c", kind=OpKind.COPY, world=2, chunks=[chunk], redop=RedOp.SUM)
    assert Spec(name="r", kind=OpKind.REDUCE, world=2, chunks=[chunk]).redop == RedOp.SUM
    assert specs.reduce(world=2, n=3, op=RedOp.MAX, root=1).redop == RedOp.MAX
    assert "world" in Spec.__init__.__doc__ and "arg0" not in Spec.__init__.__doc__
    assert torch_purlin.specs.all_gather(world=2, n=3).output_numel == [6, 6]
