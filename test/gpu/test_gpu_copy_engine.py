"""GPU tests of the copy-engine Atom (csrc/atom/cuda/host/ce_atom.h): pure-copy
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
Each case is a module-level function of the worker's context c and its
arguments; each family a listing that yields its cases (LISTINGS, in order).

    python -m pytest test/gpu/test_gpu_copy_engine.py
"""
import os
import re
import time
from datetime import timedelta
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist

from gpu_harness import (Case, Runner, all_gather_input, assert_equal, check_exited_cleanly, check_family,
                         family_registry, gpus_missing, init_worker, purlin_group, run_suite, shares_gpu)
from mp_util import make_input

WORLD = int(os.environ.get("PURLIN_GPU_WORLD", "2"))  # ranks = GPUs used (tools/gpu.sh NPROC)
SUITE_TIMEOUT_S = float(os.environ.get("PURLIN_GPU_SUITE_TIMEOUT", "300"))
PURLIN_TIMEOUT = timedelta(seconds=20)  # bounded waits: a hang fails a case, not the suite
CE_PROTOCOL = "copy-engine"

COPY_DTYPES = (torch.float32, torch.bfloat16, torch.int8, torch.int64, torch.bool, torch.complex64)
SIZES = (1, 7, 4099, 65537, 1_000_003)
SMALL_SIZES = (7, 65537, 1_000_003)  # with the 64K workspace: up to hundreds of rounds

LISTINGS, family = family_registry()  # the families in the order the worker runs them
ZC = CE_PROTOCOL + "+zero-copy"


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


# -- all_gather_into_tensor ------------------------------------------------------------


def all_gather_case(c, group, tag, dtype, n, in_place):
    rank, W, dev, nccl, inputs = c.rank, c.W, c.dev, c.nccl, c.inputs
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


@family("all_gather_into_tensor")
def all_gather_into_tensor_cases(c):
    for tag, group, sizes in c.groups:
        for dtype in COPY_DTYPES:
            for n in sizes:
                for in_place in (False, True):
                    yield Case(f"{dtype} n={n} in_place={in_place}{tag}", all_gather_case, group, tag, dtype, n, in_place)


# -- all_gather (list) -----------------------------------------------------------------------


def all_gather_list_case(c, group, tag, dtype, n):
    rank, W, dev, nccl, inputs = c.rank, c.W, c.dev, c.nccl, c.inputs
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


@family("all_gather")
def all_gather_cases(c):
    for tag, group, sizes in c.groups:
        for dtype in (torch.float32, torch.int64, torch.bool):
            for n in sizes:
                yield Case(f"{dtype} n={n}{tag}", all_gather_list_case, group, tag, dtype, n)


# -- broadcast ---------------------------------------------------------------------------------


def broadcast_case(c, group, tag, dtype, n, root):
    rank, dev, nccl, inputs = c.rank, c.dev, c.nccl, c.inputs
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


@family("broadcast")
def broadcast_cases(c):
    for tag, group, sizes in c.groups:
        for dtype in (torch.float32, torch.bfloat16, torch.uint8, torch.complex64):
            for n in sizes:
                for root in range(c.W):
                    yield Case(f"{dtype} n={n} root={root}{tag}", broadcast_case, group, tag, dtype, n, root)


# -- all_to_all_single: even and uneven splits (one of them zero) ---------------------------------


def all_to_all_case(c, group, tag, dtype, k, uneven):
    # splits[s][d]: elements rank s sends to rank d
    rank, W, dev, R, nccl = c.rank, c.W, c.dev, c.R, c.nccl
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


@family("all_to_all_single")
def all_to_all_single_cases(c):
    for tag, group, sizes in c.groups:
        for dtype in (torch.float32, torch.bfloat16, torch.int64):
            for k in (1, 1000, 300_001):
                for uneven in (False, True):
                    yield Case(f"{dtype} k={k} uneven={uneven}{tag}", all_to_all_case, group, tag, dtype, k, uneven)


# -- gather / scatter -------------------------------------------------------------------------------


def gather_case(c, group, tag, dtype, n, root):
    rank, W, dev, nccl, inputs = c.rank, c.W, c.dev, c.nccl, c.inputs
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


