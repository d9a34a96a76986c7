"""DDP and FSDP2 training on 2 GPUs with backend purlin end with the same
parameters as with NCCL (same processes, same data), and the collectives they
issued ran natively (counters). Skips cleanly without 2 GPUs.

Ranks sharing a GPU (TORCH_PURLIN_CUDA_SHARE_GPU=1 under MPS, gpu_harness.py):
NCCL refuses them, so the reference is one process's training on every rank's
batches (the mean of the ranks' losses: what DDP's and FSDP2's gradient
averaging computes).
"""
import os
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

from gpu_harness import (gpus_missing, init_worker, native_cuda_errors, purlin_group, run_ranks_expect_ok, shares_gpu,
                         write_result)

WORLD = int(os.environ.get("PURLIN_GPU_WORLD", "2"))  # ranks = GPUs used (tools/gpu.sh NPROC)
STEPS = 5

pytestmark = pytest.mark.skipif(bool(gpus_missing(WORLD)), reason=gpus_missing(WORLD) or "runs")


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


def train_local(net, all_data):
    """The reference without a backend: every step on all ranks' batches, the mean of their losses."""
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    for step in range(STEPS):
        opt.zero_grad()
        loss = sum(torch.nn.functional.mse_loss(net(d[step][0]), d[step][1]) for d in all_data) / len(all_data)
        loss.backward()
        opt.step()
    return net


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

    dev = init_worker(rank, WORLD, path, timedelta(seconds=60))
    purlin = dist.new_group(backend="purlin")
    shared = shares_gpu(WORLD)  # NOTE [shared GPU]: no NCCL; the reference is train_local
    nccl = None if shared else dist.new_group(backend="nccl")
    data = batches(rank, dev)
    all_data = [batches(r, dev) for r in range(WORLD)]
    errors = []

    # DDP
    if shared:
        ref = full_params(train_local(model(0, dev), all_data))
    else:
        ref = full_params(train(model(0, dev), data, lambda n: DDP(n, device_ids=[dev.index], process_group=nccl)))
    got = full_params(train(model(0, dev), data, lambda n: DDP(n, device_ids=[dev.index], process_group=purlin)))
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

    ref = full_params(train_local(model(1, dev), all_data) if shared else train(model(1, dev), data, fsdp(nccl)))
    got = full_params(train(model(1, dev), data, fsdp(purlin)))
    for a, b in zip(got, ref):
        if not torch.allclose(a, b, rtol=1e-5, atol=1e-6):
            errors.append(f"FSDP2 params differ by {(a - b).abs().max().item()}")

    # FSDP2 with its communication buffers from the process group's allocator: purlin's symmetric
    # pool, so its all-gathers write into the peers' outputs (NOTE [peer outputs]) and its
    # reduce-scatters read inputs in place (NOTE [zero-copy]). This model's collectives are small
    # enough for flagged lines and parity plans, which stage whatever the tensors; a group without
    # them runs every size on workspace plans, where the pool placement counts.
    def fsdp_pool(group):
        mesh = DeviceMesh.from_group(group, "cuda")

        def wrap(n):
            m = fully_shard(n, mesh=mesh)
            m.set_allocate_memory_from_process_group_for_comm(True)
            return m
        return wrap

    fsdp_module = getattr(getattr(torch.distributed, "fsdp", None), "FSDPModule", None)
    pool_variant = "not in this torch (no FSDPModule.set_allocate_memory_from_process_group_for_comm)"
    if hasattr(fsdp_module, "set_allocate_memory_from_process_group_for_comm"):
        pool_variant = ""
        # Both placements of the pool's blocks: agreed per allocation, and local (NOTE [local placement]: every
        # rank alone, FSDP2 allocating and freeing in the same order on every rank).
        for placement in ("agreed", "local"):
            planned = purlin_group(timedelta(seconds=60), TORCH_PURLIN_CUDA_LINE_BYTES="0",
                                   TORCH_PURLIN_CUDA_PARITY_BYTES="0", TORCH_PURLIN_CUDA_POOL_PLACEMENT=placement)
            got = full_params(train(model(1, dev), data, fsdp_pool(planned)))
            what = f"FSDP2 (process-group allocation, {placement} placement)"
            for a, b in zip(got, ref):
                if not torch.allclose(a, b, rtol=1e-5, atol=1e-6):
                    errors.append(f"{what} params differ by {(a - b).abs().max().item()}")
            ran = torch_purlin.protocol_counts(planned)
            pool_variant += f" {placement}: ran {ran};"
            if not any("+peer-outputs" in p for p in ran.get("all_gather_into_tensor", {})):
                errors.append(f"{what}: no all-gather wrote into peer outputs: {ran}")
            if not any("+zero-copy" in p for p in ran.get("reduce_scatter_tensor", {})):
                errors.append(f"{what}: no reduce-scatter read its input in place: {ran}")

    more, cnt = native_cuda_errors(purlin, "the purlin group")
    errors += more
    write_result(result_path, rank, errors, f"{cnt!r}; FSDP2 on the process group's allocator {pool_variant}")
    dist.destroy_process_group()


def test_ddp_and_fsdp2_match_nccl():
    run_ranks_expect_ok(worker, WORLD)
