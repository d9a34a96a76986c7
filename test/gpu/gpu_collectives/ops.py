"""ops.py — GPU collective families: the collectives one by one (every dtype, reduce op, size, root, in place), unaligned slices, a small workspace.
Run by test/gpu/test_gpu_collectives.py's one worker (families all_reduce, reduce, broadcast, all_gather_into_tensor, all_gather, reduce_scatter_tensor, all_to_all_single, gather, scatter, barrier, unaligned, small_workspace).
Each case is a function of the worker's context c (test_gpu_collectives._worker) and its arguments; each
family's listing yields its cases in order."""

import torch
import torch.distributed as dist

from gpu_harness import Case, all_gather_input, assert_equal, family_registry, purlin_group

from gpu_collectives.checks import (FLOATS, INTS, PURLIN_TIMEOUT, SIZES, assert_close_to, assert_reduced, make_input,
                                    make_op, nccl_has, ops_for)

FAMILIES, family = family_registry()


def run(c):
    """The families in order."""
    c.R.run_families(c, FAMILIES)


# -- all_reduce --------------------------------------------------------------


def all_reduce_case(c, group, dtype, op, n, tag=""):
    rank, dev, nccl = c.rank, c.dev, c.nccl
    xs = c.inputs(n, dtype, op)
    t = xs[rank].to(dev)
    dist.all_reduce(t, op=make_op(op), group=group)
    assert_reduced(t, xs, op, f"all_reduce{tag} {dtype} {op} n={n}")
    if nccl is not None and nccl_has(dtype, op):
        ref = xs[rank].to(dev)
        dist.all_reduce(ref, op=make_op(op), group=nccl)
        assert_close_to(t, ref, xs, op, f"all_reduce{tag} {dtype} {op} n={n} vs NCCL")


@family("all_reduce")
def all_reduce_cases(c):
    for dtype in FLOATS + INTS:
        for op in ops_for(dtype):
            for n in SIZES if dtype in (torch.float32, torch.bfloat16) and op == "sum" else SIZES[:6] + (65537,):
                yield Case(f"{dtype} {op} n={n}", all_reduce_case, c.pg, dtype, op, n)
    yield Case("empty tensor", all_reduce_case, c.pg, torch.float32, "sum", 0)


# -- reduce -------------------------------------------------------------------


def reduce_case(c, dtype, op, n, root):
    rank = c.rank
    xs = c.inputs(n, dtype, op)
    t = xs[rank].to(c.dev)
    dist.reduce(t, dst=root, op=make_op(op), group=c.pg)
    if rank == root:
        assert_reduced(t, xs, op, f"reduce {dtype} {op} n={n} root={root}")
    else:
        assert_equal(t, xs[rank], "reduce: non-root input must stay unchanged")


@family("reduce")
def reduce_cases(c):
    for dtype in (torch.float32, torch.bfloat16, torch.int32, torch.float16):
        for op in ("sum", "max", "product"):
            for n in (1, 1000, 65537):
                for root in range(c.W):
                    yield Case(f"{dtype} {op} n={n} root={root}", reduce_case, dtype, op, n, root)


# -- broadcast ----------------------------------------------------------------


def broadcast_case(c, dtype, n, root):
    xs = c.inputs(n, dtype)
    t = xs[c.rank].to(c.dev)
    dist.broadcast(t, src=root, group=c.pg)
    assert_equal(t, xs[root], f"broadcast {dtype} n={n} root={root}")


@family("broadcast")
def broadcast_cases(c):
    for dtype in (torch.float32, torch.bfloat16, torch.int8, torch.int64, torch.bool, torch.complex64,
                  torch.complex128):
        for n in (1, 7, 4099, 1_000_003):
            for root in range(c.W):
                yield Case(f"{dtype} n={n} root={root}", broadcast_case, dtype, n, root)


# -- all_gather_into_tensor ------------------------------------------------------


