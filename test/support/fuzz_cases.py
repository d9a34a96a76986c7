"""Seeded random collectives for the fuzz tests (test_fuzz_cpu.py, test_gpu_fuzz.py).

generate() draws a list of Cases from a seed: op (every native one, coalesced blocks, even and
uneven all_to_all, async batches waited out of order), dtype, reduce op, size class (0, 1, odd,
both sides of each protocol threshold the caller names, larger than the workspace), in-place or
out-of-place, strided (non-contiguous) tensors, the group (the whole world or a subgroup,
interleaved), and on CUDA pool tensors and CUDA graph replays. Every rank draws the same list.

NOTE [fuzz references] Case i's inputs come from a generator seeded with (seed, i, replay, group
rank, part), so every rank rebuilds every rank's inputs and computes the expected result itself,
bit for bit: floats reduced hold small integers (their sums, products and halves are exact in
every float dtype; AVG inputs are multiples of the world size), copies move random bit patterns
(NaNs and infinities included: compared as bits), integers stay far from overflow. A strided
tensor is a view of every other element of a buffer whose other elements hold a sentinel, checked
after the op: nothing outside the view may be written.

Replay: a failing case's message names PURLIN_FUZZ_SEED and PURLIN_FUZZ_CASES (run those cases
only; the others are drawn but skipped, so the failing case's inputs and groups are the same).
"""
import os
import random
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
INTS = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)
DTYPES = FLOATS + INTS + (torch.bool, torch.complex64)
BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
PREMUL = 0.5  # exact on integer sums in every float dtype
SENTINEL_BYTE = 0x5A

COPY_OPS = ("broadcast", "all_gather", "all_gather_into_tensor", "all_gather_into_tensor_coalesced", "all_to_all",
            "all_to_all_single", "all_to_all_single_uneven", "gather", "scatter")
REDUCE_OPS = ("all_reduce", "reduce", "reduce_scatter", "reduce_scatter_tensor", "reduce_scatter_tensor_coalesced",
              "all_reduce_coalesced")
OPS = REDUCE_OPS + COPY_OPS + ("barrier", "async_batch")
ASYNC_OPS = ("all_reduce", "broadcast", "all_gather_into_tensor", "reduce_scatter_tensor", "all_to_all_single")
GRAPH_OPS = ("all_reduce", "reduce", "broadcast", "all_gather_into_tensor", "reduce_scatter_tensor")  # CUDA graphs
POOL_OPS = GRAPH_OPS


@dataclass
class Case:
    index: int
    op: str
    dtype: torch.dtype
    redop: str = "sum"
    n: int = 1                 # elements per rank (per part)
    group: str = "world"
    root: int = 0              # group rank
    in_place: bool = False
    strided: bool = False
    parts: int = 1             # tensors of a coalesced block
    mode: str = "sync"         # sync | async | pool | graph
    batch: list = field(default_factory=list)  # async_batch: its Cases

    def describe(self):
        if self.op == "async_batch":
            return f"case {self.index}: async batch of " + "; ".join(c.describe() for c in self.batch)
        return (f"case {self.index}: {self.op} {str(self.dtype).replace('torch.', '')} {self.redop} n={self.n} "
                f"group={self.group} root={self.root} in_place={self.in_place} strided={self.strided} "
                f"parts={self.parts} mode={self.mode}")


def redops_for(dtype, op, device):
    if op not in REDUCE_OPS:
        return ("-",)
    if dtype.is_complex:
        return ("sum", "avg") if op == "all_reduce" else ()
    if dtype == torch.bool:
        return () if device == "cuda" else ("sum", "product", "min", "max")  # CUDA: bool reductions are NCCL's
    if dtype.is_floating_point:
        return ("sum", "avg", "product", "min", "max", "premul_sum")
    return ("sum", "product", "min", "max")


