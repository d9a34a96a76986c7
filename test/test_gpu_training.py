"""DDP and FSDP2 training on 2 GPUs with backend purlin end with the same
parameters as with NCCL (same processes, same data), and the collectives they
issued ran natively (counters). Skips cleanly without 2 GPUs.
"""
import os
import tempfile
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

WORLD = int(os.environ.get("PURLIN_GPU_WORLD", "2"))  # ranks = GPUs used (tools/device_session.sh NPROC)
STEPS = 5

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.device_count() < WORLD, reason=f"needs {WORLD} GPUs"
)


def model(seed, dev):
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 32)
    ).to(dev)


def batches(rank, dev):
    g = torch.Generator().manual_seed(100 + rank)
    return [(torch.randn(16, 64, generator=g).to(dev), torch.randn(16, 32, generator=g).to(dev))
            for _ in range(STEPS)]


def train(net, data, wrap):
    m = wrap(net)
    opt = torch.optim.SGD(m.parameters(), lr=0.05)
    for x, y in data:
        opt.zero_grad()
        torch.nn.functional.mse_loss(m(x), y).backward()
        opt.step()
    return m


def full_params(m):
    out = []
    for p in m.parameters():
        p = p.full_tensor() if hasattr(p, "full_tensor") else p
        out.append(p.detach().float().cpu())
    return out


def worker(rank, path, result_path):
    import torch_purlin
    from torch.distributed.device_mesh import DeviceMesh
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.cuda.set_device(rank)
    dev = torch.device("cuda", rank)
    dist.init_process_group("cpu:gloo,cuda:nccl", init_method=f"file://{path}", rank=rank, world_size=WORLD,
                            timeout=timedelta(seconds=60))
    purlin = dist.new_group(backend="purlin")
    nccl = dist.new_group(backend="nccl")
    data = batches(rank, dev)
    errors = []

    # DDP
    ref = full_params(train(model(0, dev), data, lambda n: DDP(n, device_ids=[rank], process_group=nccl)))
    got = full_params(train(model(0, dev), data, lambda n: DDP(n, device_ids=[rank], process_group=purlin)))
    for a, b in zip(got, ref):
        if not torch.allclose(a, b, rtol=1e-5, atol=1e-6):
            errors.append(f"DDP params differ by {(a - b).abs().max().item()}")

    # FSDP2 (fully_shard) on a mesh over each group
    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:  # older torch
        from torch.distributed._composable.fsdp import fully_shard

    def fsdp(group):
        mesh = DeviceMesh.from_group(group, "cuda")
        return lambda n: fully_shard(n, mesh=mesh)

    ref = full_params(train(model(1, dev), data, fsdp(nccl)))
    got = full_params(train(model(1, dev), data, fsdp(purlin)))
    for a, b in zip(got, ref):
        if not torch.allclose(a, b, rtol=1e-5, atol=1e-6):
            errors.append(f"FSDP2 params differ by {(a - b).abs().max().item()}")

    cnt = torch_purlin.counters(purlin, "cuda")
    fell_back = {op: c for op, c in cnt.items() if c[1]}
    if fell_back:
        errors.append(f"ops fell back to NCCL: {fell_back}")
    if not any(c[0] for c in cnt.values()):
        errors.append(f"no native CUDA op ran: {cnt}")
    with open(f"{result_path}.{rank}", "w") as f:
        f.write("\n".join(errors) if errors else "ok " + repr(cnt))
    dist.destroy_process_group()


def test_ddp_and_fsdp2_match_nccl():
    with tempfile.TemporaryDirectory() as d:
        res = os.path.join(d, "result")
        mp.spawn(worker, args=(os.path.join(d, "store"), res), nprocs=WORLD)
        for r in range(WORLD):
            with open(f"{res}.{r}") as f:
                text = f.read()
            print(f"rank {r}: {text}")
            assert text.startswith("ok"), f"rank {r}: {text}"
