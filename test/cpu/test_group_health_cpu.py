"""A broken group is broken on every rank at once, and a dead peer is noticed in about a second, on CPU
tensors (NOTE [group health], csrc/backend/group/group_health.h).

- A rank whose wait times out (its own, tiny, timeout), or that aborts the group, or shuts it down:
  every peer's pending collective raises within NOTICE_S naming that rank (pid) and its reason, and
  every later collective raises at once; the group's timeout (60 s) never comes into it.
- A peer killed with SIGKILL in the middle of a loop of collectives: every survivor raises within
  NOTICE_S naming it (group rank, global rank where it differs, pid), in the default group and in a
  subgroup; destroy_process_group works after, and nothing of the group stays in /dev/shm or in the
  survivors' mappings.
- The host pieces alone (test/cpp/test_group_health.cc): peer liveness (a killed, unreaped zombie is
  gone), verdicts between two GroupHealth objects, the watcher thread's end, the plan cache.

    python -m pytest test/cpu/test_group_health_cpu.py -q
"""
import os
import pathlib
import re
import shutil
import signal
import subprocess
import time
import unittest
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
from torch.testing._internal.common_utils import run_tests

from mp_util import BACKEND, DistTestCase, make_input, spawned

if BACKEND != "purlin":
    raise unittest.SkipTest("purlin-specific tests")

import torch_purlin  # noqa: E402,F401

ROOT = pathlib.Path(__file__).resolve().parents[2]
NOTICE_S = 2.0  # a peer's break or death must reach every rank well within this (the watcher looks every 50 ms)
LONG = timedelta(seconds=60)  # the group timeout these tests must never wait for


