"""pool.py — GPU collective families: the symmetric pool: zero-copy inputs, peer outputs, pushed sources.
Run by test/gpu/test_gpu_collectives.py's one worker (families zero_copy, peer_outputs, push).
Each case is a function of the worker's context c (test_gpu_collectives._worker) and its arguments; each
family's listing yields its cases in order (and makes the groups they share: c.zc, c.pu, c.pr)."""
import re
from datetime import timedelta

import torch
import torch.distributed as dist

from gpu_harness import Case, all_gather_input, assert_equal, family_registry, purlin_group

from gpu_collectives.checks import PURLIN_TIMEOUT, assert_close_to, assert_reduced, make_input, make_op

FAMILIES, family = family_registry()
TWO_SHOT_N = 8 * 1024 * 1024 // 2 + 4099  # bf16 elements above the zero_copy group's two-shot threshold (8M)
PAD = 4096  # pool elements on each side of a peer_outputs output: any write outside it shows


def run(c):
    """The families in order."""
    c.R.run_families(c, FAMILIES)


# -- zero-copy: inputs from the symmetric pool are read in place (NOTE [zero-copy]) ----------------------


def sym(c, n, dtype, values=None):
    """A tensor of n elements in the zero_copy group's pool (c.zc), holding `values` if given."""
    import torch_purlin

    dev, zc = c.dev, c.zc
    t = torch_purlin.empty(n, dtype=dtype, device=dev, group=zc)
    if values is not None:
        t.copy_(values.to(dev))
    return t


def zero_copy_case(c, op, n, dtype):
    import torch_purlin

    rank, W, dev, R, nccl, inputs, zc = c.rank, c.W, c.dev, c.R, c.nccl, c.inputs, c.zc
    xs = inputs(n, dtype, "sum")
    if op == "all_reduce":  # in place: zero-copy only as two-shot (NOTE [zero-copy in place])
        t = sym(c, n, dtype, xs[rank])
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
    inp = sym(c, W * n if op in ("reduce_scatter_tensor", "all_to_all_single") else n, dtype)
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


# reduce and gather from the pool, every root: each rank decides zero-copy alone, so the decision must not
# depend on its own aliasing (the root passes its buffer as input and output, its peers an input only:
# NOTE [symmetric use is rank-invariant]); deciding by it once sent a 20 MB reduce's root to a staged plan
# and its peers to zero-copy plans: a wrong result and a call-tag error at the next call.
def rooted_from_pool(c, op, n, dtype, redop, root, group):
    import torch_purlin

    rank, W, dev, inputs = c.rank, c.W, c.dev, c.inputs
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


def zero_copy_many_rounds(c):  # larger than the 64 MB workspace: two-shot scratch in rounds
    rank, W, R, zc = c.rank, c.W, c.R, c.zc
    n = 40_000_000
    xs = [torch.randn(n, generator=torch.Generator().manual_seed(R.seed() + r)) for r in range(W)]
    t = sym(c, n, torch.float32, xs[rank])
    dist.all_reduce(t, group=zc)
    assert_reduced(t, xs, "sum", "zero-copy all_reduce 160 MB")
    del t


def zero_copy_graph(c):
    rank, W, dev, R, zc = c.rank, c.W, c.dev, c.R, c.zc
    n = TWO_SHOT_N
    t = sym(c, n, torch.bfloat16)
    src = sym(c, 4099, torch.float32)
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


def allocate_tensor_api(c):
    import torch_purlin

    rank, W, dev, zc = c.rank, c.W, c.dev, c.zc
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


def pool_disagreement(c):
    # NOTE [pool agreement on the host]: ranks asking for different sizes get an error on every rank
    # (not blocks of different sizes at one offset), and the group's pool stays refused after it.
    import torch_purlin

    rank, dev, host = c.rank, c.dev, c.host
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


