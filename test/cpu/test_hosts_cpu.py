"""Groups that span hosts, on CPU, with simulated hosts (test/support/sim_hosts.py: each host is a set of rank
processes in their own mount and UTS namespaces, with a private /dev/shm and hostname; the TCP store
on 127.0.0.1 is shared). Needs root for the namespaces; skips with the reason elsewhere.

- The issue's reproduction: two ranks on two hosts, init_process_group("purlin"), all_reduce of a
  CPU tensor. Before the host map both ranks raised "shm_open failed ... No such file or directory";
  now the result equals gloo's.
- Every native op x float32 / bfloat16 / int64 / int16 / bool x reduce op, against references each
  rank computes, on 2 hosts x 1, 2 x 2 (ranks interleaved between the hosts), 2 x 3 and 2 + 1 ranks
  (NOTE [groups spanning hosts]). Inputs are small integers (AVG's multiples of the world size), so
  every result is exact whatever the order of reduction, and compared bit for bit. Counters: no op
  of a group spanning hosts runs natively as a whole; the families of the hierarchical rows run
  hierarchically where hosts hold two or more ranks each, everything else flat.
- What gloo gets wrong or lacks, as one host does it: NaN through MIN / MAX (held by a later rank),
  bool SUM through reduce and coalesced ops (bytes 0 or 1), int16 and complex copies (gather,
  scatter, all_to_all), PREMUL_SUM through reduce and coalescing blocks, uneven all_to_all, strided
  and 1-element views.
- A bad argument on one rank (NOTE [call agreement]): every rank raises the same error naming the
  ranks and values, within seconds (the timeout is 60 s), and the group runs the next op; mismatched
  broadcast roots too.
- DDP across the simulated hosts ends with gloo's parameters, bit for bit.
- Subgroups within one host (new_group, split_group, a DeviceMesh dimension) run natively; the
  other DeviceMesh dimension, across hosts, does not.
- A rank that never comes to the group's first collective: its peer fails naming it, and nothing
  is left in /dev/shm (run_hosts checks every host's /dev/shm after every run). torch's abort of a
  group spanning hosts ends a wait for peers that never call (NOTE [call agreement]).
- The host map's C++ unit test (test/cpp/test_host_map.cc).
The seeded fuzz of such groups, with a gloo twin, is test_hosts_fuzz_cpu.py.

    python -m pytest test/cpu/test_hosts_cpu.py -q
"""
import copy
import pathlib
import re
import subprocess
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

import sim_hosts

ROOT = pathlib.Path(__file__).resolve().parents[2]
WHY_NOT = sim_hosts.unshare_unavailable()
needs_hosts = pytest.mark.skipif(WHY_NOT is not None, reason=WHY_NOT or "")

# Ops the hierarchical rows name (hierarchical_rows in protocol_table.cc: every size).
FAMILIES = ("all_reduce", "reduce_scatter_tensor", "reduce_scatter", "all_gather_into_tensor", "all_gather",
            "all_reduce_coalesced", "reduce_scatter_tensor_coalesced")
PREMUL = 2.0  # exact: PREMUL_SUM results stay integers


# ---------------------------------------------------------------- inputs and references (every rank)

def ops_for(dtype):
    if dtype == torch.bool:
        return ("sum", "product")
    if dtype == torch.int16:
        return ("sum", "max")
    if dtype.is_floating_point:
        return ("sum", "avg", "product", "min", "max", "premul_sum")
    return ("sum", "product", "min", "max")


def make_op(op):
    return dist._make_nccl_premul_sum(PREMUL) if op == "premul_sum" else getattr(dist.ReduceOp, op.upper())