@family("gather")
def gather_cases(c):
    for tag, group, sizes in c.groups:
        for dtype in (torch.float32, torch.int8):
            for n in sizes:
                for root in range(c.W):
                    yield Case(f"{dtype} n={n} root={root}{tag}", gather_case, group, tag, dtype, n, root)


def scatter_case(c, group, tag, dtype, n, root):
    rank, dev, nccl, inputs = c.rank, c.dev, c.nccl, c.inputs
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


@family("scatter")
def scatter_cases(c):
    for tag, group, sizes in c.groups:
        for dtype in (torch.float32, torch.bfloat16):
            for n in sizes:
                for root in range(c.W):
                    yield Case(f"{dtype} n={n} root={root}{tag}", scatter_case, group, tag, dtype, n, root)


# -- zero_copy: pool tensors, pulled straight from the peers' inputs (NOTE [copy-engine zero-copy]) ----


def pool(c, n, dtype, group=None):
    """A tensor of n elements in `group`'s symmetric pool (the default purlin group's if None)."""
    import torch_purlin

    return torch_purlin.empty(n, dtype=dtype, device=c.dev, group=c.pg if group is None else group)


def expect_protocol(group, want, what):
    got = last_protocol(group)
    assert got == want, f"{what}: ran {last_launch(group)}, not {want!r}"


def zc_all_gather_case(c, dtype, n, in_place):
    rank, W, dev, pg, inputs = c.rank, c.W, c.dev, c.pg, c.inputs
    xs = inputs(n, dtype)
    out = pool(c, W * n, dtype)
    out.zero_()
    if in_place:
        inp = out[rank * n:(rank + 1) * n]
        inp.copy_(xs[rank].to(dev))
    else:
        inp = pool(c, n, dtype)
        inp.copy_(xs[rank].to(dev))
    dist.all_gather_into_tensor(out, inp, group=pg)
    what = f"zero-copy all_gather_into_tensor {dtype} n={n} in_place={in_place}"
    expect_protocol(pg, ZC, what)
    assert_equal(out, torch.cat(xs), what)
    del inp, out


def zc_broadcast_case(c, dtype, n, root):
    rank, dev, pg, inputs = c.rank, c.dev, c.pg, c.inputs
    xs = inputs(n, dtype)
    t = pool(c, n, dtype)
    t.copy_(xs[rank].to(dev))
    dist.broadcast(t, src=root, group=pg)
    what = f"zero-copy broadcast {dtype} n={n} root={root}"
    expect_protocol(pg, ZC, what)
    assert_equal(t, xs[root], what)
    del t


def zc_all_to_all_case(c, k):
    rank, W, dev, R, pg = c.rank, c.W, c.dev, c.R, c.pg
    splits = [[k * (1 + s + 2 * d) for d in range(W)] for s in range(W)]
    s0 = R.seed()
    ins = [make_input(s0, s, (sum(splits[s]),), torch.float32) for s in range(W)]
    # every rank allocates the same size (pool blocks are placed alike only for the same sizes in the same
    # order) and passes its own length from the block's start: the same offset on every rank
    block = pool(c, max(sum(row) for row in splits), torch.float32)
    inp = block[:sum(splits[rank])]
    inp.copy_(ins[rank].to(dev))
    out = torch.empty(sum(splits[s][rank] for s in range(W)), device=dev)
    dist.all_to_all_single(out, inp, output_split_sizes=[splits[s][rank] for s in range(W)],
                           input_split_sizes=splits[rank], group=pg)
    what = f"zero-copy all_to_all_single k={k}"
    expect_protocol(pg, ZC, what)
    want = torch.cat([ins[s][sum(splits[s][:rank]):sum(splits[s][:rank + 1])] for s in range(W)])
    assert_equal(out, want, what)
    del inp, block


def zc_plain_input_case(c, n):
    # the output in the pool, the input not: the engine cannot pull, so the kernel writes into the peers'
    # outputs (NOTE [peer outputs]); the same choice on every rank
    rank, W, dev, pg, inputs = c.rank, c.W, c.dev, c.pg, c.inputs
    xs = inputs(n, torch.float32)
    out = pool(c, W * n, torch.float32)
    dist.all_gather_into_tensor(out, xs[rank].to(dev), group=pg)
    what = f"all_gather_into_tensor, pool output, plain input, n={n}"
    assert "peer-outputs" in (last_protocol(pg) or ""), f"{what}: ran {last_launch(pg)}"
    assert_equal(out, torch.cat(xs), what)
    del out


