"""CUDA tensors of a group that spans hosts run on NCCL (NOTE [host map] in csrc/backend/machines/host_map.h),
on simulated hosts (test/support/sim_hosts.py: rank processes in their own mount and UTS namespaces, a private
/dev/shm and hostname each; root needed). NCCL, which tells hosts apart by hostname and boot id, then
connects the ranks over sockets on 127.0.0.1, as it would across nodes. Checked against CPU references
every rank computes (random integers in float32: exact sums).

- 2 hosts x 1 rank (2 GPUs): all_reduce, all_gather_into_tensor, reduce_scatter_tensor and broadcast of
  CUDA tensors each count one fallback call and no native one (CUDA IPC is never tried across hosts);
  the same group's CPU tensors still work.
- 2 hosts x 2 ranks (4 GPUs or more): the same, and a subgroup of one host's ranks runs its CUDA
  all_reduce natively.

    python -m pytest test/gpu/test_gpu_hosts.py -q
"""
from datetime import timedelta

import pytest
import torch

import sim_hosts
from gpu_harness import gpus_missing

WHY_NOT = gpus_missing(2) or sim_hosts.unshare_unavailable() or ""
pytestmark = pytest.mark.skipif(bool(WHY_NOT), reason=WHY_NOT or "runs")

N = 4096


def worker(rank, world, args):
    import torch.distributed as dist
    import torch_purlin
    from mp_util import int_floats

    torch.set_num_threads(1)
    dev = torch.device("cuda", rank % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    dist.init_process_group("purlin", timeout=timedelta(seconds=120))
    errors = []

    def same(what, got, want):
        got = got.cpu()
        if got.shape != want.shape or not torch.equal(got, want):
            errors.append(f"rank {rank}: {what}: got {got.flatten()[:4].tolist()}, want {want.flatten()[:4].tolist()}")

    every = [int_floats(100 + q, (N,)) for q in range(world)]
    x = every[rank].to(dev)
    dist.all_reduce(x)
    same("all_reduce of CUDA tensors", x, sum(every))
    out = torch.empty(world * N, device=dev)
    dist.all_gather_into_tensor(out, every[rank].to(dev))
    same("all_gather_into_tensor of CUDA tensors", out, torch.cat(every))
    part = torch.empty(N // world, device=dev)
    dist.reduce_scatter_tensor(part, every[rank].to(dev))
    same("reduce_scatter_tensor of CUDA tensors", part, sum(every).view(world, -1)[rank])
    b = every[rank].to(dev)
    dist.broadcast(b, src=world - 1)
    same("broadcast of CUDA tensors", b, every[world - 1])
    torch.cuda.synchronize()
    counts = torch_purlin.counters(device="cuda")
    for op in ("all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor", "broadcast"):
        if tuple(counts.get(op, (0, 0))) != (0, 1):
            errors.append(f"rank {rank}: {op} of CUDA tensors: counters {counts.get(op)}, expected NCCL's (0, 1)")
    y = every[rank].clone()
    dist.all_reduce(y)
    same("all_reduce of CPU tensors on the same group", y, sum(every))
    hosts = args["hosts"]
    if len(hosts[0]) > 1:
        groups = [dist.new_group(h) for h in hosts]
        mine = next(h for h in hosts if rank in h)
        g = groups[hosts.index(mine)]
        z = every[rank].to(dev)
        dist.all_reduce(z, group=g)
        same("all_reduce of CUDA tensors within a host", z, sum(every[q] for q in mine))
        torch.cuda.synchronize()
        c = torch_purlin.counters(g, device="cuda")
        if tuple(c.get("all_reduce", (0, 0))) != (1, 0):
            errors.append(f"rank {rank}: a subgroup within a host ran its CUDA all_reduce as {c.get('all_reduce')}")
    dist.barrier()
    dist.destroy_process_group()
    return errors


def test_cuda_tensors_of_a_group_spanning_hosts_run_on_nccl():
    hosts = [[0, 1], [2, 3]] if torch.cuda.device_count() >= 4 else [[0], [1]]
    results = sim_hosts.run_hosts("test_gpu_hosts:worker", hosts, args={"hosts": hosts}, timeout=300,
                                  env={"NCCL_SOCKET_IFNAME": "lo"})
    errors = [e for r in results for e in (r["value"] or [])]
    assert not errors, "\n".join(errors)