def value(seed, r, n, dtype, op, world):
    """Rank r's input of case `seed`: exact in `dtype` whatever the reduction order (NOTE in the docstring)."""
    g = torch.Generator().manual_seed(seed * 1009 + r)
    if dtype == torch.bool:
        return torch.randint(0, 2, (n,), generator=g).bool()
    if op in ("min", "max") and not dtype.is_floating_point:
        info = torch.iinfo(dtype)
        return torch.randint(info.min, info.max, (n,), generator=g, dtype=torch.int64).to(dtype)
    if dtype == torch.int16:  # sums wrap modulo 2^16 (the parts across hosts widen and narrow)
        return torch.randint(-32768, 32767, (n,), generator=g, dtype=torch.int64).to(dtype)
    if dtype == torch.int64 and op == "sum":
        return torch.randint(-2**40, 2**40, (n,), generator=g, dtype=torch.int64)
    mag = torch.randint(1, 3 if op == "product" else 5, (n,), generator=g)
    x = mag * (torch.randint(0, 2, (n,), generator=g) * 2 - 1)
    return (x * world if op == "avg" else x).to(dtype)  # AVG: the sum divides exactly


def reduced(xs, op, dtype, world):
    if dtype == torch.bool:
        s = torch.stack(xs)
        return s.any(0) if op in ("sum", "max") else s.all(0)
    wide = torch.complex128 if dtype.is_complex else torch.float64 if dtype.is_floating_point else torch.int64
    s = torch.stack([x.to(wide) for x in xs])
    r = {"sum": lambda: s.sum(0), "avg": lambda: s.sum(0) / world, "premul_sum": lambda: s.sum(0) * PREMUL,
         "product": lambda: s.prod(0), "min": lambda: s.amin(0), "max": lambda: s.amax(0)}[op]()
    return r.to(dtype)  # int16: wraps, as purlin's sums do


