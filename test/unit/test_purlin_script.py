"""`./purlin` on a distribution's "externally managed" Python (PEP 668), in a fresh clone of this checkout:
the packages go into the checkout's own environment ./.venv, made once (git ignores it) and reused; its
torch is the one the script reports and imports from ./.venv. Runs `./purlin env` (set-up without the
build) twice against /usr/bin/python3; skips where that interpreter is missing or not externally managed.
Installing torch's CPU build into the new environment takes a minute or two (pip's cache, or a local
wheel, makes it a copy).

    python -m pytest test/unit/test_purlin_script.py -q
"""
import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SYSTEM_PYTHON = "/usr/bin/python3"
PROBE = ("import os, sys, sysconfig, venv, ensurepip; print(sys.prefix == sys.base_prefix and "
         "os.path.exists(os.path.join(sysconfig.get_path('stdlib'), 'EXTERNALLY-MANAGED')))")


def externally_managed():
    if not os.access(SYSTEM_PYTHON, os.X_OK):
        return False
    r = subprocess.run([SYSTEM_PYTHON, "-c", PROBE], capture_output=True, text=True, timeout=60)
    return r.returncode == 0 and r.stdout.strip() == "True"


pytestmark = pytest.mark.skipif(not externally_managed(),
                                reason=f"{SYSTEM_PYTHON} is missing, not externally managed or has no venv module")


def run_env(clone):
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    env["PYTHON"] = SYSTEM_PYTHON
    r = subprocess.run(["./purlin", "env"], cwd=clone, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, f"rc {r.returncode}\n{r.stdout}\n{r.stderr[-4000:]}"
    return r.stdout.strip().splitlines()[-1], r.stderr


def test_externally_managed_python_gets_the_checkouts_own_environment(tmp_path):
    if not os.path.isdir(os.path.join(ROOT, ".git")) and not os.path.isfile(os.path.join(ROOT, ".git")):
        pytest.skip("not a git checkout")
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "--depth", "1", "file://" + ROOT, str(clone)], check=True, timeout=300)
    for name in ("purlin", ".gitignore"):  # this tree's script, committed or not
        shutil.copy2(os.path.join(ROOT, name), clone / name)
    venv_python = str(clone / ".venv" / "bin" / "python")

    python, said = run_env(clone)
    assert python == venv_python, said
    assert f"{SYSTEM_PYTHON} is externally managed (PEP 668): making this checkout's own environment ./.venv" in said
    assert "installing torch 2.13.0 and numpy there" in said and "MB" in said, said
    r = subprocess.run([python, "-c", "import sys, torch; print(sys.prefix); print(torch.__file__)"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    prefix, torch_file = r.stdout.split()
    assert prefix == str(clone / ".venv") and torch_file.startswith(prefix + os.sep), r.stdout
    status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all", "--", ".venv"], cwd=clone,
                            capture_output=True, text=True, check=True).stdout
    assert status == "", f"git sees the environment: {status}"

    # A later run reuses it: nothing installed again.
    python, said = run_env(clone)
    assert python == venv_python, said
    assert "using this checkout's environment ./.venv" in said and "installing" not in said, said
