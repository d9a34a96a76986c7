"""What purlin hands its gloo fallback, and what it refuses (skipped for other backends).

NOTE [fallback arguments] (csrc/backend/fallback/staged_backend.h): a non-contiguous tensor of an op
that runs on gloo is staged through a contiguous one (copied back for outputs), so strided views
give the right result and nothing outside them is written. NOTE [coalescing]: an error inside a
coalescing block (batch_isend_irecv, _coalescing_manager) is raised at the block's end, after torch
cleared its block, so the group stays usable. CPU tensors that neither purlin nor gloo takes are
refused on every rank with the op, the rank and the dtype; in a subgroup, messages that name ranks
by their group numbers say which global ranks they are.

    python -m pytest test/cpu/test_fallback_cpu.py -q
"""
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


def strided_base(seed, rank, rows, cols, dtype):
    """A (rows, 2 * cols) tensor whose even columns are the view under test."""
    return make_input(seed, rank, (rows, 2 * cols), dtype)


class FallbackArgumentsTest(DistTestCase):
    WORLD_SIZE = 2
    PG_TIMEOUT = timedelta(seconds=30)

    def assert_group_works(self, group=None):
        """A synchronous and an asynchronous all_reduce give the right sum (not this rank's own input)."""
        seed = self.next_seed()
        x = make_input(seed, self.rank, (1000,), torch.float64)
        want = sum(make_input(seed, r, (1000,), torch.float64) for r in range(self.world_size))
        dist.all_reduce(x, group=group)
        self.assertTrue(torch.equal(x, want), self.ctx("synchronous all_reduce after"))
        y = make_input(seed, 10 + self.rank, (33,), torch.float64)
        dist.all_reduce(y, group=group, async_op=True).wait()
        self.assertTrue(torch.equal(y, sum(make_input(seed, 10 + r, (33,), torch.float64)
                                           for r in range(self.world_size))), self.ctx("async all_reduce after"))

    @spawned
    def test_batch_isend_irecv_with_non_contiguous_tensors(self):
        # gloo refused the transposed tensor ("input tensor has to be contiguous") inside torch's
        # coalescing block; the group then silently returned each rank's own input.
        W, r = self.world_size, self.rank
        seed = self.next_seed()
        send = make_input(seed, r, (5, 7), torch.float32).t()  # (7, 5), not contiguous
        base = torch.full((7, 10), -1.0)
        recv = base[:, ::2]  # (7, 5) strided view of base
        reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, send, (r + 1) % W),
                                       dist.P2POp(dist.irecv, recv, (r - 1) % W)])
        for q in reqs:
            q.wait()
        want = make_input(seed, (r - 1) % W, (5, 7), torch.float32).t()
        self.assertTrue(torch.equal(recv, want), self.ctx("received into a strided view"))
        self.assertTrue(bool((base[:, 1::2] == -1.0).all()), self.ctx("written outside the view"))
        self.assert_group_works()
        # A plain irecv into a strided view: the Work copies in at wait().
        base2 = torch.zeros(4, 6)
        view = base2[:, 1::2]
        works = [dist.isend(torch.arange(12.0).reshape(4, 3) + r, (r + 1) % W), dist.irecv(view, (r - 1) % W)]
        for w in works:
            w.wait()
        self.assertTrue(torch.equal(view, torch.arange(12.0).reshape(4, 3) + (r - 1) % W))
        self.assertTrue(bool((base2[:, ::2] == 0).all()))

    @spawned
    def test_error_inside_a_coalesced_block_leaves_the_group_usable(self):
        # A native error inside the block (ranks' broadcast sizes differ) is raised at the block's end
        # on every rank; torch's block state is then clear and later collectives run.
        cpu = torch.device("cpu")
        for async_ops in (True, False):
            t = torch.ones(10 + self.rank)
            start = time.monotonic()
            with self.assertRaisesRegex(RuntimeError, rf"purlin broadcast on rank {self.rank}: .*element"):
                with dist._coalescing_manager(device=cpu, async_ops=async_ops):
                    dist.broadcast(t, 0)
            self.assertLess(time.monotonic() - start, 10)
            self.assertNotIn(dist.group.WORLD, dist.distributed_c10d._world.pg_coalesce_state)
            self.assert_group_works()
        # A block of several ops after it covers all of them.
        seed = self.next_seed()
        xs = [make_input(seed, r, (100,), torch.float32) for r in range(self.world_size)]
        b = xs[self.rank].clone()
        with dist._coalescing_manager(device=cpu, async_ops=True) as cm:
            dist.broadcast(b, 1)
        cm.wait()
        self.assertTrue(torch.equal(b, xs[1]))

    @spawned
    def test_bitwise_all_reduce_of_strided_views(self):
        # gloo ignored strides: int8 BXOR of a strided view gave wrong data and overwrote the
        # elements between the view's columns.
        folds = {dist.ReduceOp.BAND: torch.bitwise_and, dist.ReduceOp.BOR: torch.bitwise_or,
                 dist.ReduceOp.BXOR: torch.bitwise_xor}
        for op, fold in folds.items():
            for dtype in (torch.int8, torch.int32, torch.bool):
                seed = self.next_seed()
                bases = [strided_base(seed, r, 15, 11, dtype) for r in range(self.world_size)]
                mine = bases[self.rank].clone()
                keep = mine.clone()
                view = mine[:, ::2]
                dist.all_reduce(view, op=op)
                want = bases[0][:, ::2]
                for b in bases[1:]:
                    want = fold(want, b[:, ::2])
                self.assertTrue(torch.equal(view, want), self.ctx("bitwise view", op=op, dtype=dtype))
                self.assertTrue(torch.equal(mine[:, 1::2], keep[:, 1::2]),
                                self.ctx("written outside the view", op=op, dtype=dtype))
        self.assertEqual(torch_purlin.counters()["all_reduce"][0], 0)

    @spawned
    def test_forced_fallback_ops_take_strided_tensors(self):
        g = torch_purlin.group_with_settings({"TORCH_PURLIN_FORCE_FALLBACK": "cpu:all"}, device="cpu")
        W, r = self.world_size, self.rank
        seed = self.next_seed()
        # all_reduce of a transposed tensor
        xs = [make_input(seed, q, (6, 9), torch.float64) for q in range(W)]
        t = xs[r].clone().t()
        dist.all_reduce(t, group=g)
        self.assertTrue(torch.equal(t, sum(xs).t()), self.ctx("all_reduce of a transposed tensor"))
        # broadcast into a strided view
        base = torch.full((8, 6), -3.0)
        view = base[:, ::3]
        if r == 1:
            view.copy_(make_input(seed, 50, (8, 2), torch.float64).float())
        dist.broadcast(view, 1, group=g)
        self.assertTrue(torch.equal(view, make_input(seed, 50, (8, 2), torch.float64).float()))
        self.assertTrue(bool((base[:, 1::3] == -3.0).all()) and bool((base[:, 2::3] == -3.0).all()))
        # all_gather into strided outputs, from a strided input
        src = make_input(seed, 100 + r, (4, 10), torch.float32)[:, ::2]
        outs_base = [torch.full((4, 10), 7.0) for _ in range(W)]
        outs = [o[:, 1::2] for o in outs_base]
        dist.all_gather(outs, src, group=g)
        for q in range(W):
            self.assertTrue(torch.equal(outs[q], make_input(seed, 100 + q, (4, 10), torch.float32)[:, ::2]))
            self.assertTrue(bool((outs_base[q][:, ::2] == 7.0).all()))
        # all_gather_into_tensor from a non-contiguous input into a flat output (gloo wants (W * 4, 3))
        inp = make_input(seed, 200 + r, (3, 4), torch.float32).t()
        out = torch.empty(W * 12)
        dist.all_gather_into_tensor(out, inp, group=g)
        want = torch.cat([make_input(seed, 200 + q, (3, 4), torch.float32).t().reshape(-1) for q in range(W)])
        self.assertTrue(torch.equal(out, want))
        c = torch_purlin.counters(g)
        for op in ("all_reduce", "broadcast", "all_gather", "all_gather_into_tensor"):
            self.assertEqual(c[op][0], 0, op)
            self.assertGreaterEqual(c[op][1], 1, op)

    @spawned
    def test_unsupported_dtypes_are_refused_on_every_rank(self):
        cases = [("all_reduce", lambda: dist.all_reduce(torch.ones(5, dtype=torch.float8_e4m3fn)), "Float8_e4m3fn"),
                 ("all_reduce", lambda: dist.all_reduce(torch.ones(5, dtype=torch.uint16)), "UInt16"),
                 ("all_reduce", lambda: dist.all_reduce(torch.ones(5, dtype=torch.uint32)), "UInt32"),
                 ("broadcast", lambda: dist.broadcast(torch.ones(5, dtype=torch.uint32), 0), "UInt32"),
                 ("all_gather_into_tensor",
                  lambda: dist.all_gather_into_tensor(torch.empty(10, dtype=torch.uint16), torch.ones(5, dtype=torch.uint16)),
                  "UInt16"),
                 ("all_reduce", lambda: dist.all_reduce(torch.ones(5, dtype=torch.int16), op=dist.ReduceOp.BAND),
                  r"BAND on int16"),
                 ("all_reduce", lambda: dist.all_reduce(torch.ones(5), op=dist.ReduceOp.BXOR), r"BXOR on float32")]
        for op, call, what in cases:
            start = time.monotonic()
            with self.assertRaises(RuntimeError) as cm:
                call()
            msg = str(cm.exception)
            self.assertLess(time.monotonic() - start, 10, msg)
            for pattern in (rf"purlin {op} on rank {self.rank}:", what):
                self.assertRegex(msg, pattern)
            self.assertNotIn("Invalid scalar type", msg)
            self.assert_group_works()