class Checker:
    """Runs cases on every rank, counting calls per op and collecting mismatches. `hier`: whether the
    families run hierarchically (hosts of equal size, two or more ranks each)."""

    def __init__(self, rank, world, hier):
        self.rank, self.world, self.hier = rank, world, hier
        self.errors, self.calls = [], {}
        self.seed = 0

    def next(self):
        self.seed += 1
        return self.seed

    def call(self, name):
        self.calls[name] = self.calls.get(name, 0) + 1

    def same(self, what, got, want):
        if got.dtype == want.dtype == torch.bool:  # bytes: a bool must hold 0 or 1 (gloo's SUM leaves 2)
            got, want = got.view(torch.uint8), want.view(torch.uint8)
        if want.is_complex() or want.is_floating_point():  # bits: NaN equals NaN
            esize = want.element_size() * (2 if want.is_complex() else 1)
            kind = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[esize // (2 if want.is_complex() else 1)]
            if got.dtype == want.dtype and got.shape == want.shape:
                got = (torch.view_as_real(got) if got.is_complex() else got).contiguous().view(kind)
                want = (torch.view_as_real(want) if want.is_complex() else want).contiguous().view(kind)
        if got.dtype != want.dtype or got.shape != want.shape or not torch.equal(got, want):
            bad = "" if got.shape != want.shape else f" ({int((got != want).sum())} of {got.numel()} differ)"
            self.errors.append(f"rank {self.rank}: {what}: got {got.flatten()[:6].tolist()}..., "
                               f"want {want.flatten()[:6].tolist()}...{bad}")


def op_suite(ck, sizes=(5, 1001)):
    """Every native op of the default group; see the module docstring."""
    W, r = ck.world, ck.rank
    for dtype in (torch.float32, torch.bfloat16, torch.int64, torch.int16, torch.bool):
        for op in ops_for(dtype):
            for n in sizes:
                s = ck.next()
                xs = [value(s, q, n, dtype, op, W) for q in range(W)]
                x = xs[r].clone()
                dist.all_reduce(x, op=make_op(op))
                ck.call("all_reduce")
                ck.same(f"all_reduce {dtype} {op} n={n}", x, reduced(xs, op, dtype, W))
                if dtype == torch.bool:
                    continue
                big = [torch.cat([value(s + 7919, q * W + d, n, dtype, op, W) for d in range(W)]) for q in range(W)]
                want = reduced(big, op, dtype, W).view(W, n)[r]
                out = torch.empty(n, dtype=dtype)
                dist.reduce_scatter_tensor(out, big[r].clone(), op=make_op(op))
                ck.call("reduce_scatter_tensor")
                ck.same(f"reduce_scatter_tensor {dtype} {op} n={n}", out, want)
                out = torch.empty(n, dtype=dtype)
                dist.reduce_scatter(out, list(big[r].clone().view(W, n)), op=make_op(op))
                ck.call("reduce_scatter")
                ck.same(f"reduce_scatter {dtype} {op} n={n}", out, want)
    # Strided views (gloo reads their storage, not their elements) and a 1-element view whose stride
    # is not 1 (contiguous to torch, yet not viewable as bytes).
    s = ck.next()
    xs = [value(s, q, 2 * 37, torch.float32, "sum", W).view(37, 2) for q in range(W)]
    x = xs[r].clone()
    dist.all_reduce(x[:, 1])
    ck.call("all_reduce")
    want = xs[r].clone()
    want[:, 1] = reduced([t[:, 1].contiguous() for t in xs], "sum", torch.float32, W)
    ck.same("all_reduce of a strided view", x, want)
    y = torch.zeros(W, 3, dtype=torch.int64)
    dist.all_gather_into_tensor(y.t(), torch.full((3,), r, dtype=torch.int64))  # output (3, W): column q
    ck.call("all_gather_into_tensor")
    ck.same("all_gather_into_tensor into a strided view", y.t().contiguous().view(-1),
            torch.arange(W, dtype=torch.int64).repeat_interleave(3))
    t = torch.arange(8, dtype=torch.int32) * (r + 1)
    out = torch.empty(W, dtype=torch.int32)
    dist.all_gather_into_tensor(out, t[1::2][:1])
    ck.call("all_gather_into_tensor")
    ck.same("all_gather_into_tensor of a 1-element strided view", out, torch.arange(1, W + 1, dtype=torch.int32))
    outs = [torch.empty(1, dtype=torch.int32) for _ in range(W)]
    dist.all_gather(outs, t[1::2][:1])
    ck.call("all_gather")
    ck.same("all_gather of a 1-element strided view", torch.cat(outs), torch.arange(1, W + 1, dtype=torch.int32))

    for dtype in (torch.float32, torch.bfloat16, torch.int64, torch.int16):
        for n in sizes:
            s = ck.next()
            xs = [value(s, q, n, dtype, "sum", W) for q in range(W)]
            out = torch.empty(W * n, dtype=dtype)
            dist.all_gather_into_tensor(out, xs[r])
            ck.call("all_gather_into_tensor")
            ck.same(f"all_gather_into_tensor {dtype} n={n}", out, torch.cat(xs))
            outs = [torch.empty(n, dtype=dtype) for _ in range(W)]
            dist.all_gather(outs, xs[r])
            ck.call("all_gather")
            ck.same(f"all_gather {dtype} n={n}", torch.cat(outs), torch.cat(xs))
            for root in (0, W - 1):
                y = xs[r].clone()
                dist.broadcast(y, src=root)
                ck.call("broadcast")
                ck.same(f"broadcast {dtype} n={n} root={root}", y, xs[root])

    # Ops without a hierarchical form: flat.
    for dtype in (torch.float32, torch.int64, torch.int16, torch.complex64):
        s = ck.next()
        xs = [value(s, q, 33, dtype, "sum", W) for q in range(W)]
        y = xs[r].clone()
        if not dtype.is_complex:  # complex has no MAX
            dist.reduce(y, dst=W - 1, op=dist.ReduceOp.MAX)
            ck.call("reduce")
            ck.same(f"reduce max {dtype}", y, reduced(xs, "max", dtype, W) if r == W - 1 else xs[r])
        pair = [xs[r].clone(), xs[r][:7].clone()]
        dist.all_reduce_coalesced(pair)
        ck.call("all_reduce_coalesced")
        ck.same(f"all_reduce_coalesced {dtype}", torch.cat(pair),
                torch.cat([reduced(xs, "sum", dtype, W), reduced([t[:7] for t in xs], "sum", dtype, W)]))
        blocks = [value(s + 1, q, 3 * W, dtype, "sum", W) for q in range(W)]
        out = torch.empty(3 * W, dtype=dtype)
        dist.all_to_all_single(out, blocks[r])
        ck.call("all_to_all_single")
        ck.same(f"all_to_all_single {dtype}", out, torch.cat([blocks[q][3 * r:3 * r + 3] for q in range(W)]))
        outs = [torch.empty(3, dtype=dtype) for _ in range(W)]
        dist.all_to_all(outs, list(blocks[r].view(W, 3)))
        ck.call("all_to_all")
        ck.same(f"all_to_all {dtype}", torch.cat(outs), torch.cat([blocks[q][3 * r:3 * r + 3] for q in range(W)]))
        got = [torch.empty(33, dtype=dtype) for _ in range(W)] if r == 0 else None
        dist.gather(xs[r], got, dst=0)
        ck.call("gather")
        if r == 0:
            ck.same(f"gather {dtype}", torch.cat(got), torch.cat(xs))
        one = torch.empty(33, dtype=dtype)
        dist.scatter(one, list(torch.stack(xs)) if r == W - 1 else None, src=W - 1)
        ck.call("scatter")
        ck.same(f"scatter {dtype}", one, xs[r])
    gloo_lacks(ck)
    dist.barrier()
    ck.call("barrier")


def gloo_lacks(ck):
    """What gloo gets wrong or lacks, as one host does it (module docstring)."""
    W, r = ck.world, ck.rank
    nan = float("nan")
    for dtype in (torch.float32, torch.bfloat16):
        for op, keep in (("max", 2.0), ("min", -2.0)):
            x = torch.tensor([nan if r == W - 1 else 1.0, keep if r == 0 else 0.0], dtype=dtype)
            dist.all_reduce(x, op=make_op(op))
            ck.call("all_reduce")
            ck.same(f"all_reduce {op} {dtype} of a NaN held by the last rank", x, torch.tensor([nan, keep], dtype=dtype))
            y = torch.tensor([nan if r == W - 1 else 1.0] * 3, dtype=dtype)
            dist.reduce(y, dst=0, op=make_op(op))
            ck.call("reduce")
            if r == 0:
                ck.same(f"reduce {op} {dtype} of a NaN", y, torch.full((3,), nan, dtype=dtype))
    ones = torch.ones(3, dtype=torch.bool)
    b = ones.clone()
    dist.reduce(b, dst=0)
    ck.call("reduce")
    ck.same("reduce SUM of bool", b, ones)
    pair = [ones.clone(), ones[:2].clone()]
    dist.all_reduce_coalesced(pair)
    ck.call("all_reduce_coalesced")
    ck.same("all_reduce_coalesced SUM of bool", torch.cat(pair), torch.ones(5, dtype=torch.bool))
    with dist._coalescing_manager(device=torch.device("cpu")):
        for t in pair:
            dist.all_reduce(t)
    ck.call("all_reduce_coalesced")
    ck.same("SUM of bool in a coalescing block", torch.cat(pair), torch.ones(5, dtype=torch.bool))
    # PREMUL_SUM through reduce and a coalescing block.
    p = torch.full((4,), float(r + 1))
    dist.reduce(p, dst=W - 1, op=make_op("premul_sum"))
    ck.call("reduce")
    if r == W - 1:
        ck.same("reduce PREMUL_SUM", p, torch.full((4,), PREMUL * W * (W + 1) / 2))
    parts = [torch.full((3,), float(r)), torch.full((2,), 1.0)]
    with dist._coalescing_manager(device=torch.device("cpu")):
        for t in parts:
            dist.all_reduce(t, op=make_op("premul_sum"))
    ck.call("all_reduce_coalesced")
    ck.same("PREMUL_SUM in a coalescing block", torch.cat(parts),
            torch.tensor([PREMUL * W * (W - 1) / 2] * 3 + [PREMUL * W] * 2))
    # Uneven all_to_all and all_to_all_single: rank q sends j + 1 elements to rank j.
    for dtype in (torch.int16, torch.complex64, torch.float32):
        ins = [torch.full((j + 1,), 10 * r + j, dtype=dtype) for j in range(W)]
        outs = [torch.empty(r + 1, dtype=dtype) for _ in range(W)]
        dist.all_to_all(outs, ins)
        ck.call("all_to_all")
        ck.same(f"uneven all_to_all {dtype}", torch.cat(outs),
                torch.cat([torch.full((r + 1,), 10 * q + r, dtype=dtype) for q in range(W)]))
        out = torch.empty(W * (r + 1), dtype=dtype)
        dist.all_to_all_single(out, torch.cat(ins), [r + 1] * W, [j + 1 for j in range(W)])
        ck.call("all_to_all_single")
        ck.same(f"uneven all_to_all_single {dtype}", out, torch.cat(outs))


def argument_errors(ck):
    """NOTE [call agreement]: one rank's bad argument raises on every rank, promptly, naming the ranks
    and values; the group runs the next op."""
    import time
    W, r = ck.world, ck.rank
    bad = W - 1  # on the last host
    cases = (
        ("all_reduce", lambda: dist.all_reduce(torch.ones(5 if r == bad else 4)),
         r"rank 0 passed 4 elements, rank %d passed 5 elements" % bad),
        ("broadcast root", lambda: dist.broadcast(torch.ones(4), src=1 if r == bad else 0),
         r"different roots: rank 0 passed root 0, rank %d passed root 1" % bad),
        ("all_to_all_single", lambda: dist.all_to_all_single(torch.empty(W * (2 if r == bad else 1)),
                                                             torch.ones(W * (2 if r == bad else 1))),
         r"rank \d+ sends \d+ elements to rank \d+, which expects \d+ from it"),
        ("reduce dtype", lambda: dist.reduce(torch.ones(4, dtype=torch.int32 if r == bad else torch.float32), dst=0),
         r"different dtypes: rank 0 passed Float, rank %d passed Int" % bad),
        ("all_gather_into_tensor output", lambda: dist.all_gather_into_tensor(
            torch.empty(W * 3 + (1 if r == bad else 0)), torch.ones(3)),
         r"rank %d: output has %d elements, expected world size x input = %d" % (bad, W * 3 + 1, W * 3)),
        ("complex MAX", lambda: dist.all_reduce(torch.ones(2, dtype=torch.complex64), op=dist.ReduceOp.MAX),
         r"MAX.*complex"),
    )
    for what, call, pattern in cases:
        t0 = time.monotonic()
        try:
            call()
            ck.errors.append(f"rank {r}: {what}: a mismatched call returned")
        except (RuntimeError, ValueError) as e:
            took = time.monotonic() - t0
            if not re.search(pattern, str(e)) and not (what == "complex MAX" and "complex" in str(e)):
                ck.errors.append(f"rank {r}: {what}: the error does not say /{pattern}/: {e}")
            if took > 5.0:  # the timeout is 60 s; on one host it takes milliseconds
                ck.errors.append(f"rank {r}: {what}: the error took {took:.2f} s")
        x = torch.full((3,), float(r))
        dist.all_reduce(x)
        ck.same(f"all_reduce after the mismatched {what}", x, torch.full((3,), float(W * (W - 1) / 2)))


def check_counters(ck, counters):
    """What ran where (module docstring); appends to ck.errors."""
    def get(k):
        return tuple(counters.get(k, (0, 0)))

    for op, n in ck.calls.items():
        native, flat = get(op)
        across = get(op + " across hosts")[1]
        if native:
            ck.errors.append(f"rank {ck.rank}: {op} ran natively on a group spanning hosts ({counters})")
        if flat + across != n:
            ck.errors.append(f"rank {ck.rank}: {op}: {flat} flat + {across} hierarchical calls, expected {n}")
        if across != (n if ck.hier and op in FAMILIES else 0):
            ck.errors.append(f"rank {ck.rank}: {op}: {across} of {n} calls hierarchical, expected "
                             f"{'all' if ck.hier and op in FAMILIES else 'none'}")
    within = {k: v for k, v in counters.items() if k.endswith(" within hosts")}
    if ck.hier != bool(within):
        ck.errors.append(f"rank {ck.rank}: parts within hosts counted: {within}, expected {'some' if ck.hier else 'none'}")
    for k, (native, fallback) in within.items():
        if fallback or not native:
            ck.errors.append(f"rank {ck.rank}: {k} = ({native}, {fallback}): parts within a host must run natively")


def counters_of(group=None):
    import torch_purlin
    return {k: tuple(v) for k, v in torch_purlin.counters(group).items()}


def start(timeout=60):
    torch.set_num_threads(1)
    import torch_purlin  # noqa: F401  registers "purlin"
    dist.init_process_group("purlin", timeout=timedelta(seconds=timeout))


# ---------------------------------------------------------------- what each rank runs

def two_hosts_one_rank_each(rank, world, args):
    """The issue's reproduction, a rank that never comes, and the op suite: 2 hosts x 1 rank."""
    start()
    gloo = dist.new_group(backend="gloo")
    ck = Checker(rank, world, hier=False)  # one rank per host: nothing within a host to gain
    # The issue: both ranks raised "purlin shm: shm_open failed for segment '/purlin_..._r1'".
    x = torch.arange(8, dtype=torch.float32) * (rank + 1)
    ref = x.clone()
    dist.all_reduce(x)
    dist.all_reduce(ref, group=gloo)
    ck.same("the issue's all_reduce against gloo's", x, ref)
    ck.call("all_reduce")
    # Rank 1 never reaches this group's first collective: rank 0 names it, within the group's timeout.
    late = dist.new_group([0, 1], timeout=timedelta(seconds=2))
    if rank == 0:
        try:
            dist.all_reduce(torch.ones(3), group=late)
            ck.errors.append("rank 0: all_reduce on a group whose rank 1 never comes returned")
        except RuntimeError as e:
            if "rank 1" not in str(e) or "purlin/hosts/" not in str(e):
                ck.errors.append(f"rank 0: the timeout does not name rank 1 and the host map's key: {e}")
    op_suite(ck)
    check_counters(ck, counters_of())
    dist.barrier(group=gloo)
    dist.destroy_process_group()
    return ck.errors


def ddp_matches_gloo(rank, world, ck):
    """DDP over the purlin default group and over gloo: the same parameters, bit for bit. One linear
    layer under a loss linear in its output: the gradients are integers whatever the weights, so
    every sum is exact, and SGD steps of 1/16 keep the weights exact."""
    from torch.nn.parallel import DistributedDataParallel as DDP
    gloo = dist.new_group(backend="gloo")
    g = torch.Generator().manual_seed(5)
    model = torch.nn.Linear(16, 8)
    with torch.no_grad():
        for p in model.parameters():  # each rank its own start: DDP broadcasts rank 0's
            p.copy_(torch.randint(-3, 4, p.shape, generator=g).float() / 4 + rank)
    runs = []
    for group in (None, gloo):
        ddp = DDP(copy.deepcopy(model), process_group=group, bucket_cap_mb=0.0001)
        runs.append((ddp, torch.optim.SGD(ddp.parameters(), lr=1 / 16)))
    data = torch.Generator().manual_seed(100 + rank)
    for _ in range(3):
        x = torch.randint(-2, 3, (6, 16), generator=data).float()
        y = torch.randint(-2, 3, (6, 8), generator=data).float()
        for ddp, opt in runs:
            opt.zero_grad()
            (ddp(x) * y).sum().backward()
            opt.step()
    for (name, p), q in zip(runs[0][0].module.state_dict().items(), runs[1][0].module.state_dict().values()):
        ck.same(f"DDP parameter {name} against gloo's", p, q)


def subgroups_within_hosts(rank, world, hosts, ck):
    """new_group, split_group and a DeviceMesh dimension over one host's ranks run natively."""
    from torch.distributed.device_mesh import init_device_mesh
    mine = next(h for h in hosts if rank in h)
    groups = [dist.new_group(h) for h in hosts]  # every rank makes every group
    g = groups[hosts.index(mine)]
    s = ck.next()
    xs = {q: value(s, q, 300, torch.float32, "sum", world) for q in mine}
    x = xs[rank].clone()
    dist.all_reduce(x, group=g)
    ck.same("all_reduce on new_group(the host's ranks)", x, reduced(list(xs.values()), "sum", torch.float32, world))
    c = counters_of(g)
    if c.get("all_reduce") != (1, 0) or any("hosts" in k for k in c):
        ck.errors.append(f"rank {rank}: new_group within a host did not run natively: {c}")
    world_pg = dist.group.WORLD
    split = world_pg.split_group(mine, group_name=f"hosts_split_{mine[0]}")
    y = xs[rank].clone()
    split.allreduce([y]).wait()
    ck.same("all_reduce on split_group(the host's ranks)", y, reduced(list(xs.values()), "sum", torch.float32, world))
    c = counters_of(split)
    if c.get("all_reduce") != (1, 0):
        ck.errors.append(f"rank {rank}: split_group within a host did not run natively: {c}")
    # A 2-D mesh whose dimension "host" holds one host's ranks (hosts are [[0, 2], [1, 3]]).
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("host", "across"))
    for dim, native in (("host", True), ("across", False)):
        pg = mesh.get_group(dim)
        z = torch.full((64,), float(rank + 1))
        dist.all_reduce(z, group=pg)
        ranks = dist.get_process_group_ranks(pg)
        ck.same(f"all_reduce on mesh dimension {dim}", z, torch.full((64,), float(sum(q + 1 for q in ranks))))
        c = counters_of(pg)
        ran_natively = c.get("all_reduce", (0, 0))[0] == 1
        if ran_natively != native:
            ck.errors.append(f"rank {rank}: mesh dimension {dim} (ranks {ranks}): counters {c}, expected "
                             f"{'native' if native else 'the fallback'}")