def all_gather_case(c, dtype, n, in_place):
    rank, W, dev = c.rank, c.W, c.dev
    xs = c.inputs(n, dtype)
    out = torch.zeros(W * n, dtype=dtype, device=dev)
    dist.all_gather_into_tensor(out, all_gather_input(out, xs[rank], rank, in_place), group=c.pg)
    assert_equal(out, torch.cat(xs), f"all_gather_into_tensor {dtype} n={n} in_place={in_place}")
    if c.nccl is not None:
        ref = torch.zeros_like(out)
        dist.all_gather_into_tensor(ref, xs[rank].to(dev), group=c.nccl)
        assert_equal(out, ref, "vs NCCL")


@family("all_gather_into_tensor")
def all_gather_cases(c):
    for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.int32, torch.uint8, torch.bool,
                  torch.complex64):
        for n in SIZES:
            for in_place in (False, True):
                yield Case(f"{dtype} n={n} in_place={in_place}", all_gather_case, dtype, n, in_place)


# -- all_gather (list) ---------------------------------------------------------------


def all_gather_list_case(c, dtype, n):
    W = c.W
    xs = c.inputs(n, dtype)
    outs = [torch.zeros(n, dtype=dtype, device=c.dev) for _ in range(W)]
    dist.all_gather(outs, xs[c.rank].to(c.dev), group=c.pg)
    for r in range(W):
        assert_equal(outs[r], xs[r], f"all_gather {dtype} n={n} block {r}")


@family("all_gather")
def all_gather_list_cases(c):
    for dtype in (torch.float32, torch.bfloat16, torch.int64):
        for n in (1, 1000, 65537):
            yield Case(f"{dtype} n={n}", all_gather_list_case, dtype, n)


# -- reduce_scatter_tensor -----------------------------------------------------------


def reduce_scatter_case(c, dtype, op, n, in_place):
    rank, W, dev, nccl = c.rank, c.W, c.dev, c.nccl
    xs = c.inputs(W * n, dtype, op)
    inp = xs[rank].to(dev)
    out = inp[rank * n:(rank + 1) * n] if in_place else torch.zeros(n, dtype=dtype, device=dev)
    dist.reduce_scatter_tensor(out, inp, op=make_op(op), group=c.pg)
    blocks = [x[rank * n:(rank + 1) * n] for x in xs]
    assert_reduced(out, blocks, op, f"reduce_scatter_tensor {dtype} {op} n={n} in_place={in_place}")
    if nccl is not None and nccl_has(dtype, op):
        ref = torch.zeros(n, dtype=dtype, device=dev)
        dist.reduce_scatter_tensor(ref, xs[rank].to(dev), op=make_op(op), group=nccl)
        assert_close_to(out, ref, blocks, op, "vs NCCL")


@family("reduce_scatter_tensor")
def reduce_scatter_cases(c):
    for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.int32, torch.int8, torch.float64):
        for op in ("sum", "avg", "max", "premul_sum") if dtype.is_floating_point else ("sum", "min"):
            for n in (1, 7, 1000, 65537, 500_001):
                for in_place in (False, True):
                    yield Case(f"{dtype} {op} n={n} in_place={in_place}", reduce_scatter_case, dtype, op, n, in_place)


# -- all_to_all_single -----------------------------------------------------------------


