"""A group's TORCH_PURLIN_* settings (skipped for other backends).

NOTE [group settings] (csrc/common/env.h): read once, when the group is made, from its options
(torch_purlin.Options as pg_options) or the environment. NOTE [settings across ranks]: a setting
that must be equal on every rank and differs raises as the group is made, on every rank, naming it,
each rank's value and where the value came from -- where before a 1000-float all_reduce returned
wrong data on one rank (TORCH_PURLIN_CPU_TWO_SHOT_BYTES) and a forced fallback on one rank ended in
gloo's bare "Wait timeout".

    python -m pytest test/cpu/test_settings_cpu.py -q
"""
import copy
import os
import pathlib
import re
import shutil
import subprocess
import time
import unittest
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.testing._internal.common_utils import run_tests

from mp_util import BACKEND, DistTestCase, make_input, spawned

if BACKEND != "purlin":
    raise unittest.SkipTest("purlin-specific tests")

import torch_purlin  # noqa: E402

DEFAULT_TWO_SHOT = dict((n, d) for n, d, _ in torch_purlin._C.env_vars())["TORCH_PURLIN_CPU_TWO_SHOT_BYTES"]


class SettingsTest(DistTestCase):
    WORLD_SIZE = 2
    PG_TIMEOUT = timedelta(seconds=30)

    def check_all_reduce(self, group, n=1000, dtype=torch.float64):
        seed = self.next_seed()
        x = make_input(seed, self.rank, (n,), dtype)
        dist.all_reduce(x, group=group)
        want = sum(make_input(seed, r, (n,), dtype) for r in range(self.world_size))
        self.assertTrue(torch.equal(x, want), self.ctx("all_reduce", n=n))

    def expect_mismatch(self, make, var, *patterns):
        """make() (a group's creation) raises on every rank within seconds, naming var and patterns."""
        start = time.monotonic()
        with self.assertRaises(RuntimeError) as cm:
            make()
        msg = str(cm.exception)
        self.assertLess(time.monotonic() - start, 10.0, msg)
        for pattern in (r"making the group", rf"rank {self.rank}\b", re.escape(var), "must be equal on every rank")\
                + patterns:
            self.assertRegex(msg, pattern)
        self.check_all_reduce(None)  # the default group is unharmed

    def with_env(self, var, value, fn):
        saved = os.environ.get(var)
        if value is None:
            os.environ.pop(var, None)
        else:
            os.environ[var] = value
        try:
            return fn()
        finally:
            if saved is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = saved

    @spawned
    def test_two_shot_threshold_differing_raises_at_creation(self):
        # The repro: rank 0 at 1K, rank 1 at the default.
        value = "1K" if self.rank == 0 else None
        self.expect_mismatch(
            lambda: self.with_env("TORCH_PURLIN_CPU_TWO_SHOT_BYTES", value, lambda: dist.new_group(backend="purlin")),
            "TORCH_PURLIN_CPU_TWO_SHOT_BYTES", r"rank 0 '1K' \(from the environment\)",
            r"rank 1 '" + re.escape(DEFAULT_TWO_SHOT) + r"' \(the default\)")

    @spawned
    def test_forced_fallback_on_one_rank_raises_at_creation(self):
        value = "all_reduce" if self.rank == 1 else None
        self.expect_mismatch(
            lambda: self.with_env("TORCH_PURLIN_FORCE_FALLBACK", value, lambda: dist.new_group(backend="purlin")),
            "TORCH_PURLIN_FORCE_FALLBACK", r"rank 0 unset \(the default\)", r"rank 1 'all_reduce'")

    @spawned
    def test_workspace_size_differing_names_the_setting(self):
        opts = torch_purlin.Options({"TORCH_PURLIN_CPU_WORKSPACE_BYTES": "64K" if self.rank == 0 else "128K"})
        self.expect_mismatch(lambda: dist.new_group(backend="purlin", pg_options=opts),
                             "TORCH_PURLIN_CPU_WORKSPACE_BYTES", r"rank 0 '64K' \(from the group's options\)",
                             r"rank 1 '128K'")

    @spawned
    def test_values_equal_in_effect_agree(self):
        # 256K and 262144 bytes, lists in another order and case: the same settings.
        opts = torch_purlin.Options({"TORCH_PURLIN_CPU_TWO_SHOT_BYTES": "256K,@3=1M" if self.rank == 0 else
                                     "@3=1048576, 262144",
                                     "TORCH_PURLIN_FORCE_FALLBACK": "broadcast,cpu:scatter" if self.rank == 0 else
                                     "CPU:scatter,broadcast"})
        g = dist.new_group(backend="purlin", pg_options=opts)
        self.check_all_reduce(g)
        self.assertEqual(torch_purlin.counters(g)["all_reduce"], (1, 0))

    @spawned
    def test_local_settings_may_differ(self):
        opts = torch_purlin.Options({"TORCH_PURLIN_LOG": str(self.rank), "TORCH_PURLIN_DEBUG": "0"})
        g = dist.new_group(backend="purlin", pg_options=opts)
        self.check_all_reduce(g)

    @spawned
    def test_group_options_are_the_group_settings(self):
        # A small workspace pipelines a large all_reduce in rounds; two-shot from 1K. The environment
        # is neither read for them nor changed, and a later change of it does not reach the group.
        settings = {"TORCH_PURLIN_CPU_WORKSPACE_BYTES": "16K", "TORCH_PURLIN_CPU_TWO_SHOT_BYTES": "1K"}
        g = dist.new_group(backend="purlin", pg_options=torch_purlin.Options(settings))
        backend = torch_purlin.get_purlin_backend(g)
        self.assertEqual(dict(backend.options.settings), settings)
        self.assertNotIn("TORCH_PURLIN_CPU_WORKSPACE_BYTES", os.environ)
        os.environ["TORCH_PURLIN_CPU_WORKSPACE_BYTES"] = "bogus"  # read by no group made before
        try:
            for n in (1, 100, 3 * 4096 + 5, 50_000):
                self.check_all_reduce(g, n)
            self.check_all_reduce(None, 50_000)
        finally:
            del os.environ["TORCH_PURLIN_CPU_WORKSPACE_BYTES"]
        # A split of the group takes its settings (torch copies the parent's options).
        child = g.split_group([0, 1], opts=copy.deepcopy(backend.options), group_name="settings_split")
        self.assertEqual(dict(child._get_backend(torch.device("cpu")).options.settings), settings)
        seed = self.next_seed()
        x = make_input(seed, self.rank, (20_000,), torch.float32)
        child.allreduce([x]).wait()
        self.assertTrue(torch.equal(x, sum(make_input(seed, r, (20_000,), torch.float32) for r in range(2))))

    @spawned
    def test_force_fallback_items(self):
        g = torch_purlin.group_with_settings({"TORCH_PURLIN_FORCE_FALLBACK": "cpu:broadcast,cuda:all_reduce"},
                                             device="cpu")
        self.check_all_reduce(g)
        x = make_input(self.next_seed(), 0, (17,), torch.float32)
        y = x.clone() if self.rank == 0 else torch.zeros(17)
        dist.broadcast(y, 0, group=g)
        self.assertTrue(torch.equal(y, x))
        c = torch_purlin.counters(g)
        self.assertEqual(c["all_reduce"], (1, 0))  # cuda:all_reduce does not force CPU tensors
        self.assertEqual(c["broadcast"], (0, 1))

    @spawned
    def test_unknown_and_retired_names_raise(self):
        with self.assertRaisesRegex(ValueError, "TORCH_PURLIN_FORCE_FALBACK"):
            torch_purlin.Options({"TORCH_PURLIN_FORCE_FALBACK": "all"})
        with self.assertRaisesRegex(ValueError, r"TORCH_PURLIN_FORCE_NCCL is no longer read.*FORCE_FALLBACK=cuda:"):
            torch_purlin.Options({"TORCH_PURLIN_FORCE_NCCL": "all"})
        # A retired variable that would change behaviour raises on every rank as the group is made.
        with self.assertRaisesRegex(ValueError, r"TORCH_PURLIN_FORCE_NCCL is no longer read"):
            self.with_env("TORCH_PURLIN_FORCE_NCCL", "all_reduce", lambda: dist.new_group(backend="purlin"))
        self.check_all_reduce(None)


