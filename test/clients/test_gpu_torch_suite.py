"""torch's own distributed test suite on purlin with CUDA tensors: the CUDA selection of
test/clients/torch_suite/selection.py (CUDA collectives and the suite's DDP tests, which it runs on GPUs only),
world 2, ranks spawned as torch's test_distributed_spawn.py does. Skips cleanly without 2 GPUs.

    python -m pytest test/clients/test_gpu_torch_suite.py -q -s
    PURLIN_TORCH_SUITE_SHARD=1/3 python -m pytest test/clients/test_gpu_torch_suite.py -q -s   # a third of it
"""
import os
import re
import subprocess
import sys

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
RUNNER = os.path.join(HERE, "torch_suite", "run_torch_suite.py")

MISSING = "needs 2 GPUs" if not torch.cuda.is_available() or torch.cuda.device_count() < 2 else ""
pytestmark = pytest.mark.skipif(bool(MISSING), reason=MISSING or "runs")


def test_torch_distributed_suite_cuda(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("BACKEND", "WORLD_SIZE", "TEMP_DIR", "INIT_METHOD",
                                                            "PURLIN_TORCH_SUITE_GATES_OF")}
    env.update(TEMP_DIR=str(tmp_path), DISTRIBUTED_TESTS_DEFAULT_TIMEOUT="120")
    log = os.path.join(os.environ.get("PURLIN_GPU_LOG_DIR") or str(tmp_path), "torch_suite_cuda.json")
    shard = os.environ.get("PURLIN_TORCH_SUITE_SHARD", "1/1")  # spawned ranks take seconds per test: split long runs
    r = subprocess.run([sys.executable, RUNNER, "--selection", "cuda", "--shard", shard, "--json", log],
                       capture_output=True, text=True, timeout=3000, env=env)
    m = re.search(r"^(\d+) passed, (\d+) failed, (\d+) skipped$", r.stdout, re.M)
    tail = (r.stdout + r.stderr)[-6000:]
    assert m, f"no summary line (exit {r.returncode}):\n{tail}"
    print("\n".join(l for l in r.stdout.splitlines() if l.startswith(("FAILED", "torch distributed_test")))
          + f"\n{m.group(0)} (per test: {log})")
    assert int(m.group(2)) == 0, "\n".join(l for l in r.stdout.splitlines() if l.startswith("FAILED")) + "\n" + tail
