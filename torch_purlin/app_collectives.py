"""Application collectives: each is one Spec, named by layouts (torch_purlin.layouts),
where frameworks run a stock collective plus copies.

    all_to_all_dims(output, input, scatter_dim, gather_dim)   Ulysses sequence parallelism
    all_gather_v(output, input, counts, dim)                  uneven all-gather along any dim
    reduce_scatter_v(output, input, counts, dim, op)          uneven reduce-scatter along any dim
    moe_dispatch(output, input, counts) / moe_combine(...)    expert-parallel token exchange

Each writes straight into `output` from the peers' inputs, however the tensors
are strided (NOTE [layouts of the caller's tensors]); async_op=True returns a
Work; under torch.compile each runs as the registered op purlin::<name>.
"""
import functools
import math

import torch
import torch.distributed as dist

from . import layouts
from .layouts import Piece
from .registration import get_purlin_backend

# NOTE [layouts of the caller's tensors] A Spec names every rank's regions, and every
# rank must build the same Spec (its hash is each call's tag). A tensor whose shape is
# the same on every rank is therefore described with this rank's strides (SPMD code
# passes alike-strided tensors everywhere; ranks that do not fail the call-tag check,
# never silently). A tensor whose shape differs by rank (an uneven piece) is described
# as contiguous, and a non-contiguous one goes through a contiguous copy. A strided
# tensor is passed as the flat view of the storage it spans, so nothing is copied;
# a layout the 2-D regions cannot follow within APP_MAX_CHUNKS (e.g. a transposed
# piece) falls back to contiguous tensors, on every rank alike.
APP_MAX_CHUNKS_PER_PAIR = 16


def _group_size_rank(fn, group):
    if not dist.is_initialized():
        raise RuntimeError(f"{fn}: torch.distributed is not initialized")
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    return pg.size(), pg.rank()


def _fail(fn, rank, what):
    raise ValueError(f"{fn} on rank {rank}: {what}")


def _flat(t):
    """The flat view of the storage `t` spans (element 0 = t's first element)."""
    if t.numel() == 0:
        return t.new_empty(0)
    if t.is_contiguous():
        return t.view(-1)
    span = 1 + sum((s - 1) * st for s, st in zip(t.shape, t.stride()))
    return t.as_strided((span,), (1,), t.storage_offset())


def _strides(t, strided):
    return tuple(t.stride()) if strided else _contiguous_strides(tuple(t.shape))


@functools.lru_cache(maxsize=1024)
def _contiguous_strides(shape):
    return Piece((0,) * len(shape), shape).strides


class _CopyBack:
    """A Work whose wait() also copies a contiguous stand-in back into the caller's output."""

    def __init__(self, work, stand_in, output):
        self._work, self._stand_in, self._output = work, stand_in, output

    def wait(self, timeout=None):
        self._work.wait() if timeout is None else self._work.wait(timeout)
        self._output.copy_(self._stand_in)
        return True

    def is_completed(self):
        return self._work.is_completed()


def _run(fn, build, output, input, group, async_op, in_strided, out_strided):
    """Builds the Spec with the tensors' own strides where allowed, else contiguous
    ones (NOTE [layouts of the caller's tensors]), and runs it."""
    W = (group if group is not None else dist.distributed_c10d._get_default_group()).size()
    try:
        spec = build(_strides(input, in_strided), _strides(output, out_strided),
                     APP_MAX_CHUNKS_PER_PAIR * W * W)
    except layouts.TooManyChunks:
        in_strided = out_strided = False
        spec = build(_strides(input, False), _strides(output, False), 1 << 62)
    src = input if in_strided or input.is_contiguous() else input.contiguous()
    dst = output if out_strided or output.is_contiguous() else \
        torch.empty_like(output, memory_format=torch.contiguous_format)
    # The Spec was built for this group's size: the backend runs it directly (run_spec's checks, less one).
    work = get_purlin_backend(group, input.device.type).run_spec(spec, _flat(src), _flat(dst))
    if dst is not output:
        work = _CopyBack(work, dst, output)
    if async_op:
        return work
    work.wait()
    return None


