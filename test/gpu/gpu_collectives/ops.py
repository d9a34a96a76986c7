"""ops.py — GPU collective families: the collectives one by one (every dtype, reduce op, size, root, in place), unaligned slices, a small workspace.
Run by test/gpu/test_gpu_collectives.py's one worker (families all_reduce, reduce, broadcast, all_gather_into_tensor, all_gather, reduce_scatter_tensor, all_to_all_single, gather, scatter, barrier, unaligned, small_workspace)."""

import torch
import torch.distributed as dist

from gpu_harness import all_gather_input, assert_equal, purlin_group

from gpu_collectives.checks import (FLOATS, INTS, PURLIN_TIMEOUT, SIZES, assert_close_to, assert_reduced, make_input,
                                    make_op, nccl_has, ops_for)


def run(c):
    """The families in order; c: the worker's context (test_gpu_collectives._worker)."""
    rank, W, dev, R, pg, nccl, inputs = c.rank, c.W, c.dev, c.R, c.pg, c.nccl, c.inputs
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
