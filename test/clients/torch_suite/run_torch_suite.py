"""Runs torch's own distributed test suite (torch.testing._internal.distributed.distributed_test,
`_DistTestBase`) on the purlin backend, the way torch's test/distributed/test_distributed_spawn.py
runs it on gloo and NCCL: one spawned process per rank, a file rendezvous, and the environment
BACKEND, WORLD_SIZE and TEMP_DIR.

    python test/clients/torch_suite/run_torch_suite.py                  # the CI selection (CPU)
    python test/clients/torch_suite/run_torch_suite.py --selection all  # every test (long)
    python test/clients/torch_suite/run_torch_suite.py --selection cuda # the CUDA selection (needs 2 GPUs)
    python test/clients/torch_suite/run_torch_suite.py --selection cuda --shard 1/3   # a third of it
    python test/clients/torch_suite/run_torch_suite.py -k test_all_gather_object_default_pg
    BACKEND=gloo python test/clients/torch_suite/run_torch_suite.py     # the same tests on gloo
    python test/clients/torch_suite/run_torch_suite.py --list           # names, and why a test is left out

The last line is "N passed, N failed, N skipped"; --json FILE writes every test's outcome.

NOTE [third-party backend in torch's suite]
The suite reads BACKEND, WORLD_SIZE and TEMP_DIR when it is imported, and gates its tests in
two ways: by backend *name* (`BACKEND == "nccl"`, `BACKEND != "gloo"`: gloo- or NCCL-specific
behaviour such as gloo's timeouts and sparse all_reduce; those stay skipped for purlin) and by
the capability sets of `DistTestCases` (common_distributed.py: backend_feature["ddp"],
["subgroup"], ["gpu"], ["cuda"], skip_collective[...]), which name the backends that support a
feature. purlin supports DDP, subgroups and CUDA tensors, so this runner adds "purlin" to those
sets before it imports the suite. Spawned ranks import this file again (multiprocessing's
spawn), so they register purlin (`import torch_purlin`) and see the same sets.
"""
import argparse
import json
import os
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(os.path.dirname(os.path.dirname(HERE)))]  # selection.py; the repository's torch_purlin

# The suite reads these at import: defaults before importing it (the parent sets them; ranks inherit them).
os.environ.setdefault("BACKEND", "purlin")
os.environ.setdefault("WORLD_SIZE", "2")
if "TEMP_DIR" not in os.environ:
    os.environ["TEMP_DIR"] = tempfile.mkdtemp(prefix="purlin_torch_suite_")
os.environ.setdefault("INIT_METHOD", "file://" + os.path.join(os.environ["TEMP_DIR"], "init"))

# --gates-of gloo: the suite decides its backend-name gates as for gloo, while the group is purlin
# (NOTE [third-party backend in torch's suite]); the parent sets it, spawned ranks inherit it.
BACKEND = os.environ["BACKEND"]
GATES_OF = os.environ.get("PURLIN_TORCH_SUITE_GATES_OF") or BACKEND
os.environ["BACKEND"] = GATES_OF

import torch  # noqa: E402
from torch.testing._internal.common_distributed import DistTestCases  # noqa: E402

from selection import CUDA, CI, EXCLUDED, GLOO_GATED, excluded_reason  # noqa: E402

if BACKEND == "purlin":
    import torch_purlin  # noqa: F401  registers "purlin" (in every rank: spawn imports this file again)

    # NOTE [third-party backend in torch's suite]: purlin's capabilities, declared as gloo's are.
    for feature in ("ddp", "subgroup", "gpu", "cuda", "plugin"):
        DistTestCases.backend_feature[feature].add("purlin")

from torch.testing._internal.distributed import distributed_test  # noqa: E402
from torch.testing._internal.distributed.distributed_test import DistributedTest, TestDistBackend  # noqa: E402

distributed_test.BACKEND = BACKEND  # the group's backend (init_process_group) and the tests' run-time checks
os.environ["BACKEND"] = BACKEND


class TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
    """torch's test_distributed_spawn.py class: every test starts WORLD_SIZE ranks, spawned (as torch does)
    or, with PURLIN_TORCH_SUITE_START=fork (the CPU selections' default), forked: a rank then starts in
    milliseconds instead of importing torch and the suite again (seconds per test on a small machine)."""

    def setUp(self):
        super().setUp()
        if os.environ.get("PURLIN_TORCH_SUITE_START", "spawn") == "fork":
            self._start_processes(torch.multiprocessing.get_context("fork").Process)
        else:
            self._spawn_processes()
        torch.backends.cudnn.flags(enabled=True, allow_tf32=False).__enter__()