def abort_inside_a_part(rank, ck):
    """NOTE [shutdown and abort]: torch's abort of a group spanning hosts, from another thread, ends a
    wait for peers that never call (inside the call's agreement, NOTE [call agreement]), and closes
    the group."""
    import threading
    import time
    g = dist.new_group(list(range(ck.world)))
    dist.all_reduce(torch.ones(8, dtype=torch.int16), group=g)  # maps the hosts, makes the subgroups
    if rank == 0:  # its peers never join the next one
        timer = threading.Timer(0.5, dist.distributed_c10d._abort_process_group, args=(g,))
        t0 = time.monotonic()
        timer.start()
        try:  # the group's own call: torch's wrapper cannot name a group aborted meanwhile
            g.allreduce([torch.ones(8, dtype=torch.int16)]).wait()
            ck.errors.append("rank 0: an all_reduce whose host peer never joined returned")
        except RuntimeError as e:
            if not re.search(r"all_reduce on rank 0 .*aborted while this rank waited for the others", str(e)):
                ck.errors.append(f"rank 0: the abort's error does not say where it waited: {e}")
        if time.monotonic() - t0 > 20:
            ck.errors.append(f"rank 0: abort took {time.monotonic() - t0:.1f} s to end the wait")
        timer.join()
        try:
            g.allreduce([torch.ones(8, dtype=torch.int16)]).wait()
            ck.errors.append("rank 0: an aborted group ran an all_reduce")
        except RuntimeError as e:
            if "the group was aborted" not in str(e):
                ck.errors.append(f"rank 0: after abort: {e}")


