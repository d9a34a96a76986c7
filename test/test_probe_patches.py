"""The experiments kept as patches (benchmarks/probes/*.patch, each with its device command in its
header) still apply to this tree: a patch that rotted would cost a device call to find out."""
import glob
import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PATCHES = sorted(glob.glob(os.path.join(ROOT, "benchmarks", "probes", "*.patch")))


@pytest.mark.parametrize("patch", PATCHES, ids=[os.path.basename(p) for p in PATCHES])
def test_probe_patch_applies(patch):
    if not shutil.which("git") or not os.path.isdir(os.path.join(ROOT, ".git")):
        pytest.skip("needs git and a checkout")
    r = subprocess.run(["git", "apply", "--check", patch], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, f"{os.path.basename(patch)} no longer applies (regenerate it: git apply --3way):\n{r.stderr}"

