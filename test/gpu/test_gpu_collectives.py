"""GPU tests of purlin's native CUDA datapath (CUDA IPC workspaces + the plan kernel).

Needs 2 GPUs (PURLIN_GPU_WORLD; fewer shared under TORCH_PURLIN_CUDA_SHARE_GPU=1 and
MPS, gpu_harness.py; skips otherwise). One spawn of two processes, one per GPU, runs
every case in sequence and writes one line per case; the pytest functions
below then report the cases family by family, so the whole suite pays for
process start-up and NCCL initialisation once. The families live in
gpu_collectives/, one module per concern (ops, streams, settings, pool,
protocols, custom, errors): each case a function of the worker's context c,
each family a listing that yields its cases (the module's FAMILIES), and
Runner.run_families runs them in order.

Reference: NCCL in the same processes (the default group is
"cpu:gloo,cuda:nccl"), plus a float64/int64 CPU reduction of every rank's
input (NOTE [recomputable inputs] in mp_util.py: rank r's input is drawn from
a generator seeded by (case, r), so every rank can rebuild every input).
Exact comparison for copies, integers and MIN/MAX; otherwise within
RTOL[dtype] of sum_k |x_k| (fp32 accumulation, one rounding).

    python -m pytest test/gpu/test_gpu_collectives.py     # or test/gpu/run_gpu_suite.sh
"""
import os
from datetime import timedelta
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist

from gpu_harness import Runner, check_exited_cleanly, check_family, gpus_missing, init_worker, run_suite, shares_gpu

from gpu_collectives import custom, errors, ops, pool, protocols, settings, streams
from gpu_collectives.checks import PURLIN_TIMEOUT, make_input

WORLD = int(os.environ.get("PURLIN_GPU_WORLD", "2"))  # ranks = GPUs used (tools/gpu.sh NPROC)
SUITE_TIMEOUT_S = float(os.environ.get("PURLIN_GPU_SUITE_TIMEOUT", "240"))

MODULES = (ops, streams, settings, pool, protocols, custom, errors)  # the order the worker runs them in
FAMILIES = tuple(name for module in MODULES for name, _ in module.FAMILIES)


# ---- the worker -----------------------------------------------------------------------


def _worker(rank, world, init_file, log_path):
    os.environ.setdefault("TORCH_PURLIN_LOG", "1")
    # Purlin's own datapath at every size; the protocol_table family sets its own table.
    os.environ["TORCH_PURLIN_CUDA_NCCL_FROM"] = "none"
    dev = init_worker(rank, world, init_file, timedelta(seconds=120))
    import torch_purlin  # noqa: F401  registers "purlin"

    R = Runner(rank, log_path)
    shared = shares_gpu(world)  # ranks share GPUs (NOTE [shared GPU]): NCCL refuses them, no NCCL reference
    if shared:  # every group's pool (4 GB by default) on one GPU per rank and group: the largest case needs 1 GB
        os.environ["TORCH_PURLIN_CUDA_POOL_BYTES"] = "1G"
    nccl = None if shared else dist.group.WORLD
    host = dist.new_group(backend="gloo")
    pg = dist.new_group(backend="purlin", timeout=PURLIN_TIMEOUT)
    W = world

    def inputs(n, dtype, op=None):
        s = R.seed()
        return [make_input(s, r, n, dtype, op) for r in range(W)]

    c = SimpleNamespace(rank=rank, W=W, dev=dev, R=R, pg=pg, host=host, nccl=nccl, shared=shared, inputs=inputs)
    for module in MODULES:
        R.run_families(c, module.FAMILIES)

    torch.cuda.synchronize()
    dist.barrier(group=host)
    dist.destroy_process_group()
    R.out.close()


# ---- pytest side -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    if gpus_missing(WORLD):
        pytest.skip(gpus_missing(WORLD))
    return run_suite("collectives", _worker, WORLD, SUITE_TIMEOUT_S, tmp_path_factory.mktemp("purlin_gpu"))


# Under TORCH_DISTRIBUTED_DEBUG=DETAIL torch's wrapper compares every call's op and shapes across ranks
# before purlin runs it, and raises its own mismatch error: the families that make mismatched calls on
# purpose test purlin's checks, which that wrapper pre-empts. torch 2.11's wrapper also lacks
# allgather_into_tensor_coalesced, which the async family's coalescing block calls (2.13's has it).
DETAIL = os.environ.get("TORCH_DISTRIBUTED_DEBUG", "").upper() == "DETAIL"
DETAIL_SKIPS = {"call_tag": "mismatched calls on purpose", "timeout": "a rank that skips a call on purpose"}
if DETAIL and tuple(int(x) for x in torch.__version__.split(".")[:2]) < (2, 13):
    DETAIL_SKIPS["async"] = "torch's wrapper before 2.13 has no allgather_into_tensor_coalesced"


@pytest.mark.parametrize("family", FAMILIES)
def test_gpu_family(suite, family):
    if DETAIL and family in DETAIL_SKIPS:
        pytest.skip(f"TORCH_DISTRIBUTED_DEBUG=DETAIL: {DETAIL_SKIPS[family]}")
    check_family(suite, family)


def test_gpu_suite_exited_cleanly(suite):
    check_exited_cleanly(suite)