def zc_call_check_case(c):
    # NOTE [copy-engine call check]: ranks whose pool blocks lie at other offsets get an error on every rank
    # before anything is enqueued (the copy engines have no call tags), and the group stays usable.
    # Local placement: the ranks place alone, so rank 0's extra block moves its others (agreed placement
    # would pair the ranks' allocations by order and wait for an allocation rank 1 never makes).
    rank, W, dev, host, inputs = c.rank, c.W, c.dev, c.host, c.inputs
    cg = purlin_group(timedelta(seconds=20), TORCH_PURLIN_CUDA_POOL_PLACEMENT="local")
    extra = pool(c, 4096, torch.uint8, cg) if rank == 0 else None
    inp = pool(c, 1000, torch.float32, cg)
    inp.fill_(rank + 1)
    out = pool(c, W * 1000, torch.float32, cg)
    try:
        dist.all_gather_into_tensor(out, inp, group=cg)
    except (RuntimeError, ValueError) as e:
        msg = str(e)
        named = re.search(r"rank (\d+) called this collective with other arguments", msg)
        assert named and int(named.group(1)) != rank and "copy engine" in msg and f"on rank {rank}" in msg, msg
    else:
        raise AssertionError("no error for a copy-engine collective on blocks placed differently")
    xs = inputs(1000, torch.float32)
    plain = torch.empty(W * 1000, device=dev)
    dist.all_gather_into_tensor(plain, xs[rank].to(dev), group=cg)
    assert_copy_engine(cg, "the group after a call-check error")
    assert_equal(plain, torch.cat(xs), "the group after a call-check error")
    del extra, inp, out
    dist.barrier(group=host)


@family("zero_copy")
def zero_copy_cases(c):
    for dtype in (torch.float32, torch.bfloat16, torch.int8):
        for n in (7, 65537, 1_000_003):
            for in_place in (False, True):
                yield Case(f"all_gather_into_tensor {dtype} n={n} in_place={in_place}", zc_all_gather_case, dtype, n,
                           in_place)
    for n in (7, 1_000_003):
        for root in range(c.W):
            yield Case(f"broadcast n={n} root={root}", zc_broadcast_case, torch.float32, n, root)
    for k in (3, 40_000):
        yield Case(f"all_to_all_single k={k}", zc_all_to_all_case, k)
    yield Case("pool output, plain input: kernel peer outputs", zc_plain_input_case, 65537)
    yield Case("blocks at other offsets: call check error", zc_call_check_case)


# -- mixed: kernel reductions and copy-engine copies back to back on one workspace ----------------------


def mixed_case(c, group, tag, n, async_op):
    # Each op overwrites the workspace the previous one (other path) may still be read from by the peer.
    rank, W, dev, inputs = c.rank, c.W, c.dev, c.inputs
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


@family("mixed")
def mixed_cases(c):
    for tag, group, _ in c.groups:
        for n in (4099, 300_001):
            for async_op in (False, True):
                yield Case(f"n={n} async={async_op}{tag}", mixed_case, group, tag, n, async_op)


# -- CUDA graphs: capture falls back to the kernel; replays mixed with eager copy-engine ops ------------


def graph_case(c, group, tag):
    rank, W, dev, R = c.rank, c.W, c.dev, c.R
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


@family("graph")
def graph_cases(c):
    for tag, group, _ in c.groups:
        yield Case(f"capture + 10 replays{tag}", graph_case, group, tag)


# -- counters: every op above ran natively ---------------------------------------------------------------


def counters_case(c, group, tag):
    import torch_purlin

    cnt = torch_purlin.counters(group, "cuda")
    for op in ("broadcast", "all_gather_into_tensor", "all_gather", "all_to_all_single", "gather", "scatter"):
        assert op in cnt and cnt[op][0] > 0, f"{op}{tag} never ran natively: {cnt}"
        assert cnt[op][1] == 0, f"{op}{tag} fell back {cnt[op][1]} times: {cnt}"


@family("counters")
def counters_cases(c):
    for tag, group, _ in c.groups:
        yield Case(f"no copy op fell back{tag}", counters_case, group, tag, after_all=True)


# -- timeout: a rank that never calls is named by the host check; a stream whose peer's stream never comes
# is released by the watchdog ------------------------------------------------------------------------


