"""DeviceMesh, DTensor, split groups and object collectives on a purlin default group bound to a device
(`init_process_group(backend="purlin", device_id=...)`, as torchtitan starts), checked
against CPU references computed on every rank. Skips cleanly without the GPUs.

With a device-bound default group torch makes DeviceMesh's subgroups with
dist.split_group (NOTE [split groups], csrc/backend/c10d/split_group.cc), and new_group()
asks non-members for a "no color" split. Inputs are random integers held in float32, so
every sum is exact and every result is compared bit for bit.
"""
import faulthandler
import os
import sys
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

from gpu_harness import gpus_missing, init_purlin_worker, native_cuda_errors, run_ranks_expect_ok, write_result
from mp_util import int_floats, mesh_redistribution_cases, tensor_parallel_step

WORLD = int(os.environ.get("PURLIN_GPU_WORLD", "2"))  # ranks = GPUs used (tools/gpu.sh NPROC)

pytestmark = pytest.mark.skipif(bool(gpus_missing(WORLD)), reason=gpus_missing(WORLD) or "runs")


def worker(rank, path, result_path):
    from torch.distributed.device_mesh import init_device_mesh

    faulthandler.dump_traceback_later(90, exit=False)  # a hung rank's Python stack, into the suite's log
    dev = init_purlin_worker(rank, WORLD, path, timedelta(seconds=60))
    errors = []

    def step(what):  # where a hang happened, in the suite's log (pytest -s)
        print(f"rank {rank}: {what}", file=sys.stderr, flush=True)

    def check(what, got, want):
        got = got.cpu()
        if got.shape != want.shape or not torch.equal(got, want):
            bad = (got != want).sum().item() if got.shape == want.shape else f"shape {tuple(got.shape)}"
            errors.append(f"{what}: {bad} elements differ from the reference")

    # dist.split_group: every rank in one part, then a part that leaves the last rank out.
    step("split_group")
    whole = dist.split_group(split_ranks=[list(range(WORLD))], timeout=timedelta(seconds=60))
    t = int_floats(1000 + rank, (4099,)).to(dev)
    dist.all_reduce(t, group=whole)
    check("all_reduce on split_group(all ranks)", t, sum(int_floats(1000 + r, (4099,)) for r in range(WORLD)))
    head = dist.split_group(split_ranks=[list(range(WORLD - 1))], timeout=timedelta(seconds=60))
    if rank == WORLD - 1:
        if head is not None:
            errors.append(f"split_group: the rank left out got a group: {head}")
    else:
        t = int_floats(2000 + rank, (65,)).to(dev)
        dist.all_reduce(t, group=head)
        check("all_reduce on split_group(all but the last rank)", t,
              sum(int_floats(2000 + r, (65,)) for r in range(WORLD - 1)))
    # Object collectives (what checkpoint loading uses): on a device-bound group they travel as CUDA
    # uint8 tensors of per-rank sizes.
    step("object collectives")
    objs = [None] * WORLD
    dist.all_gather_object(objs, {"rank": rank, "pad": "x" * (37 * rank)}, group=whole)
    if [o["rank"] for o in objs] != list(range(WORLD)) or [len(o["pad"]) for o in objs] != [37 * r for r in range(WORLD)]:
        errors.append(f"all_gather_object gave {[(o['rank'], len(o['pad'])) for o in objs]}")
    lst = [("from", rank, list(range(rank * 11)))]
    dist.broadcast_object_list(lst, src=WORLD - 1)
    if lst[0] != ("from", WORLD - 1, list(range((WORLD - 1) * 11))):
        errors.append(f"broadcast_object_list gave {lst[0][:2]}")
    # new_group on a device-bound group: the non-member's "no color" split.
    step("new_group([0])")
    solo = dist.new_group([0])
    if rank == 0:
        t = int_floats(3000, (10,)).to(dev)
        dist.all_reduce(t, group=solo)
        check("all_reduce on new_group([0])", t, int_floats(3000, (10,)))

    # A 2-D mesh (its dimension groups come from split_group) and DTensor redistributions.
    step("2-D mesh")
    shape = (2, WORLD // 2) if WORLD % 2 == 0 else (1, WORLD)
    mesh = init_device_mesh("cuda", shape, mesh_dim_names=("dp", "tp"))
    for name in ("dp", "tp"):
        g = mesh.get_group(name)
        if dist.get_backend(g) != "purlin":
            errors.append(f"mesh dimension {name} is on {dist.get_backend(g)}, not purlin")
    for what, got, want in mesh_redistribution_cases(mesh, rank, WORLD, 4000):
        check(what, got, want)

    # Tensor parallelism on the 1-D mesh of the default group.
    step("tensor parallel")
    for what, got, want in tensor_parallel_step(init_device_mesh("cuda", (WORLD,)), WORLD, 6):
        if not torch.allclose(got, want, rtol=1e-4, atol=1e-5):
            errors.append(f"{what} differs by {(got - want).abs().max().item()}")

    torch.cuda.synchronize()
    faulthandler.cancel_dump_traceback_later()
    more, cnt = native_cuda_errors(None, "the default group")
    errors += more
    dims = {name: native_cuda_errors(mesh.get_group(name), f"the mesh's {name} group")[1] for name in ("dp", "tp")}
    if not any(c[0] for c in dims["dp"].values()):
        errors.append(f"no native CUDA op ran on the mesh's dp group: {dims}")
    write_result(result_path, rank, errors, f"default {cnt!r}; mesh {dims!r}")
    dist.destroy_process_group()


def test_device_mesh_dtensor_and_split_groups_on_a_device_bound_group():
    run_ranks_expect_ok(worker, WORLD)