def test_settings_registry_and_agreement_unit(tmp_path):
    """test/cpp/test_settings.cc (no torch): values compared across ranks, a group's snapshot, the
    agreement's verdicts with threads as ranks, the derived ranks per GPU."""
    if not shutil.which("g++"):
        raise unittest.SkipTest("g++ is required")
    root = pathlib.Path(__file__).resolve().parents[2]
    exe = tmp_path / "test_settings"
    srcs = ["csrc/common/env.cc", "csrc/backend/group/setup_agreement.cc",
            "csrc/backend/group/shm_group.cc", "csrc/backend/group/shm_capacity.cc",
            "csrc/atom/cpu/cpu_atom.cc", "csrc/atom/cpu/shm_segment.cc",
            "csrc/atom/cpu/reduce_cpu.cc", "csrc/atom/atom.cc", "csrc/common/types.cc", "test/cpp/test_settings.cc"]
    cmd = ["g++", "-O1", "-std=c++17", "-Wall", "-pthread", "-I", str(root / "csrc"),
           *[str(root / s) for s in srcs if s.endswith(".cc")], "-lrt", "-o", str(exe)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"compile failed: {' '.join(cmd)}\n{r.stderr[-4000:]}"
    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip().endswith("0 failed"), r.stdout + r.stderr


if __name__ == "__main__":
    run_tests()
