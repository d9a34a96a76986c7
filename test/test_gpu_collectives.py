"""GPU tests of purlin's native CUDA datapath (CUDA IPC workspaces + the plan kernel).

Needs 2 GPUs (PURLIN_GPU_WORLD; fewer shared under TORCH_PURLIN_CUDA_SHARE_GPU=1 and
MPS, gpu_harness.py; skips otherwise). One spawn of two processes, one per GPU, runs
every case in sequence and writes one line per case; the pytest functions
below then report the cases family by family, so the whole suite pays for
process start-up and NCCL initialisation once.

Reference: NCCL in the same processes (the default group is
"cpu:gloo,cuda:nccl"), plus a float64/int64 CPU reduction of every rank's
input (NOTE [recomputable inputs] in mp_util.py: rank r's input is drawn from
a generator seeded by (case, r), so every rank can rebuild every input).
Exact comparison for copies, integers and MIN/MAX; otherwise within
RTOL[dtype] of sum_k |x_k| (fp32 accumulation, one rounding).

    python -m pytest test/test_gpu_collectives.py     # or test/gpu/run_gpu_suite.sh
"""
import os
import re
import time
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

from gpu_harness import (Runner, all_gather_input, assert_equal, check_exited_cleanly, check_family, gpus_missing,
                         init_worker, purlin_group, run_suite, shares_gpu)
from mp_util import PREMUL_FACTOR, reference

WORLD = int(os.environ.get("PURLIN_GPU_WORLD", "2"))  # ranks = GPUs used (tools/gpu.sh NPROC)
SUITE_TIMEOUT_S = float(os.environ.get("PURLIN_GPU_SUITE_TIMEOUT", "240"))
PURLIN_TIMEOUT = timedelta(seconds=20)  # bounded device waits: a hang fails a case, not the suite
RTOL = {torch.float64: 1e-12, torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}

FLOATS = (torch.float32, torch.bfloat16, torch.float16, torch.float64)
INTS = (torch.int32, torch.int8, torch.uint8, torch.int64, torch.int16)
SIZES = (1, 3, 7, 127, 1000, 4099, 65537, 1_000_003)

FAMILIES = (
    "all_reduce", "reduce", "broadcast", "all_gather_into_tensor", "all_gather", "reduce_scatter_tensor",
    "all_to_all_single", "gather", "scatter", "barrier", "unaligned", "small_workspace", "async", "graph",
    "mixed_backend", "setup_agreement", "counters", "fallback", "protocol_table", "zero_copy", "peer_outputs", "push",
    "lines", "parity", "overlapped_launch", "block_counts", "call_tag", "timeout",
)


# ---- inputs and references ---------------------------------------------------------


def ops_for(dtype):
    if dtype.is_floating_point:
        return ("sum", "avg", "product", "min", "max", "premul_sum")
    return ("sum", "product", "min", "max")


def make_op(name):
    if name == "premul_sum":
        return dist._make_nccl_premul_sum(PREMUL_FACTOR)
    return getattr(dist.ReduceOp, name.upper())


def make_input(seed, rank, n, dtype, op=None):
    g = torch.Generator().manual_seed(seed * 1_000_003 + rank)
    if dtype == torch.bool:
        return torch.randint(0, 2, (n,), generator=g).bool()
    if dtype.is_complex:
        return torch.complex(torch.rand(n, generator=g) + 0.5, -torch.rand(n, generator=g) - 0.5).to(dtype)
    if dtype.is_floating_point:
        mag = 0.5 + torch.rand(n, generator=g, dtype=torch.float64)
        sign = torch.randint(0, 2, (n,), generator=g) * 2 - 1
        return (mag * sign).to(dtype)
    info = torch.iinfo(dtype)
    if op in ("min", "max"):
        lo, hi = info.min, info.max
    elif op == "product":
        lo, hi = (1, 3) if dtype == torch.uint8 else (-3, 3)
    else:
        lo, hi = (0, 100) if dtype == torch.uint8 else (-100, 100)
    hi = min(hi, torch.iinfo(torch.int64).max - 1)  # randint's bound is exclusive and an int64
    x = torch.randint(lo, hi + 1, (n,), generator=g, dtype=torch.int64)
    x[x == 0] = 1
    return x.to(dtype)


def assert_reduced(got, xs, op, what):
    """got (any device) is the reduction of xs under op."""
    got = got.cpu()
    dtype = xs[0].dtype
    ref = reference(xs, op)
    if not dtype.is_floating_point:
        # integers wrap like the device arithmetic (two's complement of the width)
        return assert_equal(got, ref.to(dtype), what)
    if op in ("min", "max"):
        return assert_equal(got, ref.to(dtype), what)
    scale = ref.abs() if op == "product" else torch.stack([t.double().abs() for t in xs]).sum(0) * {
        "sum": 1.0, "avg": 1.0 / len(xs), "premul_sum": PREMUL_FACTOR}[op]
    err = (got.double() - ref).abs()
    bad = ~(err <= RTOL[dtype] * scale + 1e-300)
    if bad.any():
        i = int(bad.nonzero()[0])
        raise AssertionError(f"{what}: {int(bad.sum())}/{got.numel()} elements off; first at {i}: got {got[i].item()!r}, "
                             f"expected {ref[i].item()!r} (rtol {RTOL[dtype]})")


def assert_close_to(got, ref, xs, op, what):
    """got vs another backend's result ref: exact where the arithmetic is exact, else the reduction tolerance."""
    if not xs[0].dtype.is_floating_point or op in ("min", "max"):
        return assert_equal(got, ref, what)
    if op == "premul_sum" and xs[0].dtype in (torch.float16, torch.bfloat16):
        # NCCL rounds the factor to the tensor's dtype first (0.3 -> 0.30078125 in
        # bf16); purlin keeps it in fp32. Both are checked against float64 by
        # assert_reduced; they need not agree with each other.
        return
    scale = torch.stack([t.double().abs() for t in xs]).sum(0)
    err = (got.cpu().double() - ref.cpu().double()).abs()
    bad = ~(err <= 2 * RTOL[xs[0].dtype] * scale + 1e-300)
    assert not bad.any(), f"{what}: differs from NCCL at {int(bad.sum())} elements"


def nccl_has(dtype, op=None):
    return dtype not in (torch.int16,) and not (op in ("avg", "premul_sum") and not dtype.is_floating_point)


# ---- the worker -----------------------------------------------------------------------