def other_groups_work(c):
    rank, W, dev, pg = c.rank, c.W, c.dev, c.pg
    x = torch.zeros(W * 4, device=dev)
    dist.all_gather_into_tensor(x, torch.full((4,), float(rank), device=dev), group=pg)
    assert_equal(x, torch.arange(W, dtype=torch.float32).repeat_interleave(4), "other group after a timeout")


def never_calls_case(c):
    # NOTE [copy-engine call check]: every copy-engine collective meets its peers on the host first, so a
    # rank that never calls is a host timeout naming it, at the call itself
    rank, W, dev, host, tg = c.rank, c.W, c.dev, c.host, c.tg
    warm = torch.zeros(W * 16, device=dev)
    dist.all_gather_into_tensor(warm, torch.ones(16, device=dev), group=tg)  # workspace set up on every rank
    torch.cuda.synchronize()
    dist.barrier(group=host)
    if rank == 0:
        out = torch.zeros(W * 1024, device=dev)
        for attempt in range(2):  # the timeout, then the broken group
            try:
                dist.all_gather_into_tensor(out, torch.ones(1024, device=dev), group=tg)  # rank 1.. never join
            except RuntimeError as e:
                msg = str(e)
                if attempt == 0:
                    named = re.search(r"waiting for rank (\d+)", msg)
                    assert "timed out" in msg and named and int(named.group(1)) != 0, msg
                else:
                    assert "unusable" in msg, msg
            else:
                raise AssertionError("no error when the other ranks never call")
    other_groups_work(c)
    dist.barrier(group=host)


def late_stream_case(c):
    # NOTE [copy-engine watchdog]: every rank calls (the host check passes), but ranks 1.. queue ~5 s of GPU
    # work first, so rank 0's stream waits for their Arrive past the 3 s timeout: the watchdog releases it
    # and the group raises at rank 0's next collective
    rank, W, dev, host, tg2 = c.rank, c.W, c.dev, c.host, c.tg2
    warm = torch.zeros(W * 16, device=dev)
    dist.all_gather_into_tensor(warm, torch.ones(16, device=dev), group=tg2)
    torch.cuda.synchronize()
    dist.barrier(group=host)
    if rank != 0:
        torch.cuda._sleep(10_000_000_000)  # ~5 s at ~2 GHz, ahead of the collective on this stream
    out = torch.zeros(W * 1024, device=dev)
    dist.all_gather_into_tensor(out, torch.ones(1024, device=dev), group=tg2)
    t0 = time.time()
    torch.cuda.synchronize()  # rank 0: returns once the watchdog released the stream (~3 s)
    waited = time.time() - t0
    assert waited < 60, f"the stream stayed blocked {waited:.1f} s"
    if rank == 0:
        try:
            dist.all_gather_into_tensor(out, torch.ones(1024, device=dev), group=tg2)
        except RuntimeError as e:
            msg = str(e)
            named = re.search(r"waiting for rank (\d+)", msg)
            assert "timed out" in msg and "copy engine" in msg and named and int(named.group(1)) != 0, msg
        else:
            raise AssertionError("no error after a copy-engine timeout")
    other_groups_work(c)
    dist.barrier(group=host)


@family("timeout")
def timeout_cases(c):
    c.tg = dist.new_group(backend="purlin", timeout=timedelta(seconds=3))
    c.tg2 = dist.new_group(backend="purlin", timeout=timedelta(seconds=3))
    yield Case("rank 1 never calls", never_calls_case)
    yield Case("a peer's stream comes late", late_stream_case)


# ---- the worker -----------------------------------------------------------------------


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
    W = world

    def inputs(n, dtype):
        s = R.seed()
        return [make_input(s, r, (n,), dtype) for r in range(W)]

    c = SimpleNamespace(rank=rank, W=W, dev=dev, R=R, pg=pg, host=host, nccl=nccl, inputs=inputs,
                        groups=(("", pg, SIZES), (" (64K workspace)", small, SMALL_SIZES)))
    R.run_families(c, LISTINGS)

    torch.cuda.synchronize()
    dist.barrier(group=host)
    dist.destroy_process_group()
    R.out.close()


# ---- pytest side -----------------------------------------------------------------------------

FAMILIES = tuple(name for name, _ in LISTINGS)


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