def test_group_health_host_pieces(tmp_path):
    """test/cpp/test_group_health.cc: PeerLiveness, GroupHealth verdicts through the watcher thread, PlanCache."""
    if not shutil.which("g++"):
        pytest.skip("g++ is required")
    exe = tmp_path / "test_group_health"
    srcs = [ROOT / "csrc/backend/group" / f for f in ("group_health.cc", "health_watcher.cc", "peer_liveness.cc")]
    cmd = ["g++", "-O1", "-std=c++17", "-Wall", "-I", str(ROOT / "csrc"), *map(str, srcs),
           str(ROOT / "test/cpp/test_group_health.cc"), "-pthread", "-o", str(exe)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"compile failed: {' '.join(cmd)}\n{r.stderr}"
    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    print(r.stdout)
    assert r.returncode == 0 and r.stdout.strip().endswith("0 failed") and "FAIL" not in r.stdout, r.stdout + r.stderr


def shm_of(pids):
    """/dev/shm names a group of these processes made (the first rank's pid starts each name)."""
    return sorted(f for f in os.listdir("/dev/shm") if any(f.startswith(f"purlin_{p}_") for p in pids))


def mapped_segments():
    with open("/proc/self/maps") as f:
        return [line.strip() for line in f if "/purlin_" in line]


def health_threads():
    """This process's watcher threads (NOTE [health watcher])."""
    names = []
    for t in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{t}/comm") as f:
                names.append(f.read().strip())
        except FileNotFoundError:
            pass
    return [n for n in names if n == "purlin-health"]


def pidfds():
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if "pidfd" in target:
            out.append(target)
    return out


class HealthCase(DistTestCase):
    PG_TIMEOUT = LONG

    def setup_pids(self, tag):
        """Every rank's pid, through the default store."""
        store = dist.distributed_c10d._get_default_store()
        store.set(f"{tag}/pid{self.rank}", str(os.getpid()))
        return store, [int(store.get(f"{tag}/pid{r}")) for r in range(self.world_size)]

    def raises(self, call, *patterns):
        """call() must raise RuntimeError matching every pattern; returns (message, when it raised)."""
        with self.assertRaises(RuntimeError, msg=f"rank {self.rank}: no error") as cm:
            call()
        when = time.monotonic()
        msg = str(cm.exception)
        for p in patterns:
            self.assertRegex(msg, p, f"rank {self.rank}")
        return msg, when

    def all_reduce_checked(self, group, ranks, seed):
        """A correct all_reduce on `group` (whose members are the global `ranks`)."""
        x = make_input(seed, self.rank, (513,), torch.float64)
        dist.all_reduce(x, group=group)
        self.assertTrue(torch.equal(x, sum(make_input(seed, r, (513,), torch.float64) for r in ranks)),
                        self.ctx("all_reduce before the break"))


class BrokenGroupTest(HealthCase):
    WORLD_SIZE = 3

    @spawned
    def test_a_timeout_on_one_rank_breaks_the_group_everywhere(self):
        store, pids = self.setup_pids("timeout")
        # Rank 0's group gives up after 1 s; the others' would wait 60 s.
        g = dist.new_group(backend="purlin", timeout=timedelta(seconds=1) if self.rank == 0 else LONG)
        self.all_reduce_checked(g, range(3), self.next_seed())
        t = torch.ones(100)
        finder = rf"rank 0 \(pid {pids[0]}\) found the group unusable: purlin all_reduce \(seq 2\) on rank 0: timed out"
        if self.rank == 2:  # never joins; comes once rank 0 gave up
            store.wait(["timeout/raised0"])
            start = time.monotonic()
            msg, when = self.raises(lambda: dist.all_reduce(t, group=g), "purlin all_reduce", r"on rank 2\b", finder)
            self.assertLess(when - start, NOTICE_S, msg)
        else:
            start = time.monotonic()
            msg, when = self.raises(lambda: dist.all_reduce(t, group=g), r"purlin all_reduce \(seq 2\)",
                                    rf"on rank {self.rank}\b", r"waiting for rank 2\b",
                                    r"timed out after 1 s" if self.rank == 0 else finder)
            if self.rank == 0:
                store.set("timeout/raised0", repr(when))
                self.assertLess(when - start, 1 + NOTICE_S, msg)
            else:  # pending in the same call: it ends with rank 0's finding, not at its own 60 s
                self.assertIn("the group is unusable: ", msg)
                raised0 = float(store.get("timeout/raised0"))
                self.assertLess(when - raised0, NOTICE_S, msg)
                self.assertLess(when - start, 1 + 2 * NOTICE_S, msg)
        # Every later call raises at once with the same reason; the default group is not touched.
        start = time.monotonic()
        self.raises(lambda: dist.all_reduce(t, group=g), rf"purlin all_reduce on rank {self.rank}: the group is "
                    r"unusable after an earlier failure: .*timed out")
        self.assertLess(time.monotonic() - start, 0.5)
        self.all_reduce_checked(None, range(3), self.next_seed())
        dist.destroy_process_group(g)
        dist.barrier()

    @spawned
    def test_abort_or_shutdown_on_one_rank_ends_the_peers_waits(self):
        store, pids = self.setup_pids("abort")
        g = dist.new_group(backend="purlin", timeout=LONG)
        h = dist.new_group(backend="purlin", timeout=LONG)
        seed = self.next_seed()
        self.all_reduce_checked(g, range(3), seed)
        self.all_reduce_checked(h, range(3), seed + 1)
        t = torch.ones(100)
        # g: rank 0 aborts it while ranks 1 and 2 wait for it in an all_reduce.
        if self.rank == 0:
            time.sleep(0.5)
            store.set("abort/at", repr(time.monotonic()))
            dist.distributed_c10d._abort_process_group(g)
        else:
            msg, when = self.raises(lambda: dist.all_reduce(t, group=g), rf"purlin all_reduce \(seq 2\) on rank "
                                    rf"{self.rank}: the group is unusable: rank 0 \(pid {pids[0]}\) aborted the group",
                                    r"waiting for rank 0\b")
            self.assertLess(when - float(store.get("abort/at")), NOTICE_S, msg)
            self.raises(lambda: dist.all_reduce(t, group=g), "unusable after an earlier failure: rank 0 .*aborted")
            dist.destroy_process_group(g)
        # h: rank 1 shuts it down while ranks 0 and 2 wait in an all_reduce.
        if self.rank == 1:
            time.sleep(0.5)
            store.set("shutdown/at", repr(time.monotonic()))
            dist.destroy_process_group(h)
        else:
            msg, when = self.raises(lambda: dist.all_reduce(t, group=h), rf"on rank {self.rank}: the group is "
                                    rf"unusable: rank 1 \(pid {pids[1]}\) shut the group down")
            self.assertLess(when - float(store.get("shutdown/at")), NOTICE_S, msg)
            dist.destroy_process_group(h)
        self.all_reduce_checked(None, range(3), self.next_seed())


class KilledPeerTest(HealthCase):
    WORLD_SIZE = 3
    VICTIM = 2

    def _check_return_codes(self, fn, elapsed_time):
        # The victim kills itself on purpose; the others must finish their checks cleanly.
        codes = [p.exitcode for p in self.processes]
        self.assertEqual(codes[self.VICTIM], -signal.SIGKILL, codes)
        self.assertEqual([c for i, c in enumerate(codes) if i != self.VICTIM], [0] * (self.world_size - 1), codes)

    def loop_until_killed(self, group, members, store, tag):
        """all_reduce on `group` (its members: global ranks), checked, until the victim kills itself in the
        middle; returns the survivor's (message, seconds from the kill to the raise)."""
        me = members.index(self.rank)
        for i in range(10_000):
            if self.rank == self.VICTIM and i == 20:
                store.set(f"{tag}/killed_at", repr(time.monotonic()))
                os.kill(os.getpid(), signal.SIGKILL)
            x = torch.full((1000,), float(1000 * i + me + 1))
            try:
                dist.all_reduce(x, group=group)
            except RuntimeError as e:
                when = time.monotonic()
                self.assertEqual(i, 20, f"rank {self.rank}: raised in round {i}: {e}")
                return str(e), when - float(store.get(f"{tag}/killed_at"))
            if i == 0:
                self.assertEqual(len(health_threads()), 1, "one watcher thread per process while groups are watched")
            want = sum(1000 * i + k + 1 for k in range(len(members)))
            self.assertTrue(bool((x == want).all()), self.ctx("all_reduce in the loop", round=i))
        self.fail("the loop never raised")

    def check_clean_end(self, pids):
        start = time.monotonic()
        dist.destroy_process_group()
        self.assertLess(time.monotonic() - start, 5.0, "destroy_process_group after a peer died")
        self.assertEqual(shm_of(pids), [], "/dev/shm after the group ended")
        self.assertEqual(mapped_segments(), [], "the group's segments are still mapped")
        self.assertEqual(health_threads(), [], "the health watcher outlived every group")
        self.assertEqual(pidfds(), [], "pidfds outlived the groups")

    @spawned
    def test_a_killed_peer_is_named_within_seconds(self):
        store, pids = self.setup_pids("kill")
        msg, took = self.loop_until_killed(None, [0, 1, 2], store, "kill")
        self.assertLess(took, NOTICE_S, msg)
        self.assertRegex(msg, rf"purlin all_reduce \(seq \d+\) on rank {self.rank}: the group is unusable: rank 2 "
                              rf"\(pid {pids[2]}\) is gone: its process ended")
        self.raises(lambda: dist.all_reduce(torch.ones(4)), rf"on rank {self.rank}: the group is unusable after an "
                    rf"earlier failure: rank 2 \(pid {pids[2]}\) is gone")
        self.check_clean_end(pids)


class KilledPeerInSubgroupTest(KilledPeerTest):
    WORLD_SIZE = 4
    VICTIM = 3

    @spawned
    def test_a_killed_peer_is_named_within_seconds(self):
        store, pids = self.setup_pids("subkill")
        self.all_reduce_checked(None, range(4), self.next_seed())  # the default group watches rank 3 too
        sub = dist.new_group([1, 2, 3], backend="purlin", timeout=LONG)
        if self.rank == 0:  # not in the subgroup: pending in the default group, which rank 3 never joins either
            store.wait(["subkill/killed_at"])
            msg, when = self.raises(lambda: dist.all_reduce(torch.ones(4)), r"on rank 0: the group is unusable( after an "
                                    rf"earlier failure)?: rank 3 \(pid {pids[3]}\) is gone: its process ended")
            self.assertLess(when - float(store.get("subkill/killed_at")), NOTICE_S, msg)
        else:
            msg, took = self.loop_until_killed(sub, [1, 2, 3], store, "subkill")
            self.assertLess(took, NOTICE_S, msg)
            # group rank 2 of the subgroup is global rank 3
            self.assertRegex(msg, rf"on rank {self.rank - 1}: the group is unusable: group rank 2 \(global rank 3, "
                                  rf"pid {pids[3]}\) is gone: its process ended")
        self.check_clean_end(pids)


if __name__ == "__main__":
    run_tests()