def _worker(rank, world, init_file, log_path):
    os.environ.setdefault("TORCH_PURLIN_LOG", "1")
    # Purlin's own datapath at every size; the protocol_table family sets its own table.
    os.environ["TORCH_PURLIN_CUDA_NCCL_FROM"] = "none"
    dev = init_worker(rank, world, init_file, timedelta(seconds=120))
    import torch_purlin  # noqa: F401  registers "purlin"

    R = Runner(rank, log_path)
    shared = shares_gpu(world)  # ranks share GPUs (NOTE [shared GPU]): NCCL refuses them, no NCCL reference
    nccl = None if shared else dist.group.WORLD
    host = dist.new_group(backend="gloo")
    pg = dist.new_group(backend="purlin", timeout=PURLIN_TIMEOUT)
    W = world

    def inputs(n, dtype, op=None):
        s = R.seed()
        return [make_input(s, r, n, dtype, op) for r in range(W)]

    # -- all_reduce --------------------------------------------------------------
    R.family = "all_reduce"

    def all_reduce_case(group, dtype, op, n, tag=""):
        xs = inputs(n, dtype, op)
        t = xs[rank].to(dev)
        dist.all_reduce(t, op=make_op(op), group=group)
        assert_reduced(t, xs, op, f"all_reduce{tag} {dtype} {op} n={n}")
        if nccl is not None and nccl_has(dtype, op):
            ref = xs[rank].to(dev)
            dist.all_reduce(ref, op=make_op(op), group=nccl)
            assert_close_to(t, ref, xs, op, f"all_reduce{tag} {dtype} {op} n={n} vs NCCL")

    for dtype in FLOATS + INTS:
        for op in ops_for(dtype):
            for n in SIZES if dtype in (torch.float32, torch.bfloat16) and op == "sum" else SIZES[:6] + (65537,):
                R.check(f"{dtype} {op} n={n}", all_reduce_case, pg, dtype, op, n)
    R.check("empty tensor", all_reduce_case, pg, torch.float32, "sum", 0)

    # -- reduce -------------------------------------------------------------------
    R.family = "reduce"

    def reduce_case(dtype, op, n, root):
        xs = inputs(n, dtype, op)
        t = xs[rank].to(dev)
        dist.reduce(t, dst=root, op=make_op(op), group=pg)
        if rank == root:
            assert_reduced(t, xs, op, f"reduce {dtype} {op} n={n} root={root}")
        else:
            assert_equal(t, xs[rank], "reduce: non-root input must stay unchanged")

    for dtype in (torch.float32, torch.bfloat16, torch.int32, torch.float16):
        for op in ("sum", "max", "product"):
            for n in (1, 1000, 65537):
                for root in range(W):
                    R.check(f"{dtype} {op} n={n} root={root}", reduce_case, dtype, op, n, root)

    # -- broadcast ----------------------------------------------------------------
    R.family = "broadcast"

    def broadcast_case(dtype, n, root):
        xs = inputs(n, dtype)
        t = xs[rank].to(dev)
        dist.broadcast(t, src=root, group=pg)
        assert_equal(t, xs[root], f"broadcast {dtype} n={n} root={root}")

    for dtype in (torch.float32, torch.bfloat16, torch.int8, torch.int64, torch.bool, torch.complex64,
                  torch.complex128):
        for n in (1, 7, 4099, 1_000_003):
            for root in range(W):
                R.check(f"{dtype} n={n} root={root}", broadcast_case, dtype, n, root)

    # -- all_gather_into_tensor ------------------------------------------------------
    R.family = "all_gather_into_tensor"

    def all_gather_case(dtype, n, in_place):
        xs = inputs(n, dtype)
        out = torch.zeros(W * n, dtype=dtype, device=dev)
        dist.all_gather_into_tensor(out, all_gather_input(out, xs[rank], rank, in_place), group=pg)
        assert_equal(out, torch.cat(xs), f"all_gather_into_tensor {dtype} n={n} in_place={in_place}")
        if nccl is not None:
            ref = torch.zeros_like(out)
            dist.all_gather_into_tensor(ref, xs[rank].to(dev), group=nccl)
            assert_equal(out, ref, "vs NCCL")

    for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.int32, torch.uint8, torch.bool,
                  torch.complex64):
        for n in SIZES:
            for in_place in (False, True):
                R.check(f"{dtype} n={n} in_place={in_place}", all_gather_case, dtype, n, in_place)

    # -- all_gather (list) ---------------------------------------------------------------
    R.family = "all_gather"

    def all_gather_list_case(dtype, n):
        xs = inputs(n, dtype)
        outs = [torch.zeros(n, dtype=dtype, device=dev) for _ in range(W)]
        dist.all_gather(outs, xs[rank].to(dev), group=pg)
        for r in range(W):
            assert_equal(outs[r], xs[r], f"all_gather {dtype} n={n} block {r}")

    for dtype in (torch.float32, torch.bfloat16, torch.int64):
        for n in (1, 1000, 65537):
            R.check(f"{dtype} n={n}", all_gather_list_case, dtype, n)

    # -- reduce_scatter_tensor -----------------------------------------------------------
    R.family = "reduce_scatter_tensor"

    def reduce_scatter_case(dtype, op, n, in_place):
        xs = inputs(W * n, dtype, op)
        inp = xs[rank].to(dev)
        out = inp[rank * n:(rank + 1) * n] if in_place else torch.zeros(n, dtype=dtype, device=dev)
        dist.reduce_scatter_tensor(out, inp, op=make_op(op), group=pg)
        blocks = [x[rank * n:(rank + 1) * n] for x in xs]
        assert_reduced(out, blocks, op, f"reduce_scatter_tensor {dtype} {op} n={n} in_place={in_place}")
        if nccl is not None and nccl_has(dtype, op):
            ref = torch.zeros(n, dtype=dtype, device=dev)
            dist.reduce_scatter_tensor(ref, xs[rank].to(dev), op=make_op(op), group=nccl)
            assert_close_to(out, ref, blocks, op, "vs NCCL")

    for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.int32, torch.int8, torch.float64):
        for op in ("sum", "avg", "max", "premul_sum") if dtype.is_floating_point else ("sum", "min"):
            for n in (1, 7, 1000, 65537, 500_001):
                for in_place in (False, True):
                    R.check(f"{dtype} {op} n={n} in_place={in_place}", reduce_scatter_case, dtype, op, n, in_place)

    # -- all_to_all_single -----------------------------------------------------------------
    R.family = "all_to_all_single"

    def all_to_all_case(dtype, k, uneven):
        # splits[s][d]: elements rank s sends to rank d (uneven: includes a zero split)
        splits = [[(k * (1 + s + 2 * d) if uneven else k) * (0 if uneven and s == 0 and d == 1 else 1)
                   for d in range(W)] for s in range(W)]
        s0 = R.seed()
        xs = [make_input(s0, r, sum(splits[r]), dtype) for r in range(W)]
        out = torch.zeros(sum(splits[s][rank] for s in range(W)), dtype=dtype, device=dev)
        ins = [splits[rank][d] for d in range(W)]
        outs = [splits[s][rank] for s in range(W)]
        if uneven:
            dist.all_to_all_single(out, xs[rank].to(dev), outs, ins, group=pg)
        else:
            dist.all_to_all_single(out, xs[rank].to(dev), group=pg)
        want = torch.cat([xs[s][sum(splits[s][:rank]):sum(splits[s][:rank + 1])] for s in range(W)])
        assert_equal(out, want, f"all_to_all_single {dtype} k={k} uneven={uneven}")
        if nccl is not None:
            ref = torch.zeros_like(out)
            dist.all_to_all_single(ref, xs[rank].to(dev), outs, ins, group=nccl)
            assert_equal(out, ref, "vs NCCL")

    for dtype in (torch.float32, torch.bfloat16, torch.int64):
        for k in (1, 3, 1000, 300_001):
            for uneven in (False, True):
                R.check(f"{dtype} k={k} uneven={uneven}", all_to_all_case, dtype, k, uneven)

    # -- gather / scatter ---------------------------------------------------------------------
    R.family = "gather"

    def gather_case(dtype, n, root):
        xs = inputs(n, dtype)
        lst = [torch.zeros(n, dtype=dtype, device=dev) for _ in range(W)] if rank == root else None
        dist.gather(xs[rank].to(dev), lst, dst=root, group=pg)
        if rank == root:
            for r in range(W):
                assert_equal(lst[r], xs[r], f"gather {dtype} n={n} root={root} block {r}")

    for dtype in (torch.float32, torch.int32):
        for n in (1, 1000, 65537):
            for root in range(W):
                R.check(f"{dtype} n={n} root={root}", gather_case, dtype, n, root)

    R.family = "scatter"

    def scatter_case(dtype, n, root):
        xs = inputs(n, dtype)
        out = torch.zeros(n, dtype=dtype, device=dev)
        lst = [x.to(dev) for x in xs] if rank == root else None
        dist.scatter(out, lst, src=root, group=pg)
        assert_equal(out, xs[rank], f"scatter {dtype} n={n} root={root}")

    for dtype in (torch.float32, torch.bfloat16):
        for n in (1, 1000, 65537):
            for root in range(W):
                R.check(f"{dtype} n={n} root={root}", scatter_case, dtype, n, root)

    # -- barrier -------------------------------------------------------------------------------
    R.family = "barrier"
    R.check("barrier x3", lambda: [dist.barrier(group=pg) for _ in range(3)])

    # -- unaligned: slices at odd element offsets --------------------------------------------------
    R.family = "unaligned"

    def unaligned_all_reduce(dtype, n, off):
        xs = inputs(n, dtype, "sum")
        big = torch.zeros(n + 5, dtype=dtype, device=dev)
        t = big[off:off + n]
        t.copy_(xs[rank].to(dev))
        dist.all_reduce(t, group=pg)
        assert_reduced(t, xs, "sum", f"unaligned all_reduce {dtype} n={n} offset={off}")
        assert_equal(big[:off], torch.zeros(off, dtype=dtype), "bytes before the slice")
        assert_equal(big[off + n:], torch.zeros(5 - off, dtype=dtype), "bytes after the slice")

    def unaligned_all_gather(dtype, n, off):
        xs = inputs(n, dtype)
        big = torch.zeros(W * n + 5, dtype=dtype, device=dev)
        out = big[off:off + W * n]
        src = torch.zeros(n + 3, dtype=dtype, device=dev)[1:n + 1]
        src.copy_(xs[rank].to(dev))
        dist.all_gather_into_tensor(out, src, group=pg)
        assert_equal(out, torch.cat(xs), f"unaligned all_gather {dtype} n={n} offset={off}")

    def unaligned_reduce_scatter(dtype, n, off):
        xs = inputs(W * n, dtype, "sum")
        big = torch.zeros(W * n + 5, dtype=dtype, device=dev)
        inp = big[off:off + W * n]
        inp.copy_(xs[rank].to(dev))
        out = torch.zeros(n + 2, dtype=dtype, device=dev)[1:n + 1]
        dist.reduce_scatter_tensor(out, inp, group=pg)
        assert_reduced(out, [x[rank * n:(rank + 1) * n] for x in xs], "sum", f"unaligned reduce_scatter {dtype} n={n}")

    for dtype in (torch.float32, torch.bfloat16, torch.int8, torch.float16):
        for n in (1, 33, 4099, 100_003):
            for off in (1, 3):
                R.check(f"all_reduce {dtype} n={n} off={off}", unaligned_all_reduce, dtype, n, off)
                R.check(f"all_gather {dtype} n={n} off={off}", unaligned_all_gather, dtype, n, off)
                R.check(f"reduce_scatter {dtype} n={n} off={off}", unaligned_reduce_scatter, dtype, n, off)

    # -- small workspace: tensors much larger than it (many rounds, device-resident plans, two-shot) ----
    R.family = "small_workspace"
    # Workspace plans at every size (lines and parity plans would serve up to 8M without rounds).
    small = purlin_group(PURLIN_TIMEOUT, TORCH_PURLIN_CUDA_WORKSPACE_BYTES="64K", TORCH_PURLIN_CUDA_TWO_SHOT_BYTES="16K",
                         TORCH_PURLIN_CUDA_LINE_BYTES="0", TORCH_PURLIN_CUDA_PARITY_BYTES="0")
    for dtype in (torch.float32, torch.bfloat16, torch.int32):
        for n in (1, 1000, 100_003, 1_000_003):
            R.check(f"all_reduce {dtype} n={n}", all_reduce_case, small, dtype, "sum", n, " (64K workspace)")
    R.check("all_reduce f32 max n=300001", all_reduce_case, small, torch.float32, "max", 300_001, " (64K workspace)")
    R.check("all_reduce f32 premul n=300001", all_reduce_case, small, torch.float32, "premul_sum", 300_001, " (64K)")
    # One-shot in many rounds (the default at W = 2 at every size: NOTE [protocol table]).
    one = purlin_group(PURLIN_TIMEOUT, TORCH_PURLIN_CUDA_WORKSPACE_BYTES="64K", TORCH_PURLIN_CUDA_TWO_SHOT_BYTES="1G",
                       TORCH_PURLIN_CUDA_LINE_BYTES="0", TORCH_PURLIN_CUDA_PARITY_BYTES="0")
    for dtype in (torch.float32, torch.bfloat16):
        for n in (100_003, 1_000_003):
            R.check(f"one-shot all_reduce {dtype} n={n}", all_reduce_case, one, dtype, "sum", n, " (64K, one-shot)")

    def small_copy_ops(n):
        xs = inputs(n, torch.float32)
        out = torch.zeros(W * n, device=dev)
        dist.all_gather_into_tensor(out, xs[rank].to(dev), group=small)
        assert_equal(out, torch.cat(xs), f"all_gather n={n} (64K workspace)")
        t = xs[rank].to(dev)
        dist.broadcast(t, src=1, group=small)
        assert_equal(t, xs[1], f"broadcast n={n} (64K workspace)")
        big = torch.cat(xs).to(dev) + rank
        o = torch.zeros(n, device=dev)
        dist.reduce_scatter_tensor(o, big, group=small)
        assert_reduced(o, [torch.cat(xs)[rank * n:(rank + 1) * n] + r for r in range(W)], "sum",
                       f"reduce_scatter n={n} (64K workspace)")
        a2a = torch.zeros(W * n, device=dev)
        dist.all_to_all_single(a2a, big, group=small)
        assert_equal(a2a, torch.cat([torch.cat(xs)[rank * n:(rank + 1) * n] + s for s in range(W)]),
                     f"all_to_all_single n={n} (64K workspace)")
        if nccl is not None:
            ref = torch.zeros_like(a2a)
            dist.all_to_all_single(ref, big, group=nccl)
            assert_equal(a2a, ref, f"all_to_all_single n={n} (64K workspace) vs NCCL")

    for n in (5, 40_000, 500_001):
        R.check(f"copy ops n={n}", small_copy_ops, n)

    # -- async_op=True overlapping with compute ------------------------------------------------------
    R.family = "async"

    def async_case(n):
        xs = inputs(n, torch.float32, "sum")
        t = xs[rank].to(dev)
        a = torch.randn(1024, 1024, device=dev)
        w = dist.all_reduce(t, group=pg, async_op=True)
        b = a @ a  # compute queued on the current stream while the collective runs on purlin's stream
        outs = [torch.zeros(n, device=dev) for _ in range(W)]
        w2 = dist.all_gather(outs, xs[rank].to(dev), group=pg, async_op=True)
        w.wait()
        w2.wait()
        c = b.sum()
        assert_reduced(t, xs, "sum", f"async all_reduce n={n}")
        for r in range(W):
            assert_equal(outs[r], xs[r], f"async all_gather n={n}")
        assert torch.isfinite(c)
        fut = dist.all_reduce(t, group=pg, async_op=True).get_future()
        got = fut.wait()[0]
        # t held the sum S already, so the second all_reduce gives W * S
        assert_reduced(got, [torch.stack(xs).sum(0)] * W, "sum", "get_future() of an async all_reduce")
        torch.cuda.synchronize()
        assert w.is_completed()

    for n in (1, 4099, 1_000_003):
        R.check(f"all_reduce + all_gather n={n}", async_case, n)

    def coalesced_block(n):
        # NOTE [coalescing] (csrc/backend/c10d/coalesced_work.h): torch hands back only endCoalescing()'s Work
        # for an async block (the fast path's all_reduce_coalesced Work is dropped), so that Work must
        # order the caller's stream after the block's collectives on purlin's stream.
        xs, ys = inputs(n, torch.float32, "sum"), inputs(n + 5, torch.float32, "sum")
        t, u = xs[rank].to(dev), ys[rank].to(dev)
        with dist._coalescing_manager(group=pg, device=dev, async_ops=True) as cm:
            dist.all_reduce(t, group=pg)
            dist.all_reduce(u, group=pg)
        cm.wait()
        t2, u2 = t.clone(), u.clone()  # read on the current stream right after wait()
        assert_reduced(t2, xs, "sum", f"coalesced async all_reduce n={n}")
        assert_reduced(u2, ys, "sum", f"coalesced async all_reduce n={n + 5}")
        g = inputs(n, torch.bfloat16)
        out = torch.empty(W * n, dtype=torch.bfloat16, device=dev)
        with dist._coalescing_manager(group=pg, device=dev, async_ops=True) as cm:
            dist.all_gather_into_tensor(out, g[rank].to(dev), group=pg)
        cm.wait()
        assert_equal(out.clone(), torch.cat(g), f"coalesced async all_gather_into_tensor n={n}")

    for n in (4099, 1_000_003, 8_000_001):
        R.check(f"async coalesced block n={n}", coalesced_block, n)

    # -- CUDA graph capture + replay -------------------------------------------------------------------
    R.family = "graph"

    def graph_all_reduce_1000():
        n = 8192
        inp = torch.full((n,), float(rank + 1), device=dev)
        buf = torch.empty_like(inp)
        dist.all_reduce(buf, group=pg)  # warm-up outside capture
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            buf.copy_(inp)
            dist.all_reduce(buf, group=pg)
            inp.add_(1.0)
        base = sum(r + 1 for r in range(W))
        for k in range(1, 1001):
            g.replay()
            if k % 100 == 0:
                torch.cuda.synchronize()
                want = float(base + W * (k - 1))
                assert torch.all(buf == want), f"replay {k}: got {buf[:4].tolist()}, want {want}"

    R.check("all_reduce x1000 replays", graph_all_reduce_1000)

    def graph_every_op():
        n = 4099
        split = [[3 + s if d == 0 else 5 for d in range(W)] for s in range(W)]  # split[s][d]: s sends to d
        splits_in = split[rank]
        splits_out = [split[s][rank] for s in range(W)]
        x = torch.zeros(n, device=dev)
        ag = torch.zeros(W * n, device=dev)
        rs_in = torch.zeros(W * n, device=dev)
        rs = torch.zeros(n, device=dev)
        bc = torch.zeros(n, device=dev)
        red = torch.zeros(n, device=dev)
        a2a_in = torch.zeros(sum(splits_in), device=dev)
        a2a = torch.zeros(sum(splits_out), device=dev)
        lst = [torch.zeros(n, device=dev) for _ in range(W)]
        ar_async = torch.zeros(n, device=dev)

        def body():
            ag.zero_()
            dist.all_gather_into_tensor(ag, x, group=pg)
            dist.reduce_scatter_tensor(rs, rs_in, group=pg)
            bc.copy_(x)
            dist.broadcast(bc, src=1, group=pg)
            red.copy_(x)
            dist.reduce(red, dst=0, group=pg)
            dist.all_to_all_single(a2a, a2a_in, splits_out, splits_in, group=pg)
            dist.all_gather(lst, x, group=pg)
            ar_async.copy_(x)
            dist.all_reduce(ar_async, group=pg, async_op=True).wait()

        body()  # warm-up: plans exist before capture
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            body()
        for it in range(3):
            s = R.seed()
            xs = [make_input(s, r, n, torch.float32) for r in range(W)]
            rss = [make_input(s + 7, r, W * n, torch.float32) for r in range(W)]
            a2as = [make_input(s + 9, r, sum(split[r]), torch.float32) for r in range(W)]
            x.copy_(xs[rank].to(dev))
            rs_in.copy_(rss[rank].to(dev))
            a2a_in.copy_(a2as[rank].to(dev))
            g.replay()
            torch.cuda.synchronize()
            assert_equal(ag, torch.cat(xs), f"graph all_gather_into_tensor it={it}")
            assert_reduced(rs, [r_[rank * n:(rank + 1) * n] for r_ in rss], "sum", f"graph reduce_scatter it={it}")
            assert_equal(bc, xs[1], f"graph broadcast it={it}")
            if rank == 0:
                assert_reduced(red, xs, "sum", f"graph reduce it={it}")
            want = torch.cat([a2as[s_][sum(split[s_][:rank]):sum(split[s_][:rank + 1])] for s_ in range(W)])
            assert_equal(a2a, want, f"graph all_to_all_single it={it}")
            for r in range(W):
                assert_equal(lst[r], xs[r], f"graph all_gather list it={it}")
            assert_reduced(ar_async, xs, "sum", f"graph async all_reduce it={it}")

    R.check("every op in one graph, 3 replays", graph_every_op)

    # -- "cpu:purlin,cuda:purlin": both tensor kinds in one program --------------------------------------
    R.family = "mixed_backend"
    mixed = dist.new_group(backend="cpu:purlin,cuda:purlin", timeout=PURLIN_TIMEOUT)

    def mixed_case():
        xs = inputs(1000, torch.float32, "sum")
        c = xs[rank].clone()
        g = xs[rank].to(dev)
        dist.all_reduce(c, group=mixed)
        dist.all_reduce(g, group=mixed)
        assert_reduced(c, xs, "sum", "cpu tensor")
        assert_reduced(g, xs, "sum", "cuda tensor")
        out = torch.zeros(W * 1000, device=dev)
        dist.all_gather_into_tensor(out, g, group=mixed)
        cnt = torch_purlin.counters(mixed, "cuda")
        assert cnt["all_reduce"] == (2, 0), cnt
        assert cnt["all_gather_into_tensor"] == (1, 0), cnt

    R.check("all_reduce cpu + cuda", mixed_case)

    # -- setup agreement: a setting one rank cannot use fails every rank at once (NOTE [setup agreement]) -------
    R.family = "setup_agreement"

    def setup_agreement_case(var, value):
        # The last rank's group is made with the malformed value (NOTE [group settings]); its CUDA setup, on
        # its first CUDA op below, fails on every rank.
        opts = torch_purlin.Options({var: value}) if rank == W - 1 else None
        bad = dist.new_group(backend="purlin", timeout=PURLIN_TIMEOUT, pg_options=opts)
        t = torch.ones(1000, device=dev)
        start = time.monotonic()
        try:
            dist.all_reduce(t, group=bad)
        except RuntimeError as e:
            first = str(e)
        else:
            raise AssertionError("no error from a group whose last rank has a malformed " + var)
        took = time.monotonic() - start
        assert took < 10.0, f"a bad setting must fail every rank at once, not by the store timeout ({took:.1f} s)"
        for pattern in (r"all_?reduce", rf"on rank {rank}\b", rf"rank {W - 1} could not set up", var, re.escape(value)):
            assert re.search(pattern, first), (pattern, first)
        try:  # the group stays failed with the same reason and never waits again
            dist.all_reduce(t, group=bad)
        except RuntimeError as e:
            again = str(e)
        else:
            raise AssertionError("a group whose CUDA setup failed ran a collective")
        assert "unusable" in again and var in again and rf"rank {W - 1} could not set up" in again, again
        x = torch.ones(4, device=dev)
        dist.all_reduce(x, group=pg)  # other groups still work
        assert torch.all(x == W)

    R.check("malformed setting on the last rank", setup_agreement_case, "TORCH_PURLIN_CUDA_LINE_FORMAT", "bogus")
    R.check("malformed pool placement on the last rank", setup_agreement_case, "TORCH_PURLIN_CUDA_POOL_PLACEMENT",
            "bogus")

    def equal_setting_case(var, value):
        # NOTE [settings across ranks]: a setting every rank must share, different on the last rank,
        # raises on every rank as the group is made, naming it and the values.
        opts = torch_purlin.Options({var: value}) if rank == W - 1 else None
        start = time.monotonic()
        try:
            dist.new_group(backend="purlin", timeout=PURLIN_TIMEOUT, pg_options=opts)
        except RuntimeError as e:
            msg = str(e)
        else:
            raise AssertionError(f"a group whose last rank has another {var} was made")
        assert time.monotonic() - start < 10.0, msg
        for pattern in (rf"on rank {rank}\b", var, "must be equal on every rank", rf"rank {W - 1} '{re.escape(value)}'"):
            assert re.search(pattern, msg), (pattern, msg)
        x = torch.ones(4, device=dev)
        dist.all_reduce(x, group=pg)  # other groups still work
        assert torch.all(x == W)

    # (every rank's environment says "none": the worker's first lines)
    R.check("NCCL rows differing on the last rank", equal_setting_case, "TORCH_PURLIN_CUDA_NCCL_FROM",
            "all_reduce=1G")
    R.check("two-shot threshold differing on the last rank", equal_setting_case, "TORCH_PURLIN_CUDA_TWO_SHOT_BYTES",
            "1M")

    # -- counters: every native op above ran natively ---------------------------------------------------
    R.family = "counters"

    def counters_case():
        cnt = torch_purlin.counters(pg, "cuda")
        for op in ("all_reduce", "reduce", "broadcast", "all_gather_into_tensor", "all_gather",
                   "reduce_scatter_tensor", "all_to_all_single", "gather", "scatter"):
            assert op in cnt and cnt[op][0] > 0, f"{op} never ran natively: {cnt}"
            assert cnt[op][1] == 0, f"{op} fell back {cnt[op][1]} times: {cnt}"

    R.check_after_all("no CUDA op fell back", counters_case)

    def counters_own_ops_case():
        # Self-contained (runs under any PURLIN_GPU_FAMILIES): each op once, each counted native, none fell back.
        before = torch_purlin.counters(pg, "cuda")
        n = 4099
        x = inputs(W * n, torch.float32, "sum")[rank].to(dev)
        out = torch.empty(W * n, device=dev)
        one = torch.empty(n, device=dev)
        dist.all_reduce(x[:n].clone(), group=pg)
        dist.reduce(x[:n].clone(), dst=W - 1, group=pg)
        dist.broadcast(x[:n].clone(), src=0, group=pg)
        dist.all_gather_into_tensor(out, x[:n], group=pg)
        dist.all_gather([torch.empty(n, device=dev) for _ in range(W)], x[:n], group=pg)
        dist.reduce_scatter_tensor(one, x, group=pg)
        dist.all_to_all_single(out, x, group=pg)
        dist.gather(x[:n], [torch.empty(n, device=dev) for _ in range(W)] if rank == 0 else None, dst=0, group=pg)
        dist.scatter(one, list(x.chunk(W)) if rank == 0 else None, src=0, group=pg)
        torch.cuda.synchronize()
        after = torch_purlin.counters(pg, "cuda")
        for op in ("all_reduce", "reduce", "broadcast", "all_gather_into_tensor", "all_gather",
                   "reduce_scatter_tensor", "all_to_all_single", "gather", "scatter"):
            native = after.get(op, (0, 0))[0] - before.get(op, (0, 0))[0]
            fell = after.get(op, (0, 0))[1] - before.get(op, (0, 0))[1]
            assert native == 1 and fell == 0, f"{op}: {native} native calls, {fell} fallbacks (want 1, 0): {after}"

    R.check("each op once: counted native, no fallback", counters_own_ops_case)

    # -- fallback to NCCL: bool / complex reductions, TORCH_PURLIN_FORCE_FALLBACK --------------------------
    R.family = "fallback"
    os.environ["TORCH_PURLIN_FORCE_FALLBACK"] = "broadcast"
    fb = dist.new_group(backend="purlin", timeout=PURLIN_TIMEOUT)  # created on every rank, used only with NCCL
    os.environ.pop("TORCH_PURLIN_FORCE_FALLBACK")

    def fallback_case():
        b = (torch.arange(10, device=dev) % (rank + 2)) == 0
        dist.all_reduce(b, op=dist.ReduceOp.MAX, group=fb)  # bool reduction: NCCL
        want = torch.zeros(10, dtype=torch.bool)
        for r in range(W):
            want |= (torch.arange(10) % (r + 2)) == 0
        assert_equal(b, want, "bool all_reduce via NCCL")
        z = torch.full((5,), complex(rank, 1), dtype=torch.complex64, device=dev)
        dist.all_reduce(z, group=fb)  # complex reduction: NCCL
        assert_equal(z, torch.full((5,), complex(sum(range(W)), W), dtype=torch.complex64), "complex all_reduce")
        t = torch.full((7,), float(rank), device=dev)
        dist.broadcast(t, src=1, group=fb)  # forced
        assert_equal(t, torch.full((7,), 1.0), "forced broadcast")
        zz = torch.zeros(10, dtype=torch.complex64, device=dev)
        dist.all_gather_into_tensor(zz, z, group=fb)  # complex copy: native
        cnt = torch_purlin.counters(fb, "cuda")
        # torch views a complex SUM all_reduce as float32 before the backend sees
        # it, so that one runs natively; the bool one falls back.
        assert cnt["all_reduce"] == (1, 1), cnt
        assert cnt["broadcast"] == (0, 1), cnt
        assert cnt["all_gather_into_tensor"] == (1, 0), cnt

    def batch_p2p_case():
        # point-to-point goes to NCCL; a batch is one NCCL group (NOTE [coalescing]), so a ring of
        # sends and receives larger than NCCL's buffers cannot deadlock
        n = 4_000_003
        xs = inputs(n, torch.float32)
        got = torch.full((n,), float("nan"), device=dev)
        reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, xs[rank].to(dev), (rank + 1) % W, group=fb),
                                       dist.P2POp(dist.irecv, got, (rank - 1) % W, group=fb)])
        for q in reqs:
            q.wait()
        assert_equal(got.clone(), xs[(rank - 1) % W], "batch_isend_irecv ring")

    if shared:
        R.skip("ranks share a GPU: no NCCL to fall back to (NOTE [shared GPU])")
    else:
        R.check("bool/complex reductions and a forced op use NCCL", fallback_case)
        R.check("batch_isend_irecv ring through NCCL", batch_p2p_case)

    # -- the protocol table's NCCL rows (NOTE [protocol table] in csrc/backend/host/protocol_table.h) -----------------
    R.family = "protocol_table"
    # all_reduce's row for this world replaces its plain one; a row for another world never applies.
    tb = purlin_group(PURLIN_TIMEOUT, TORCH_PURLIN_CUDA_NCCL_FROM=f"all_reduce=1G,all_reduce@{W}=64K,all_gather=64K,"
                      f"all_gather@{W + 1}=1K,all_to_all=64K")

    def table_first_nccl_in_capture():
        big = torch.empty(65536, device=dev)  # 256 KB: the table sends it to NCCL, which has not run yet
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            g = torch.cuda.CUDAGraph()
            try:
                with torch.cuda.graph(g, stream=s):
                    dist.all_reduce(big, group=tb)
            except RuntimeError as e:
                assert "cannot be captured" in str(e) and f"on rank {rank}" in str(e), str(e)
            else:
                raise AssertionError("a first NCCL collective inside capture was not refused")
        torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()

    def table_ignored_on_shared_gpu():
        # NOTE [shared GPU]: NCCL refuses the group, so the table's rows are ignored: native at every size,
        # in a graph too.
        before = torch_purlin.counters(tb, "cuda")
        for n in (65537, 300_001):
            xs = inputs(n, torch.float32, "sum")
            t = xs[rank].to(dev)
            dist.all_reduce(t, group=tb)
            assert torch_purlin.last_launch(tb)["protocol"] != "nccl", torch_purlin.last_launch(tb)
            assert_reduced(t, xs, "sum", f"table all_reduce n={n} on a shared GPU")
        full = inputs(W * 20000, torch.float32)
        out = torch.empty(W * 20000, device=dev)
        dist.all_to_all_single(out, full[rank].to(dev), group=tb)
        assert torch_purlin.last_launch(tb)["protocol"] != "nccl", torch_purlin.last_launch(tb)
        assert_equal(out, torch.cat([f[rank * 20000:(rank + 1) * 20000] for f in full]), "table all_to_all")
        big = torch.empty(65537, device=dev)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, stream=s):
                dist.all_reduce(big, group=tb)
        torch.cuda.current_stream().wait_stream(s)
        xb = inputs(65537, torch.float32, "sum")
        big.copy_(xb[rank].to(dev))
        g.replay()
        torch.cuda.synchronize()
        assert_reduced(big, xb, "sum", "table all_reduce in a graph on a shared GPU")
        after = torch_purlin.counters(tb, "cuda")
        for op in ("all_reduce", "all_to_all_single"):
            assert after[op][1] == before.get(op, (0, 0))[1], (op, before, after)

    if shared:
        R.check("ranks sharing a GPU ignore the table's NCCL rows", table_ignored_on_shared_gpu)
    else:
        R.check("first NCCL-routed op inside capture: clear error", table_first_nccl_in_capture)

    def table_routes():
        def expect(what, nccl_wanted):
            proto = torch_purlin.last_launch(tb)["protocol"]
            assert (proto == "nccl") == nccl_wanted, f"{what}: protocol {proto}"

        before = torch_purlin.counters(tb, "cuda")
        for n, nccl_wanted in ((1000, False), (16384, True), (65537, True), (4099, False)):  # float32: 64K = 16384
            xs = inputs(n, torch.float32, "sum")
            t = xs[rank].to(dev)
            dist.all_reduce(t, group=tb)
            expect(f"all_reduce n={n}", nccl_wanted)
            assert_reduced(t, xs, "sum", f"table all_reduce n={n}")
        for n, nccl_wanted in ((1000, False), (16384 // W + 1, True)):  # the larger side (output) decides
            xs = inputs(n, torch.float32)
            out = torch.empty(W * n, device=dev)
            dist.all_gather_into_tensor(out, xs[rank].to(dev), group=tb)
            expect(f"all_gather n={n}", nccl_wanted)
            assert_equal(out, torch.cat(xs), f"table all_gather n={n}")
        xs = inputs(W * 20000, torch.float32, "sum")  # no reduce_scatter row: native at any size
        out = torch.empty(20000, device=dev)
        dist.reduce_scatter_tensor(out, xs[rank].to(dev), group=tb)
        expect("reduce_scatter", False)
        assert_reduced(out, [x[rank * 20000:(rank + 1) * 20000] for x in xs], "sum", "table reduce_scatter")
        k = 20000
        full = inputs(W * k, torch.float32)
        out = torch.empty(W * k, device=dev)
        dist.all_to_all_single(out, full[rank].to(dev), group=tb)  # even split: the table applies
        expect("all_to_all even", True)
        assert_equal(out, torch.cat([f[rank * k:(rank + 1) * k] for f in full]), "table all_to_all even")
        out.zero_()
        dist.all_to_all_single(out, full[rank].to(dev), [k] * W, [k] * W, group=tb)  # split sizes: never the table
        expect("all_to_all with splits", False)
        assert_equal(out, torch.cat([f[rank * k:(rank + 1) * k] for f in full]), "table all_to_all splits")
        after = torch_purlin.counters(tb, "cuda")
        got = {op: (after[op][0] - before.get(op, (0, 0))[0], after[op][1] - before.get(op, (0, 0))[1])
               for op in ("all_reduce", "all_gather_into_tensor", "all_to_all_single")}
        assert got == {"all_reduce": (2, 2), "all_gather_into_tensor": (1, 1), "all_to_all_single": (1, 1)}, got

    if not shared:
        R.check("sizes from the table run on NCCL, others native", table_routes)

    def table_graph():
        big = torch.empty(65537, device=dev)   # NCCL (ran eagerly above)
        small = torch.empty(4099, device=dev)  # purlin
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            dist.all_reduce(small, group=tb)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, stream=s):
                dist.all_reduce(big, group=tb)
                dist.all_reduce(small, group=tb)
        torch.cuda.current_stream().wait_stream(s)
        for rep in range(3):
            xb, xs = inputs(65537, torch.float32, "sum"), inputs(4099, torch.float32, "sum")
            big.copy_(xb[rank].to(dev))
            small.copy_(xs[rank].to(dev))
            g.replay()
            torch.cuda.synchronize()
            assert_reduced(big, xb, "sum", f"graph replay {rep} (NCCL)")
            assert_reduced(small, xs, "sum", f"graph replay {rep} (purlin)")

    if not shared:
        R.check("NCCL-routed and native ops in one CUDA graph", table_graph)

    # The two-shot threshold's item for this world replaces the plain one; another world's never applies.
    ts = purlin_group(PURLIN_TIMEOUT, TORCH_PURLIN_CUDA_TWO_SHOT_BYTES=f"1M,@{W}=4M,@{W + 1}=2K",
                      TORCH_PURLIN_CUDA_LINE_BYTES="0", TORCH_PURLIN_CUDA_PARITY_BYTES="0")

    def two_shot_per_world():
        for n, want in ((300_001, "one-shot"), (1_100_001, "two-shot"), (4099, "one-shot")):  # float32: 4M = 1M elems
            xs = inputs(n, torch.float32, "sum")
            t = xs[rank].to(dev)
            dist.all_reduce(t, group=ts)
            proto = torch_purlin.last_launch(ts)["protocol"]
            assert proto.startswith(want), f"all_reduce n={n}: protocol {proto}, want {want} (two-shot from 4M at W={W})"
            assert_reduced(t, xs, "sum", f"all_reduce n={n} under a per-world two-shot threshold")

    R.check("two-shot threshold per world size", two_shot_per_world)

    # -- zero-copy: inputs from the symmetric pool are read in place (NOTE [zero-copy]) ----------------------
    R.family = "zero_copy"
    # Small and mid sizes too (else flagged lines and parity plans serve them).
    # Two-shot from 8M at every world size (the default may keep W = 2 one-shot longer: NOTE [protocol table]).
    zc = purlin_group(PURLIN_TIMEOUT, TORCH_PURLIN_CUDA_LINE_BYTES="0", TORCH_PURLIN_CUDA_PARITY_BYTES="0",
                      TORCH_PURLIN_CUDA_TWO_SHOT_BYTES="8M")
    two_shot_n = 8 * 1024 * 1024 // 2 + 4099  # bf16 elements above TORCH_PURLIN_CUDA_TWO_SHOT_BYTES (8M)

    def sym(n, dtype, values=None):
        t = torch_purlin.empty(n, dtype=dtype, device=dev, group=zc)
        if values is not None:
            t.copy_(values.to(dev))
        return t

    def zero_copy_case(op, n, dtype):
        xs = inputs(n, dtype, "sum")
        if op == "all_reduce":  # in place: zero-copy only as two-shot (NOTE [zero-copy in place])
            t = sym(n, dtype, xs[rank])
            dist.all_reduce(t, group=zc)
            # two-shot pushes the reduced slices (NOTE [push])
            want_proto = "two-shot+zero-copy+push-reduced" if n * t.element_size() >= 8 << 20 else "one-shot+push"
            assert torch_purlin.last_launch(zc)["protocol"] == want_proto, torch_purlin.last_launch(zc)
            if nccl is not None:
                ref = xs[rank].to(dev)
                dist.all_reduce(ref, group=nccl)
                assert_close_to(t, ref, xs, "sum", f"zero-copy all_reduce n={n}")
            assert_reduced(t, xs, "sum", f"zero-copy all_reduce n={n}")
            return
        inp = sym(W * n if op in ("reduce_scatter_tensor", "all_to_all_single") else n, dtype)
        full = [make_input(R.seed(), r, inp.numel(), dtype) for r in range(W)]
        inp.copy_(full[rank].to(dev))
        if op == "all_gather_into_tensor":
            out = torch.empty(W * n, dtype=dtype, device=dev)
            dist.all_gather_into_tensor(out, inp, group=zc)
            assert_equal(out, torch.cat(full), f"zero-copy all_gather n={n}")
        elif op == "reduce_scatter_tensor":
            out = torch.empty(n, dtype=dtype, device=dev)
            dist.reduce_scatter_tensor(out, inp, group=zc)
            assert_reduced(out, [f[rank * n:(rank + 1) * n] for f in full], "sum", f"zero-copy reduce_scatter n={n}")
            if nccl is not None:
                ref = torch.empty_like(out)
                dist.reduce_scatter_tensor(ref, full[rank].to(dev), group=nccl)
                assert_close_to(out, ref, [f[rank * n:(rank + 1) * n] for f in full], "sum", "vs NCCL")
        elif op == "all_to_all_single":
            out = torch.empty(W * n, dtype=dtype, device=dev)
            dist.all_to_all_single(out, inp, group=zc)
            assert_equal(out, torch.cat([f[rank * n:(rank + 1) * n] for f in full]), f"zero-copy all_to_all_single n={n}")
            if nccl is not None:
                ref = torch.empty_like(out)
                dist.all_to_all_single(ref, full[rank].to(dev), group=nccl)
                assert_equal(out, ref, f"zero-copy all_to_all_single n={n} vs NCCL")
        elif op == "broadcast":
            dist.broadcast(inp, src=1, group=zc)
            assert_equal(inp, full[1], f"zero-copy broadcast n={n}")
        # A broadcast's buffer in the pool is its output too: the root writes the peers' (NOTE [peer outputs]).
        want = "+peer-outputs" if op == "broadcast" else "zero-copy"
        assert want in torch_purlin.last_launch(zc)["protocol"], torch_purlin.last_launch(zc)
        # The caller may overwrite its input as soon as the op returned (Release waits).
        inp.fill_(-1)
        torch.cuda.synchronize()

    for op in ("all_gather_into_tensor", "reduce_scatter_tensor", "all_to_all_single", "broadcast", "all_reduce"):
        for n in (1, 4098, 1_000_002) if op != "all_reduce" else (1000, two_shot_n):
            for dtype in (torch.bfloat16, torch.float32):
                R.check(f"{op} n={n} {dtype}", zero_copy_case, op, n, dtype)

    # reduce and gather from the pool, every root: each rank decides zero-copy alone, so the decision must not
    # depend on its own aliasing (the root passes its buffer as input and output, its peers an input only:
    # NOTE [symmetric use is rank-invariant]); deciding by it once sent a 20 MB reduce's root to a staged plan
    # and its peers to zero-copy plans: a wrong result and a call-tag error at the next call.
    def rooted_from_pool(op, n, dtype, redop, root, group):
        xs = inputs(n, dtype, redop)
        t = torch_purlin.empty(n, dtype=dtype, device=dev, group=group)
        t.copy_(xs[rank].to(dev))
        if op == "reduce":
            dist.reduce(t, dst=root, op=make_op(redop), group=group)
            if rank == root:
                assert_reduced(t, xs, redop, f"pool reduce n={n} root={root} {redop}")
        else:
            out = torch.empty(W * n, dtype=dtype, device=dev) if rank == root else None
            dist.gather(t, [*out.chunk(W)] if out is not None else None, dst=root, group=group)
            if rank == root:
                assert_equal(out, torch.cat(xs), f"pool gather n={n} root={root}")
        # reduce reads the pool in place on every rank; gather never does (its root may pass its input
        # inside its output, at a pool offset the peers cannot know: NOTE [zero-copy in place]).
        proto = torch_purlin.last_launch(group)["protocol"]
        assert ("zero-copy" in proto) == (op == "reduce"), proto
        t.fill_(-1)  # the caller may overwrite its input as soon as the op returned (Release waits)
        x = torch.full((1000,), rank + 1.0, device=dev)  # the group is still in step
        dist.all_reduce(x, group=group)
        assert torch.all(x == W * (W + 1) / 2), x[:4]

    for root in range(W):
        for op, n, dtype, redop in (("reduce", 1_000_003, torch.float32, "sum"), ("reduce", 4099, torch.bfloat16, "max"),
                                    ("gather", 1_000_003, torch.bfloat16, "sum"), ("gather", 4099, torch.float32, "sum")):
            R.check(f"{op} from the pool n={n} {dtype} {redop} root={root}", rooted_from_pool, op, n, dtype, redop,
                    root, zc)
    # The default group's settings, as a user first meets them: 20 MB, past the parity plans.
    for op, n, dtype, redop in (("reduce", 5 << 20, torch.float32, "sum"), ("reduce", 20 << 20, torch.uint8, "max")):
        R.check(f"{op} from the pool n={n} {dtype} {redop} default settings", rooted_from_pool, op, n, dtype, redop,
                W - 1, pg)

    def zero_copy_many_rounds():  # larger than the 64 MB workspace: two-shot scratch in rounds
        n = 40_000_000
        xs = [torch.randn(n, generator=torch.Generator().manual_seed(R.seed() + r)) for r in range(W)]
        t = sym(n, torch.float32, xs[rank])
        dist.all_reduce(t, group=zc)
        assert_reduced(t, xs, "sum", "zero-copy all_reduce 160 MB")
        del t

    R.check("all_reduce 160 MB float32", zero_copy_many_rounds)

    def zero_copy_graph():
        n = two_shot_n
        t = sym(n, torch.bfloat16)
        src = sym(4099, torch.float32)
        out = torch.empty(W * 4099, device=dev)
        t.fill_(1)
        src.fill_(1)
        dist.all_reduce(t, group=zc)
        dist.all_gather_into_tensor(out, src, group=zc)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            dist.all_reduce(t, group=zc)
            dist.all_gather_into_tensor(out, src, group=zc)
        for it in range(5):
            s_ = R.seed()
            xs = [make_input(s_, r, n, torch.bfloat16) for r in range(W)]
            ys = [make_input(s_ + 1, r, 4099, torch.float32) for r in range(W)]
            t.copy_(xs[rank].to(dev))
            src.copy_(ys[rank].to(dev))
            g.replay()
            torch.cuda.synchronize()
            assert_reduced(t, xs, "sum", f"graph zero-copy all_reduce it={it}")
            assert_equal(out, torch.cat(ys), f"graph zero-copy all_gather it={it}")

    R.check("zero-copy ops in a CUDA graph", zero_copy_graph)

    def allocate_tensor_api():
        be = torch_purlin.get_purlin_backend(zc, "cuda")
        t = be.empty([3, 5], torch.int32, dev)
        assert t.shape == (3, 5) and t.dtype == torch.int32 and t.device == dev
        freed = [torch_purlin.empty(1 << 20, dtype=torch.uint8, device=dev, group=zc) for _ in range(4)]
        del freed  # blocks return to the pool; the next allocation reuses them on every rank
        u = torch_purlin.empty(1 << 20, dtype=torch.uint8, device=dev, group=zc)
        u.fill_(rank + 1)
        v = torch.empty(W << 20, dtype=torch.uint8, device=dev)
        dist.all_gather_into_tensor(v, u, group=zc)
        assert_equal(v, torch.cat([torch.full((1 << 20,), r + 1, dtype=torch.uint8) for r in range(W)]), "reuse")

    R.check("empty / pool reuse", allocate_tensor_api)

    def pool_disagreement():
        # NOTE [pool agreement on the host]: ranks asking for different sizes get an error on every rank
        # (not blocks of different sizes at one offset), and the group's pool stays refused after it.
        bad = purlin_group(timedelta(seconds=10))
        ok = torch_purlin.empty(16, device=dev, group=bad)
        assert ok.numel() == 16
        for what in ("sizes differ", "after the failure"):
            try:
                torch_purlin.empty(1000 + 4096 * rank if what == "sizes differ" else 16, dtype=torch.uint8,
                                   device=dev, group=bad)
            except RuntimeError as e:
                msg = str(e)
                assert f"on rank {rank}" in msg and "same sizes in the same order" in msg, (what, msg)
            else:
                raise AssertionError(f"{what}: no error")
        dist.barrier(group=host)

    R.check("empty: ranks disagree on the size", pool_disagreement)

    def pool_streams():
        # NOTE [pool streams]: a block freed while its stream's work is queued comes back at once for that stream,
        # for another stream only after that work (a fresh group: a fresh pool, first fit from offset 0).
        fresh = purlin_group(timedelta(seconds=30))
        a, b = torch.cuda.Stream(device=dev), torch.cuda.Stream(device=dev)
        n = 1 << 20
        with torch.cuda.stream(a):
            x = torch_purlin.empty(n, dtype=torch.uint8, device=dev, group=fresh)
            torch.cuda._sleep(100_000_000)  # tens of ms of queued work on a before x is written
            x.fill_(rank + 1)
        first = x.data_ptr()
        del x
        with torch.cuda.stream(b):
            y = torch_purlin.empty(n, dtype=torch.uint8, device=dev, group=fresh)
            y.fill_(200)
        assert y.data_ptr() != first, "stream b got the block that stream a's queued work still writes"
        with torch.cuda.stream(a):
            z = torch_purlin.empty(n, dtype=torch.uint8, device=dev, group=fresh)
        assert z.data_ptr() == first, "stream a does not reuse its own freed block at once"
        torch.cuda.synchronize()
        assert_equal(y, torch.full((n,), 200, dtype=torch.uint8), "stream b's block")
        del z
        torch.cuda.synchronize()
        with torch.cuda.stream(b):
            w = torch_purlin.empty(n, dtype=torch.uint8, device=dev, group=fresh)
        assert w.data_ptr() == first, "after stream a's work completed, its freed block is free for stream b"
        dist.barrier(group=host)

    R.check("empty: freed blocks come back in stream order", pool_streams)

    def local_placement():
        # NOTE [local placement]: no exchange per allocation. A block freed on stream a is borrowed by stream b only
        # when nothing else holds b's block, and then b waits on the GPU for a's work queued before the free; the
        # ranks' offsets agree because they allocate and free alike, and zero-copy collectives on such blocks are
        # right. A 4M pool: a 3M block on a, freed, leaves 1M that b fills first.
        loc = purlin_group(timedelta(seconds=30), TORCH_PURLIN_CUDA_POOL_PLACEMENT="local",
                           TORCH_PURLIN_CUDA_POOL_BYTES="4M",
                           TORCH_PURLIN_CUDA_LINE_BYTES="0", TORCH_PURLIN_CUDA_PARITY_BYTES="0")
        a, b = torch.cuda.Stream(device=dev), torch.cuda.Stream(device=dev)
        n = 3 << 20
        with torch.cuda.stream(a):
            x = torch_purlin.empty(n, dtype=torch.uint8, device=dev, group=loc)
            torch.cuda._sleep(100_000_000)  # tens of ms of queued work on a before x is written
            x.fill_(rank + 1)
        first = x.data_ptr()
        del x
        with torch.cuda.stream(b):
            z = torch_purlin.empty(1 << 19, dtype=torch.uint8, device=dev, group=loc)
            assert z.data_ptr() == first + n, "local placement: free space before borrowing another stream's block"
            del z
            y = torch_purlin.empty(n, dtype=torch.uint8, device=dev, group=loc)
            y.fill_(200)  # must run after a's fill: without the event wait a's late fill would win
        assert y.data_ptr() == first, "local placement: stream b does not borrow stream a's freed block when full"
        torch.cuda.synchronize()
        assert_equal(y, torch.full((n,), 200, dtype=torch.uint8), "stream b's write ordered after stream a's work")
        del y
        m = 4099
        for it in range(3):  # each input freed after use: the next one reuses its block
            inp = torch_purlin.empty(W * m, device=dev, group=loc)
            full = [make_input(R.seed(), r, W * m, torch.float32) for r in range(W)]
            inp.copy_(full[rank].to(dev))
            out = torch.empty(m, device=dev)
            dist.reduce_scatter_tensor(out, inp, group=loc)
            assert "zero-copy" in torch_purlin.last_launch(loc)["protocol"], torch_purlin.last_launch(loc)
            assert_reduced(out, [f[rank * m:(rank + 1) * m] for f in full], "sum", f"local placement it={it}")
            del inp
        torch.cuda.synchronize()
        dist.barrier(group=host)

    R.check("local placement: reuse across streams, zero-copy collectives", local_placement)

    def local_placement_diverged():
        # NOTE [local placement]: ranks that allocate differently get different offsets without an error; the
        # first collective on such tensors fails its call tag (which hashes pool offsets) on every rank, before
        # any peer data is read.
        div = purlin_group(timedelta(seconds=10), TORCH_PURLIN_CUDA_POOL_PLACEMENT="local",
                           TORCH_PURLIN_CUDA_LINE_BYTES="0", TORCH_PURLIN_CUDA_PARITY_BYTES="0")
        warm = torch.ones(8, device=dev)
        first = torch_purlin.empty(16, device=dev, group=div)  # every rank: the pool exists
        extra = torch_purlin.empty(4096, dtype=torch.uint8, device=dev, group=div) if rank == 0 else None
        p = torch_purlin.empty(1000, device=dev, group=div)
        p.fill_(rank + 1)
        out = torch.empty(W * 1000, device=dev)
        dist.all_gather_into_tensor(out, p, group=div)  # zero-copy on every rank, rank 0's block elsewhere
        torch.cuda.synchronize()
        try:
            dist.all_reduce(warm, group=div)
        except RuntimeError as e:
            msg = str(e)
            named = re.search(r"rank (\d+) called this collective with other arguments", msg)
            assert f"on rank {rank}" in msg and named and int(named.group(1)) != rank, msg
        else:
            raise AssertionError("no error after a collective on blocks the ranks placed differently")
        del first, extra
        dist.barrier(group=host)

    R.check("local placement: ranks that allocate differently get a call-tag error", local_placement_diverged)

    def pool_or_plain():
        # NOTE [pool or plain]: torch's allocate_tensor (FSDP2's path) answers a full pool with ordinary memory on
        # every rank (collectives on it stage), torch_purlin.empty raises instead.
        small = purlin_group(timedelta(seconds=30), TORCH_PURLIN_CUDA_POOL_BYTES="64K",
                             TORCH_PURLIN_CUDA_LINE_BYTES="0", TORCH_PURLIN_CUDA_PARITY_BYTES="0")
        backend = small._get_backend(dev)
        fits = backend.allocate_tensor(8192, dtype=torch.float32, device=dev)      # 32 KB: in the pool
        big = backend.allocate_tensor(1 << 20, dtype=torch.float32, device=dev)    # 4 MB: no room anywhere
        for t, want in ((fits, "copy+zero-copy"), (big, "copy+push")):
            t.fill_(rank + 1)
            out = torch.empty(W * t.numel(), device=dev)
            dist.all_gather_into_tensor(out, t, group=small)
            assert torch_purlin.last_launch(small)["protocol"] == want, (t.numel(), torch_purlin.last_launch(small))
            assert_equal(out, torch.cat([torch.full((t.numel(),), r + 1.0) for r in range(W)]), f"n={t.numel()}")
        try:
            torch_purlin.empty(1 << 20, device=dev, group=small)
        except RuntimeError as e:
            assert f"on rank {rank}" in str(e) and "no room" in str(e), str(e)
        else:
            raise AssertionError("torch_purlin.empty did not raise on a full pool")
        dist.barrier(group=host)

    R.check("allocate_tensor: ordinary memory when the pool is full", pool_or_plain)

    # -- peer outputs: outputs in the pool are written by their peers (NOTE [peer outputs]) ----------------
    R.family = "peer_outputs"
    pad = 4096  # pool elements on each side of the output: any write outside it shows

    def padded(n, dtype):
        big = sym(n + 2 * pad, dtype)
        big.fill_(-7)
        return big, big[pad:pad + n]

    def peer_outputs_case(op, n, dtype, in_place):
        full = [make_input(R.seed(), r, n, dtype) for r in range(W)]
        before = torch_purlin.protocol_counts(zc).get(op, {}).get("copy+peer-outputs", 0)
        if op == "all_gather_into_tensor":
            big, out = padded(W * n, dtype)
            dist.all_gather_into_tensor(out, all_gather_input(out, full[rank], rank, in_place), group=zc)
            want = torch.cat(full)
        else:
            big, out = padded(n, dtype)
            out.copy_(full[rank].to(dev))
            dist.broadcast(out, src=W - 1, group=zc)
            want = full[W - 1]
        assert torch_purlin.last_launch(zc)["protocol"] == "copy+peer-outputs", torch_purlin.last_launch(zc)
        assert torch_purlin.protocol_counts(zc)[op]["copy+peer-outputs"] == before + 1, torch_purlin.protocol_counts(zc)
        assert_equal(out, want, f"{op} n={n} in_place={in_place} into pool outputs")
        edge = torch.full((pad,), -7, dtype=dtype)
        assert_equal(big[:pad], edge, f"{op} n={n}: before the output")
        assert_equal(big[-pad:], edge, f"{op} n={n}: after the output")

    for op in ("all_gather_into_tensor", "broadcast"):
        for n in (1, 4099, 1_000_002):
            for dtype in (torch.float32, torch.bfloat16):
                for in_place in ((False, True) if op == "all_gather_into_tensor" else (True,)):
                    R.check(f"{op} n={n} {dtype} in_place={in_place}", peer_outputs_case, op, n, dtype, in_place)

    def peer_outputs_reuse():
        # Back to back, no host sync: each all_gather overwrites an output the previous step's kernel
        # reads; peers may write it only once this rank reached the collective (the Consumed(1) wait).
        n, steps = 300_001, 12
        _, out = padded(W * n, torch.float32)
        acc = torch.zeros(W * n, device=dev)
        xs = [torch.randn(n, generator=torch.Generator().manual_seed(R.seed() * 100 + r)) for r in range(W)]
        for k in range(steps):
            dist.all_gather_into_tensor(out, (xs[rank] + k).to(dev), group=zc)
            acc += out * (k + 1)
        torch.cuda.synchronize()
        want = sum((torch.cat(xs) + k) * (k + 1) for k in range(steps))
        assert torch.allclose(acc.cpu(), want, rtol=1e-5, atol=1e-3), "peer-output all_gathers out of order"

    R.check("back-to-back all_gathers into one pool output", peer_outputs_reuse)

    def peer_outputs_graph():
        n = 70_001
        _, out = padded(W * n, torch.bfloat16)
        src = torch.empty(n, dtype=torch.bfloat16, device=dev)
        src.fill_(1)
        dist.all_gather_into_tensor(out, src, group=zc)  # eager first (plan and pool mapped)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            dist.all_gather_into_tensor(out, src, group=zc)
        for rep in range(3):
            xs = [make_input(R.seed(), r, n, torch.bfloat16) for r in range(W)]
            src.copy_(xs[rank].to(dev))
            g.replay()
            torch.cuda.synchronize()
            assert_equal(out, torch.cat(xs), f"graph replay {rep}")

    R.check("peer-output all_gather in a CUDA graph", peer_outputs_graph)

    # -- push: sources write into the readers' workspaces (NOTE [push]) -------------------------------------
    R.family = "push"
    # A 1M workspace: many rounds, slot reuse in the readers' workspaces; no lines or parity plans: push plans
    # at every size.
    pu = purlin_group(PURLIN_TIMEOUT, TORCH_PURLIN_CUDA_WORKSPACE_BYTES="1M",
                      TORCH_PURLIN_CUDA_LINE_BYTES="0", TORCH_PURLIN_CUDA_PARITY_BYTES="0",
                      TORCH_PURLIN_CUDA_TWO_SHOT_BYTES="8M")

    def push_case(op, n, dtype):
        xs = inputs(W * n, dtype, "sum")
        if op == "all_reduce":
            t = xs[rank].to(dev)
            dist.all_reduce(t, group=pu)
            assert_reduced(t, xs, "sum", f"push all_reduce n={W * n}")
        elif op == "all_gather_into_tensor":
            out = torch.empty(W * W * n, dtype=dtype, device=dev)
            dist.all_gather_into_tensor(out, xs[rank].to(dev), group=pu)
            assert_equal(out, torch.cat(xs), f"push all_gather n={n}")
        elif op == "reduce_scatter_tensor":
            out = torch.empty(n, dtype=dtype, device=dev)
            dist.reduce_scatter_tensor(out, xs[rank].to(dev), group=pu)
            assert_reduced(out, [x[rank * n:(rank + 1) * n] for x in xs], "sum", f"push reduce_scatter n={n}")
        elif op == "all_to_all_single":
            out = torch.empty(W * n, dtype=dtype, device=dev)
            dist.all_to_all_single(out, xs[rank].to(dev), group=pu)
            want = torch.cat([x[rank * n:(rank + 1) * n] for x in xs])
            assert_equal(out, want, f"push all_to_all n={n}")
        elif op == "broadcast":
            t = xs[rank].to(dev)
            dist.broadcast(t, src=0, group=pu)
            assert_equal(t, xs[0], f"push broadcast n={n}")
        assert "+push" in torch_purlin.last_launch(pu)["protocol"], torch_purlin.last_launch(pu)

    for op in ("all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor", "all_to_all_single", "broadcast"):
        for n in (1, 4099, 700_001):
            for dtype in (torch.float32, torch.bfloat16):
                R.check(f"{op} n={n} {dtype}", push_case, op, n, dtype)
    R.check("two-shot all_reduce 24 MB", push_case, "all_reduce", 3_000_001, torch.float32)

    # Reduced slices pushed to the other ranks (two-shot phase 1), in many rounds, from an ordinary tensor
    # (phase 0 pushed too) and from a pool tensor (zero-copy phase 0).
    pr = purlin_group(PURLIN_TIMEOUT, TORCH_PURLIN_CUDA_WORKSPACE_BYTES="1M",
                      TORCH_PURLIN_CUDA_LINE_BYTES="0", TORCH_PURLIN_CUDA_PARITY_BYTES="0",
                      TORCH_PURLIN_CUDA_TWO_SHOT_BYTES="8M")

    def push_reduced_case(n, dtype, pool):
        xs = inputs(n, dtype, "sum")
        t = torch_purlin.empty(n, dtype=dtype, device=dev, group=pr) if pool else torch.empty(n, dtype=dtype, device=dev)
        t.copy_(xs[rank].to(dev))
        dist.all_reduce(t, group=pr)
        assert_reduced(t, xs, "sum", f"push-reduced all_reduce n={n} pool={pool}")
        want = "two-shot" + ("+zero-copy" if pool else "+push") + "+push-reduced"
        assert torch_purlin.last_launch(pr)["protocol"] == want, torch_purlin.last_launch(pr)

    for pool in (False, True):
        R.check(f"push-reduced two-shot all_reduce pool={pool}", push_reduced_case, 4_198_403, torch.bfloat16, pool)
        R.check(f"push-reduced two-shot all_reduce f32 pool={pool}", push_reduced_case, 2_100_001, torch.float32, pool)


    # -- flagged lines: small collectives in one NVLink trip (NOTE [line plans]) ----------------------------
    R.family = "lines"

    narrow = purlin_group(PURLIN_TIMEOUT, TORCH_PURLIN_CUDA_LINE_FORMAT="narrow")
    wide = purlin_group(PURLIN_TIMEOUT, TORCH_PURLIN_CUDA_LINE_FORMAT="wide")

    def line_protocols():
        t = torch.ones(1000, device=dev)
        dist.all_reduce(t, group=pg)
        assert torch.all(t == W)
        assert torch_purlin.last_launch(pg)["protocol"] == "one-shot+lines", torch_purlin.last_launch(pg)
        big = torch.ones(2 << 20, device=dev)  # 8 MB: above TORCH_PURLIN_CUDA_LINE_BYTES, workspace plan
        dist.all_reduce(big, group=pg)
        assert torch.all(big == W)
        assert "lines" not in torch_purlin.last_launch(pg)["protocol"], torch_purlin.last_launch(pg)
        out = torch.empty(W * 1000, device=dev)
        dist.all_gather_into_tensor(out, t, group=pg)
        assert torch_purlin.last_launch(pg)["protocol"] == "copy+lines", torch_purlin.last_launch(pg)
        x = torch.ones(1000, device=dev)
        dist.all_reduce(x, op=dist._make_nccl_premul_sum(2.0), group=pg)  # never on lines
        assert torch.all(x == 2 * W)
        assert "lines" not in torch_purlin.last_launch(pg)["protocol"], torch_purlin.last_launch(pg)
        # TORCH_PURLIN_CUDA_LINE_FORMAT: auto (pg) takes wide lines above 128K per rank for single-chunk
        # specs (all_reduce, broadcast), above 512K for all_gather / all_to_all (wide_line_plan in
        # cuda_group_plans.cc), narrow ones for the rest; wide and narrow take theirs (NOTE [wide lines]).
        # float32: 800, 400 or 100 KB per rank (an all_gather's limit counts its output: W x 800/W KB).
        # Ranks sharing a GPU: auto takes narrow lines only (NOTE [shared GPU]).
        auto_wide = "lines" if shared else "wide-lines"
        for group, op, kb, want in ((pg, "all_reduce", 800, "one-shot+" + auto_wide),
                                    (pg, "all_reduce", 100, "one-shot+lines"), (pg, "broadcast", 100, "copy+lines"),
                                    (pg, "broadcast", 400, "copy+" + auto_wide), (pg, "all_gather", 400, "copy+lines"),
                                    (pg, "all_gather", 800, "copy+" + auto_wide), (wide, "all_gather", 400, "copy+wide-lines"),
                                    (wide, "all_reduce", 800, "one-shot+wide-lines"),
                                    (narrow, "all_reduce", 800, "one-shot+lines"), (narrow, "all_gather", 800, "copy+lines")):
            n = kb * 250 // W if op == "all_gather" else kb * 250
            xs = inputs(n, torch.float32, "sum")
            t = xs[rank].to(dev)
            if op == "all_reduce":
                dist.all_reduce(t, group=group)
                assert_reduced(t, xs, "sum", f"{want} all_reduce")
            elif op == "broadcast":
                dist.broadcast(t, src=W - 1, group=group)
                assert_equal(t, xs[W - 1], f"{want} broadcast")
            else:
                out = torch.empty(W * n, device=dev)
                dist.all_gather_into_tensor(out, t, group=group)
                assert_equal(out, torch.cat(xs), f"{want} all_gather")
            assert torch_purlin.last_launch(group)["protocol"] == want, (op, torch_purlin.last_launch(group))
        # A strided destination takes narrow lines in a wide group.
        rows, row_len = 37, 11
        xs = inputs(rows * row_len, torch.float32)
        got = torch.empty(W * rows * row_len, device=dev)
        torch_purlin.interleaved_all_gather(got, xs[rank].to(dev).view(rows, row_len), group=wide)
        want = torch.stack([x.view(rows, row_len) for x in xs], 1).reshape(-1)
        assert_equal(got, want, "interleaved all_gather")
        assert torch_purlin.last_launch(wide)["protocol"] == "copy+lines", torch_purlin.last_launch(wide)

    R.check("protocol by size, op and line format", line_protocols)

    def wide_line_edges(dtype):
        # Sizes around whole lines (P elements of payload per 128-byte line) and the block split, every
        # collective shape, a 1 MiB rank share (TORCH_PURLIN_CUDA_LINE_BYTES): NOTE [wide lines].
        esize = torch.empty(0, dtype=dtype).element_size()
        P = 120 // esize
        for n in (1, P - 1, P, P + 1, 4 * P + 3, 8 * P, 33 * P + 5, 65537, (1 << 20) // esize):
            if n < 1:
                continue
            op = "sum" if dtype.is_floating_point or n % 2 else "max"
            xs = inputs(n, dtype, op)
            t = xs[rank].to(dev)
            dist.all_reduce(t, op=make_op(op), group=wide)
            assert_reduced(t, xs, op, f"all_reduce n={n}")
            assert "wide-lines" in torch_purlin.last_launch(wide)["protocol"], (n, torch_purlin.last_launch(wide))
            out = torch.empty(W * n, dtype=dtype, device=dev)
            dist.all_gather_into_tensor(out, xs[rank].to(dev), group=wide)
            assert_equal(out, torch.cat(xs), f"all_gather n={n}")
            m = max(1, n // W)
            full = inputs(W * m, dtype, "sum")
            rs = torch.empty(m, dtype=dtype, device=dev)
            dist.reduce_scatter_tensor(rs, full[rank].to(dev), group=wide)
            assert_reduced(rs, [f[rank * m:(rank + 1) * m] for f in full], "sum", f"reduce_scatter n={W * m}")
            a2a = torch.empty(W * m, dtype=dtype, device=dev)
            dist.all_to_all_single(a2a, full[rank].to(dev), group=wide)
            assert_equal(a2a, torch.cat([f[rank * m:(rank + 1) * m] for f in full]), f"all_to_all n={W * m}")
            b = xs[rank].to(dev)
            dist.broadcast(b, src=n % W, group=wide)
            assert_equal(b, xs[n % W], f"broadcast n={n}")

    for dtype in (torch.uint8, torch.bfloat16, torch.float16, torch.float32, torch.float64, torch.int64):
        R.check(f"wide lines, edges of lines and blocks, {dtype}", wide_line_edges, dtype)

    def line_tear_stress(group, iters):
        # Back-to-back 1 MiB line collectives, each with fresh random bytes, no host sync: a line taken
        # before all of it arrived would hold the previous collective's bytes of that parity (NOTE [wide
        # lines]). Exact checks (copies and int32 sums), inputs drawn on the device.
        seed = R.seed()  # once: every rank draws the same number of seeds

        def draw(i, r, n, dtype):
            g = torch.Generator(device=dev).manual_seed(seed * 7919 + i * 131 + r)
            return torch.randint(-1000, 1000, (n,), generator=g, device=dev, dtype=torch.int64).to(dtype)

        outs = []
        for i in range(iters):
            if i % 2:
                t = draw(i, rank, 1 << 18, torch.int32)
                dist.all_reduce(t, group=group)
            else:
                t = draw(i, i % W, 1 << 20, torch.uint8) if rank == i % W else torch.empty(1 << 20, dtype=torch.uint8, device=dev)
                dist.broadcast(t, src=i % W, group=group)
            outs.append(t)
        for i, t in enumerate(outs):
            if i % 2:
                want = sum(draw(i, r, 1 << 18, torch.int32).long() for r in range(W)).int()
            else:
                want = draw(i, i % W, 1 << 20, torch.uint8)
            bad = (t != want).nonzero()
            assert bad.numel() == 0, f"collective {i}: {bad.numel()} elements differ, first at {int(bad[0])}"

    R.check("wide lines: 400 back-to-back 1 MiB collectives, fresh data", line_tear_stress, wide, 400)
    R.check("narrow lines: 200 back-to-back 1 MiB collectives, fresh data", line_tear_stress, narrow, 200)

    def mixed_call(kind, i, n, dtype, group, big_n, a2a_n):
        # One collective of a back-to-back sequence, by kind (0 broadcast, 1 reduce, 2 all_reduce,
        # 3 all_gather, 4 a large all_reduce of big_n elements, 5 all_to_all of a2a_n per rank) with
        # rotating roots; returns (output, reference, reduce op or None, name) to check after the sequence.
        xs = inputs(n, dtype, "sum")
        root = i % W
        if kind == 0:
            t = xs[rank].to(dev)
            dist.broadcast(t, src=root, group=group)
            return t, xs[root], None, f"broadcast {i}"
        if kind == 1:
            t = xs[rank].to(dev)
            dist.reduce(t, dst=root, op=dist.ReduceOp.SUM, group=group)
            return t, xs if rank == root else xs[rank], "sum" if rank == root else None, f"reduce {i}"
        if kind == 2:
            t = xs[rank].to(dev)
            dist.all_reduce(t, group=group)
            return t, xs, "sum", f"all_reduce {i}"
        if kind == 3:
            out = torch.empty(W * n, dtype=dtype, device=dev)
            dist.all_gather_into_tensor(out, xs[rank].to(dev), group=group)
            return out, torch.cat(xs), None, f"all_gather {i}"
        if kind == 4:
            big = inputs(big_n, torch.float32, "sum")  # a workspace plan in between
            t = big[rank].to(dev)
            dist.all_reduce(t, group=group)
            return t, big, "sum", f"all_reduce big {i}"
        full = inputs(W * a2a_n, dtype, "sum")
        out = torch.empty(W * a2a_n, dtype=dtype, device=dev)
        dist.all_to_all_single(out, full[rank].to(dev), group=group)
        return out, torch.cat([f[rank * a2a_n:(rank + 1) * a2a_n] for f in full]), None, f"all_to_all {i}"

    def check_sequence(checks):
        for got, want, op, what in checks:
            if op is None:
                assert_equal(got, want, what)
            else:
                assert_reduced(got, want, op, what)

    def line_sequence(group, n_iters):
        # Line collectives back to back with no host sync, asymmetric ones
        # (broadcast / reduce from rotating roots, where a root reads nothing)
        # and workspace collectives in between: parity reuse (NOTE [line plans]).
        checks = []
        for i in range(n_iters):
            n = (1, 7, 1000, 4099, 65537)[i % 5]
            dtype = (torch.float32, torch.bfloat16, torch.int32)[i % 3]
            checks.append(mixed_call(i % 6, i, n, dtype, group, big_n=300_001, a2a_n=n))
        check_sequence(checks)

    R.check("120 mixed collectives, no host sync", line_sequence, pg, 120)
    R.check("60 mixed collectives, no host sync (wide lines)", line_sequence, wide, 60)

    def line_graph():
        t = torch.empty(4099, device=dev)
        b = torch.empty(1000, dtype=torch.bfloat16, device=dev)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            dist.all_reduce(t, group=pg)  # warm the plans outside capture
            dist.broadcast(b, src=1, group=pg)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, stream=s):
                for _ in range(3):
                    dist.all_reduce(t, group=pg)
                    dist.broadcast(b, src=1, group=pg)
        torch.cuda.current_stream().wait_stream(s)
        for rep in range(5):
            xs = inputs(4099, torch.float32, "sum")
            bs = inputs(1000, torch.bfloat16)
            t.copy_(xs[rank].to(dev))
            b.copy_(bs[rank].to(dev))
            g.replay()
            torch.cuda.synchronize()
            assert_reduced(t, [x * W * W for x in xs], "sum", f"graph replay {rep}")  # three all_reduces
            assert_equal(b, bs[1], f"graph replay {rep} broadcast")

    R.check("line collectives in a CUDA graph", line_graph)

    # -- parity plans: mid sizes without waiting for the previous collective (NOTE [parity plans]) ----------
    R.family = "parity"
    pp = purlin_group(PURLIN_TIMEOUT, TORCH_PURLIN_CUDA_LINE_BYTES="256K", TORCH_PURLIN_CUDA_PARITY_BYTES="4M")
    mid = 300_001  # float32: 1.2 MB per rank, between the line and parity limits

    def parity_protocols():
        xs = inputs(mid, torch.float32, "sum")
        t = xs[rank].to(dev)
        dist.all_reduce(t, group=pp)
        assert_reduced(t, xs, "sum", "all_reduce")
        assert torch_purlin.last_launch(pp)["protocol"] == "one-shot+parity", torch_purlin.last_launch(pp)
        b = xs[rank].to(dev)
        dist.broadcast(b, src=W - 1, group=pp)
        assert_equal(b, xs[W - 1], "broadcast")
        assert torch_purlin.last_launch(pp)["protocol"] == "copy+parity", torch_purlin.last_launch(pp)
        small = torch.ones(1000, device=dev)
        dist.all_reduce(small, group=pp)
        assert torch_purlin.last_launch(pp)["protocol"] == "one-shot+lines", torch_purlin.last_launch(pp)
        big = torch.ones(2 << 20, device=dev)  # 8 MB: above TORCH_PURLIN_CUDA_PARITY_BYTES, workspace plan
        dist.all_reduce(big, group=pp)
        assert torch.all(big == W)
        assert "parity" not in torch_purlin.last_launch(pp)["protocol"], torch_purlin.last_launch(pp)
        x = xs[rank].to(dev)
        dist.all_reduce(x, op=dist._make_nccl_premul_sum(PREMUL_FACTOR), group=pp)  # never a parity plan
        assert_reduced(x, xs, "premul_sum", "premul_sum")
        assert "parity" not in torch_purlin.last_launch(pp)["protocol"], torch_purlin.last_launch(pp)
        c = inputs(mid, torch.complex128)  # 16-byte elements: too wide for lines, fine for parity plans
        out = torch.empty(W * mid, dtype=torch.complex128, device=dev)
        dist.all_gather_into_tensor(out, c[rank].to(dev), group=pp)
        assert_equal(out, torch.cat(c), "complex128 all_gather")

    R.check("protocol by size and op", parity_protocols)

    def parity_sequence(n_iters):
        # Parity plans back to back with no host sync: consecutive ones alternate halves, asymmetric ones
        # (broadcast / reduce from rotating roots) let a rank run ahead, and line and workspace collectives
        # in between advance the same sequence (lseq) or none.
        checks = []
        for i in range(n_iters):
            n = (mid, 777_777 // 2, 400_000, 1000, mid)[i % 5]
            dtype = (torch.float32, torch.bfloat16, torch.int32)[i % 3]
            kind = i % 7
            checks.append(mixed_call(2 if kind == 6 else kind, i, n, dtype, pp, big_n=3_000_001, a2a_n=n // W + 1))
        check_sequence(checks)

    R.check("100 mixed collectives, no host sync", parity_sequence, 100)

    def parity_graph():
        t = torch.empty(mid, device=dev)
        b = torch.empty(mid, dtype=torch.bfloat16, device=dev)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            dist.all_reduce(t, group=pp)  # warm the plans outside capture
            dist.broadcast(b, src=W - 1, group=pp)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, stream=s):
                for _ in range(3):
                    dist.all_reduce(t, group=pp)
                    dist.broadcast(b, src=W - 1, group=pp)
        torch.cuda.current_stream().wait_stream(s)
        for rep in range(5):
            xs = inputs(mid, torch.float32, "sum")
            bs = inputs(mid, torch.bfloat16)
            t.copy_(xs[rank].to(dev))
            b.copy_(bs[rank].to(dev))
            g.replay()
            torch.cuda.synchronize()
            assert_reduced(t, [x * W * W for x in xs], "sum", f"graph replay {rep}")  # three all_reduces
            assert_equal(b, bs[W - 1], f"graph replay {rep} broadcast")

    R.check("parity plans in a CUDA graph", parity_graph)

    # -- overlapped launches: programmatic dependent launch (NOTE [overlapped launch]) ------------------------
    R.family = "overlapped_launch"
    plain = purlin_group(PURLIN_TIMEOUT, TORCH_PURLIN_CUDA_PDL="0")

    def overlap_flags():
        t = torch.ones(1000, device=dev)
        dist.all_reduce(t, group=pg)
        want = torch.cuda.get_device_capability(dev)[0] >= 9  # TORCH_PURLIN_CUDA_PDL=1 by default
        assert torch_purlin.last_launch(pg)["overlapped"] == want, torch_purlin.last_launch(pg)
        dist.all_reduce(t, group=plain)
        assert torch.all(t == W * W)
        assert not torch_purlin.last_launch(plain)["overlapped"], torch_purlin.last_launch(plain)

    R.check("TORCH_PURLIN_CUDA_PDL picks the launch", overlap_flags)

    def overlap_chain(graph):
        # Each collective's input is written by a torch kernel, right before it on the same stream, from
        # fresh per-rank data and a scalar of the previous collective's output; groups with (pg) and without
        # (plain) overlapped launches alternate. A collective that touched memory before its producer ended
        # would read stale bytes. Line (4 KB), parity (2 MB) and workspace (24 MB) plans; int32: exact.
        sizes, steps = (1000, 500_000, 6_000_000), 12
        bufs = [torch.empty(sizes[i % 3], dtype=torch.int32, device=dev) for i in range(steps)]
        outs = [None] * steps

        def chain():
            c = torch.zeros((), dtype=torch.int64, device=dev)
            for i in range(steps):
                t = bufs[i] + c.to(torch.int32)
                dist.all_reduce(t, group=pg if i % 2 == 0 else plain)
                outs[i] = t
                c = t.sum() & 1023

        def fill_and_expect():
            xs = [inputs(sizes[i % 3], torch.int32, "sum") for i in range(steps)]
            for i in range(steps):
                bufs[i].copy_(xs[i][rank])
            wants, c = [], 0
            for i in range(steps):
                want = sum(x.long() for x in xs[i]) + W * c
                wants.append(want.int())
                c = int(want.sum()) & 1023
            return wants

        if not graph:
            for rep in range(3):
                wants = fill_and_expect()
                chain()
                for i in range(steps):
                    assert_equal(outs[i], wants[i], f"eager rep {rep} collective {i}")
            return
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            fill_and_expect()
            chain()  # warm the plans outside capture
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, stream=s):
                chain()
        torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        for rep in range(3):
            wants = fill_and_expect()
            g.replay()
            torch.cuda.synchronize()
            for i in range(steps):
                assert_equal(outs[i], wants[i], f"graph replay {rep} collective {i}")

    R.check("producer kernels, groups with and without overlap, eager", overlap_chain, False)
    R.check("producer kernels, groups with and without overlap, CUDA graph", overlap_chain, True)
    R.check("120 mixed collectives, no host sync, plain launches", line_sequence, plain, 120)

    # -- block counts: the launch's block count follows the size (launch_config.h) --------------------------
    R.family = "block_counts"

    def block_count_case():
        seen = {}
        for n in (256, 65536, 1 << 20, 16 << 20):
            t = torch.ones(n, dtype=torch.bfloat16, device=dev)
            dist.all_reduce(t, group=pg)
            assert torch.all(t == W), f"n={n}"
            seen[n] = torch_purlin.last_launch(pg)["blocks"]
        assert seen[256] < seen[16 << 20], seen
        assert sorted(seen.values()) == list(seen.values()), seen

    R.check("small messages use fewer blocks", block_count_case)

    # -- call tags: mismatched calls are named, nothing is read (NOTE [call tags]) --------------------------
    R.family = "call_tag"

    def call_tag_case(kind):
        # "sizes" runs on (narrow) flagged lines, "sizes, wide lines" on wide ones, "sizes, parity plan" as a
        # parity plan (its tags in ptag, NOTE [parity plans]), the others on workspace plans (a pool placement
        # matters only to them).
        env = {"sizes": {}, "sizes, wide lines": {"TORCH_PURLIN_CUDA_LINE_FORMAT": "wide"},
               "sizes, parity plan": {"TORCH_PURLIN_CUDA_LINE_BYTES": "0"},
               "sizes far apart, parity plan": {"TORCH_PURLIN_CUDA_LINE_BYTES": "0"}}.get(
            kind, {"TORCH_PURLIN_CUDA_LINE_BYTES": "0", "TORCH_PURLIN_CUDA_PARITY_BYTES": "0"})
        bad = purlin_group(timedelta(seconds=10), **env)
        warm = torch.ones(8, device=dev)
        dist.all_reduce(warm, group=bad)
        torch.cuda.synchronize()
        if kind == "sizes far apart, parity plan":
            # NOTE [tagged waits]: rank 0 launches fewer blocks than its peers, whose extra blocks wait for flags
            # rank 0 never raises; they see its tag instead (was: a timeout at world 8, 2026-12-01)
            t = torch.ones(1000 if rank == 0 else 1_000_000, device=dev)
        elif kind.startswith("sizes"):
            t = torch.ones(1000 + 512 * rank, device=dev)  # ranks disagree on the element count
        elif kind == "output pool placement":  # NOTE [peer outputs]: rank 0 would write into rank 1's pool
            t = torch.full((1000,), rank + 1.0, device=dev)
            pool_out = torch_purlin.empty(W * 1000, device=dev, group=bad)  # collective: both ranks
            pool_out.fill_(-5)
            out = pool_out if rank == 0 else torch.empty(W * 1000, device=dev)
        else:
            p = torch_purlin.empty(1000, device=dev, group=bad)  # collective: both ranks
            t = p if rank == 0 else torch.empty(1000, device=dev)
            t.fill_(1)
            out = torch.empty(W * 1000, device=dev)
        before = t.clone()
        if kind == "pool placement":
            dist.all_gather_into_tensor(out, t, group=bad)  # rank 0 zero-copy, rank 1 staged
        elif kind == "output pool placement":
            dist.all_gather_into_tensor(out, t, group=bad)  # rank 0 writes into peers' outputs, rank 1 pushes
        else:
            dist.all_reduce(t, group=bad)
        torch.cuda.synchronize()
        try:
            dist.all_reduce(warm, group=bad)
        except RuntimeError as e:
            msg = str(e)
            named = re.search(r"rank (\d+) called this collective with other arguments", msg)
            assert f"on rank {rank}" in msg and named and int(named.group(1)) != rank, msg
        else:
            raise AssertionError("no error after a mismatched call")
        if kind == "output pool placement":
            # the call tag stopped rank 0 before it wrote: rank 1's (unused) pool block is untouched
            assert_equal(pool_out, torch.full((W * 1000,), -5.0), "nothing written into a peer's pool")
        elif kind != "pool placement":
            assert_equal(t, before, "nothing of the peer's data was read")
        dist.barrier(group=host)

    for kind in ("sizes", "sizes, wide lines", "sizes, parity plan", "sizes far apart, parity plan",
                 "sizes, workspace plan", "pool placement", "output pool placement"):
        R.check(kind, call_tag_case, kind)

    def one_sided_local_error(same_on_every_rank):
        # NOTE [one-sided local errors] (cuda_group_host_checks.cc): an argument error raises on its rank at once. If every
        # rank made it, the group goes on; if only the last rank did, the others entered the collective, and no
        # rank may then get a result from this group: the erring rank's next call raises (it waited for the
        # others on the host), theirs raise once their device wait timed out (at the latest one call later).
        try:
            local_error_body(same_on_every_rank)
        finally:
            dist.barrier(group=host)  # the ranks leave this case together, whatever failed

    def local_error_body(same_on_every_rank):
        g = purlin_group(timedelta(seconds=3))
        x = torch.full((5,), rank + 1.0, device=dev)
        dist.all_reduce(x, group=g)
        torch.cuda.synchronize()
        erring = same_on_every_rank or rank == W - 1
        out = torch.empty(W * 3 + (1 if erring else 0), device=dev)
        try:
            dist.all_gather_into_tensor(out, torch.ones(3, device=dev), group=g)
        except (RuntimeError, ValueError) as e:
            assert erring and "output has" in str(e), str(e)
        else:
            assert not erring, "a wrong output size did not raise"
        want = torch.full((5,), W * (W + 1) / 2, device=dev)
        if same_on_every_rank:
            y = torch.full((5,), rank + 1.0, device=dev)
            dist.all_reduce(y, group=g)
            assert_equal(y, want.cpu(), "the group after an error on every rank")
            return
        raised = None
        for _ in range(2):
            y = torch.full((5,), rank + 1.0, device=dev)
            try:
                dist.all_reduce(y, group=g)
                torch.cuda.synchronize()
            except RuntimeError as e:
                raised = str(e)
                break
            assert rank != W - 1, "the erring rank's next call ran"  # it waits for the others first
        assert raised and f"on rank {rank}" in raised, raised
        if rank == W - 1:
            assert "argument error on this rank only" in raised and "output has" in raised, raised
        else:
            assert re.search(rf"timed out.*waiting for rank {W - 1}\b", raised), raised

    R.check("a local argument error on every rank", one_sided_local_error, True)
    R.check("a local argument error on one rank only", one_sided_local_error, False)

    def checked_calls_case():
        # NOTE [checked calls]: sizes that put the ranks on different protocols (rank 0 on flagged lines, the others
        # on workspace plans; without the check: the group's timeout) are named on the host before anything is
        # launched, on every rank, and the group stays usable.
        pg = purlin_group(timedelta(seconds=10), TORCH_PURLIN_CUDA_CHECK_CALLS="1")
        t = torch.ones(1000 if rank == 0 else 8_000_000, device=dev)
        try:
            dist.all_reduce(t, group=pg)
        except (RuntimeError, ValueError) as e:
            msg = str(e)
            assert f"on rank {rank}" in msg and "elements" in msg and "all_reduce" in msg, msg
        else:
            raise AssertionError("no error for sizes that differ across ranks")
        torch.cuda.synchronize()
        assert torch.all(t == 1).item(), "something ran after the checked error"
        x = torch.full((4099,), float(rank + 1), device=dev)
        dist.all_reduce(x, group=pg)
        assert torch.all(x == W * (W + 1) / 2).item(), "the group is unusable after the checked error"
        dist.barrier(group=host)

    R.check("sizes across protocols, checked calls", checked_calls_case)

    # -- timeout: a rank that never arrives is named, the process stays usable ------------------------------
    R.family = "timeout"
    to = dist.new_group(backend="purlin", timeout=timedelta(seconds=3))

    def timeout_case():
        t = torch.ones(16, device=dev)
        dist.all_reduce(t, group=to)  # sets the workspace up on both ranks
        torch.cuda.synchronize()
        dist.barrier(group=host)
        if rank == 0:
            dist.all_reduce(t, group=to)  # rank 1 never joins: the kernel gives up after 3 s
            torch.cuda.synchronize()
            try:
                dist.all_reduce(t, group=to)
            except RuntimeError as e:
                msg = str(e)
                named = re.search(r"waiting for rank (\d+)", msg)  # ranks 1.. never join
                assert "purlin all_reduce on rank 0: timed out" in msg and named and int(named.group(1)) != 0, msg
            else:
                raise AssertionError("no error after a device timeout")
            x = torch.ones(4, device=dev)
            dist.all_reduce(x, group=pg)  # other groups still work
        else:
            x = torch.ones(4, device=dev)
            dist.all_reduce(x, group=pg)
        assert torch.all(x == W)
        dist.barrier(group=host)

    R.check("rank 1 never arrives", timeout_case)

    torch.cuda.synchronize()
    dist.barrier(group=host)
    dist.destroy_process_group()
    R.out.close()


# ---- pytest side -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    if gpus_missing(WORLD):
        pytest.skip(gpus_missing(WORLD))
    return run_suite("collectives", _worker, WORLD, SUITE_TIMEOUT_S, tmp_path_factory.mktemp("purlin_gpu"))


@pytest.mark.parametrize("family", FAMILIES)
def test_gpu_family(suite, family):
    check_family(suite, family)


def test_gpu_suite_exited_cleanly(suite):
    check_exited_cleanly(suite)
