"""settings.py — GPU collective families: settings agreed at setup, the counters, the fallback to NCCL, the protocol table.
Run by test/gpu/test_gpu_collectives.py's one worker (families setup_agreement, counters, fallback, protocol_table).
Each case is a function of the worker's context c (test_gpu_collectives._worker) and its arguments; each
family's listing yields its cases in order (and makes the groups they share: c.fb, c.tb, c.ts)."""
import os
import re
import time

import torch
import torch.distributed as dist

from gpu_harness import Case, Skip, assert_equal, family_registry, purlin_group

from gpu_collectives.checks import PURLIN_TIMEOUT, assert_reduced

FAMILIES, family = family_registry()


def run(c):
    """The families in order."""
    c.R.run_families(c, FAMILIES)


# -- setup agreement: a setting one rank cannot use fails every rank at once (NOTE [setup agreement]) -------


def setup_agreement_case(c, var, value):
    # The last rank's group is made with the malformed value (NOTE [group settings]); its CUDA setup, on
    # its first CUDA op below, fails on every rank.
    import torch_purlin

    rank, W, dev, pg = c.rank, c.W, c.dev, c.pg
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


def equal_setting_case(c, var, value):
    # NOTE [settings across ranks]: a setting every rank must share, different on the last rank,
    # raises on every rank as the group is made, naming it and the values.
    import torch_purlin

    rank, W, dev, pg = c.rank, c.W, c.dev, c.pg
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


@family("setup_agreement")
def setup_agreement_cases(c):
    yield Case("malformed setting on the last rank", setup_agreement_case, "TORCH_PURLIN_CUDA_LINE_FORMAT", "bogus")
    yield Case("malformed pool placement on the last rank", setup_agreement_case, "TORCH_PURLIN_CUDA_POOL_PLACEMENT",
               "bogus")
    # (every rank's environment says "none": the worker's first lines)
    yield Case("NCCL rows differing on the last rank", equal_setting_case, "TORCH_PURLIN_CUDA_NCCL_FROM",
               "all_reduce=1G")
    yield Case("two-shot threshold differing on the last rank", equal_setting_case, "TORCH_PURLIN_CUDA_TWO_SHOT_BYTES",
               "1M")


# -- counters: every native op above ran natively ---------------------------------------------------


def counters_case(c):
    import torch_purlin

    pg = c.pg
    cnt = torch_purlin.counters(pg, "cuda")
    for op in ("all_reduce", "reduce", "broadcast", "all_gather_into_tensor", "all_gather",
               "reduce_scatter_tensor", "all_to_all_single", "gather", "scatter"):
        assert op in cnt and cnt[op][0] > 0, f"{op} never ran natively: {cnt}"
        assert cnt[op][1] == 0, f"{op} fell back {cnt[op][1]} times: {cnt}"


def counters_own_ops_case(c):
    # Self-contained (runs under any PURLIN_GPU_FAMILIES): each op once, each counted native, none fell back.
    import torch_purlin

    rank, W, dev, pg, inputs = c.rank, c.W, c.dev, c.pg, c.inputs
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


@family("counters")
def counters_cases(c):
    yield Case("no CUDA op fell back", counters_case, after_all=True)
    yield Case("each op once: counted native, no fallback", counters_own_ops_case)


# -- fallback to NCCL: bool / complex reductions, TORCH_PURLIN_FORCE_FALLBACK --------------------------


def fallback_case(c):
    import torch_purlin

    rank, W, dev, fb = c.rank, c.W, c.dev, c.fb
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


def batch_p2p_case(c):
    # point-to-point goes to NCCL; a batch is one NCCL group (NOTE [coalescing]), so a ring of
    # sends and receives larger than NCCL's buffers cannot deadlock
    rank, W, dev, inputs, fb = c.rank, c.W, c.dev, c.inputs, c.fb
    n = 4_000_003
    xs = inputs(n, torch.float32)
    got = torch.full((n,), float("nan"), device=dev)
    reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, xs[rank].to(dev), (rank + 1) % W, group=fb),
                                   dist.P2POp(dist.irecv, got, (rank - 1) % W, group=fb)])
    for q in reqs:
        q.wait()
    assert_equal(got.clone(), xs[(rank - 1) % W], "batch_isend_irecv ring")