def two_hosts_two_ranks_each(rank, world, args):
    """2 hosts x 2 ranks, interleaved: host 0 = ranks 0, 2, host 1 = ranks 1, 3."""
    start()
    ck = Checker(rank, world, hier=True)
    op_suite(ck)
    check_counters(ck, counters_of())
    argument_errors(ck)
    ddp_matches_gloo(rank, world, ck)
    subgroups_within_hosts(rank, world, args["hosts"], ck)
    abort_inside_a_part(rank, ck)
    dist.barrier()
    dist.destroy_process_group()
    return ck.errors


def op_suite_only(rank, world, args):
    """The op suite, its counters and the argument errors on any placement (args: hosts, even)."""
    start()
    ck = Checker(rank, world, hier=args["even"])
    op_suite(ck, sizes=tuple(args.get("sizes", (5, 1001))))
    check_counters(ck, counters_of())
    argument_errors(ck)
    if not args["even"]:  # the host's own ranks still form a native subgroup
        host = next(h for h in args["hosts"] if rank in h)
        groups = {tuple(h): dist.new_group(h) for h in args["hosts"]}
        if len(host) > 1:
            g = groups[tuple(host)]
            x = torch.full((10,), float(rank))
            dist.all_reduce(x, group=g)
            ck.same("all_reduce within the larger host", x, torch.full((10,), float(sum(host))))
            if counters_of(g).get("all_reduce") != (1, 0):
                ck.errors.append(f"rank {rank}: the host's subgroup did not run natively: {counters_of(g)}")
    dist.barrier()
    dist.destroy_process_group()
    return ck.errors