def all_names():
    return sorted(n for n in dir(TestDistBackendWithSpawn) if n.startswith("test_"))


def select(which, pattern=None):
    names = all_names()
    if pattern:
        return [n for n in names if pattern in n]
    if which == "all":
        return names
    chosen = {"ci": CI, "cuda": CUDA, "gloo-gated": list(GLOO_GATED)}[which]
    missing = sorted(set(chosen) - set(names))
    if missing:  # another torch release: its suite may have renamed or dropped a test
        print(f"run_torch_suite: not in torch {torch.__version__}'s suite: {missing}", flush=True)
    return [n for n in chosen if n in names]


class Outcomes(unittest.TextTestResult):
    """Records every test's outcome (passed / failed / skipped) and its time."""

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.rows = {}
        self._t0 = {}

    def startTest(self, test):
        self._t0[test.id()] = time.time()
        super().startTest(test)

    def _row(self, test, outcome, detail=""):
        name = test.id().rsplit(".", 1)[-1]
        self.rows[name] = {"outcome": outcome, "s": round(time.time() - self._t0.get(test.id(), time.time()), 2),
                           "detail": detail[-4000:]}

    def addSuccess(self, test):
        super().addSuccess(test)
        self._row(test, "passed")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._row(test, "failed", self._exc_info_to_string(err, test))

    def addError(self, test, err):
        super().addError(test, err)
        self._row(test, "failed", self._exc_info_to_string(err, test))

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._row(test, "skipped", reason)

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._row(test, "passed", "expected failure")

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._row(test, "failed", "unexpected success")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--selection", choices=("ci", "all", "cuda", "gloo-gated"), default="ci",
                    help="gloo-gated: the tests torch gates to gloo by name, run on purlin with "
                         "PURLIN_TORCH_SUITE_GATES_OF=gloo (see selection.GLOO_GATED)")
    ap.add_argument("-k", dest="pattern", help="only tests whose name contains this")
    ap.add_argument("--json", help="write {test: {outcome, s, detail}} here")
    ap.add_argument("--list", action="store_true", help="print the selection and the excluded tests, then exit")
    ap.add_argument("--include-excluded", action="store_true", help="also run the tests EXCLUDED names")
    ap.add_argument("--shard", default="1/1", help="I/N: only the I-th of N equal parts of the selection")
    ap.add_argument("--start", choices=("fork", "spawn"),
                    help="how ranks start (default: fork for the CPU selections, spawn for cuda)")
    args = ap.parse_args(argv)
    if args.selection == "gloo-gated" and GATES_OF != "gloo":  # the gates are decided when the suite is imported
        os.environ["PURLIN_TORCH_SUITE_GATES_OF"] = "gloo"
        os.execv(sys.executable, [sys.executable, os.path.abspath(__file__)] + (argv or sys.argv[1:]))
    os.environ["PURLIN_TORCH_SUITE_START"] = args.start or ("spawn" if args.selection == "cuda" else "fork")
    names = select(args.selection, args.pattern)
    if not args.include_excluded:
        names = [n for n in names if excluded_reason(n) is None]
    part, parts = (int(x) for x in args.shard.split("/"))
    names = names[part - 1::parts]
    if args.list:
        for n in names:
            print(n)
        for n, why in sorted(EXCLUDED.items()):
            print(f"# excluded {n}: {why}")
        return 0
    suite = unittest.TestSuite(TestDistBackendWithSpawn(n) for n in names)
    runner = unittest.TextTestRunner(resultclass=Outcomes, verbosity=2, stream=sys.stdout)
    t0 = time.time()
    result = runner.run(suite)
    rows = result.rows
    counts = {k: sum(1 for r in rows.values() if r["outcome"] == k) for k in ("passed", "failed", "skipped")}
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"backend": BACKEND, "world_size": os.environ["WORLD_SIZE"], "torch": torch.__version__,
                       "selection": args.selection, "seconds": round(time.time() - t0, 1), "tests": rows}, f, indent=1)
    for name, r in sorted(rows.items()):
        if r["outcome"] == "failed":
            print(f"FAILED {name}")
    gates = f" (gates of {GATES_OF})" if GATES_OF != BACKEND else ""
    print(f"torch distributed_test, selection {args.selection}{gates}, on {BACKEND}, world {os.environ['WORLD_SIZE']}, "
          f"torch {torch.__version__}: {time.time() - t0:.0f} s")
    print(f"{counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped")
    return 1 if counts["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