def pool_streams(c):
    # NOTE [pool streams]: a block freed while its stream's work is queued comes back at once for that stream,
    # for another stream only after that work (a fresh group: a fresh pool, first fit from offset 0).
    import torch_purlin

    rank, dev, host = c.rank, c.dev, c.host
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


def local_placement(c):
    # NOTE [local placement]: no exchange per allocation. A block freed on stream a is borrowed by stream b only
    # when nothing else holds b's block, and then b waits on the GPU for a's work queued before the free; the
    # ranks' offsets agree because they allocate and free alike, and zero-copy collectives on such blocks are
    # right. A 4M pool: a 3M block on a, freed, leaves 1M that b fills first.
    import torch_purlin

    rank, W, dev, R, host = c.rank, c.W, c.dev, c.R, c.host
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


def local_placement_diverged(c):
    # NOTE [local placement]: ranks that allocate differently get different offsets without an error; the
    # first collective on such tensors fails its call tag (which hashes pool offsets) on every rank, before
    # any peer data is read.
    import torch_purlin

    rank, W, dev, host = c.rank, c.W, c.dev, c.host
    div = purlin_group(timedelta(seconds=10), TORCH_PURLIN_CUDA_POOL_PLACEMENT="local",
                       TORCH_PURLIN_CUDA_LINE_BYTES="0", TORCH_PURLIN_CUDA_PARITY_BYTES="0")
    warm = torch.ones(8, device=dev)
    first = torch_purlin.empty(16, device=dev, group=div)  # every rank: the pool exists
    extra = torch_purlin.empty(4096, dtype=torch.uint8, device=dev, group=div) if rank == 0 else None
    p = torch_purlin.empty(1000, device=dev, group=div)
    p.fill_(rank + 1)
    out = torch.empty(W * 1000, device=dev)
    try:  # every rank reaches the barrier below, whatever this one found
        try:  # the tag check fails in the all_gather (on the host) or in its kernel (raised at the next call)
            dist.all_gather_into_tensor(out, p, group=div)  # zero-copy on every rank, rank 0's block elsewhere
            torch.cuda.synchronize()
            dist.all_reduce(warm, group=div)
        except RuntimeError as e:
            msg = str(e)
            # The verdict names a rank whose arguments differ from the finder's: rank 0 to ranks 1.., and any
            # other rank to rank 0, which from W = 3 on may first hear it from a peer's verdict (naming rank 0).
            named = re.search(r"rank (\d+) called this collective with other arguments", msg)
            finder = re.search(r"rank (\d+) \(pid \d+\) found the group unusable", msg)
            told = finder is not None and int(finder.group(1)) != rank
            assert f"on rank {rank}" in msg and named and (int(named.group(1)) != rank or told), msg
        else:
            raise AssertionError("no error after a collective on blocks the ranks placed differently")
    finally:
        del first, extra
        dist.barrier(group=host)


def pool_or_plain(c):
    # NOTE [pool or plain]: torch's allocate_tensor (FSDP2's path) answers a full pool with ordinary memory on
    # every rank (collectives on it stage), torch_purlin.empty raises instead.
    import torch_purlin

    rank, W, dev, host = c.rank, c.W, c.dev, c.host
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


