"""custom.py — GPU family: the application collectives (all_to_all_dims, all_gather_v,
reduce_scatter_v, moe_dispatch / moe_combine) on CUDA tensors, against NCCL's composed path
(permute + all_to_all_single + copy, padded all_gather, ...) in the same processes, or the
reference every rank computes from every rank's recomputable inputs where ranks share a GPU;
the same collectives captured in a CUDA graph and replayed on fresh inputs; and built-ins
restated as layouts (torch_purlin.layouts), whose custom Specs must launch as the built-ins do.
Run by test/gpu/test_gpu_collectives.py's one worker (family custom_collectives).
Each case is a function of the worker's context c (test_gpu_collectives._worker) and its arguments; the
family's listing yields its cases in order."""

import torch
import torch.distributed as dist

from gpu_harness import Case, assert_equal, family_registry

from gpu_collectives.checks import assert_reduced

FAMILIES, family = family_registry()


def run(c):
    """The family's cases in order."""
    c.R.run_families(c, FAMILIES)


def ranked_inputs(c, shapes, dtype):
    """Rank r's input of shapes[r], for every rank: integers 1..99 from a generator seeded by (case, r)
    (exact in every dtype the cases use, and so are their sums over 8 ranks in float32)."""
    s = c.R.seed()
    return [(torch.randint(1, 100, shape, generator=torch.Generator().manual_seed(s * 64 + r))).to(dtype)
            for r, shape in enumerate(shapes)]


def shaped_inputs(c, shape, dtype):
    """Every rank's input of `shape` (ranked_inputs)."""
    return ranked_inputs(c, [shape] * c.W, dtype)


