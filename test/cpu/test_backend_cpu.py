"""The purlin backend as torch.distributed sees it, on CPU tensors:
registration strings, subgroups, custom collectives, fallbacks and their
counters, point-to-point, /dev/shm hygiene (also when a rank is killed),
the end of a group (destroy_process_group, abort) and
TORCH_DISTRIBUTED_DEBUG=DETAIL's collective-mismatch checker.
"""
import os
import signal
import threading
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.testing._internal.common_utils import run_tests

from mp_util import BACKEND, DistTestCase, make_input, spawned

import unittest

if BACKEND != "purlin":
    raise unittest.SkipTest("purlin-specific tests")

import torch_purlin  # noqa: E402


def shm_segments(prefix="purlin_"):
    return sorted(f for f in os.listdir("/dev/shm") if f.startswith(prefix))


class BackendCpuTest(DistTestCase):
    WORLD_SIZE = 3

    @spawned
    def test_custom_interleaved_all_gather(self):
        rows, row_len = 5, 3
        x = make_input(self.next_seed(), self.rank, (rows, row_len), torch.float32)
        out = torch.full((rows * self.world_size, row_len), float("nan"))
        torch_purlin.interleaved_all_gather(out, x)
        for r in range(self.world_size):
            xr = make_input(self._case, r, (rows, row_len), torch.float32)
            for i in range(rows):
                self.assertTrue(torch.equal(out[i * self.world_size + r], xr[i]))
        # The same collective as an explicit Spec, run through the public API.
        spec = torch_purlin.specs.interleaved_all_gather(self.world_size, rows, row_len)
        out2 = torch.full_like(out, float("nan"))
        torch_purlin.run_spec(spec, x, out2)
        self.assertTrue(torch.equal(out, out2))
        self.assertGreaterEqual(torch_purlin.counters()["custom"][0], 2)

    @spawned
    def test_group_with_settings_reads_them_and_restores_the_environment(self):
        os.environ["TORCH_PURLIN_FORCE_FALLBACK"] = "scatter"  # the process's own value, to come back
        os.environ.pop("TORCH_PURLIN_LOG", None)
        g = torch_purlin.group_with_settings({"TORCH_PURLIN_FORCE_FALLBACK": "broadcast", "TORCH_PURLIN_LOG": 0},
                                             ranks=[0, 2], device="cpu")
        self.assertEqual(os.environ["TORCH_PURLIN_FORCE_FALLBACK"], "scatter")
        self.assertNotIn("TORCH_PURLIN_LOG", os.environ)
        if self.rank != 1:
            x = make_input(self.next_seed(), 0, (33,), torch.float32)
            y = x.clone() if self.rank == 0 else torch.full_like(x, float("nan"))
            dist.broadcast(y, 0, group=g)
            self.assertTrue(torch.equal(y, x))
            c = torch_purlin.counters(g)
            self.assertEqual(c["broadcast"], (0, 1))  # the group's setting
            self.assertEqual(c["all_gather_into_tensor"], (1, 0))  # its first collective ran natively
        else:
            self.assertIs(g, dist.GroupMember.NON_GROUP_MEMBER)
            self.next_seed()
        del os.environ["TORCH_PURLIN_FORCE_FALLBACK"]
        with self.assertRaisesRegex(ValueError, "TORCH_PURLIN_FORCE_FALBACK"):
            torch_purlin.group_with_settings({"TORCH_PURLIN_FORCE_FALBACK": "all"})

    @spawned
    def test_batch_isend_irecv_delivers_and_leaves_point_to_point_usable(self):
        # NOTE [coalescing]: torch hands back only endCoalescing()'s Work for the batch.
        W, r = self.world_size, self.rank
        for n in (10, 100_003):
            seed = self.next_seed()
            mine = make_input(seed, r, (n,), torch.float32)
            frm = make_input(seed, (r - 1) % W, (n,), torch.float32)
            back = make_input(seed, (r + 1) % W, (n,), torch.float32)
            got, got_back = torch.full((n,), float("nan")), torch.full((n,), float("nan"))
            reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, mine, (r + 1) % W),
                                           dist.P2POp(dist.irecv, got, (r - 1) % W),
                                           dist.P2POp(dist.isend, mine, (r - 1) % W),
                                           dist.P2POp(dist.irecv, got_back, (r + 1) % W)])
            for q in reqs:
                q.wait()
            self.assertTrue(torch.equal(got, frm), f"n={n}: ring forward")
            self.assertTrue(torch.equal(got_back, back), f"n={n}: ring backward")
        plain = torch.full((7,), float("nan"))
        works = [dist.isend(torch.full((7,), float(r)), (r + 1) % W), dist.irecv(plain, (r - 1) % W)]
        for w in works:
            w.wait()
        self.assertTrue(torch.equal(plain, torch.full((7,), float((r - 1) % W))))
        self.assertGreaterEqual(torch_purlin.counters()["send"][1], 5)

    @spawned
    def test_coalescing_manager_works_cover_every_op(self):
        # An async block's one Work stands for all its ops (NOTE [coalescing]).
        xs = self.rank_inputs(self.next_seed(), (1000,), torch.float32)
        ts = [xs[self.rank].clone(), xs[self.rank].clone() * 2]
        with dist._coalescing_manager(async_ops=True) as cm:
            for t in ts:
                dist.all_reduce(t)
        cm.wait()
        want = torch.stack(xs).double().sum(0)
        torch.testing.assert_close(ts[0].double(), want, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(ts[1].double(), 2 * want, rtol=1e-5, atol=1e-5)

    @spawned
    def test_bitwise_reductions_and_sparse_tensors_fall_back_to_gloo(self):
        for op, fold in ((dist.ReduceOp.BAND, torch.bitwise_and), (dist.ReduceOp.BOR, torch.bitwise_or),
                         (dist.ReduceOp.BXOR, torch.bitwise_xor)):
            for dtype in (torch.int32, torch.uint8, torch.bool):
                xs = self.rank_inputs(self.next_seed(), (37,), dtype)
                t = xs[self.rank].clone()
                dist.all_reduce(t, op=op)
                want = xs[0]
                for x in xs[1:]:
                    want = fold(want, x)
                self.assertTrue(torch.equal(t, want), f"{op} {dtype}")
        self.assertEqual(torch_purlin.counters()["all_reduce"], (0, 9))
        idx = torch.tensor([[self.rank, 5]])
        val = torch.tensor([1.0 + self.rank, 2.0])
        s = torch.sparse_coo_tensor(idx, val, (8,))
        dist.all_reduce(s)
        want = torch.zeros(8)
        for q in range(self.world_size):
            want[q] += 1.0 + q
        want[5] += 2.0 * self.world_size
        self.assertTrue(torch.equal(s.to_dense(), want))
        self.assertEqual(torch_purlin.counters()["all_reduce"], (0, 10))

    @spawned
    def test_subgroup_and_mixed_backend_string(self):
        sub = dist.new_group([0, 2], backend="purlin")
        x = torch.arange(4, dtype=torch.float32) + self.rank
        if self.rank in (0, 2):
            dist.all_reduce(x, group=sub)
            self.assertTrue(torch.equal(x, torch.arange(4, dtype=torch.float32) * 2 + 2))
        mixed = dist.new_group(backend="cpu:purlin,cuda:gloo")
        y = torch.ones(3) * (self.rank + 1)
        dist.all_reduce(y, group=mixed)
        self.assertTrue(torch.equal(y, torch.full((3,), 6.0)))
        self.assertEqual(torch_purlin.counters(mixed)["all_reduce"], (1, 0))

    @spawned
    def test_point_to_point_uses_gloo_fallback_between_two_ranks(self):
        # Only ranks 0 and 1 take part: the lazily created gloo fallback must
        # not need rank 2.
        t = torch.arange(6, dtype=torch.int64) * (self.rank + 1)
        if self.rank == 0:
            dist.send(t, dst=1)
        elif self.rank == 1:
            got = torch.empty_like(t)
            dist.recv(got, src=0)
            self.assertTrue(torch.equal(got, torch.arange(6)))
            self.assertEqual(torch_purlin.counters()["recv"], (0, 1))
        dist.barrier()
        self.assertGreaterEqual(torch_purlin.counters()["barrier"][0], 1)

    @spawned
    def test_shm_is_unlinked_after_setup_and_destroy(self):
        dist.all_reduce(torch.ones(10))
        dist.barrier()
        self.assertEqual([s for s in shm_segments() if s.startswith(f"purlin_{os.getpid()}")], [])
        dist.destroy_process_group()
        self.assertEqual([s for s in shm_segments() if s.startswith(f"purlin_{os.getpid()}")], [])


class SplitGroupTest(DistTestCase):
    """NOTE [split groups]: the backend-level split that dist.split_group and DeviceMesh use on a
    device-bound group (their Python entry needs a GPU: test_gpu_device_mesh.py)."""
    WORLD_SIZE = 4

    @spawned
    def test_split_makes_working_subgroups_and_skips_non_members(self):
        from datetime import timedelta
        import copy
        world = dist.group.WORLD
        parent = world._get_backend(torch.device("cpu"))
        self.assertTrue(parent.supports_splitting)
        self.assertEqual(parent.options._timeout, self.PG_TIMEOUT)
        opts = copy.deepcopy(parent.options)  # what dist.split_group does first
        self.assertIsInstance(opts, torch_purlin._C.PurlinBackend.Options)
        mine = [0, 1] if self.rank < 2 else [2, 3]
        child = world.split_group(mine, timeout=timedelta(seconds=20), opts=opts, group_name=f"test_split_{mine[0]}")
        cpu, cuda = child._get_backend(torch.device("cpu")), child._get_backend(torch.device("cuda"))
        self.assertIs(cpu, cuda)  # one backend for both device types, as new_group() makes
        self.assertEqual((child.rank(), child.size()), (self.rank - mine[0], 2))
        self.assertEqual(cpu.options._timeout, timedelta(seconds=20))
        # A native collective: every rank recomputes its pair's random inputs.
        seed = self.next_seed()
        x = make_input(seed, self.rank, (1000,), torch.float64)
        want = sum(make_input(seed, r, (1000,), torch.float64) for r in mine)
        child.allreduce([x]).wait()
        self.assertTrue(torch.equal(x, want), self.ctx("all_reduce on a split group"))
        self.assertEqual(torch_purlin.counters(child)["all_reduce"], (1, 0))
        # Point-to-point runs on the split group's own gloo fallback (built from its own store).
        y = make_input(seed, 100 + self.rank, (7,), torch.int32)
        peer = mine[1] if self.rank == mine[0] else mine[0]
        got = torch.empty_like(y)
        if self.rank == mine[0]:
            child.send([y], peer - mine[0], 0).wait()
            child.recv([got], peer - mine[0], 1).wait()
        else:
            child.recv([got], peer - mine[0], 0).wait()
            child.send([y], peer - mine[0], 1).wait()
        self.assertTrue(torch.equal(got, make_input(seed, 100 + peer, (7,), torch.int32)))
        # Ranks 1 and 3 are in no part of this split: they get None and take no part in it.
        other = world.split_group([0, 2], group_name="test_split_even")
        if self.rank in (0, 2):
            z = make_input(seed, 200 + self.rank, (33,), torch.float32)
            other.allreduce([z]).wait()
            want = make_input(seed, 200, (33,), torch.float32) + make_input(seed, 202, (33,), torch.float32)
            self.assertTrue(torch.equal(z, want), self.ctx("all_reduce on the even split"))
        else:
            self.assertIsNone(other)
            parent.perform_nocolor_split(torch.device("cpu"))  # new_group's call on non-members: nothing to do
        # torch names a split group by hashing its ranks with the number of groups the process joined,
        # which now differs between ranks 0, 2 and 1, 3: the group must meet all the same.
        again = world.split_group(list(range(self.world_size)), group_name=f"differs_on_rank_{self.rank}")
        z = make_input(seed, 300 + self.rank, (129,), torch.float64)
        again.allreduce([z]).wait()
        want = sum(make_input(seed, 300 + r, (129,), torch.float64) for r in range(self.world_size))
        self.assertTrue(torch.equal(z, want), self.ctx("all_reduce on a split named differently per rank"))
        dist.barrier()


class GroupEndTest(DistTestCase):
    """NOTE [shutdown and abort] (csrc/backend/c10d/group_lifecycle.cc)."""
    WORLD_SIZE = 3

    @spawned
    def test_destroy_shuts_the_group_down_and_a_new_group_works(self):
        seed = self.next_seed()
        x = make_input(seed, self.rank, (513,), torch.float64)
        dist.all_reduce(x)
        self.assertTrue(torch.equal(x, sum(make_input(seed, r, (513,), torch.float64) for r in range(3))))
        b = torch.full((8,), 6 + self.rank, dtype=torch.int32)
        dist.all_reduce(b, op=dist.ReduceOp.BAND)  # runs on (and so creates) the gloo fallback
        self.assertTrue(torch.equal(b, torch.full((8,), 6 & 7 & 8, dtype=torch.int32)))
        pair = dist.new_group([0, 1])
        world = dist.group.WORLD
        backend = world._get_backend(torch.device("cpu"))
        dist.destroy_process_group()  # shuts down every group, the pair too
        peer = (self.rank + 1) % 3
        calls = {
            "all_reduce": lambda: world.allreduce([torch.ones(4)]),
            "barrier": lambda: world.barrier(),
            "broadcast": lambda: world.broadcast(torch.ones(4), 0),
            "send": lambda: world.send([torch.ones(2)], peer, 0),
            "recv": lambda: world.recv([torch.ones(2)], peer, 0),
            "custom": lambda: backend.run_spec(torch_purlin.specs.interleaved_all_gather(3, 2, 1), torch.ones(2),
                                               torch.empty(6)),
        }
        if self.rank < 2:
            calls["all_gather_into_tensor"] = lambda: pair._allgather_base(torch.empty(4), torch.ones(2))
        for op, call in calls.items():
            with self.assertRaisesRegex(RuntimeError, f"purlin {op} on rank {self.rank}: the group was shut down"):
                call()
        backend.shutdown()  # a second shutdown does nothing
        # The last reference to the backend is a Python object here: it must die with the GIL released
        # (NOTE [no GIL at the last reference]: gloo's destructor hung one run in two without).
        del world, backend, pair
        # A new group in the same processes (on a fresh store) runs natively, bit for bit.
        store = dist.FileStore(self.file_name + "_again", self.world_size)
        dist.init_process_group("purlin", store=store, rank=self.rank, world_size=3, timeout=self.PG_TIMEOUT)
        seed = self.next_seed()
        y = make_input(seed, self.rank, (1000,), torch.float64)
        dist.all_reduce(y)
        self.assertTrue(torch.equal(y, sum(make_input(seed, r, (1000,), torch.float64) for r in range(3))))
        self.assertEqual(torch_purlin.counters()["all_reduce"], (1, 0))


class GroupAbortTest(DistTestCase):
    """NOTE [shutdown and abort]: abort() ends a wait at once, from another thread."""
    WORLD_SIZE = 2
    PG_TIMEOUT = timedelta(seconds=120)

    @spawned
    def test_abort_ends_a_waiting_collective_and_closes_the_group(self):
        dist.all_reduce(torch.ones(64))  # the group's segments exist
        world = dist.group.WORLD
        store = dist.distributed_c10d._get_default_store()
        if self.rank == 0:
            # Rank 1 never joins this all_reduce; torch's abort, from a timer thread, must end the wait
            # long before the 120 s timeout, name what it waited for, and close the group.
            timer = threading.Timer(0.5, dist.distributed_c10d._abort_process_group)
            start = time.monotonic()
            timer.start()
            with self.assertRaisesRegex(RuntimeError, r"purlin all_reduce \(seq 2\) on rank 0: the group was aborted "
                                                      r"in phase '.+' waiting for rank 1"):
                world.allreduce([torch.ones(64)]).wait()
            self.assertLess(time.monotonic() - start, 20)
            timer.join()
            with self.assertRaisesRegex(RuntimeError, "purlin all_reduce on rank 0: the group was aborted"):
                world.allreduce([torch.ones(4)])
            store.set("rank0_done", "1")
        else:
            store.wait(["rank0_done"])


class ForcedFallbackTest(DistTestCase):
    WORLD_SIZE = 2

    @spawned
    def test_forced_fallback_is_counted_and_correct(self):
        os.environ["TORCH_PURLIN_FORCE_FALLBACK"] = "broadcast,cuda:all_reduce"  # all_reduce: CUDA tensors only
        g = dist.new_group(backend="purlin")
        x = torch.arange(8, dtype=torch.float32) if self.rank == 0 else torch.zeros(8)
        dist.broadcast(x, 0, group=g)
        self.assertTrue(torch.equal(x, torch.arange(8, dtype=torch.float32)))
        y = torch.ones(8)
        dist.all_reduce(y, group=g)
        c = torch_purlin.counters(g)
        self.assertEqual(c["broadcast"], (0, 1))
        self.assertEqual(c["all_reduce"], (1, 0))
        del os.environ["TORCH_PURLIN_FORCE_FALLBACK"]


class KilledRankTest(DistTestCase):
    WORLD_SIZE = 2

    def _check_return_codes(self, fn, elapsed_time):
        # Rank 1 kills itself on purpose; rank 0 must finish its checks cleanly.
        self.assertEqual(self.processes[1].exitcode, -signal.SIGKILL)
        self.assertEqual(self.processes[0].exitcode, 0)

    @spawned
    def test_no_segments_left_when_a_rank_is_killed(self):
        dist.all_reduce(torch.ones(4))
        if self.rank == 1:
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(0.5)
        # Rank 0 created the name prefix from its pid; rank 1's segment too is gone.
        self.assertEqual([s for s in shm_segments() if s.startswith(f"purlin_{os.getpid()}")], [])


class DebugDetailTest(DistTestCase):
    WORLD_SIZE = 2
    DEBUG_DETAIL = True

    # torch_purlin's own API (counters, run_spec, interleaved_all_gather) finds purlin behind the wrapper.
    test_custom_interleaved_all_gather = BackendCpuTest.test_custom_interleaved_all_gather

    @spawned
    def test_purlin_apis_find_purlin_behind_torchs_wrapper(self):
        wrapper = dist.group.WORLD._get_backend(torch.device("cpu"))
        self.assertEqual(type(wrapper).__name__, "_ProcessGroupWrapper")
        backend = torch_purlin.get_purlin_backend()
        self.assertIsInstance(backend, torch_purlin._C.PurlinBackend)
        self.assertIs(torch_purlin.registration.unwrap(wrapper), backend)
        inputs = [make_input(self.next_seed(), r, (1025,), torch.float64) for r in range(self.world_size)]
        x = inputs[self.rank].clone()
        dist.all_reduce(x)
        self.assertTrue(torch.equal(x, inputs[0] + inputs[1]))  # two ranks: one addition, exact
        self.assertEqual(torch_purlin.counters()["all_reduce"], (1, 0))  # torch's checks ran on its helper group
        dist.barrier()

    @spawned
    def test_detail_mode_reports_mismatched_collectives(self):
        x = torch.ones(4)
        dist.all_reduce(x)
        self.assertTrue(torch.equal(x, torch.full((4,), 2.0)))
        # torch's wrapper (ProcessGroupWrapper, gloo-based) checks fingerprints
        # before purlin runs anything.
        with self.assertRaisesRegex(RuntimeError, "Detected mismatch between collectives"):
            if self.rank == 0:
                dist.all_reduce(x)
            else:
                dist.broadcast(x, 0)


if __name__ == "__main__":
    run_tests()
