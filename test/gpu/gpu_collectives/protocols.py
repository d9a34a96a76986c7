"""protocols.py — GPU collective families: the small and mid-size protocols: flagged lines, parity plans, overlapped launches, block counts.
Run by test/gpu/test_gpu_collectives.py's one worker (families lines, parity, overlapped_launch, block_counts).
Each case is a function of the worker's context c (test_gpu_collectives._worker) and its arguments; each
family's listing yields its cases in order (and makes the groups they share: c.narrow, c.wide, c.pp, c.plain)."""

import torch
import torch.distributed as dist

from gpu_harness import Case, assert_equal, family_registry, purlin_group
from mp_util import PREMUL_FACTOR

from gpu_collectives.checks import PURLIN_TIMEOUT, assert_reduced, make_op

FAMILIES, family = family_registry()
MID = 300_001  # float32: 1.2 MB per rank, between the parity family's line and parity limits


def run(c):
    """The families in order."""
    c.R.run_families(c, FAMILIES)


# -- flagged lines: small collectives in one NVLink trip (NOTE [line plans]) ----------------------------


def line_protocols(c):
    import torch_purlin

    rank, W, dev, pg, shared, inputs, narrow, wide = c.rank, c.W, c.dev, c.pg, c.shared, c.inputs, c.narrow, c.wide
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


def wide_line_edges(c, dtype):
    # Sizes around whole lines (P elements of payload per 128-byte line) and the block split, every
    # collective shape, a 1 MiB rank share (TORCH_PURLIN_CUDA_LINE_BYTES): NOTE [wide lines].
    import torch_purlin

    rank, W, dev, inputs, wide = c.rank, c.W, c.dev, c.inputs, c.wide
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


def line_tear_stress(c, group, iters):
    # Back-to-back 1 MiB line collectives, each with fresh random bytes, no host sync: a line taken
    # before all of it arrived would hold the previous collective's bytes of that parity (NOTE [wide
    # lines]). Exact checks (copies and int32 sums), inputs drawn on the device.
    rank, W, dev, R = c.rank, c.W, c.dev, c.R
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


def mixed_call(c, kind, i, n, dtype, group, big_n, a2a_n):
    # One collective of a back-to-back sequence, by kind (0 broadcast, 1 reduce, 2 all_reduce,
    # 3 all_gather, 4 a large all_reduce of big_n elements, 5 all_to_all of a2a_n per rank) with
    # rotating roots; returns (output, reference, reduce op or None, name) to check after the sequence.
    rank, W, dev, inputs = c.rank, c.W, c.dev, c.inputs
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


def line_sequence(c, group, n_iters):
    # Line collectives back to back with no host sync, asymmetric ones
    # (broadcast / reduce from rotating roots, where a root reads nothing)
    # and workspace collectives in between: parity reuse (NOTE [line plans]).
    checks = []
    for i in range(n_iters):
        n = (1, 7, 1000, 4099, 65537)[i % 5]
        dtype = (torch.float32, torch.bfloat16, torch.int32)[i % 3]
        checks.append(mixed_call(c, i % 6, i, n, dtype, group, big_n=300_001, a2a_n=n))
    check_sequence(checks)


def line_graph(c):
    rank, W, dev, pg, inputs = c.rank, c.W, c.dev, c.pg, c.inputs
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


@family("lines")
def lines_cases(c):
    c.narrow = purlin_group(PURLIN_TIMEOUT, TORCH_PURLIN_CUDA_LINE_FORMAT="narrow")
    c.wide = purlin_group(PURLIN_TIMEOUT, TORCH_PURLIN_CUDA_LINE_FORMAT="wide")
    yield Case("protocol by size, op and line format", line_protocols)
    for dtype in (torch.uint8, torch.bfloat16, torch.float16, torch.float32, torch.float64, torch.int64):
        yield Case(f"wide lines, edges of lines and blocks, {dtype}", wide_line_edges, dtype)
    yield Case("wide lines: 400 back-to-back 1 MiB collectives, fresh data", line_tear_stress, c.wide, 400)
    yield Case("narrow lines: 200 back-to-back 1 MiB collectives, fresh data", line_tear_stress, c.narrow, 200)
    yield Case("120 mixed collectives, no host sync", line_sequence, c.pg, 120)
    yield Case("60 mixed collectives, no host sync (wide lines)", line_sequence, c.wide, 60)
    yield Case("line collectives in a CUDA graph", line_graph)


# -- parity plans: mid sizes without waiting for the previous collective (NOTE [parity plans]) ----------


def parity_protocols(c):
    import torch_purlin

    rank, W, dev, inputs, pp = c.rank, c.W, c.dev, c.inputs, c.pp
    xs = inputs(MID, torch.float32, "sum")
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
    zs = inputs(MID, torch.complex128)  # 16-byte elements: too wide for lines, fine for parity plans
    out = torch.empty(W * MID, dtype=torch.complex128, device=dev)
    dist.all_gather_into_tensor(out, zs[rank].to(dev), group=pp)
    assert_equal(out, torch.cat(zs), "complex128 all_gather")


