"""Seeded random collectives on CUDA tensors (test/support/fuzz_cases.py), as test_fuzz_cpu.py does on CPU.

Two purlin groups, the whole world and a subgroup (ranks 1.. where there are more than two), made
with small flagged-line, parity and workspace sizes so every protocol and pipelining in rounds
happen at small sizes, and the protocol table's NCCL rows off: every case runs natively. Cases
draw the op, dtype, reduce op, size class (both sides of every threshold, past the workspace),
strided tensors, async ops waited out of order, the group, and the mode: plain tensors, pool tensors
(torch_purlin.empty), CUDA graph replays (captured once, replayed with fresh inputs). Every rank
checks every case against references it computes itself, bit for bit (NOTE [fuzz references]).
Skips without CUDA (gpu_harness.py); ranks may share a GPU under TORCH_PURLIN_CUDA_SHARE_GPU=1.

    PURLIN_GPU_WORLD=2 python -m pytest test/gpu/test_gpu_fuzz.py -q
    PURLIN_GPU_WORLD=4 TORCH_PURLIN_CUDA_SHARE_GPU=1 python -m pytest test/gpu/test_gpu_fuzz.py -q   # one GPU, MPS
    PURLIN_FUZZ_PROFILE=long ...            # ten times the cases
    PURLIN_FUZZ_SEED=... PURLIN_FUZZ_CASES=17,40 ...   # replay (the seed is printed)
"""
import os
import secrets
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

import fuzz_cases
from gpu_harness import Runner, check_exited_cleanly, check_family, gpus_missing, init_worker, run_suite

WORLD = int(os.environ.get("PURLIN_GPU_WORLD", "2"))
SUITE_TIMEOUT_S = float(os.environ.get("PURLIN_GPU_SUITE_TIMEOUT", "480"))
PURLIN_TIMEOUT = timedelta(seconds=20)
LONG = os.environ.get("PURLIN_FUZZ_PROFILE", "short") == "long"
CASES = int(os.environ.get("PURLIN_GPU_FUZZ_CASES", "400")) * (10 if LONG else 1)
SEED = int(os.environ.get("PURLIN_FUZZ_SEED") or secrets.randbelow(2**31))  # drawn once, in the pytest process
WORLD_SETTINGS = {"TORCH_PURLIN_CUDA_NCCL_FROM": "none", "TORCH_PURLIN_CUDA_LINE_BYTES": "4K",
                  "TORCH_PURLIN_CUDA_PARITY_BYTES": "64K", "TORCH_PURLIN_CUDA_WORKSPACE_BYTES": "256K",
                  "TORCH_PURLIN_CUDA_TWO_SHOT_BYTES": "32K", "TORCH_PURLIN_CUDA_POOL_BYTES": "256M"}
SUB_SETTINGS = {"TORCH_PURLIN_CUDA_NCCL_FROM": "none", "TORCH_PURLIN_CUDA_LINE_BYTES": "1K",
                "TORCH_PURLIN_CUDA_PARITY_BYTES": "16K", "TORCH_PURLIN_CUDA_WORKSPACE_BYTES": "64K",
                "TORCH_PURLIN_CUDA_TWO_SHOT_BYTES": "8K", "TORCH_PURLIN_CUDA_POOL_BYTES": "256M"}
# Bytes per rank where a CUDA protocol changes in either group: lines, parity, two-shot, a
# workspace slot (half the workspace) and the workspace.
THRESHOLDS = (1024, 4096, 8192, 16384, 32768, 65536, 131072, 262144)
FAMILIES = ("fuzz",)


def _worker(rank, world, init_file, log_path):
    seed = int(os.environ["PURLIN_FUZZ_SEED"])  # the pytest process's, inherited
    dev = init_worker(rank, world, init_file, timedelta(seconds=120))
    import torch_purlin

    R = Runner(rank, log_path)
    R.family = "fuzz"
    host = dist.new_group(backend="gloo")
    sub_ranks = list(range(1, world)) if world > 2 else [0, 1]
    groups = {"world": (torch_purlin.group_with_settings(WORLD_SETTINGS, timeout=PURLIN_TIMEOUT, device=dev),
                        list(range(world))),
              "sub": (torch_purlin.group_with_settings(SUB_SETTINGS, ranks=sub_ranks, timeout=PURLIN_TIMEOUT,
                                                       device=dev), sub_ranks)}
    cases = fuzz_cases.generate(seed, CASES, world, sub_ranks, "cuda", THRESHOLDS,
                                ("sync", "async", "pool", "graph"), max_elems=(1 << 24) if LONG else (1 << 21))
    env = fuzz_cases.Env(seed, rank, dev, groups, empty=torch_purlin.empty)
    replay = f"replay: PURLIN_FUZZ_SEED={seed} PURLIN_FUZZ_CASES={{}} PURLIN_GPU_WORLD={world}"
    if rank == 0:
        print(f"\n[fuzz cuda world {world}] seed {seed}, {len(cases)} cases ({replay.format('<i,...>')})", flush=True)

    def one(case):
        try:
            fuzz_cases.run_case(env, case, sync=torch.cuda.synchronize)
        except Exception as e:  # noqa: BLE001  the message says how to replay the case
            raise AssertionError(f"{e}\n{replay.format(case.index)}") from e

    for case in fuzz_cases.selected(cases):
        R.check(case.describe(), one, case)
    torch.cuda.synchronize()
    dist.barrier(group=host)
    dist.destroy_process_group()
    R.out.close()


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    if gpus_missing(WORLD):
        pytest.skip(gpus_missing(WORLD))
    os.environ["PURLIN_FUZZ_SEED"] = str(SEED)  # the spawned ranks read it
    print(f"\n[fuzz cuda] seed {SEED} (PURLIN_FUZZ_SEED={SEED} replays it)")
    return run_suite("fuzz", _worker, WORLD, SUITE_TIMEOUT_S, tmp_path_factory.mktemp("purlin_gpu_fuzz"))


@pytest.mark.parametrize("family", FAMILIES)
def test_gpu_family(suite, family):
    check_family(suite, family)


def test_gpu_suite_exited_cleanly(suite):
    check_exited_cleanly(suite)
