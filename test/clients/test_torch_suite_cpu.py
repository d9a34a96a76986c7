"""torch's own distributed test suite (torch.testing._internal.distributed.distributed_test) on purlin,
world 2, CPU: the selections of test/clients/torch_suite/selection.py, run by test/clients/torch_suite/run_torch_suite.py
in a fresh process each. Every selected test must pass (none may skip: a test that stops running is a
change to look at).

    python -m pytest test/clients/test_torch_suite_cpu.py -q
    python test/clients/torch_suite/run_torch_suite.py --selection all    # every test, on demand (~1 min)
"""
import os
import re
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "torch_suite"))
from selection import CI, GLOO_GATED  # noqa: E402

RUNNER = os.path.join(HERE, "torch_suite", "run_torch_suite.py")


@pytest.mark.parametrize("selection,expected", [("ci", len(CI)), ("gloo-gated", len(GLOO_GATED))])
def test_torch_distributed_suite(selection, expected, tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("BACKEND", "WORLD_SIZE", "TEMP_DIR", "INIT_METHOD",
                                                            "PURLIN_TORCH_SUITE_GATES_OF")}
    env.update(TEMP_DIR=str(tmp_path), DISTRIBUTED_TESTS_DEFAULT_TIMEOUT="120", OMP_NUM_THREADS="1")
    r = subprocess.run([sys.executable, RUNNER, "--selection", selection, "--json", str(tmp_path / "out.json")],
                       capture_output=True, text=True, timeout=900, env=env)
    tail = (r.stdout + r.stderr)[-6000:]
    m = re.search(r"^(\d+) passed, (\d+) failed, (\d+) skipped$", r.stdout, re.M)
    assert m, f"no summary line (exit {r.returncode}):\n{tail}"
    passed, failed, skipped = map(int, m.groups())
    print(r.stdout.strip().splitlines()[-2], f"\n{passed} passed, {failed} failed, {skipped} skipped")
    assert failed == 0 and r.returncode == 0, "\n".join(l for l in r.stdout.splitlines() if l.startswith("FAILED")) \
        + "\n" + tail
    assert passed == expected and skipped == 0, f"{passed} of {expected} selected tests passed, {skipped} skipped:\n{tail}"