@family("fallback")
def fallback_cases(c):
    os.environ["TORCH_PURLIN_FORCE_FALLBACK"] = "broadcast"
    c.fb = dist.new_group(backend="purlin", timeout=PURLIN_TIMEOUT)  # created on every rank, used only with NCCL
    os.environ.pop("TORCH_PURLIN_FORCE_FALLBACK")
    if c.shared:
        yield Skip("ranks share a GPU: no NCCL to fall back to (NOTE [shared GPU])")
    else:
        yield Case("bool/complex reductions and a forced op use NCCL", fallback_case)
        yield Case("batch_isend_irecv ring through NCCL", batch_p2p_case)


# -- the protocol table's NCCL rows (NOTE [protocol table] in csrc/backend/group/protocol_table.h) -----------------


def table_first_nccl_in_capture(c):
    rank, dev, tb = c.rank, c.dev, c.tb
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


def table_ignored_on_shared_gpu(c):
    # NOTE [shared GPU]: NCCL refuses the group, so the table's rows are ignored: native at every size,
    # in a graph too.
    import torch_purlin

    rank, W, dev, inputs, tb = c.rank, c.W, c.dev, c.inputs, c.tb
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


def table_routes(c):
    import torch_purlin

    rank, W, dev, inputs, tb = c.rank, c.W, c.dev, c.inputs, c.tb

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


def table_graph(c):
    rank, dev, inputs, tb = c.rank, c.dev, c.inputs, c.tb
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


def two_shot_per_world(c):
    import torch_purlin

    rank, W, dev, inputs, ts = c.rank, c.W, c.dev, c.inputs, c.ts
    for n, want in ((300_001, "one-shot"), (1_100_001, "two-shot"), (4099, "one-shot")):  # float32: 4M = 1M elems
        xs = inputs(n, torch.float32, "sum")
        t = xs[rank].to(dev)
        dist.all_reduce(t, group=ts)
        proto = torch_purlin.last_launch(ts)["protocol"]
        assert proto.startswith(want), f"all_reduce n={n}: protocol {proto}, want {want} (two-shot from 4M at W={W})"
        assert_reduced(t, xs, "sum", f"all_reduce n={n} under a per-world two-shot threshold")


@family("protocol_table")
def protocol_table_cases(c):
    # all_reduce's row for this world replaces its plain one; a row for another world never applies.
    c.tb = purlin_group(PURLIN_TIMEOUT,
                        TORCH_PURLIN_CUDA_NCCL_FROM=f"all_reduce=1G,all_reduce@{c.W}=64K,all_gather=64K,"
                        f"all_gather@{c.W + 1}=1K,all_to_all=64K")
    if c.shared:
        yield Case("ranks sharing a GPU ignore the table's NCCL rows", table_ignored_on_shared_gpu)
    else:
        yield Case("first NCCL-routed op inside capture: clear error", table_first_nccl_in_capture)
        yield Case("sizes from the table run on NCCL, others native", table_routes)
        yield Case("NCCL-routed and native ops in one CUDA graph", table_graph)
    # The two-shot threshold's item for this world replaces the plain one; another world's never applies.
    c.ts = purlin_group(PURLIN_TIMEOUT, TORCH_PURLIN_CUDA_TWO_SHOT_BYTES=f"1M,@{c.W}=4M,@{c.W + 1}=2K",
                        TORCH_PURLIN_CUDA_LINE_BYTES="0", TORCH_PURLIN_CUDA_PARITY_BYTES="0")
    yield Case("two-shot threshold per world size", two_shot_per_world)
