"""custom.py — GPU family: the application collectives (all_to_all_dims, all_gather_v,
reduce_scatter_v, moe_dispatch / moe_combine) on CUDA tensors, against NCCL's composed path
(permute + all_to_all_single + copy, padded all_gather, ...) in the same processes, or the
reference every rank computes from every rank's recomputable inputs where ranks share a GPU.
Run by test/gpu/test_gpu_collectives.py's one worker (family custom_collectives).
Each case is a function of the worker's context c (test_gpu_collectives._worker) and its arguments; the
family's listing yields its cases in order."""

import torch
import torch.distributed as dist

from gpu_harness import Case, assert_equal, family_registry

FAMILIES, family = family_registry()


def run(c):
    """The family's cases in order."""
    c.R.run_families(c, FAMILIES)


def shaped_inputs(c, shape, dtype):
    """Every rank's input of `shape`: integers 1..99 from a generator seeded by (case, rank)."""
    s = c.R.seed()
    return [(torch.randint(1, 100, shape, generator=torch.Generator().manual_seed(s * 64 + r))).to(dtype)
            for r in range(c.W)]


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