def ulysses(c, S, H, D, dtype, async_op):
    # Both directions of Ulysses sequence parallelism: [S/W, H, D] -> [S, H/W, D] -> back.
    import torch_purlin

    rank, W, dev, pg = c.rank, c.W, c.dev, c.pg
    xs = shaped_inputs(c, (S // W, H, D), dtype)
    x = xs[rank].to(dev)
    want = torch.cat([t.chunk(W, 1)[rank] for t in xs], 0).to(dev)
    out = torch.full_like(want, -1)
    work = torch_purlin.all_to_all_dims(out, x, 1, 0, group=pg, async_op=async_op)
    if async_op:
        work.wait()
    assert_equal(out, want, f"all_to_all_dims S={S} H={H} D={D}")
    if c.nccl is not None:  # NCCL's composed path: permute, all_to_all_single, copy
        send = x.view(S // W, W, H // W, D).permute(1, 0, 2, 3).contiguous()
        recv = torch.empty_like(send)
        dist.all_to_all_single(recv, send, group=c.nccl)
        assert_equal(out, recv.view(S, H // W, D), "all_to_all_dims vs NCCL composed")
    back = torch.full_like(x, -1)
    torch_purlin.all_to_all_dims(back, out, 0, 1, group=pg)
    assert_equal(back, x, "all_to_all_dims inverse")


def uneven(c, n, dtype):
    import torch_purlin

    rank, W, dev, pg = c.rank, c.W, c.dev, c.pg
    counts = [(r * 7 + n) % 5 * n for r in range(W)]
    counts[0] = 0
    xs = [t.view(-1, 3) for t in shaped_inputs(c, (sum(counts) * 3,), dtype)]
    pieces = [xs[r][sum(counts[:r]):sum(counts[:r + 1])] for r in range(W)]
    out = torch.full((sum(counts), 3), -1, dtype=dtype, device=dev)
    torch_purlin.all_gather_v(out, pieces[rank].to(dev), counts, dim=0, group=pg)
    assert_equal(out, torch.cat(pieces).to(dev), f"all_gather_v counts={counts}")
    mine = torch.full((counts[rank], 3), -1, dtype=dtype, device=dev)
    torch_purlin.reduce_scatter_v(mine, xs[rank].to(dev), counts, dim=0, group=pg, async_op=True).wait()
    want = sum(x.double() for x in xs).to(dtype)[sum(counts[:rank]):sum(counts[:rank + 1])]
    assert_equal(mine, want.to(dev), f"reduce_scatter_v counts={counts}")


def moe(c, E, H):
    import torch_purlin

    rank, W, dev, pg = c.rank, c.W, c.dev, c.pg
    counts = [[(s * 5 + e * 3) % 4 for e in range(E)] for s in range(W)]
    toks = [shaped_inputs(c, (sum(counts[s]), H), torch.bfloat16)[s] for s in range(W)]
    L = E // W

    def block(s, e):
        a = sum(counts[s][:e])
        return toks[s][a:a + counts[s][e]]
    want = torch.cat([block(s, rank * L + l) for l in range(L) for s in range(W)]).to(dev)
    out = torch.full_like(want, -1)
    torch_purlin.moe_dispatch(out, toks[rank].to(dev), counts, group=pg)
    assert_equal(out, want, f"moe_dispatch E={E}")
    back = torch.full_like(toks[rank].to(dev), -1)
    torch_purlin.moe_combine(back, out, counts, group=pg)
    assert_equal(back, toks[rank].to(dev), f"moe_combine E={E}")


# -- in a CUDA graph: captured once, replayed on fresh inputs copied into the captured buffers -----------


def captured(body):
    """body() captured in a CUDA graph after one warm-up run, both on a side stream (the Specs and
    plans exist before capture, as the graph family's built-ins); returns replay(), which replays
    the graph on the current stream and waits for it."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        body()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=s):
            body()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()

    def replay():
        g.replay()
        torch.cuda.synchronize()
    return replay


def ulysses_graph(c, S, H, D, dtype, pad):
    # Both Ulysses directions in one graph, the second async_op=True; with pad > 0 the input is a
    # view of padded heads ([S/W, H, D] of [S/W, H + pad, D]), read in place through its strides
    # (its W x W chunks stay 2-D regions).
    import torch_purlin

    rank, W, dev, pg = c.rank, c.W, c.dev, c.pg
    x = torch.zeros((S // W, H + pad, D), dtype=dtype, device=dev)[:, :H]
    out = torch.zeros((S, H // W, D), dtype=dtype, device=dev)
    back = torch.zeros((S // W, H, D), dtype=dtype, device=dev)

    def body():
        torch_purlin.all_to_all_dims(out, x, 1, 0, group=pg)
        torch_purlin.all_to_all_dims(back, out, 0, 1, group=pg, async_op=True).wait()
    replay = captured(body)
    for rep in range(2):
        xs = shaped_inputs(c, (S // W, H, D), dtype)
        x.copy_(xs[rank].to(dev))
        out.fill_(-1)
        back.fill_(-1)
        replay()
        assert_equal(out, torch.cat([t.chunk(W, 1)[rank] for t in xs], 0), f"replay {rep}: all_to_all_dims")
        assert_equal(back, xs[rank], f"replay {rep}: all_to_all_dims inverse")


def uneven_graph(c, n, dim, dtype):
    # all_gather_v and reduce_scatter_v (async_op=True) of uneven counts, zeros included, along `dim`
    # of a 2-D tensor whose other dim has 3.
    import torch_purlin

    rank, W, dev, pg = c.rank, c.W, c.dev, c.pg
    counts = [(r * 7 + n) % 5 * n for r in range(W)]
    counts[0] = 0
    starts = [sum(counts[:r]) for r in range(W)]

    def shape(k):
        return (k, 3) if dim == 0 else (3, k)
    piece = torch.zeros(shape(counts[rank]), dtype=dtype, device=dev)
    gathered = torch.zeros(shape(sum(counts)), dtype=dtype, device=dev)
    whole = torch.zeros(shape(sum(counts)), dtype=dtype, device=dev)
    mine = torch.zeros(shape(counts[rank]), dtype=dtype, device=dev)

    def body():
        torch_purlin.all_gather_v(gathered, piece, counts, dim=dim, group=pg)
        torch_purlin.reduce_scatter_v(mine, whole, counts, dim=dim, group=pg, async_op=True).wait()
    replay = captured(body)
    for rep in range(2):
        xs = shaped_inputs(c, shape(sum(counts)), dtype)
        pieces = [xs[r].narrow(dim, starts[r], counts[r]) for r in range(W)]
        piece.copy_(pieces[rank].to(dev))
        whole.copy_(xs[rank].to(dev))
        gathered.fill_(-1)
        mine.fill_(-1)
        replay()
        assert_equal(gathered, torch.cat(pieces, dim), f"replay {rep}: all_gather_v counts={counts}")
        want = sum(x.double() for x in xs).to(dtype).narrow(dim, starts[rank], counts[rank])
        assert_equal(mine, want, f"replay {rep}: reduce_scatter_v counts={counts}")


def moe_graph(c, E, H):
    # moe_dispatch into the expert-major layout and moe_combine back, in one graph.
    import torch_purlin

    rank, W, dev, pg = c.rank, c.W, c.dev, c.pg
    counts = [[(s * 5 + e * 3 + 1) % 4 for e in range(E)] for s in range(W)]
    L = E // W
    received = sum(counts[s][rank * L + l] for l in range(L) for s in range(W))
    toks = torch.zeros((sum(counts[rank]), H), dtype=torch.bfloat16, device=dev)
    expert_major = torch.zeros((received, H), dtype=torch.bfloat16, device=dev)
    back = torch.zeros_like(toks)

    def body():
        torch_purlin.moe_dispatch(expert_major, toks, counts, group=pg)
        torch_purlin.moe_combine(back, expert_major, counts, group=pg)
    replay = captured(body)
    for rep in range(2):
        xs = ranked_inputs(c, [(sum(counts[s]), H) for s in range(W)], torch.bfloat16)

        def block(s, e):
            a = sum(counts[s][:e])
            return xs[s][a:a + counts[s][e]]
        toks.copy_(xs[rank].to(dev))
        expert_major.fill_(-1)
        back.fill_(-1)
        replay()
        want = torch.cat([block(s, rank * L + l) for l in range(L) for s in range(W)])
        assert_equal(expert_major, want, f"replay {rep}: moe_dispatch E={E}")
        assert_equal(back, xs[rank], f"replay {rep}: moe_combine E={E}")


# -- a built-in restated as layouts launches as the built-in (NOTE [custom Specs share the built-ins'
# protocols] in test/cpp/test_custom_protocol.cc) ---------------------------------------------------------


def restated_launch(c, name, nbytes):
    # The built-in, then its Spec from torch_purlin.layouts through run_spec, on the same group and
    # alike tensors (in place where the built-in is): the same last_launch (protocol, blocks, threads,
    # overlapped), the custom call counted under "custom" in protocol_counts, and bit-equal results (the
    # same plan reduces in the same order). float32, `nbytes` per rank (all_gather: its input,
    # reduce_scatter: its output).
    import torch_purlin
    from torch_purlin.layouts import Partial, Replicate, Shard, collective

    rank, W, dev, pg = c.rank, c.W, c.dev, c.pg
    n = nbytes // 4
    if name == "all_reduce":
        xs = c.inputs(n, torch.float32, "sum")
        spec = collective("restated_all_reduce", (n,), Partial(), Replicate(), W, op="sum")
        builtin, custom = xs[rank].to(dev, copy=True), xs[rank].to(dev, copy=True)  # reduced in place
        calls = (lambda: dist.all_reduce(builtin, group=pg),
                 lambda: torch_purlin.run_spec(spec, custom, custom, group=pg))
    elif name in ("all_gather", "all_gather in place"):
        xs = c.inputs(n, torch.float32)
        spec = collective("restated_all_gather", (W * n,), Shard(0), Replicate(), W)
        builtin, custom = torch.full((W * n,), -1.0, device=dev), torch.full((W * n,), -1.0, device=dev)
        if name == "all_gather":
            ins = xs[rank].to(dev), xs[rank].to(dev)
        else:  # the input is the rank's own block of the output
            ins = builtin[rank * n:(rank + 1) * n], custom[rank * n:(rank + 1) * n]
            for t in ins:
                t.copy_(xs[rank].to(dev))
        calls = (lambda: dist.all_gather_into_tensor(builtin, ins[0], group=pg),
                 lambda: torch_purlin.run_spec(spec, ins[1], custom, group=pg))
    else:
        assert name == "reduce_scatter", name
        xs = c.inputs(W * n, torch.float32, "sum")
        spec = collective("restated_reduce_scatter", (W * n,), Partial(), Shard(0), W, op="sum")
        builtin, custom = torch.full((n,), -1.0, device=dev), torch.full((n,), -1.0, device=dev)
        src = xs[rank].to(dev)
        calls = (lambda: dist.reduce_scatter_tensor(builtin, src, group=pg),
                 lambda: torch_purlin.run_spec(spec, src, custom, group=pg))
    calls[0]()
    want = torch_purlin.last_launch(pg)
    before = torch_purlin.protocol_counts(pg).get("custom", {}).get(want["protocol"], 0)
    calls[1]()
    got = torch_purlin.last_launch(pg)
    assert got == want, f"{name} of {nbytes} bytes: the restated Spec launched {got}, the built-in {want}"
    after = torch_purlin.protocol_counts(pg).get("custom", {}).get(want["protocol"], 0)
    assert after == before + 1, f"{name}: custom launches of {want['protocol']} went {before} -> {after}"
    assert_equal(custom, builtin, f"{name} of {nbytes} bytes: restated Spec vs built-in")
    if name == "all_reduce":
        assert_reduced(builtin, xs, "sum", f"{name} of {nbytes} bytes")
    elif name == "reduce_scatter":
        assert_reduced(builtin, [x[rank * n:(rank + 1) * n] for x in xs], "sum", f"{name} of {nbytes} bytes")
    else:
        assert_equal(builtin, torch.cat(xs), f"{name} of {nbytes} bytes")


@family("custom_collectives")
def custom_collectives_cases(c):
    W = c.W
    for S, H, D, dtype, async_op in ((4 * W, 2 * W, 8, torch.float32, False),
                                     (64 * W, 4 * W, 128, torch.bfloat16, True),
                                     (512 * W, 2 * W, 64, torch.float16, False)):
        yield Case(f"all_to_all_dims S={S} H={H} D={D} {dtype}", ulysses, S, H, D, dtype, async_op)
    for n, dtype in ((1, torch.float32), (1000, torch.float32), (77, torch.int64)):
        yield Case(f"all_gather_v / reduce_scatter_v n={n} {dtype}", uneven, n, dtype)
    for E, H in ((W, 16), (4 * W, 256)):
        yield Case(f"moe_dispatch / moe_combine E={E} H={H}", moe, E, H)
    for S, H, D, dtype, pad in ((4 * W, 2 * W, 8, torch.float32, 0), (64 * W, 4 * W, 128, torch.bfloat16, 8)):
        yield Case(f"CUDA graph: all_to_all_dims S={S} H={H} D={D} pad={pad} {dtype}, 2 replays", ulysses_graph,
                   S, H, D, dtype, pad)
    for n, dim, dtype in ((1000, 0, torch.float32), (77, 1, torch.int64)):
        yield Case(f"CUDA graph: all_gather_v / reduce_scatter_v n={n} dim={dim} {dtype}, 2 replays", uneven_graph,
                   n, dim, dtype)
    yield Case(f"CUDA graph: moe_dispatch / moe_combine E={2 * W} H=64, 2 replays", moe_graph, 2 * W, 64)
    for name in ("all_reduce", "all_gather", "all_gather in place", "reduce_scatter"):
        for nbytes in (4 << 10, 256 << 10, 4 << 20):
            yield Case(f"{name} restated as layouts launches as the built-in, {nbytes >> 10} KB", restated_launch,
                       name, nbytes)
