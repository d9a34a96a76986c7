"""torchtitan's llama3 debug model with torchtitan's own tensor-parallel plan (test/clients/torchtitan_tp.py) on a
purlin default group bound to the GPUs (`device_id=`, as torchtitan starts), world 2 (PURLIN_GPU_WORLD):
its loss curve equals the same run on an NCCL group in the same processes (fp32: every collective adds
two numbers at world 2; test/gpu/test_gpu_training.py's tolerance, rtol 1e-5), is within 1e-4 of a
single-rank run on each rank's GPU, and every collective ran natively. World 4: torchtitan's FSDP2 over
a data-parallel dimension of 2 and tensor parallelism 2 against the single-rank run. Ranks sharing a GPU
(NOTE [shared GPU]): the single-rank run only (NCCL refuses them). Skips cleanly without the GPUs or
without torchtitan 0.2.2 and its pure-Python imports (torchtitan_missing() names what is missing).

    python -m pytest test/clients/test_gpu_torchtitan.py -q -s
"""
import os
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

from gpu_harness import gpus_missing, init_purlin_worker, native_cuda_errors, run_ranks_expect_ok, shares_gpu, \
    write_result
from torchtitan_tp import compare, torchtitan_missing, train

WORLD = int(os.environ.get("PURLIN_GPU_WORLD", "2"))
STEPS = 8
MISSING = gpus_missing(WORLD) or torchtitan_missing()
pytestmark = pytest.mark.skipif(bool(MISSING), reason=MISSING or "runs")


def worker(rank, path, result_path):
    from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
    torchtitan_missing()  # its stand-ins, in this process too
    dev = init_purlin_worker(rank, WORLD, path, timedelta(seconds=120))
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    errors, curves = [], {}

    def run(name, *meshes, **kw):
        try:
            curves[name] = train(dev, *meshes, STEPS, **kw)
        except Exception as e:  # noqa: BLE001 — reported with the rank
            errors.append(f"{name}: {type(e).__name__}: {e}")

    run("one rank", None)
    if WORLD == 2:
        run("purlin tp2", DeviceMesh.from_group(dist.group.WORLD, "cuda"))
        groups = [None]
        if not shares_gpu(WORLD):
            run("nccl tp2", DeviceMesh.from_group(dist.new_group(backend="nccl"), "cuda"))
    else:
        mesh = init_device_mesh("cuda", (WORLD // 2, 2), mesh_dim_names=("dp", "tp"))
        run("purlin fsdp x tp2", mesh["tp"], dp_mesh=mesh["dp"])
        groups = [mesh["dp"].get_group(), mesh["tp"].get_group()]
    purlin = "purlin tp2" if WORLD == 2 else "purlin fsdp x tp2"
    if purlin in curves and "nccl tp2" in curves:
        errors.append(compare(curves[purlin], curves["nccl tp2"], "purlin vs nccl", 1e-5, 1e-6))
    if purlin in curves and "one rank" in curves:
        errors.append(compare(curves[purlin], curves["one rank"], "purlin vs one rank", 1e-4, 0.0))
    for g in groups:
        errors += native_cuda_errors(g, "the tensor-parallel group")[0]
    errors = [e for e in errors if e]
    write_result(result_path, rank, errors, "; ".join(f"{k}: {[round(x, 5) for x in v]}" for k, v in curves.items()))
    dist.destroy_process_group()


def test_torchtitan_tensor_parallel_gpu():
    run_ranks_expect_ok(worker, WORLD)