def _check_pair(fn, me, output, input):
    if output.dtype != input.dtype:
        _fail(fn, me, f"output dtype {output.dtype} differs from input dtype {input.dtype}")
    if output.device != input.device:
        _fail(fn, me, f"output is on {output.device}, input on {input.device}")


def _dim(fn, me, d, n, what):
    if not -n <= d < n:
        _fail(fn, me, f"{what} {d} is outside the input's {n} dims")
    return d % n


def _group_name(group):
    return "" if group is None else group.group_name


def _group_of(name):
    return None if name == "" else dist.distributed_c10d._resolve_process_group(name)


def _compiled(fn, async_op):
    if not torch.compiler.is_compiling():
        return False
    if async_op:
        raise ValueError(f"{fn}: async_op=True is not supported under torch.compile (the op runs in the graph)")
    return True


# ---------------------------------------------------------------- all_to_all_dims

def all_to_all_dims(output, input, scatter_dim, gather_dim, group=None, async_op=False):
    """output = cat over ranks r of chunk(input_r, W, scatter_dim)[rank] along gather_dim.

    The all-to-all of Ulysses sequence parallelism, in either direction ([S/W, H, D]
    -> [S, H/W, D] with scatter_dim=1, gather_dim=0; back with 0, 1), on any dims,
    with no permute or contiguous copies: one Spec of W x W chunks, read from each
    input where it lies, written into `output` where it belongs. Replaces
    permute + all_to_all_single + copy (e.g. deepspeed.sequence.layer's _SeqAllToAll).
    Every rank passes an input of one shape; input.shape[scatter_dim] must be a
    multiple of the world size."""
    fn = "all_to_all_dims"
    if _compiled(fn, async_op):
        torch.ops.purlin.all_to_all_dims(output, input, scatter_dim, gather_dim, _group_name(group))
        return None
    W, me = _group_size_rank(fn, group)
    n = input.dim()
    _check_pair(fn, me, output, input)
    s, g = _dim(fn, me, scatter_dim, n, "scatter_dim"), _dim(fn, me, gather_dim, n, "gather_dim")
    X = tuple(input.shape)
    if X[s] % W:
        _fail(fn, me, f"input dim {s} (scatter_dim) has size {X[s]}, not a multiple of the world size {W}")
    want = list(X)
    want[s] //= W
    want[g] *= W
    if tuple(output.shape) != tuple(want):
        _fail(fn, me, f"output has shape {tuple(output.shape)}, expected {tuple(want)} (input {X}, "
                      f"scatter_dim {s}, gather_dim {g}, world size {W})")

    def build(si, so, max_chunks):
        return _a2a_dims_spec(X, s, g, W, si, so, max_chunks)

    return _run(fn, build, output, input, group, async_op, True, True)