def sizes(rng, esize, thresholds):
    """An element count per rank: 0, 1, odd, either side of a threshold (bytes per rank), or past them all."""
    kind = rng.random()
    if kind < 0.08:
        return 0
    if kind < 0.16:
        return 1
    if kind < 0.4:
        return rng.randrange(2, 600) | 1
    if kind < 0.9 and thresholds:
        t = rng.choice(thresholds) // esize
        return max(0, t + rng.choice((-1, 0, 1, 3)))
    top = max(thresholds or [4096]) // esize
    return int(top * rng.uniform(1.5, 3.0)) | 1


def generate(seed, count, world, sub_ranks, device="cpu", thresholds=(), modes=("sync",), max_elems=1 << 20):
    """`count` Cases for `world` ranks; `sub_ranks`: the subgroup's ranks (None: no subgroup)."""
    rng = random.Random(seed)
    cases = []
    for i in range(count):
        cases.append(_draw(rng, i, world, sub_ranks, device, thresholds, modes, max_elems))
    return cases


def _draw(rng, index, world, sub_ranks, device, thresholds, modes, max_elems, op=None, group=None):
    op = op or rng.choice(OPS)
    group = group or ("sub" if sub_ranks and rng.random() < 0.3 else "world")
    size = len(sub_ranks) if group == "sub" else world
    if op == "async_batch":  # its ops have indices of their own (other inputs), past every case's
        c = Case(index, op, torch.float32, group=group, mode="async")
        c.batch = [_draw(rng, index + (k + 1) * 1_000_000, world, sub_ranks, device, thresholds, ("sync",),
                         max_elems, rng.choice(ASYNC_OPS), group)
                   for k in range(rng.randint(2, 4))]
        for b in c.batch:
            b.mode = "async"
        return c
    while True:
        dtype = rng.choice(DTYPES)
        redops = redops_for(dtype, op, device)
        if redops:
            break
    esize = torch.empty(0, dtype=dtype).element_size()
    n = min(sizes(rng, esize, thresholds), max_elems // max(1, size))
    c = Case(index, op, dtype, rng.choice(redops), n, group, rng.randrange(size))
    c.strided = rng.random() < 0.2
    c.in_place = op in ("all_gather_into_tensor",) and rng.random() < 0.4
    c.parts = rng.randint(1, 3) if op.endswith("_coalesced") else 1
    kinds = [m for m in modes if m != "async" and (m == "sync" or op in GRAPH_OPS)] or ["sync"]
    c.mode = rng.choice(kinds)
    if c.mode in ("pool", "graph"):
        c.strided = False
    if c.mode == "sync" and "async" in modes and rng.random() < 0.25:
        c.mode = "async"
    return c


def selected(cases):
    """The cases PURLIN_FUZZ_CASES names (comma list of indices), else all."""
    only = os.environ.get("PURLIN_FUZZ_CASES", "")
    if not only:
        return cases
    keep = {int(x) for x in only.split(",") if x.strip()}
    return [c for c in cases if c.index in keep]


# ---- inputs and references -------------------------------------------------------------------


def make_values(seed, case, replay, member, part, n, world, redop=None, copy=False):
    """Group rank `member`'s part `part` of case `case` (NOTE [fuzz references]), on the CPU."""
    key = (((seed * 1_000_003 + case.index) * 31 + replay) * 1009 + member) * 4099 + part
    g = torch.Generator().manual_seed(key % (1 << 62))
    dtype = case.dtype
    if copy and dtype != torch.bool:  # random bits
        esize = torch.empty(0, dtype=dtype).element_size()
        raw = torch.randint(0, 256, (n * esize,), generator=g, dtype=torch.int64).to(torch.uint8)
        return raw.view(dtype)
    if dtype == torch.bool:
        return torch.randint(0, 2, (n,), generator=g).bool()
    if redop == "product":
        lo, hi = (1, 3) if dtype == torch.uint8 else (-2, 2)
    elif redop in ("min", "max"):
        lo, hi = {torch.uint8: (0, 255), torch.int8: (-128, 127), torch.bfloat16: (-250, 250),
                  torch.float16: (-2000, 2000)}.get(dtype, (-100_000, 100_000))
    else:  # sums of up to 8 ranks (x world for AVG) stay exact and in range
        lo, hi = {torch.uint8: (1, 30), torch.int8: (-15, 15), torch.bfloat16: (-3, 3),
                  torch.float16: (-30, 30)}.get(dtype, (-100, 100))
    x = torch.randint(lo, hi + 1, (2 if dtype.is_complex else 1, n), generator=g, dtype=torch.int64)
    if lo < 0:
        x[x == 0] = 1
    if redop == "avg":
        x = x * world
    if dtype.is_complex:
        return torch.complex(x[0].float(), x[1].float()).to(dtype)
    return x[0].to(dtype)


def reduce_ref(xs, redop, dtype, world):
    wide = torch.complex128 if dtype.is_complex else torch.float64 if dtype.is_floating_point else torch.int64
    s = torch.stack([x.to(wide) for x in xs])
    if dtype == torch.bool:
        r = s.sum(0) if redop in ("sum", "max") else s.prod(0)
        return (r != 0) if redop in ("sum", "max") else (r != 0)
    if redop in ("sum", "avg", "premul_sum"):
        r = s.sum(0)
        if redop == "avg":
            r = r / world
        if redop == "premul_sum":
            r = r * PREMUL
    elif redop == "product":
        r = s.prod(0)
    elif redop == "min":
        r = s.amin(0)
    else:
        r = s.amax(0)
    return r.to(dtype)


def redop_of(name):
    if name == "premul_sum":
        return dist._make_nccl_premul_sum(PREMUL)
    return getattr(dist.ReduceOp, name.upper())


def bits(t):
    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bool:
        return t.to(torch.uint8)
    if t.is_complex():
        t = torch.view_as_real(t)
    return t.view(BITS[t.element_size()]) if t.numel() else t.to(torch.uint8)


def assert_bits(got, want, what):
    g, w = bits(got).reshape(-1), bits(want).reshape(-1)
    if g.shape != w.shape:
        raise AssertionError(f"{what}: {g.numel()} elements, expected {w.numel()}")
    bad = (g != w).nonzero()
    if bad.numel():
        i = int(bad[0])
        raise AssertionError(f"{what}: {bad.numel()}/{g.numel()} elements wrong; first at {i}: got "
                             f"{got.reshape(-1)[i].item()!r}, expected {want.reshape(-1)[i].item()!r}")


# ---- running a case --------------------------------------------------------------------------


class Env:
    """What a rank runs cases with: device, groups {name: (group, global ranks)}, the seed, and for
    CUDA pool tensors the allocator (torch_purlin.empty)."""

    def __init__(self, seed, rank, device, groups, empty=None):
        self.seed, self.rank, self.device, self.groups, self.empty = seed, rank, torch.device(device), groups, empty


class Buffers:
    """The tensors of one case on this rank, allocated once (graph replays refill them in place)."""

    def __init__(self, env, case):
        self.env, self.case = env, case
        self.views = []  # (view, base): strided tensors and their sentinel buffers

    def tensor(self, n, strided=None, pool=None):
        env, case = self.env, self.case
        strided = case.strided if strided is None else strided
        if (case.mode == "pool" if pool is None else pool) and env.empty is not None:
            group, _ = env.groups[case.group]
            return env.empty(max(n, 1), dtype=case.dtype, device=env.device, group=group)[:n]
        if not strided:
            return torch.empty(n, dtype=case.dtype, device=env.device)
        base = torch.empty(2 * n, dtype=case.dtype, device=env.device)
        self.views.append(base)
        return base[::2]

    def seal(self):
        """Fills the elements outside every strided view with the sentinel."""
        for base in self.views:
            if base.numel():
                base[1::2].copy_(_sentinel_like(base[1::2]))

    def check_sentinels(self, what):
        for base in self.views:
            if base.numel():
                assert_bits(base[1::2], _sentinel_like(base[1::2]), f"{what}: written outside a strided view")


def _sentinel_like(t):
    if t.dtype == torch.bool:
        return torch.ones_like(t)
    esize = t.element_size()
    raw = torch.full((t.numel() * esize,), SENTINEL_BYTE, dtype=torch.uint8, device=t.device)
    return raw.view(t.dtype).reshape(t.shape)


class Op:
    """One case as calls: load(replay) fills inputs and poisons outputs, issue(async_op) runs it (a
    Work, a coalescing manager or None), check(replay) compares with the references."""

    def __init__(self, env, case):
        self.env, self.case = env, case
        group, ranks = env.groups[case.group]
        self.group, self.ranks = group, ranks
        self.W = len(ranks)
        self.me = ranks.index(env.rank)
        self.root_global = ranks[case.root]
        self.buf = Buffers(env, case)
        self.copy = case.op in COPY_OPS
        c, W, n = case, self.W, case.n
        self.splits = [[_split(env.seed, c.index, i, j, n) for j in range(W)] for i in range(W)]
        op = c.op
        if op in ("all_reduce", "reduce", "broadcast"):
            self.x = self.buf.tensor(n)
        elif op == "all_reduce_coalesced":
            self.xs = [self.buf.tensor(n + k) for k in range(c.parts)]
        elif op == "all_gather":
            self.x, self.outs = self.buf.tensor(n), [self.buf.tensor(n) for _ in range(W)]
        elif op == "all_gather_into_tensor":
            self.out = self.buf.tensor(W * n)
            self.x = self.out[self.me * n:(self.me + 1) * n] if c.in_place else self.buf.tensor(n)
        elif op == "all_gather_into_tensor_coalesced":
            self.xs = [self.buf.tensor(n + k, strided=False) for k in range(c.parts)]
            self.outs = [self.buf.tensor(W * (n + k), strided=False) for k in range(c.parts)]
        elif op == "reduce_scatter":
            self.ins, self.out = [self.buf.tensor(n) for _ in range(W)], self.buf.tensor(n)
        elif op == "reduce_scatter_tensor":
            self.inp, self.out = self.buf.tensor(W * n), self.buf.tensor(n)
        elif op == "reduce_scatter_tensor_coalesced":
            self.ins = [self.buf.tensor(W * (n + k), strided=False) for k in range(c.parts)]
            self.outs = [self.buf.tensor(n + k, strided=False) for k in range(c.parts)]
        elif op == "all_to_all":
            self.ins = [self.buf.tensor(self.splits[self.me][j]) for j in range(W)]
            self.outs = [self.buf.tensor(self.splits[i][self.me]) for i in range(W)]
        elif op == "all_to_all_single":
            self.inp, self.out = self.buf.tensor(W * n), self.buf.tensor(W * n)
        elif op == "all_to_all_single_uneven":
            self.inp = self.buf.tensor(sum(self.splits[self.me]))
            self.out = self.buf.tensor(sum(s[self.me] for s in self.splits))
        elif op == "gather":
            self.x = self.buf.tensor(n)
            self.outs = [self.buf.tensor(n) for _ in range(W)] if self.me == c.root else None
        elif op == "scatter":
            self.out = self.buf.tensor(n)
            self.ins = [self.buf.tensor(n) for _ in range(W)] if self.me == c.root else None
        self.buf.seal()

    # inputs of group rank m, part p
    def value(self, replay, m, p, n):
        return make_values(self.env.seed, self.case, replay, m, p, n, self.W, self.case.redop, self.copy)

    def _poison(self, t):
        if t.numel():
            t.copy_(_sentinel_like(t) if t.dtype != torch.bool else torch.zeros_like(t))

    def load(self, replay):
        c, n, me, W, dev = self.case, self.case.n, self.me, self.W, self.env.device
        v = lambda m, p, k=n: self.value(replay, m, p, k).to(dev)  # noqa: E731
        op = c.op
        if op in ("all_reduce", "reduce"):
            self.x.copy_(v(me, 0))
        elif op == "broadcast":
            self.x.copy_(v(me, 0)) if me == c.root else self._poison(self.x)
        elif op == "all_reduce_coalesced":
            for k, x in enumerate(self.xs):
                x.copy_(v(me, k, n + k))
        elif op == "all_gather":
            self.x.copy_(v(me, 0))
            for o in self.outs:
                self._poison(o)
        elif op == "all_gather_into_tensor":
            self._poison(self.out)
            self.x.copy_(v(me, 0))
        elif op == "all_gather_into_tensor_coalesced":
            for k, (x, o) in enumerate(zip(self.xs, self.outs)):
                self._poison(o)
                x.copy_(v(me, k, n + k))
        elif op == "reduce_scatter":
            for j, t in enumerate(self.ins):
                t.copy_(v(me, j))
            self._poison(self.out)
        elif op == "reduce_scatter_tensor":
            self.inp.copy_(v(me, 0, W * n))
            self._poison(self.out)
        elif op == "reduce_scatter_tensor_coalesced":
            for k, (t, o) in enumerate(zip(self.ins, self.outs)):
                t.copy_(v(me, k, W * (n + k)))
                self._poison(o)
        elif op == "all_to_all":
            for j, t in enumerate(self.ins):
                t.copy_(v(me, j, self.splits[me][j]))
            for o in self.outs:
                self._poison(o)
        elif op == "all_to_all_single":
            self.inp.copy_(v(me, 0, W * n))
            self._poison(self.out)
        elif op == "all_to_all_single_uneven":
            self.inp.copy_(torch.cat([v(me, j, self.splits[me][j]) for j in range(W)]))
            self._poison(self.out)
        elif op == "gather":
            self.x.copy_(v(me, 0))
            for o in self.outs or []:
                self._poison(o)
        elif op == "scatter":
            for j, t in enumerate(self.ins or []):
                t.copy_(v(me, j))
            self._poison(self.out)

    def issue(self, async_op=False):
        c, g = self.case, self.group
        r = redop_of(c.redop) if c.redop != "-" else None
        op = c.op
        if op == "all_reduce":
            return dist.all_reduce(self.x, op=r, group=g, async_op=async_op)
        if op == "reduce":
            return dist.reduce(self.x, self.root_global, op=r, group=g, async_op=async_op)
        if op == "broadcast":
            return dist.broadcast(self.x, self.root_global, group=g, async_op=async_op)
        if op == "all_gather":
            return dist.all_gather(self.outs, self.x, group=g, async_op=async_op)
        if op == "all_gather_into_tensor":
            return dist.all_gather_into_tensor(self.out, self.x, group=g, async_op=async_op)
        if op == "reduce_scatter":
            return dist.reduce_scatter(self.out, self.ins, op=r, group=g, async_op=async_op)
        if op == "reduce_scatter_tensor":
            return dist.reduce_scatter_tensor(self.out, self.inp, op=r, group=g, async_op=async_op)
        if op == "all_to_all":
            return dist.all_to_all(self.outs, self.ins, group=g, async_op=async_op)
        if op == "all_to_all_single":
            return dist.all_to_all_single(self.out, self.inp, group=g, async_op=async_op)
        if op == "all_to_all_single_uneven":
            return dist.all_to_all_single(self.out, self.inp, [s[self.me] for s in self.splits],
                                          self.splits[self.me], group=g, async_op=async_op)
        if op == "gather":
            return dist.gather(self.x, self.outs, self.root_global, group=g, async_op=async_op)
        if op == "scatter":
            return dist.scatter(self.out, self.ins, self.root_global, group=g, async_op=async_op)
        if op == "barrier":
            return dist.barrier(group=g, async_op=async_op)
        # coalesced blocks: torch's fast paths (allreduce_coalesced, the *_into_tensor_coalesced ops)
        cm = dist._coalescing_manager(group=g, device=self.env.device, async_ops=async_op)
        with cm as m:
            if op == "all_reduce_coalesced":
                for x in self.xs:
                    dist.all_reduce(x, op=r, group=g)
            elif op == "all_gather_into_tensor_coalesced":
                for o, x in zip(self.outs, self.xs):
                    dist.all_gather_into_tensor(o, x, group=g)
            else:
                for o, t in zip(self.outs, self.ins):
                    dist.reduce_scatter_tensor(o, t, op=r, group=g)
        return m if async_op else None

    def check(self, replay):
        c, n, me, W = self.case, self.case.n, self.me, self.W
        what = f"rank {self.env.rank} (group rank {me}) {c.describe()} replay {replay}"
        v = lambda m, p, k=n: self.value(replay, m, p, k)  # noqa: E731
        red = lambda xs: reduce_ref(xs, c.redop, c.dtype, W)  # noqa: E731
        op = c.op
        if op == "all_reduce":
            assert_bits(self.x, red([v(m, 0) for m in range(W)]), what)
        elif op == "reduce":
            if me == c.root:
                assert_bits(self.x, red([v(m, 0) for m in range(W)]), what)
        elif op == "broadcast":
            assert_bits(self.x, v(c.root, 0), what)
        elif op == "all_reduce_coalesced":
            for k, x in enumerate(self.xs):
                assert_bits(x, red([v(m, k, n + k) for m in range(W)]), f"{what} part {k}")
        elif op == "all_gather":
            for m, o in enumerate(self.outs):
                assert_bits(o, v(m, 0), f"{what} from {m}")
        elif op == "all_gather_into_tensor":
            assert_bits(self.out, torch.cat([v(m, 0) for m in range(W)]), what)
        elif op == "all_gather_into_tensor_coalesced":
            for k, o in enumerate(self.outs):
                assert_bits(o, torch.cat([v(m, k, n + k) for m in range(W)]), f"{what} part {k}")
        elif op == "reduce_scatter":
            assert_bits(self.out, red([v(m, me) for m in range(W)]), what)
        elif op == "reduce_scatter_tensor":
            assert_bits(self.out, red([v(m, 0, W * n)[me * n:(me + 1) * n] for m in range(W)]), what)
        elif op == "reduce_scatter_tensor_coalesced":
            for k, o in enumerate(self.outs):
                k_n = n + k
                assert_bits(o, red([v(m, k, W * k_n)[me * k_n:(me + 1) * k_n] for m in range(W)]), f"{what} part {k}")
        elif op == "all_to_all":
            for i, o in enumerate(self.outs):
                assert_bits(o, v(i, me, self.splits[i][me]), f"{what} from {i}")
        elif op == "all_to_all_single":
            assert_bits(self.out, torch.cat([v(i, 0, W * n)[me * n:(me + 1) * n] for i in range(W)]), what)
        elif op == "all_to_all_single_uneven":
            assert_bits(self.out, torch.cat([v(i, me, self.splits[i][me]) for i in range(W)]), what)
        elif op == "gather":
            for m, o in enumerate(self.outs or []):
                assert_bits(o, v(m, 0), f"{what} from {m}")
        elif op == "scatter":
            assert_bits(self.out, v(c.root, me), what)
        self.buf.check_sentinels(what)


def _split(seed, index, i, j, n):
    """Uneven all_to_all: elements group rank i sends to j (0 included)."""
    r = random.Random((seed * 7919 + index) * 131 + i * 17 + j)
    return r.choice((0, 1, n, n + r.randrange(0, 40) * 3 + 1, max(0, n // 2)))


def run_case(env, case, sync=None):
    """Runs one case on this rank (nothing if it is not in the case's group); raises AssertionError
    naming the case. `sync()` waits for the device where outputs are read (CUDA)."""
    _group, ranks = env.groups[case.group]
    if env.rank not in ranks:
        return
    sync = sync or (lambda: None)
    if case.op == "async_batch":
        ops = [Op(env, c) for c in case.batch]
        for o in ops:
            o.load(0)
        works = [o.issue(async_op=True) for o in ops]
        order = list(range(len(works)))
        random.Random(env.seed * 31 + case.index).shuffle(order)  # waited out of order
        for i in order:
            works[i].wait()
        sync()
        for o in ops:
            o.check(0)
        return
    o = Op(env, case)
    if case.mode == "graph":
        o.load(0)
        o.issue()  # warm: the plan exists before capture
        sync()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            o.issue()
        for replay in (1, 2):
            o.load(replay)
            graph.replay()
            sync()
            o.check(replay)
        return
    o.load(0)
    w = o.issue(async_op=case.mode == "async")
    if w is not None:
        w.wait()
    sync()
    o.check(0)
