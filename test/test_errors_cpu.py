"""Error contract of the purlin backend on CPU (skipped for other backends).

Bad input must raise RuntimeError on every rank, quickly, with a message that
names the op, the reporting rank and the reason; the group must then still
run the next, correct collective. A missing peer must make the others raise
"timed out" naming that peer once the group timeout has passed.

    python -m pytest test/test_errors_cpu.py -q
"""
import re
import time
import unittest
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.testing._internal.common_utils import run_tests

from mp_util import BACKEND, DistTestCase, spawned

SKIP_REASON = f"the error contract is purlin's; backend under test is {BACKEND}"


@unittest.skipIf(BACKEND != "purlin", SKIP_REASON)
class TestBadInput(DistTestCase):
    WORLD_SIZE = 2
    PG_TIMEOUT = timedelta(seconds=30)  # a hang fails in 30 s, not at the harness's 300

    def expect_error(self, run, op, *reasons):
        """run() must raise RuntimeError naming op (regex), this rank, and every reason (regex)."""
        start = time.monotonic()
        with self.assertRaises(RuntimeError, msg=f"rank {self.rank}: {op} did not raise") as cm:
            run()
        msg = str(cm.exception)
        elapsed = time.monotonic() - start
        self.assertLess(elapsed, 10.0, f"rank {self.rank}: {op} took {elapsed:.1f}s to fail: {msg}")
        for pattern in (op, rf"rank[\s=:\[]*{self.rank}\b") + reasons:
            self.assertRegex(msg, re.compile(pattern, re.I),
                             f"rank {self.rank}: message lacks /{pattern}/")
        self.check_group_works()

    def check_group_works(self):
        t = torch.full((1025,), float(self.rank + 1))
        dist.all_reduce(t)
        expected = self.world_size * (self.world_size + 1) / 2
        self.assertTrue(bool((t == expected).all()), f"rank {self.rank}: group broken after error")

    # Cases where one rank is wrong: every rank must raise (no rank may hang or
    # silently read past the end of a peer's buffer).

    @spawned
    def test_all_reduce_numel_mismatch(self):
        t = torch.ones(1025 + self.rank)
        self.expect_error(lambda: dist.all_reduce(t), r"all_?reduce", r"numel|size|elements|mismatch")

    @spawned
    def test_all_to_all_single_split_mismatch(self):
        # Rank 0 expects 3 elements from rank 1; rank 1 sends it 5.
        in_splits, out_splits = ([4, 3], [4, 3]) if self.rank == 0 else ([5, 4], [3, 4])
        inp, out = torch.ones(sum(in_splits)), torch.empty(sum(out_splits))
        self.expect_error(
            lambda: dist.all_to_all_single(out, inp, output_split_sizes=out_splits,
                                           input_split_sizes=in_splits),
            r"all_?to_?all", r"split|size|elements|mismatch")

    @spawned
    def test_all_gather_into_tensor_wrong_output_size(self):
        out = torch.empty(self.world_size * 7 - (self.rank == 0))  # rank 0's is one short
        self.expect_error(lambda: dist.all_gather_into_tensor(out, torch.ones(7)),
                          r"all_?gather", r"size|numel|shape|elements")

    # Unsupported dtype/op pairs, the same on every rank: the message names both.

    @spawned
    def test_min_on_complex(self):
        # torch's Python API rejects this itself; the group's own binding does not.
        opts = dist.AllreduceOptions()
        opts.reduceOp = dist.ReduceOp.MIN
        group = dist.distributed_c10d._get_default_group()
        z = torch.ones(7, dtype=torch.complex64)
        self.expect_error(lambda: group.allreduce([z], opts).wait(),
                          r"all_?reduce", r"\bmin\b", r"complex")

    @spawned
    def test_avg_on_int32(self):
        i = torch.ones(7, dtype=torch.int32)
        self.expect_error(lambda: dist.all_reduce(i, op=dist.ReduceOp.AVG),
                          r"all_?reduce", r"\bavg\b", r"int32")

    # A setting that one rank cannot use (NOTE [setup agreement]): every rank fails at the group's first
    # collective, at once, naming that rank and the setting; the other groups keep working.

    @spawned
    def test_bad_setting_on_one_rank(self):
        self.bad_setting_case("TORCH_PURLIN_CPU_WORKSPACE_BYTES", "bogus")

    @spawned
    def test_bad_two_shot_list_on_one_rank(self):
        self.bad_setting_case("TORCH_PURLIN_CPU_TWO_SHOT_BYTES", "256K,@two=1M", shown="@two=1m")

    def bad_setting_case(self, var, value, shown=None):
        import os
        self.check_group_works()  # the default group is set up before the setting goes bad
        group = dist.new_group(backend="purlin")  # set up on its first collective, below
        saved = os.environ.get(var)
        if self.rank == 1:
            os.environ[var] = value
        t = torch.ones(1025)
        start = time.monotonic()
        try:
            with self.assertRaises(RuntimeError) as first:
                dist.all_reduce(t, group=group)
        finally:
            if saved is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = saved
        # The group stays failed with the same reason and never waits again; the default group works.
        self.expect_error(lambda: dist.all_reduce(t, group=group), r"all_?reduce", r"unusable",
                          r"rank 1 could not set up", var)
        self.assertLess(time.monotonic() - start, 10.0, "a bad setting must fail every rank at once, not by timeout")
        for pattern in (r"all_?reduce", rf"rank {self.rank}\b", r"rank 1 could not set up", var,
                        re.escape(shown or value)):
            self.assertRegex(str(first.exception), pattern)


@unittest.skipIf(BACKEND != "purlin", SKIP_REASON)
class TestTimeout(DistTestCase):
    WORLD_SIZE = 2
    PG_TIMEOUT = timedelta(seconds=3)
    SLACK_S = 4.0

    @property
    def destroy_pg_upon_exit(self):
        return False  # the group is broken by design; leave it alone

    @spawned
    def test_missing_peer_times_out(self):
        store = dist.distributed_c10d._get_default_store()
        t = torch.ones(1025)
        dist.all_reduce(t)  # the group is up and connected
        if self.rank == 1:
            # Skip the collective, and stay alive until rank 0 is done so that it
            # sees a silent peer, not a dead one.
            try:
                store.wait(["timeout_test/done"], timedelta(seconds=30))
            except RuntimeError:
                raise AssertionError("rank 0's all_reduce without rank 1 did not end in 30 s")
            return
        start = time.monotonic()
        try:
            with self.assertRaises(RuntimeError) as cm:
                dist.all_reduce(t)
        finally:
            store.set("timeout_test/done", "1")
        elapsed = time.monotonic() - start
        msg = str(cm.exception)
        limit = self.PG_TIMEOUT.total_seconds()
        self.assertGreater(elapsed, 0.8 * limit, f"raised before the timeout: {msg}")
        self.assertLess(elapsed, limit + self.SLACK_S, f"raised after {elapsed:.1f}s: {msg}")
        self.assertRegex(msg, re.compile(r"timed out", re.I))
        self.assertRegex(msg, re.compile(r"rank[\s=:\[]*1\b", re.I),
                         "the message must name the missing peer")
        # No further collectives: the group is broken.


if __name__ == "__main__":
    run_tests()