@functools.lru_cache(maxsize=256)
def _a2a_dims_spec(X, s, g, W, si, so, max_chunks):
    # The logical tensor: the input's dims with a source-rank dim before gather_dim and
    # scatter_dim split into (dest rank, chunk). Rank r's input is the box at source r,
    # rank q's output the box at dest q; their strides address the caller's tensors.
    shape, sin, sout, src_dim, dst_dim = [], [], [], None, None
    for d in range(len(X)):
        if d == g:
            block = X[g] if g != s else X[s] // W  # what each source contributes along gather_dim
            src_dim = len(shape)
            shape.append(W), sin.append(1), sout.append(block * so[g])
        if d == s:
            dst_dim = len(shape)
            shape.append(W), sin.append((X[s] // W) * si[s]), sout.append(1)
            shape.append(X[s] // W), sin.append(si[s]), sout.append(so[s])
        else:
            shape.append(X[d]), sin.append(si[d]), sout.append(so[d])

    def box(at, r):
        return tuple(r if k == at else 0 for k in range(len(shape))), \
            tuple(1 if k == at else shape[k] for k in range(len(shape)))

    ins = [Piece(*box(src_dim, r), strides=tuple(sin)) for r in range(W)]
    outs = [Piece(*box(dst_dim, q), strides=tuple(sout)) for q in range(W)]
    return layouts.collective("all_to_all_dims", tuple(shape), ins, outs, W, max_chunks=max_chunks)


# ---------------------------------------------------------------- all_gather_v / reduce_scatter_v

def _counts(fn, me, counts, W):
    counts = [int(c) for c in (counts.tolist() if isinstance(counts, torch.Tensor) else counts)]
    if len(counts) != W:
        _fail(fn, me, f"counts has {len(counts)} entries, the group has {W} ranks")
    if any(c < 0 for c in counts):
        _fail(fn, me, f"counts {counts} has a negative entry")
    return counts


def _v_shapes(fn, me, whole, part, counts, dim, whole_name, part_name):
    n = whole.dim()
    if part.dim() != n:
        _fail(fn, me, f"{part_name} has {part.dim()} dims, {whole_name} has {n}")
    d = _dim(fn, me, dim, n, "dim")
    if whole.shape[d] != sum(counts):
        _fail(fn, me, f"{whole_name} dim {d} has size {whole.shape[d]}, counts sum to {sum(counts)}")
    want = list(whole.shape)
    want[d] = counts[me]
    if tuple(part.shape) != tuple(want):
        _fail(fn, me, f"{part_name} has shape {tuple(part.shape)}, expected {tuple(want)} (counts[{me}] = "
                      f"{counts[me]} along dim {d})")
    return d


def _v_pieces(shape, counts, d):
    out, start = [], 0
    for c in counts:
        out.append(Piece(tuple(start if k == d else 0 for k in range(len(shape))),
                         tuple(c if k == d else shape[k] for k in range(len(shape)))))
        start += c
    return out


@functools.lru_cache(maxsize=256)
def _all_gather_v_spec(shape, counts, d, so, W, max_chunks):
    outs = Piece((0,) * len(shape), shape, strides=so)
    return layouts.collective("all_gather_v", shape, _v_pieces(shape, counts, d), outs, W, max_chunks=max_chunks)


@functools.lru_cache(maxsize=256)
def _reduce_scatter_v_spec(shape, counts, d, si, W, redop, max_chunks):
    ins = Piece((0,) * len(shape), shape, strides=si)
    return layouts.collective("reduce_scatter_v", shape, ins, _v_pieces(shape, counts, d), W, op=redop,
                              max_chunks=max_chunks)


def all_gather_v(output, input, counts, dim=0, group=None, async_op=False):
    """All-gather of uneven pieces along `dim`: rank r's input holds counts[r] slices
    (zeros allowed), output = cat of every rank's input along `dim`; no padding.
    Replaces padding to max(counts) + all_gather_into_tensor + narrow/cat, or a list
    all_gather of uneven tensors (data-parallel attention's token gather)."""
    fn = "all_gather_v"
    if _compiled(fn, async_op):
        torch.ops.purlin.all_gather_v(output, input, [int(c) for c in counts], dim, _group_name(group))
        return None
    W, me = _group_size_rank(fn, group)
    _check_pair(fn, me, output, input)
    counts = _counts(fn, me, counts, W)
    d = _v_shapes(fn, me, output, input, counts, dim, "output", "input")
    shape = tuple(output.shape)

    def build(si, so, max_chunks):
        return _all_gather_v_spec(shape, tuple(counts), d, so, W, max_chunks)

    return _run(fn, build, output, input, group, async_op, False, True)


def reduce_scatter_v(output, input, counts, dim=0, op=dist.ReduceOp.SUM, group=None, async_op=False):
    """Reduce-scatter into uneven pieces along `dim`: every rank's input is the whole
    tensor; rank r's output gets slices [sum(counts[:r]), +counts[r]) of the reduction
    over ranks (zeros allowed); no padding. Replaces padding + reduce_scatter_tensor +
    narrow (MoE / uneven sequence shards)."""
    fn = "reduce_scatter_v"
    if _compiled(fn, async_op):
        torch.ops.purlin.reduce_scatter_v(output, input, [int(c) for c in counts], dim, layouts.redop_of(op).name,
                                          _group_name(group))
        return None
    W, me = _group_size_rank(fn, group)
    _check_pair(fn, me, output, input)
    counts = _counts(fn, me, counts, W)
    d = _v_shapes(fn, me, input, output, counts, dim, "input", "output")
    shape = tuple(input.shape)
    try:
        redop = layouts.redop_of(op)
    except layouts.LayoutError as e:
        _fail(fn, me, str(e))

    def build(si, so, max_chunks):
        return _reduce_scatter_v_spec(shape, tuple(counts), d, si, W, redop, max_chunks)

    return _run(fn, build, output, input, group, async_op, True, False)


# ---------------------------------------------------------------- MoE dispatch / combine

def _moe_table(fn, me, counts, W, sent, received):
    """The validated [W, E] counts as a tuple of tuples."""
    rows = counts.tolist() if isinstance(counts, torch.Tensor) else counts
    rows = tuple(tuple(int(c) for c in r) for r in rows)
    if len(rows) != W or any(len(r) != len(rows[0]) for r in rows):
        _fail(fn, me, f"counts must be a [world size {W}, experts] table (every rank's tokens per expert)")
    E = len(rows[0])
    if E == 0 or E % W:
        _fail(fn, me, f"counts names {E} experts, not a positive multiple of the world size {W}")
    if any(c < 0 for r in rows for c in r):
        _fail(fn, me, "counts has a negative entry")
    L = E // W
    if tuple(received.shape[1:]) != tuple(sent.shape[1:]):
        _fail(fn, me, f"the token tensors' trailing shapes differ: {tuple(sent.shape)} and {tuple(received.shape)}")
    if sent.shape[0] != sum(rows[me]):
        _fail(fn, me, f"the sorted-by-expert tensor has {sent.shape[0]} tokens, counts[{me}] sums to {sum(rows[me])}")
    mine = sum(rows[s][me * L + l] for s in range(W) for l in range(L))
    if received.shape[0] != mine:
        _fail(fn, me, f"the expert-major tensor has {received.shape[0]} tokens, its experts get {mine}")
    return rows


def _moe_layouts(fn, me, counts, W, sent, received):
    """(logical shape, per-rank sorted-by-expert pieces, per-rank expert-major pieces)."""
    return _moe_pieces(_moe_table(fn, me, counts, W, sent, received), tuple(sent.shape[1:]), W)


@functools.lru_cache(maxsize=64)
def _moe_pieces(rows, rest, W):
    E = len(rows[0])
    L = E // W
    start = [[0] * E for _ in range(W)]
    at = 0
    for s in range(W):
        for e in range(E):
            start[s][e] = at
            at += rows[s][e]
    shape = (at,) + rest
    zeros = (0,) * len(rest)
    row = math.prod(rest)
    by_expert = tuple(Piece((start[s][0],) + zeros, (sum(rows[s]),) + rest) for s in range(W))
    expert_major = []
    for d in range(W):
        ps, off = [], 0
        for l in range(L):
            for s in range(W):
                c = rows[s][d * L + l]
                if c:
                    ps.append(Piece((start[s][d * L + l],) + zeros, (c,) + rest, offset=off * row))
                off += c
        expert_major.append(tuple(ps))
    return shape, by_expert, tuple(expert_major)


@functools.lru_cache(maxsize=64)
def _moe_spec(fn, rows, rest, W):
    shape, by_expert, expert_major = _moe_pieces(rows, rest, W)
    ins, outs = (by_expert, expert_major) if fn == "moe_dispatch" else (expert_major, by_expert)
    return layouts.collective(fn, shape, ins, outs, W)


def moe_dispatch(output, input, counts, group=None, async_op=False):
    """Expert-parallel token dispatch: rank s's `input` holds its tokens sorted by
    expert (counts[s][e] for expert e; expert e lives on rank e // (E / W)); rank d's
    `output` receives, for each of its local experts in order, the tokens of every
    rank s in rank order (expert-major, what a grouped GEMM reads). `counts` is the
    whole [W, E] table (e.g. all_gather of each rank's tokens per expert). Replaces
    all_to_all_single + the permute to expert-major of
    torchtitan.distributed.expert_parallel.ExpertParallel._token_dispatch."""
    return _moe("moe_dispatch", output, input, counts, group, async_op, dispatch=True)


def moe_combine(output, input, counts, group=None, async_op=False):
    """The inverse of moe_dispatch: rank d's expert-major `input` goes back to every
    source rank's sorted-by-expert `output`. Replaces the unpermute + all_to_all_single
    of torchtitan's ExpertParallel._token_combine."""
    return _moe("moe_combine", output, input, counts, group, async_op, dispatch=False)


def _moe(fn, output, input, counts, group, async_op, dispatch):
    if _compiled(fn, async_op):
        flat = [int(c) for r in (counts.tolist() if isinstance(counts, torch.Tensor) else counts) for c in r]
        getattr(torch.ops.purlin, fn)(output, input, flat, len(flat) // dist.get_world_size(group),
                                      _group_name(group))
        return None
    W, me = _group_size_rank(fn, group)
    _check_pair(fn, me, output, input)
    if input.dim() < 1:
        _fail(fn, me, "token tensors need a leading token dim")
    sent, received = (input, output) if dispatch else (output, input)
    rows = _moe_table(fn, me, counts, W, sent, received)

    def build(si, so, max_chunks):
        return _moe_spec(fn, rows, tuple(sent.shape[1:]), W)

    return _run(fn, build, output, input, group, async_op, False, False)


# ---------------------------------------------------------------- registered ops (torch.compile)

@torch.library.custom_op("purlin::all_to_all_dims", mutates_args=("output",))
def _all_to_all_dims_op(output: torch.Tensor, input: torch.Tensor, scatter_dim: int, gather_dim: int,
                        group_name: str) -> None:
    all_to_all_dims(output, input, scatter_dim, gather_dim, _group_of(group_name))


@torch.library.custom_op("purlin::all_gather_v", mutates_args=("output",))
def _all_gather_v_op(output: torch.Tensor, input: torch.Tensor, counts: list[int], dim: int,
                     group_name: str) -> None:
    all_gather_v(output, input, counts, dim, _group_of(group_name))


@torch.library.custom_op("purlin::reduce_scatter_v", mutates_args=("output",))
def _reduce_scatter_v_op(output: torch.Tensor, input: torch.Tensor, counts: list[int], dim: int, op: str,
                         group_name: str) -> None:
    reduce_scatter_v(output, input, counts, dim, op.lower(), _group_of(group_name))


def _moe_op(fn):
    def run(output: torch.Tensor, input: torch.Tensor, counts: list[int], experts: int, group_name: str) -> None:
        table = [counts[i:i + experts] for i in range(0, len(counts), experts)]
        globals()[fn](output, input, table, _group_of(group_name))
    run.__name__ = f"_{fn}_op"
    op = torch.library.custom_op(f"purlin::{fn}", run, mutates_args=("output",))
    op.register_fake(lambda output, input, counts, experts, group_name: None)
    return op


for _op in (_all_to_all_dims_op, _all_gather_v_op, _reduce_scatter_v_op):
    _op.register_fake(lambda *args: None)
_moe_dispatch_op, _moe_combine_op = _moe_op("moe_dispatch"), _moe_op("moe_combine")