def parity_sequence(c, n_iters):
    # Parity plans back to back with no host sync: consecutive ones alternate halves, asymmetric ones
    # (broadcast / reduce from rotating roots) let a rank run ahead, and line and workspace collectives
    # in between advance the same sequence (lseq) or none.
    W, pp = c.W, c.pp
    checks = []
    for i in range(n_iters):
        n = (MID, 777_777 // 2, 400_000, 1000, MID)[i % 5]
        dtype = (torch.float32, torch.bfloat16, torch.int32)[i % 3]
        kind = i % 7
        checks.append(mixed_call(c, 2 if kind == 6 else kind, i, n, dtype, pp, big_n=3_000_001, a2a_n=n // W + 1))
    check_sequence(checks)


def parity_graph(c):
    rank, W, dev, inputs, pp = c.rank, c.W, c.dev, c.inputs, c.pp
    t = torch.empty(MID, device=dev)
    b = torch.empty(MID, dtype=torch.bfloat16, device=dev)
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
        xs = inputs(MID, torch.float32, "sum")
        bs = inputs(MID, torch.bfloat16)
        t.copy_(xs[rank].to(dev))
        b.copy_(bs[rank].to(dev))
        g.replay()
        torch.cuda.synchronize()
        assert_reduced(t, [x * W * W for x in xs], "sum", f"graph replay {rep}")  # three all_reduces
        assert_equal(b, bs[W - 1], f"graph replay {rep} broadcast")


@family("parity")
def parity_cases(c):
    c.pp = purlin_group(PURLIN_TIMEOUT, TORCH_PURLIN_CUDA_LINE_BYTES="256K", TORCH_PURLIN_CUDA_PARITY_BYTES="4M")
    yield Case("protocol by size and op", parity_protocols)
    yield Case("100 mixed collectives, no host sync", parity_sequence, 100)
    yield Case("parity plans in a CUDA graph", parity_graph)


# -- overlapped launches: programmatic dependent launch (NOTE [overlapped launch]) ------------------------


def overlap_flags(c):
    import torch_purlin

    W, dev, pg, plain = c.W, c.dev, c.pg, c.plain
    t = torch.ones(1000, device=dev)
    dist.all_reduce(t, group=pg)
    want = torch.cuda.get_device_capability(dev)[0] >= 9  # TORCH_PURLIN_CUDA_PDL=1 by default
    assert torch_purlin.last_launch(pg)["overlapped"] == want, torch_purlin.last_launch(pg)
    dist.all_reduce(t, group=plain)
    assert torch.all(t == W * W)
    assert not torch_purlin.last_launch(plain)["overlapped"], torch_purlin.last_launch(plain)


def overlap_chain(c, graph):
    # Each collective's input is written by a torch kernel, right before it on the same stream, from
    # fresh per-rank data and a scalar of the previous collective's output; groups with (pg) and without
    # (plain) overlapped launches alternate. A collective that touched memory before its producer ended
    # would read stale bytes. Line (4 KB), parity (2 MB) and workspace (24 MB) plans; int32: exact.
    rank, W, dev, pg, inputs, plain = c.rank, c.W, c.dev, c.pg, c.inputs, c.plain
    sizes, steps = (1000, 500_000, 6_000_000), 12
    bufs = [torch.empty(sizes[i % 3], dtype=torch.int32, device=dev) for i in range(steps)]
    outs = [None] * steps

    def chain():
        carry = torch.zeros((), dtype=torch.int64, device=dev)
        for i in range(steps):
            t = bufs[i] + carry.to(torch.int32)
            dist.all_reduce(t, group=pg if i % 2 == 0 else plain)
            outs[i] = t
            carry = t.sum() & 1023

    def fill_and_expect():
        xs = [inputs(sizes[i % 3], torch.int32, "sum") for i in range(steps)]
        for i in range(steps):
            bufs[i].copy_(xs[i][rank])
        wants, carry = [], 0
        for i in range(steps):
            want = sum(x.long() for x in xs[i]) + W * carry
            wants.append(want.int())
            carry = int(want.sum()) & 1023
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


@family("overlapped_launch")
def overlapped_launch_cases(c):
    c.plain = purlin_group(PURLIN_TIMEOUT, TORCH_PURLIN_CUDA_PDL="0")
    yield Case("TORCH_PURLIN_CUDA_PDL picks the launch", overlap_flags)
    yield Case("producer kernels, groups with and without overlap, eager", overlap_chain, False)
    yield Case("producer kernels, groups with and without overlap, CUDA graph", overlap_chain, True)
    yield Case("120 mixed collectives, no host sync, plain launches", line_sequence, c.plain, 120)


# -- block counts: the launch's block count follows the size (launch_config.h) --------------------------


def block_count_case(c):
    import torch_purlin

    W, dev, pg = c.W, c.dev, c.pg
    seen = {}
    for n in (256, 65536, 1 << 20, 16 << 20):
        t = torch.ones(n, dtype=torch.bfloat16, device=dev)
        dist.all_reduce(t, group=pg)
        assert torch.all(t == W), f"n={n}"
        seen[n] = torch_purlin.last_launch(pg)["blocks"]
    assert seen[256] < seen[16 << 20], seen
    assert sorted(seen.values()) == list(seen.values()), seen


@family("block_counts")
def block_counts_cases(c):
    yield Case("small messages use fewer blocks", block_count_case)
