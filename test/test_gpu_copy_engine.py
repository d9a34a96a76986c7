"""GPU tests of the copy-engine Atom (csrc/atom/cuda/ce_atom.h): pure-copy
collectives enqueued as cudaMemcpyAsync + stream memory operations, no kernel.

Needs 2 GPUs (PURLIN_GPU_WORLD; fewer shared under TORCH_PURLIN_CUDA_SHARE_GPU=1 and MPS,
then without the NCCL comparisons: gpu_harness.py; skips otherwise). TORCH_PURLIN_CUDA_CE_BYTES=1 sends every
copyable collective of the purlin groups to the copy-engine path (outside
CUDA-graph capture); reductions still run on the plan kernel, so the "mixed"
family interleaves both paths on one workspace (NOTE [copy-engine barriers]).
Results are compared bit-exactly with the expected values (every rank rebuilds
every rank's input, NOTE [recomputable inputs] in mp_util.py) and with NCCL in
the same processes. `torch_purlin.last_launch(group)["protocol"]` must say
"copy-engine" after each case (checked once the engine exposes it).

Same harness as test_gpu_collectives.py: one spawn of two processes runs every
case and writes one line per case; the pytest functions report family by family.

    python -m pytest test/test_gpu_copy_engine.py
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
from mp_util import make_input

WORLD = int(os.environ.get("PURLIN_GPU_WORLD", "2"))  # ranks = GPUs used (tools/device_session.sh NPROC)
SUITE_TIMEOUT_S = float(os.environ.get("PURLIN_GPU_SUITE_TIMEOUT", "300"))
PURLIN_TIMEOUT = timedelta(seconds=20)  # bounded waits: a hang fails a case, not the suite
CE_PROTOCOL = "copy-engine"

COPY_DTYPES = (torch.float32, torch.bfloat16, torch.int8, torch.int64, torch.bool, torch.complex64)
SIZES = (1, 7, 4099, 65537, 1_000_003)
SMALL_SIZES = (7, 65537, 1_000_003)  # with the 64K workspace: up to hundreds of rounds

FAMILIES = (
    "all_gather_into_tensor", "all_gather", "broadcast", "all_to_all_single", "gather", "scatter",
    "mixed", "graph", "counters", "timeout",
)


def last_launch(group):
    """torch_purlin.last_launch(group) ({'protocol', 'blocks', ...}), or None while the engine lacks it."""
    import torch_purlin

    fn = getattr(torch_purlin, "last_launch", None)
    return None if fn is None else dict(fn(group))


def last_protocol(group):
    info = last_launch(group)
    return None if info is None else info.get("protocol")


def assert_copy_engine(group, what):
    info = last_launch(group)
    if info is None:
        return
    assert info.get("protocol") == CE_PROTOCOL, f"{what}: ran with {info}, not protocol {CE_PROTOCOL!r}"
    assert not info.get("blocks"), f"{what}: the copy-engine path reports {info.get('blocks')} SMs used"


def _worker(rank, world, init_file, log_path):
    os.environ.setdefault("TORCH_PURLIN_LOG", "1")
    os.environ["TORCH_PURLIN_CUDA_CE_BYTES"] = "1"
    os.environ["TORCH_PURLIN_CUDA_NCCL_FROM"] = "none"  # the Atom at every size (NOTE [protocol table])
    os.environ["TORCH_PURLIN_CUDA_LINE_BYTES"] = "0"  # small copies too (flagged lines would serve them)
    os.environ["TORCH_PURLIN_CUDA_PARITY_BYTES"] = "0"  # and mid-sized ones (parity plans would)
    dev = init_worker(rank, world, init_file, timedelta(seconds=120))
    import torch_purlin  # noqa: F401  registers "purlin"

    R = Runner(rank, log_path)
    nccl = None if shares_gpu(world) else dist.group.WORLD  # NCCL refuses ranks sharing a GPU (NOTE [shared GPU])
    host = dist.new_group(backend="gloo")
    pg = purlin_group(PURLIN_TIMEOUT)
    small = purlin_group(PURLIN_TIMEOUT, TORCH_PURLIN_CUDA_WORKSPACE_BYTES="64K")
    groups = (("", pg, SIZES), (" (64K workspace)", small, SMALL_SIZES))
    W = world

    def inputs(n, dtype):
        s = R.seed()
        return [make_input(s, r, (n,), dtype) for r in range(W)]

    # -- all_gather_into_tensor ------------------------------------------------------------
    R.family = "all_gather_into_tensor"

    def all_gather_case(group, tag, dtype, n, in_place):
        xs = inputs(n, dtype)
        out = torch.zeros(W * n, dtype=dtype, device=dev)
        dist.all_gather_into_tensor(out, all_gather_input(out, xs[rank], rank, in_place), group=group)
        what = f"all_gather_into_tensor{tag} {dtype} n={n} in_place={in_place}"
        assert_copy_engine(group, what)
        assert_equal(out, torch.cat(xs), what)
        if nccl is not None:
            ref = torch.zeros_like(out)
            dist.all_gather_into_tensor(ref, xs[rank].to(dev), group=nccl)
            assert_equal(out, ref, what + " vs NCCL")

    for tag, group, sizes in groups:
        for dtype in COPY_DTYPES:
            for n in sizes:
                for in_place in (False, True):
                    R.check(f"{dtype} n={n} in_place={in_place}{tag}", all_gather_case, group, tag, dtype, n, in_place)

    # -- all_gather (list) -----------------------------------------------------------------------
    R.family = "all_gather"

    def all_gather_list_case(group, tag, dtype, n):
        xs = inputs(n, dtype)
        outs = [torch.zeros(n, dtype=dtype, device=dev) for _ in range(W)]
        dist.all_gather(outs, xs[rank].to(dev), group=group)
        what = f"all_gather{tag} {dtype} n={n}"
        assert_copy_engine(group, what)
        refs = [torch.zeros(n, dtype=dtype, device=dev) for _ in range(W)]
        if nccl is not None:
            dist.all_gather(refs, xs[rank].to(dev), group=nccl)
        for r in range(W):
            assert_equal(outs[r], xs[r], f"{what} block {r}")
            if nccl is not None:
                assert_equal(outs[r], refs[r], f"{what} block {r} vs NCCL")

    for tag, group, sizes in groups:
        for dtype in (torch.float32, torch.int64, torch.bool):
            for n in sizes:
                R.check(f"{dtype} n={n}{tag}", all_gather_list_case, group, tag, dtype, n)

    # -- broadcast ---------------------------------------------------------------------------------
    R.family = "broadcast"

    def broadcast_case(group, tag, dtype, n, root):
        xs = inputs(n, dtype)
        t = xs[rank].to(dev)
        dist.broadcast(t, src=root, group=group)
        what = f"broadcast{tag} {dtype} n={n} root={root}"
        assert_copy_engine(group, what)
        assert_equal(t, xs[root], what)
        if nccl is not None:
            ref = xs[rank].to(dev)
            dist.broadcast(ref, src=root, group=nccl)
            assert_equal(t, ref, what + " vs NCCL")

    for tag, group, sizes in groups:
        for dtype in (torch.float32, torch.bfloat16, torch.uint8, torch.complex64):
            for n in sizes:
                for root in range(W):
                    R.check(f"{dtype} n={n} root={root}{tag}", broadcast_case, group, tag, dtype, n, root)

    # -- all_to_all_single: even and uneven splits (one of them zero) ---------------------------------
    R.family = "all_to_all_single"

    def all_to_all_case(group, tag, dtype, k, uneven):
        # splits[s][d]: elements rank s sends to rank d
        splits = [[(k * (1 + s + 2 * d) if uneven else k) * (0 if uneven and s == 0 and d == 1 else 1)
                   for d in range(W)] for s in range(W)]
        s0 = R.seed()
        xs = [make_input(s0, r, (sum(splits[r]),), dtype) for r in range(W)]
        out = torch.zeros(sum(splits[s][rank] for s in range(W)), dtype=dtype, device=dev)
        ins = [splits[rank][d] for d in range(W)]
        outs = [splits[s][rank] for s in range(W)]
        if uneven:
            dist.all_to_all_single(out, xs[rank].to(dev), outs, ins, group=group)
        else:
            dist.all_to_all_single(out, xs[rank].to(dev), group=group)
        what = f"all_to_all_single{tag} {dtype} k={k} uneven={uneven}"
        assert_copy_engine(group, what)
        want = torch.cat([xs[s][sum(splits[s][:rank]):sum(splits[s][:rank + 1])] for s in range(W)])
        assert_equal(out, want, what)
        if nccl is not None:
            ref = torch.zeros_like(out)
            dist.all_to_all_single(ref, xs[rank].to(dev), outs, ins, group=nccl)
            assert_equal(out, ref, what + " vs NCCL")

    for tag, group, sizes in groups:
        for dtype in (torch.float32, torch.bfloat16, torch.int64):
            for k in (1, 1000, 300_001):
                for uneven in (False, True):
                    R.check(f"{dtype} k={k} uneven={uneven}{tag}", all_to_all_case, group, tag, dtype, k, uneven)

    # -- gather / scatter -------------------------------------------------------------------------------
    R.family = "gather"

    def gather_case(group, tag, dtype, n, root):
        xs = inputs(n, dtype)
        lst = [torch.zeros(n, dtype=dtype, device=dev) for _ in range(W)] if rank == root else None
        dist.gather(xs[rank].to(dev), lst, dst=root, group=group)
        what = f"gather{tag} {dtype} n={n} root={root}"
        assert_copy_engine(group, what)
        refs = [torch.zeros(n, dtype=dtype, device=dev) for _ in range(W)] if rank == root else None
        if nccl is not None:
            dist.gather(xs[rank].to(dev), refs, dst=root, group=nccl)
        if rank == root:
            for r in range(W):
                assert_equal(lst[r], xs[r], f"{what} block {r}")
                if nccl is not None:
                    assert_equal(lst[r], refs[r], f"{what} block {r} vs NCCL")

    for tag, group, sizes in groups:
        for dtype in (torch.float32, torch.int8):
            for n in sizes:
                for root in range(W):
                    R.check(f"{dtype} n={n} root={root}{tag}", gather_case, group, tag, dtype, n, root)

    R.family = "scatter"

    def scatter_case(group, tag, dtype, n, root):
        xs = inputs(n, dtype)
        out = torch.zeros(n, dtype=dtype, device=dev)
        dist.scatter(out, [x.to(dev) for x in xs] if rank == root else None, src=root, group=group)
        what = f"scatter{tag} {dtype} n={n} root={root}"
        assert_copy_engine(group, what)
        assert_equal(out, xs[rank], what)
        if nccl is not None:
            ref = torch.zeros(n, dtype=dtype, device=dev)
            dist.scatter(ref, [x.to(dev) for x in xs] if rank == root else None, src=root, group=nccl)
            assert_equal(out, ref, what + " vs NCCL")

    for tag, group, sizes in groups:
        for dtype in (torch.float32, torch.bfloat16):
            for n in sizes:
                for root in range(W):
                    R.check(f"{dtype} n={n} root={root}{tag}", scatter_case, group, tag, dtype, n, root)

    # -- mixed: kernel reductions and copy-engine copies back to back on one workspace ----------------------
    R.family = "mixed"

    def mixed_case(group, tag, n, async_op):
        # Each op overwrites the workspace the previous one (other path) may still be read from by the peer.
        for it in range(10):
            xs = inputs(n, torch.float32)
            ar = xs[rank].to(dev)
            w1 = dist.all_reduce(ar, group=group, async_op=async_op)  # plan kernel
            ag = torch.zeros(W * n, device=dev)
            w2 = dist.all_gather_into_tensor(ag, xs[rank].to(dev), group=group, async_op=async_op)  # copy engine
            rs = torch.zeros(n, device=dev)
            w3 = dist.reduce_scatter_tensor(rs, torch.cat(xs).to(dev), group=group, async_op=async_op)  # kernel
            bc = xs[rank].to(dev)
            w4 = dist.broadcast(bc, src=it % W, group=group, async_op=async_op)  # copy engine
            if async_op:
                for w in (w1, w2, w3, w4):
                    w.wait()
            what = f"mixed{tag} n={n} async={async_op} it={it}"
            assert_copy_engine(group, what)
            total = torch.stack(xs).double().sum(0)
            assert torch.allclose(ar.cpu().double(), total, rtol=1e-5, atol=1e-5), what + ": all_reduce"
            assert_equal(ag, torch.cat(xs), what + ": all_gather_into_tensor")
            rs_ref = (torch.cat(xs).double() * W)[rank * n:(rank + 1) * n]  # every rank gave cat(xs)
            assert torch.allclose(rs.cpu().double(), rs_ref, rtol=1e-5, atol=1e-5), what + ": reduce_scatter"
            assert_equal(bc, xs[it % W], what + ": broadcast")

    for tag, group, _ in groups:
        for n in (4099, 300_001):
            for async_op in (False, True):
                R.check(f"n={n} async={async_op}{tag}", mixed_case, group, tag, n, async_op)

    # -- CUDA graphs: capture falls back to the kernel; replays mixed with eager copy-engine ops ------------
    R.family = "graph"

    def graph_case(group, tag):
        n = 65537
        split = [[3 + s if d == 0 else 5 for d in range(W)] for s in range(W)]  # split[s][d]: s sends to d
        x = torch.zeros(n, device=dev)
        ag = torch.zeros(W * n, device=dev)
        bc = torch.zeros(n, device=dev)
        a2a_in = torch.zeros(sum(split[rank]), device=dev)
        a2a = torch.zeros(sum(split[s][rank] for s in range(W)), device=dev)
        lst = [torch.zeros(n, device=dev) for _ in range(W)]

        def body():
            dist.all_gather_into_tensor(ag, x, group=group)
            bc.copy_(x)
            dist.broadcast(bc, src=1, group=group)
            dist.all_to_all_single(a2a, a2a_in, [split[s][rank] for s in range(W)], split[rank], group=group)
            dist.all_gather(lst, x, group=group)

        body()  # warm-up outside capture (copy engine)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            body()
        p = last_protocol(group)
        assert p != CE_PROTOCOL, f"graph{tag}: a captured op reports protocol {p!r}"
        for it in range(10):
            s = R.seed()
            xs = [make_input(s, r, (n,), torch.float32) for r in range(W)]
            a2as = [make_input(s + 1000, r, (sum(split[r]),), torch.float32) for r in range(W)]
            x.copy_(xs[rank].to(dev))
            a2a_in.copy_(a2as[rank].to(dev))
            g.replay()
            # an eager copy-engine op right behind the replayed kernels, same workspace
            eager = torch.zeros(W * n, device=dev)
            dist.all_gather_into_tensor(eager, x, group=group)
            assert_copy_engine(group, f"graph{tag} eager op after replay {it}")
            torch.cuda.synchronize()
            what = f"graph{tag} replay {it}"
            assert_equal(ag, torch.cat(xs), what + ": all_gather_into_tensor")
            assert_equal(eager, torch.cat(xs), what + ": eager all_gather_into_tensor")
            assert_equal(bc, xs[1], what + ": broadcast")
            want = torch.cat([a2as[s_][sum(split[s_][:rank]):sum(split[s_][:rank + 1])] for s_ in range(W)])
            assert_equal(a2a, want, what + ": all_to_all_single")
            for r in range(W):
                assert_equal(lst[r], xs[r], what + f": all_gather block {r}")

    for tag, group, _ in groups:
        R.check(f"capture + 10 replays{tag}", graph_case, group, tag)

    # -- counters: every op above ran natively ---------------------------------------------------------------
    R.family = "counters"

    def counters_case(group, tag):
        cnt = torch_purlin.counters(group, "cuda")
        for op in ("broadcast", "all_gather_into_tensor", "all_gather", "all_to_all_single", "gather", "scatter"):
            assert op in cnt and cnt[op][0] > 0, f"{op}{tag} never ran natively: {cnt}"
            assert cnt[op][1] == 0, f"{op}{tag} fell back {cnt[op][1]} times: {cnt}"

    for tag, group, _ in groups:
        R.check_after_all(f"no copy op fell back{tag}", counters_case, group, tag)

    # -- timeout: the watchdog releases a stream whose peer never comes ------------------------------------
    R.family = "timeout"
    tg = dist.new_group(backend="purlin", timeout=timedelta(seconds=3))

    def timeout_case():
        warm = torch.zeros(W * 16, device=dev)
        dist.all_gather_into_tensor(warm, torch.ones(16, device=dev), group=tg)  # workspace set up on both ranks
        torch.cuda.synchronize()
        dist.barrier(group=host)
        if rank == 0:
            out = torch.zeros(W * 1024, device=dev)
            dist.all_gather_into_tensor(out, torch.ones(1024, device=dev), group=tg)  # rank 1 never joins
            t0 = time.time()
            torch.cuda.synchronize()  # returns once the watchdog released the stream (~3 s)
            waited = time.time() - t0
            assert waited < 60, f"the stream stayed blocked {waited:.1f} s"
            try:
                dist.all_gather_into_tensor(out, torch.ones(1024, device=dev), group=tg)
            except RuntimeError as e:
                msg = str(e)
                named = re.search(r"waiting for rank (\d+)", msg)  # ranks 1.. never join
                assert "timed out" in msg and named and int(named.group(1)) != 0, msg
            else:
                raise AssertionError("no error after a copy-engine timeout")
        x = torch.zeros(W * 4, device=dev)
        dist.all_gather_into_tensor(x, torch.full((4,), float(rank), device=dev), group=pg)  # other groups work
        assert_equal(x, torch.arange(W, dtype=torch.float32).repeat_interleave(4), "other group after a timeout")
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
    return run_suite("copy_engine", _worker, WORLD, SUITE_TIMEOUT_S, tmp_path_factory.mktemp("purlin_ce"))


@pytest.mark.parametrize("family", FAMILIES)
def test_copy_engine_family(suite, family):
    check_family(suite, family)


def test_copy_engine_suite_exited_cleanly(suite):
    check_exited_cleanly(suite)
