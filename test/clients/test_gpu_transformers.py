"""HF transformers' own tensor parallelism over a purlin default group bound to a GPU (as
test/clients/test_transformers_tp_cpu.py does on CPU): a tiny random Llama (test/clients/hf_tp_util.py, no
download) loaded with `DistributedConfig(tp_size=world)` gives the non-parallel model's fp32 logits
(CPU reference, GPU_LOGIT_ATOL) and the same greedy tokens; with one GPU per rank its logits are
bit-identical to the same run over NCCL at world 2; every collective ran natively on purlin
(CUDA counters). Skips cleanly without the GPUs or without transformers (and accelerate).

    python -m pytest test/clients/test_gpu_transformers.py -q            # PURLIN_GPU_WORLD=2 (default)
"""
import os
import tempfile
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

from gpu_harness import gpus_missing, init_purlin_worker, run_ranks_expect_ok, shares_gpu, write_result
from hf_tp_util import GPU_LOGIT_ATOL, make_reference, tp_run, transformers_missing

WORLD = int(os.environ.get("PURLIN_GPU_WORLD", "2"))  # ranks = GPUs used (tools/gpu.sh NPROC)
MISSING = gpus_missing(WORLD) or transformers_missing()

pytestmark = pytest.mark.skipif(bool(MISSING), reason=MISSING or "runs")


def worker(rank, path, result_path):
    dev = init_purlin_worker(rank, WORLD, path, timedelta(seconds=60))
    os.environ["LOCAL_RANK"] = str(dev.index)  # transformers binds the rank's GPU from it
    folder = os.environ["PURLIN_HF_FOLDER"]
    # NCCL as the bit-exact reference: two partial sums per all_reduce at world 2 (NCCL refuses ranks sharing a GPU).
    nccl = dist.new_group(backend="nccl") if WORLD == 2 and not shares_gpu(WORLD) else None
    results = tp_run(folder, rank, WORLD, dev, exact_against=nccl, logit_atol=GPU_LOGIT_ATOL)
    errors = [f"{what}: {err}" for what, err in results if err]
    write_result(result_path, rank, errors, f"{len(results)} checks: " + "; ".join(w for w, _ in results))
    dist.destroy_process_group()


def test_transformers_tensor_parallel_gpu():
    with tempfile.TemporaryDirectory() as d:
        make_reference(d)
        os.environ["PURLIN_HF_FOLDER"] = d  # inherited by the spawned ranks
        try:
            run_ranks_expect_ok(worker, WORLD)
        finally:
            os.environ.pop("PURLIN_HF_FOLDER", None)