@family("zero_copy")
def zero_copy_cases(c):
    # Small and mid sizes too (else flagged lines and parity plans serve them).
    # Two-shot from 8M at every world size (the default may keep W = 2 one-shot longer: NOTE [protocol table]).
    c.zc = purlin_group(PURLIN_TIMEOUT, TORCH_PURLIN_CUDA_LINE_BYTES="0", TORCH_PURLIN_CUDA_PARITY_BYTES="0",
                        TORCH_PURLIN_CUDA_TWO_SHOT_BYTES="8M")
    for op in ("all_gather_into_tensor", "reduce_scatter_tensor", "all_to_all_single", "broadcast", "all_reduce"):
        for n in (1, 4098, 1_000_002) if op != "all_reduce" else (1000, TWO_SHOT_N):
            for dtype in (torch.bfloat16, torch.float32):
                yield Case(f"{op} n={n} {dtype}", zero_copy_case, op, n, dtype)
    for root in range(c.W):
        for op, n, dtype, redop in (("reduce", 1_000_003, torch.float32, "sum"), ("reduce", 4099, torch.bfloat16, "max"),
                                    ("gather", 1_000_003, torch.bfloat16, "sum"), ("gather", 4099, torch.float32, "sum")):
            yield Case(f"{op} from the pool n={n} {dtype} {redop} root={root}", rooted_from_pool, op, n, dtype, redop,
                       root, c.zc)
    # The default group's settings, as a user first meets them: 20 MB, past the parity plans.
    for op, n, dtype, redop in (("reduce", 5 << 20, torch.float32, "sum"), ("reduce", 20 << 20, torch.uint8, "max")):
        yield Case(f"{op} from the pool n={n} {dtype} {redop} default settings", rooted_from_pool, op, n, dtype, redop,
                   c.W - 1, c.pg)
    yield Case("all_reduce 160 MB float32", zero_copy_many_rounds)
    yield Case("zero-copy ops in a CUDA graph", zero_copy_graph)
    yield Case("empty / pool reuse", allocate_tensor_api)
    yield Case("empty: ranks disagree on the size", pool_disagreement)
    yield Case("empty: freed blocks come back in stream order", pool_streams)
    yield Case("local placement: reuse across streams, zero-copy collectives", local_placement)
    yield Case("local placement: ranks that allocate differently get a call-tag error", local_placement_diverged)
    yield Case("allocate_tensor: ordinary memory when the pool is full", pool_or_plain)


# -- peer outputs: outputs in the pool are written by their peers (NOTE [peer outputs]) ----------------


def padded(c, n, dtype):
    """(block, output): n elements of the pool with PAD elements of -7 on each side."""
    big = sym(c, n + 2 * PAD, dtype)
    big.fill_(-7)
    return big, big[PAD:PAD + n]


def peer_outputs_case(c, op, n, dtype, in_place):
    import torch_purlin

    rank, W, dev, R, zc = c.rank, c.W, c.dev, c.R, c.zc
    full = [make_input(R.seed(), r, n, dtype) for r in range(W)]
    before = torch_purlin.protocol_counts(zc).get(op, {}).get("copy+peer-outputs", 0)
    if op == "all_gather_into_tensor":
        big, out = padded(c, W * n, dtype)
        dist.all_gather_into_tensor(out, all_gather_input(out, full[rank], rank, in_place), group=zc)
        want = torch.cat(full)
    else:
        big, out = padded(c, n, dtype)
        out.copy_(full[rank].to(dev))
        dist.broadcast(out, src=W - 1, group=zc)
        want = full[W - 1]
    assert torch_purlin.last_launch(zc)["protocol"] == "copy+peer-outputs", torch_purlin.last_launch(zc)
    assert torch_purlin.protocol_counts(zc)[op]["copy+peer-outputs"] == before + 1, torch_purlin.protocol_counts(zc)
    assert_equal(out, want, f"{op} n={n} in_place={in_place} into pool outputs")
    edge = torch.full((PAD,), -7, dtype=dtype)
    assert_equal(big[:PAD], edge, f"{op} n={n}: before the output")
    assert_equal(big[-PAD:], edge, f"{op} n={n}: after the output")


def peer_outputs_reuse(c):
    # Back to back, no host sync: each all_gather overwrites an output the previous step's kernel
    # reads; peers may write it only once this rank reached the collective (the Consumed(1) wait).
    rank, W, dev, R, zc = c.rank, c.W, c.dev, c.R, c.zc
    n, steps = 300_001, 12
    _, out = padded(c, W * n, torch.float32)
    acc = torch.zeros(W * n, device=dev)
    xs = [torch.randn(n, generator=torch.Generator().manual_seed(R.seed() * 100 + r)) for r in range(W)]
    for k in range(steps):
        dist.all_gather_into_tensor(out, (xs[rank] + k).to(dev), group=zc)
        acc += out * (k + 1)
    torch.cuda.synchronize()
    want = sum((torch.cat(xs) + k) * (k + 1) for k in range(steps))
    assert torch.allclose(acc.cpu(), want, rtol=1e-5, atol=1e-3), "peer-output all_gathers out of order"


