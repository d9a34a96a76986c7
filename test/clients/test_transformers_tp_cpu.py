"""HF transformers' own tensor parallelism over a purlin default group, on CPU tensors.

A tiny random Llama (test/clients/hf_tp_util.py: built from a config, saved to a temporary folder, no
download) is loaded with `DistributedConfig(tp_size=world)` on every rank of a purlin group. Its
fp32 logits equal the non-parallel model's (to LOGIT_ATOL: the row-parallel layers add partial
sums in another order) and its greedy `generate` tokens are the same; at world 2 its logits are
bit-identical to the same run over gloo (two partial sums: one way to add them); every collective
transformers issued ran natively (torch_purlin.counters). World 2 and 4.

    python -m pytest test/clients/test_transformers_tp_cpu.py -q
"""
import os
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

from gpu_harness import Runner, check_exited_cleanly, check_family, run_suite
from hf_tp_util import make_reference, tp_run, transformers_missing

pytestmark = pytest.mark.skipif(bool(transformers_missing()), reason=transformers_missing() or "runs")


def _worker(rank, world, init_file, log_path):
    import torch_purlin  # noqa: F401  registers "purlin"
    torch.set_num_threads(1)  # the ranks share the host's cores
    folder = os.path.dirname(init_file)
    runner = Runner(rank, log_path)
    runner.family = "transformers_tp"
    dist.init_process_group("purlin", init_method=f"file://{init_file}", rank=rank, world_size=world,
                            timeout=timedelta(seconds=60))
    gloo = dist.new_group(backend="gloo") if world == 2 else None
    for what, err in tp_run(folder, rank, world, torch.device("cpu"), exact_against=gloo):
        runner.check(what, _raise, err)
    dist.destroy_process_group()


def _raise(err):
    if err:
        raise AssertionError(err)


@pytest.mark.parametrize("world", [2, 4])
def test_transformers_tensor_parallel(world, tmp_path):
    make_reference(str(tmp_path))
    suite = run_suite(f"transformers_tp_w{world}", _worker, world=world, timeout_s=150, tmp_dir=tmp_path)
    check_family(suite, "transformers_tp")
    check_exited_cleanly(suite)
    names = {r["case"] for r in suite["rows"]}
    assert len(names) == (5 if world == 2 else 4), names
