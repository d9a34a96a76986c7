"""streams.py — GPU collective families: async_op with compute, coalesced blocks, CUDA graph capture and replay, CPU and CUDA tensors in one program.
Run by test/gpu/test_gpu_collectives.py's one worker (families async, graph, mixed_backend).
Each case is a function of the worker's context c (test_gpu_collectives._worker) and its arguments; each
family's listing yields its cases in order."""

import torch
import torch.distributed as dist

from gpu_harness import Case, assert_equal, family_registry

from gpu_collectives.checks import PURLIN_TIMEOUT, assert_reduced, make_input

FAMILIES, family = family_registry()


def run(c):
    """The families in order."""
    c.R.run_families(c, FAMILIES)


# -- async_op=True overlapping with compute ------------------------------------------------------


def async_case(c, n):
    rank, W, dev, pg = c.rank, c.W, c.dev, c.pg
    xs = c.inputs(n, torch.float32, "sum")
    t = xs[rank].to(dev)
    a = torch.randn(1024, 1024, device=dev)
    w = dist.all_reduce(t, group=pg, async_op=True)
    b = a @ a  # compute queued on the current stream while the collective runs on purlin's stream
    outs = [torch.zeros(n, device=dev) for _ in range(W)]
    w2 = dist.all_gather(outs, xs[rank].to(dev), group=pg, async_op=True)
    w.wait()
    w2.wait()
    total = b.sum()
    assert_reduced(t, xs, "sum", f"async all_reduce n={n}")
    for r in range(W):
        assert_equal(outs[r], xs[r], f"async all_gather n={n}")
    assert torch.isfinite(total)
    fut = dist.all_reduce(t, group=pg, async_op=True).get_future()
    got = fut.wait()[0]
    # t held the sum S already, so the second all_reduce gives W * S
    assert_reduced(got, [torch.stack(xs).sum(0)] * W, "sum", "get_future() of an async all_reduce")
    torch.cuda.synchronize()
    assert w.is_completed()


def coalesced_block(c, n):
    # NOTE [coalescing] (csrc/backend/c10d/coalesced_work.h): torch hands back only endCoalescing()'s Work
    # for an async block (the fast path's all_reduce_coalesced Work is dropped), so that Work must
    # order the caller's stream after the block's collectives on purlin's stream.
    rank, W, dev, pg = c.rank, c.W, c.dev, c.pg
    xs, ys = c.inputs(n, torch.float32, "sum"), c.inputs(n + 5, torch.float32, "sum")
    t, u = xs[rank].to(dev), ys[rank].to(dev)
    with dist._coalescing_manager(group=pg, device=dev, async_ops=True) as cm:
        dist.all_reduce(t, group=pg)
        dist.all_reduce(u, group=pg)
    cm.wait()
    t2, u2 = t.clone(), u.clone()  # read on the current stream right after wait()
    assert_reduced(t2, xs, "sum", f"coalesced async all_reduce n={n}")
    assert_reduced(u2, ys, "sum", f"coalesced async all_reduce n={n + 5}")
    g = c.inputs(n, torch.bfloat16)
    out = torch.empty(W * n, dtype=torch.bfloat16, device=dev)
    with dist._coalescing_manager(group=pg, device=dev, async_ops=True) as cm:
        dist.all_gather_into_tensor(out, g[rank].to(dev), group=pg)
    cm.wait()
    assert_equal(out.clone(), torch.cat(g), f"coalesced async all_gather_into_tensor n={n}")


@family("async")
def async_cases(c):
    for n in (1, 4099, 1_000_003):
        yield Case(f"all_reduce + all_gather n={n}", async_case, n)
    for n in (4099, 1_000_003, 8_000_001):
        yield Case(f"async coalesced block n={n}", coalesced_block, n)


# -- CUDA graph capture + replay -------------------------------------------------------------------


def graph_all_reduce_1000(c):
    rank, W, dev, pg = c.rank, c.W, c.dev, c.pg
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


def graph_every_op(c):
    rank, W, dev, pg = c.rank, c.W, c.dev, c.pg
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
        s = c.R.seed()
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


@family("graph")
def graph_cases(c):
    yield Case("all_reduce x1000 replays", graph_all_reduce_1000)
    yield Case("every op in one graph, 3 replays", graph_every_op)


# -- "cpu:purlin,cuda:purlin": both tensor kinds in one program --------------------------------------


def mixed_case(c, mixed):
    import torch_purlin

    rank, W, dev = c.rank, c.W, c.dev
    xs = c.inputs(1000, torch.float32, "sum")
    on_cpu = xs[rank].clone()
    g = xs[rank].to(dev)
    dist.all_reduce(on_cpu, group=mixed)
    dist.all_reduce(g, group=mixed)
    assert_reduced(on_cpu, xs, "sum", "cpu tensor")
    assert_reduced(g, xs, "sum", "cuda tensor")
    out = torch.zeros(W * 1000, device=dev)
    dist.all_gather_into_tensor(out, g, group=mixed)
    cnt = torch_purlin.counters(mixed, "cuda")
    assert cnt["all_reduce"] == (2, 0), cnt
    assert cnt["all_gather_into_tensor"] == (1, 0), cnt


@family("mixed_backend")
def mixed_backend_cases(c):
    mixed = dist.new_group(backend="cpu:purlin,cuda:purlin", timeout=PURLIN_TIMEOUT)
    yield Case("all_reduce cpu + cuda", mixed_case, mixed)