# ---------------------------------------------------------------- pytest

def run(target, hosts, **args):
    results = sim_hosts.run_hosts(f"test_hosts_cpu:{target}", hosts, args=dict(args, hosts=hosts), timeout=240)
    errors = [e for r in results for e in (r["value"] or [])]
    assert not errors, "\n".join(errors[:40])


@needs_hosts
def test_issue_two_hosts_one_rank_each():
    run("two_hosts_one_rank_each", [[0], [1]])


@needs_hosts
def test_two_hosts_two_ranks_each_interleaved():
    run("two_hosts_two_ranks_each", [[0, 2], [1, 3]])


@needs_hosts
def test_two_hosts_three_ranks_each():
    run("op_suite_only", [[0, 1, 2], [3, 4, 5]], even=True, sizes=[5, 3001])


@needs_hosts
def test_uneven_hosts_run_flat():
    run("op_suite_only", [[0, 1], [2]], even=False)


@needs_hosts
def test_one_rank_then_three():
    run("op_suite_only", [[0], [1, 2, 3]], even=False, sizes=[5])


def test_host_map_program(tmp_path):
    """The partition, hints and exchange of the host map, in C++ (no torch)."""
    exe = tmp_path / "test_host_map"
    cmd = ["g++", "-O0", "-std=c++17", "-Wall", "-I", str(ROOT / "csrc"), "-I", str(ROOT / "test/cpp"),
           str(ROOT / "csrc/backend/machines/host_map.cc"), str(ROOT / "csrc/backend/group/shm_group.cc"),
           str(ROOT / "csrc/backend/group/shm_capacity.cc"), str(ROOT / "csrc/common/types.cc"),
           str(ROOT / "csrc/atom/atom.cc"), *map(str, sorted((ROOT / "csrc/atom/cpu").glob("*.cc"))),
           str(ROOT / "test/cpp/test_host_map.cc"), "-o", str(exe), "-lrt", "-pthread"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, f"compile failed: {' '.join(cmd)}\n{p.stderr}"
    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and " 0 failed" in r.stdout, f"{r.stdout}\n{r.stderr}"
