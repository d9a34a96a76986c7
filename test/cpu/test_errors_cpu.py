"""Error contract of the purlin backend on CPU (skipped for other backends).

Bad input must raise RuntimeError on every rank, quickly, with a message that
names the op, the reporting rank and the reason; the group must then still
run the next, correct collective; torch_purlin.counters() does not count the
refused call. A missing peer must make the others raise
"timed out" naming that peer once the group timeout has passed.

    python -m pytest test/cpu/test_errors_cpu.py -q
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
        native_before = self.native_calls()
        start = time.monotonic()
        with self.assertRaises(RuntimeError, msg=f"rank {self.rank}: {op} did not raise") as cm:
            run()
        msg = str(cm.exception)
        elapsed = time.monotonic() - start
        # a call refused for its arguments ran nothing: counters() does not count it
        self.assertEqual(self.native_calls(), native_before, f"rank {self.rank}: a refused {op} was counted")
        self.assertLess(elapsed, 10.0, f"rank {self.rank}: {op} took {elapsed:.1f}s to fail: {msg}")
        for pattern in (op, rf"rank[\s=:\[]*{self.rank}\b") + reasons:
            self.assertRegex(msg, re.compile(pattern, re.I),
                             f"rank {self.rank}: message lacks /{pattern}/")
        self.check_group_works()

    def native_calls(self):
        import torch_purlin
        return sum(native for native, _ in torch_purlin.counters().values())

    def check_group_works(self):
        t = torch.full((1025,), float(self.rank + 1))
        dist.all_reduce(t)
        expected = self.world_size * (self.world_size + 1) / 2
        self.assertTrue(bool((t == expected).all()), f"rank {self.rank}: group broken after error")

    @spawned
    def test_root_outside_the_group(self):
        for name, call in (("broadcast", lambda o: dist.group.WORLD.broadcast([torch.ones(5)], o)),
                           ("reduce", lambda o: dist.group.WORLD.reduce([torch.ones(5)], o))):
            opts = dist.BroadcastOptions() if name == "broadcast" else dist.ReduceOptions()
            opts.rootRank = self.world_size
            self.expect_error(lambda: call(opts).wait(), name, rf"root rank {self.world_size} is outside the group")

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

    # A setting that one rank cannot use (NOTE [setup agreement]): every rank fails as the group is made,
    # at once, naming that rank and the setting; the other groups keep working. The same malformed
    # value on every rank: each fails alike.

    @spawned
    def test_bad_setting_on_one_rank(self):
        self.bad_setting_case("TORCH_PURLIN_CPU_WORKSPACE_BYTES", "bogus")

    @spawned
    def test_bad_two_shot_list_on_one_rank(self):
        self.bad_setting_case("TORCH_PURLIN_CPU_TWO_SHOT_BYTES", "256K,@two=1M", shown="@two=1m")

    @spawned
    def test_bad_forced_fallback_item_on_every_rank(self):
        self.bad_setting_case("TORCH_PURLIN_FORCE_FALLBACK", "cpu:all_reduse", ranks=(0, 1))

    def bad_setting_case(self, var, value, shown=None, ranks=(1,)):
        import os
        self.check_group_works()
        saved = os.environ.get(var)
        if self.rank in ranks:
            os.environ[var] = value
        start = time.monotonic()
        try:
            with self.assertRaises(RuntimeError) as first:
                dist.new_group(backend="purlin")  # the settings are read and agreed as it is made
        finally:
            if saved is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = saved
        self.assertLess(time.monotonic() - start, 10.0, "a bad setting must fail every rank at once, not by timeout")
        for r in ranks:
            for pattern in (r"making the group", rf"rank {self.rank}\b", rf"rank {r} could not set up", var,
                            re.escape(shown or value)):
                self.assertRegex(str(first.exception), pattern)
        self.check_group_works()


@unittest.skipIf(BACKEND != "purlin", SKIP_REASON)
class TestTimeout(DistTestCase):
    WORLD_SIZE = 2
    PG_TIMEOUT = timedelta(seconds=3)
    SLACK_S = 4.0

    @property
    def destroy_pg_upon_exit(self):
        return False  # the group is broken by design; leave it alone

    def expect_rank_1_missing(self, run, patterns):
        """Rank 1 skips run() and stays alive (a silent peer, not a dead one); rank 0's run() must
        raise after the group timeout, within SLACK_S, with a message matching every pattern."""
        store = dist.distributed_c10d._get_default_store()
        key = f"timeout_test/{self.id()}/done"
        if self.rank == 1:
            try:
                store.wait([key], timedelta(seconds=30))
            except RuntimeError:
                raise AssertionError("rank 0's collective without rank 1 did not end in 30 s")
            return
        start = time.monotonic()
        try:
            with self.assertRaises(RuntimeError) as cm:
                run()
        finally:
            store.set(key, "1")
        elapsed = time.monotonic() - start
        msg = str(cm.exception)
        limit = self.PG_TIMEOUT.total_seconds()
        self.assertGreater(elapsed, 0.8 * limit, f"raised before the timeout: {msg}")
        self.assertLess(elapsed, limit + self.SLACK_S, f"raised after {elapsed:.1f}s: {msg}")
        for pattern in patterns:
            self.assertRegex(msg, re.compile(pattern, re.I), msg)

    @spawned
    def test_missing_peer_times_out(self):
        t = torch.ones(1025)
        dist.all_reduce(t)  # the group is up and connected
        # the message must name the missing peer; no further collectives: the group is broken
        self.expect_rank_1_missing(lambda: dist.all_reduce(t), (r"timed out", r"rank[\s=:\[]*1\b"))

    @spawned
    def test_missing_peer_at_the_first_collective_times_out(self):
        # The group sets itself up on its first collective: that wait is bounded by the
        # group's timeout too (store_rendezvous.h), not by the store's.
        self.expect_rank_1_missing(lambda: dist.all_reduce(torch.ones(8)),
                                   (r"timed out", r"all_reduce", r"rank 0\b", r"waiting for rank 1\b"))

if __name__ == "__main__":
    run_tests()