def peer_outputs_graph(c):
    rank, W, dev, R, zc = c.rank, c.W, c.dev, c.R, c.zc
    n = 70_001
    _, out = padded(c, W * n, torch.bfloat16)
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


@family("peer_outputs")
def peer_outputs_cases(c):
    for op in ("all_gather_into_tensor", "broadcast"):
        for n in (1, 4099, 1_000_002):
            for dtype in (torch.float32, torch.bfloat16):
                for in_place in ((False, True) if op == "all_gather_into_tensor" else (True,)):
                    yield Case(f"{op} n={n} {dtype} in_place={in_place}", peer_outputs_case, op, n, dtype, in_place)
    yield Case("back-to-back all_gathers into one pool output", peer_outputs_reuse)
    yield Case("peer-output all_gather in a CUDA graph", peer_outputs_graph)


# -- push: sources write into the readers' workspaces (NOTE [push]) -------------------------------------


def push_case(c, op, n, dtype):
    import torch_purlin

    rank, W, dev, inputs, pu = c.rank, c.W, c.dev, c.inputs, c.pu
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


def push_reduced_case(c, n, dtype, pool):
    import torch_purlin

    rank, dev, inputs, pr = c.rank, c.dev, c.inputs, c.pr
    xs = inputs(n, dtype, "sum")
    t = torch_purlin.empty(n, dtype=dtype, device=dev, group=pr) if pool else torch.empty(n, dtype=dtype, device=dev)
    t.copy_(xs[rank].to(dev))
    dist.all_reduce(t, group=pr)
    assert_reduced(t, xs, "sum", f"push-reduced all_reduce n={n} pool={pool}")
    want = "two-shot" + ("+zero-copy" if pool else "+push") + "+push-reduced"
    assert torch_purlin.last_launch(pr)["protocol"] == want, torch_purlin.last_launch(pr)


@family("push")
def push_cases(c):
    # A 1M workspace: many rounds, slot reuse in the readers' workspaces; no lines or parity plans: push plans
    # at every size.
    c.pu = purlin_group(PURLIN_TIMEOUT, TORCH_PURLIN_CUDA_WORKSPACE_BYTES="1M",
                        TORCH_PURLIN_CUDA_LINE_BYTES="0", TORCH_PURLIN_CUDA_PARITY_BYTES="0",
                        TORCH_PURLIN_CUDA_TWO_SHOT_BYTES="8M")
    for op in ("all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor", "all_to_all_single", "broadcast"):
        for n in (1, 4099, 700_001):
            for dtype in (torch.float32, torch.bfloat16):
                yield Case(f"{op} n={n} {dtype}", push_case, op, n, dtype)
    yield Case("two-shot all_reduce 24 MB", push_case, "all_reduce", 3_000_001, torch.float32)
    # Reduced slices pushed to the other ranks (two-shot phase 1), in many rounds, from an ordinary tensor
    # (phase 0 pushed too) and from a pool tensor (zero-copy phase 0).
    c.pr = purlin_group(PURLIN_TIMEOUT, TORCH_PURLIN_CUDA_WORKSPACE_BYTES="1M",
                        TORCH_PURLIN_CUDA_LINE_BYTES="0", TORCH_PURLIN_CUDA_PARITY_BYTES="0",
                        TORCH_PURLIN_CUDA_TWO_SHOT_BYTES="8M")
    for pool in (False, True):
        yield Case(f"push-reduced two-shot all_reduce pool={pool}", push_reduced_case, 4_198_403, torch.bfloat16, pool)
        yield Case(f"push-reduced two-shot all_reduce f32 pool={pool}", push_reduced_case, 2_100_001, torch.float32, pool)