class SubgroupMessagesTest(DistTestCase):
    """Messages in a subgroup name group ranks and say which global ranks they are."""
    WORLD_SIZE = 3
    PG_TIMEOUT = timedelta(seconds=30)

    @property
    def destroy_pg_upon_exit(self):
        return False  # the subgroup is broken by design

    @spawned
    def test_subgroup_errors_name_global_ranks(self):
        sub = dist.new_group([0, 2], timeout=timedelta(seconds=2))
        store = dist.distributed_c10d._get_default_store()
        if self.rank == 1:
            store.wait(["subgroup_messages_done"], timedelta(seconds=60))
            return
        t = torch.ones(64)
        dist.all_reduce(t, group=sub)  # the subgroup is up
        # An argument error: the ranks' sizes differ.
        with self.assertRaises(RuntimeError) as cm:
            dist.all_reduce(torch.ones(7 + self.rank), group=sub)
        self.assertRegex(str(cm.exception), r"rank 0 = global rank 0, rank 1 = global rank 2")
        # Global rank 2 (group rank 1) does not come: rank 0's wait names it both ways.
        if self.rank == 0:
            start = time.monotonic()
            with self.assertRaises(RuntimeError) as cm:
                dist.all_reduce(t, group=sub)
            msg = str(cm.exception)
            self.assertLess(time.monotonic() - start, 10, msg)
            for pattern in (r"timed out", r"waiting for rank 1\b", r"rank 1 = global rank 2"):
                self.assertRegex(msg, pattern)
            store.set("subgroup_messages_done", "1")
        else:
            store.wait(["subgroup_messages_done"], timedelta(seconds=60))


if __name__ == "__main__":
    run_tests()