def all_to_all_case(c, dtype, k, uneven):
    rank, W, dev = c.rank, c.W, c.dev
    # splits[s][d]: elements rank s sends to rank d (uneven: includes a zero split)
    splits = [[(k * (1 + s + 2 * d) if uneven else k) * (0 if uneven and s == 0 and d == 1 else 1)
               for d in range(W)] for s in range(W)]
    s0 = c.R.seed()
    xs = [make_input(s0, r, sum(splits[r]), dtype) for r in range(W)]
    out = torch.zeros(sum(splits[s][rank] for s in range(W)), dtype=dtype, device=dev)
    ins = [splits[rank][d] for d in range(W)]
    outs = [splits[s][rank] for s in range(W)]
    if uneven:
        dist.all_to_all_single(out, xs[rank].to(dev), outs, ins, group=c.pg)
    else:
        dist.all_to_all_single(out, xs[rank].to(dev), group=c.pg)
    want = torch.cat([xs[s][sum(splits[s][:rank]):sum(splits[s][:rank + 1])] for s in range(W)])
    assert_equal(out, want, f"all_to_all_single {dtype} k={k} uneven={uneven}")
    if c.nccl is not None:
        ref = torch.zeros_like(out)
        dist.all_to_all_single(ref, xs[rank].to(dev), outs, ins, group=c.nccl)
        assert_equal(out, ref, "vs NCCL")


@family("all_to_all_single")
def all_to_all_cases(c):
    for dtype in (torch.float32, torch.bfloat16, torch.int64):
        for k in (1, 3, 1000, 300_001):
            for uneven in (False, True):
                yield Case(f"{dtype} k={k} uneven={uneven}", all_to_all_case, dtype, k, uneven)


# -- gather / scatter ---------------------------------------------------------------------


def gather_case(c, dtype, n, root):
    rank, W, dev = c.rank, c.W, c.dev
    xs = c.inputs(n, dtype)
    lst = [torch.zeros(n, dtype=dtype, device=dev) for _ in range(W)] if rank == root else None
    dist.gather(xs[rank].to(dev), lst, dst=root, group=c.pg)
    if rank == root:
        for r in range(W):
            assert_equal(lst[r], xs[r], f"gather {dtype} n={n} root={root} block {r}")


@family("gather")
def gather_cases(c):
    for dtype in (torch.float32, torch.int32):
        for n in (1, 1000, 65537):
            for root in range(c.W):
                yield Case(f"{dtype} n={n} root={root}", gather_case, dtype, n, root)


def scatter_case(c, dtype, n, root):
    xs = c.inputs(n, dtype)
    out = torch.zeros(n, dtype=dtype, device=c.dev)
    lst = [x.to(c.dev) for x in xs] if c.rank == root else None
    dist.scatter(out, lst, src=root, group=c.pg)
    assert_equal(out, xs[c.rank], f"scatter {dtype} n={n} root={root}")


@family("scatter")
def scatter_cases(c):
    for dtype in (torch.float32, torch.bfloat16):
        for n in (1, 1000, 65537):
            for root in range(c.W):
                yield Case(f"{dtype} n={n} root={root}", scatter_case, dtype, n, root)


# -- barrier -------------------------------------------------------------------------------


def barrier_case(c):
    for _ in range(3):
        dist.barrier(group=c.pg)


@family("barrier")
def barrier_cases(c):
    yield Case("barrier x3", barrier_case)


# -- unaligned: slices at odd element offsets --------------------------------------------------


def unaligned_all_reduce(c, dtype, n, off):
    xs = c.inputs(n, dtype, "sum")
    big = torch.zeros(n + 5, dtype=dtype, device=c.dev)
    t = big[off:off + n]
    t.copy_(xs[c.rank].to(c.dev))
    dist.all_reduce(t, group=c.pg)
    assert_reduced(t, xs, "sum", f"unaligned all_reduce {dtype} n={n} offset={off}")
    assert_equal(big[:off], torch.zeros(off, dtype=dtype), "bytes before the slice")
    assert_equal(big[off + n:], torch.zeros(5 - off, dtype=dtype), "bytes after the slice")


def unaligned_all_gather(c, dtype, n, off):
    W, dev = c.W, c.dev
    xs = c.inputs(n, dtype)
    big = torch.zeros(W * n + 5, dtype=dtype, device=dev)
    out = big[off:off + W * n]
    src = torch.zeros(n + 3, dtype=dtype, device=dev)[1:n + 1]
    src.copy_(xs[c.rank].to(dev))
    dist.all_gather_into_tensor(out, src, group=c.pg)
    assert_equal(out, torch.cat(xs), f"unaligned all_gather {dtype} n={n} offset={off}")


