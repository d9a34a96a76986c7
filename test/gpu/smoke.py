"""smoke.py — a 20-second check of the CUDA datapath on 2 GPUs, or PURLIN_GPU_WORLD (build first).

Every expected value is computed from the closed-form inputs (no reference
backend), so it runs as well with ranks sharing a GPU (TORCH_PURLIN_CUDA_SHARE_GPU=1
under MPS, NOTE [shared GPU]; gpu_harness.py).

    python3 test/gpu/smoke.py     # prints one line per check, exits non-zero on a failure
"""
import os
import sys
import tempfile
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "support"))
from gpu_harness import init_worker  # noqa: E402


def main(rank, world, init):
    dev = init_worker(rank, world, init, timedelta(seconds=60))
    import torch_purlin
    pg = dist.new_group(backend="purlin", timeout=timedelta(seconds=10))
    ranks_sum = world * (world + 1) // 2  # sum of (r + 1) over ranks
    bad = 0

    def check(name, ok):
        nonlocal bad
        bad += not ok
        if rank == 0 or not ok:
            print(f"[rank {rank}] {'OK  ' if ok else 'FAIL'} {name}", flush=True)

    for dtype in (torch.float32, torch.bfloat16, torch.int32):
        for n in (1, 1000, 1_000_003):
            x = (torch.arange(n, device=dev) % 7 + rank + 1).to(dtype)
            ref = ((torch.arange(n, device=dev) % 7) * world + ranks_sum).to(dtype)  # small integers: exact
            dist.all_reduce(x, group=pg)
            check(f"all_reduce {dtype} n={n}", torch.equal(x, ref))
    n = 4099
    x = torch.arange(n, device=dev, dtype=torch.float32) + 1000 * rank
    out = torch.zeros(world * n, device=dev)
    ref = torch.cat([torch.arange(n, device=dev, dtype=torch.float32) + 1000 * r for r in range(world)])
    dist.all_gather_into_tensor(out, x, group=pg)
    check("all_gather_into_tensor", torch.equal(out, ref))
    big = torch.arange(world * n, device=dev, dtype=torch.float32) * (rank + 1)
    rs = torch.zeros(n, device=dev)
    rref = torch.arange(rank * n, (rank + 1) * n, device=dev, dtype=torch.float32) * ranks_sum  # < 2^24: exact
    dist.reduce_scatter_tensor(rs, big, group=pg)
    check("reduce_scatter_tensor", torch.equal(rs, rref))
    b = x.clone()
    dist.broadcast(b, src=1, group=pg)
    check("broadcast", torch.equal(b, torch.arange(n, device=dev, dtype=torch.float32) + 1000))
    ins = [3 + rank + d for d in range(world)]   # rank sends 3 + rank + d elements to d
    outs = [3 + s + rank for s in range(world)]  # and receives 3 + s + rank from s
    a_in = torch.arange(sum(ins), device=dev, dtype=torch.float32) + 100 * rank
    a = torch.zeros(sum(outs), device=dev)
    # from rank s: its elements sum(3 + s + d for d < rank) onwards, 3 + s + rank of them
    aref = torch.cat([torch.arange(sum(3 + s + d for d in range(rank)), sum(3 + s + d for d in range(rank + 1)),
                                   device=dev, dtype=torch.float32) + 100 * s for s in range(world)])
    dist.all_to_all_single(a, a_in, outs, ins, group=pg)
    check("all_to_all_single uneven", torch.equal(a, aref))
    t = torch.ones(1 << 20, device=dev)
    w = dist.all_reduce(t, group=pg, async_op=True)
    w.wait()
    check("async all_reduce", bool(torch.all(t == world)))
    inp = torch.full((8192,), float(rank + 1), device=dev)
    buf = torch.empty_like(inp)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        buf.copy_(inp)
        dist.all_reduce(buf, group=pg)
        inp.add_(1.0)
    for k in range(1, 201):
        g.replay()
    torch.cuda.synchronize()
    check("graph all_reduce x200", bool(torch.all(buf == ranks_sum + world * 199)))
    zs = torch_purlin.empty(4099, device=dev, group=pg)  # symmetric pool: zero-copy reads
    zs.copy_(x)
    zout = torch.zeros(world * n, device=dev)
    dist.all_gather_into_tensor(zout, zs, group=pg)
    check(f"zero-copy all_gather ({torch_purlin.last_launch(pg)['protocol']})", torch.equal(zout, ref))
    zb = torch_purlin.empty(5 << 20, device=dev, group=pg)  # 20 MB: a workspace plan (protocol printed)
    zb.fill_(rank + 1.0)
    dist.all_reduce(zb, group=pg)
    check(f"zero-copy all_reduce ({torch_purlin.last_launch(pg)['protocol']})", bool(torch.all(zb == ranks_sum)))
    cnt = torch_purlin.counters(pg, "cuda")
    check(f"no fallback {cnt}", all(v[1] == 0 for v in cnt.values()))
    dist.barrier(group=dist.new_group(backend="gloo"))
    dist.destroy_process_group()
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as d:
        world = int(os.environ.get("PURLIN_GPU_WORLD", "2"))  # tools/gpu.sh NPROC
        ctx = mp.start_processes(main, args=(world, os.path.join(d, "init")), nprocs=world, start_method="spawn",
                                 join=False)
        while not ctx.join(timeout=60):
            pass