def unaligned_reduce_scatter(c, dtype, n, off):
    rank, W, dev = c.rank, c.W, c.dev
    xs = c.inputs(W * n, dtype, "sum")
    big = torch.zeros(W * n + 5, dtype=dtype, device=dev)
    inp = big[off:off + W * n]
    inp.copy_(xs[rank].to(dev))
    out = torch.zeros(n + 2, dtype=dtype, device=dev)[1:n + 1]
    dist.reduce_scatter_tensor(out, inp, group=c.pg)
    assert_reduced(out, [x[rank * n:(rank + 1) * n] for x in xs], "sum", f"unaligned reduce_scatter {dtype} n={n}")


@family("unaligned")
def unaligned_cases(c):
    for dtype in (torch.float32, torch.bfloat16, torch.int8, torch.float16):
        for n in (1, 33, 4099, 100_003):
            for off in (1, 3):
                yield Case(f"all_reduce {dtype} n={n} off={off}", unaligned_all_reduce, dtype, n, off)
                yield Case(f"all_gather {dtype} n={n} off={off}", unaligned_all_gather, dtype, n, off)
                yield Case(f"reduce_scatter {dtype} n={n} off={off}", unaligned_reduce_scatter, dtype, n, off)


# -- small workspace: tensors much larger than it (many rounds, device-resident plans, two-shot) ----


def small_copy_ops(c, small, n):
    rank, W, dev = c.rank, c.W, c.dev
    xs = c.inputs(n, torch.float32)
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
    if c.nccl is not None:
        ref = torch.zeros_like(a2a)
        dist.all_to_all_single(ref, big, group=c.nccl)
        assert_equal(a2a, ref, f"all_to_all_single n={n} (64K workspace) vs NCCL")


@family("small_workspace")
def small_workspace_cases(c):
    # Workspace plans at every size (lines and parity plans would serve up to 8M without rounds).
    small = purlin_group(PURLIN_TIMEOUT, TORCH_PURLIN_CUDA_WORKSPACE_BYTES="64K", TORCH_PURLIN_CUDA_TWO_SHOT_BYTES="16K",
                         TORCH_PURLIN_CUDA_LINE_BYTES="0", TORCH_PURLIN_CUDA_PARITY_BYTES="0")
    for dtype in (torch.float32, torch.bfloat16, torch.int32):
        for n in (1, 1000, 100_003, 1_000_003):
            yield Case(f"all_reduce {dtype} n={n}", all_reduce_case, small, dtype, "sum", n, " (64K workspace)")
    yield Case("all_reduce f32 max n=300001", all_reduce_case, small, torch.float32, "max", 300_001, " (64K workspace)")
    yield Case("all_reduce f32 premul n=300001", all_reduce_case, small, torch.float32, "premul_sum", 300_001, " (64K)")
    # One-shot in many rounds (the default at W = 2 at every size: NOTE [protocol table]).
    one = purlin_group(PURLIN_TIMEOUT, TORCH_PURLIN_CUDA_WORKSPACE_BYTES="64K", TORCH_PURLIN_CUDA_TWO_SHOT_BYTES="1G",
                       TORCH_PURLIN_CUDA_LINE_BYTES="0", TORCH_PURLIN_CUDA_PARITY_BYTES="0")
    for dtype in (torch.float32, torch.bfloat16):
        for n in (100_003, 1_000_003):
            yield Case(f"one-shot all_reduce {dtype} n={n}", all_reduce_case, one, dtype, "sum", n, " (64K, one-shot)")
    for n in (5, 40_000, 500_001):
        yield Case(f"copy ops n={n}", small_copy_ops, small, n)
