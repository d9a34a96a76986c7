"""Multi-process CPU correctness tests of every collective, for world sizes 2, 3, 4.

    python -m pytest test/cpu/test_collectives_cpu.py -q          # backend purlin
    PURLIN_TEST_BACKEND=gloo python -m pytest test/cpu/test_collectives_cpu.py -q -rA

A few spawned tests per world size, each running several op families that
loop over dtype x reduce op x size (coll_reduce_cases.py, coll_copy_cases.py). The
SmallWorkspace class shrinks the backend's per-rank shared workspace
(TORCH_PURLIN_CPU_WORKSPACE_BYTES) so that large sizes are pipelined in chunks.
"""
import time

import torch
import torch.distributed as dist
from torch.testing._internal.common_utils import run_tests

from coll_copy_cases import CopyCases
from coll_reduce_cases import ReduceCases
from mp_util import DistTestCase, assert_exact, assert_reduced, make_input, spawned

LAYOUT_DTYPES = (torch.float32, torch.bfloat16, torch.int64, torch.bool, torch.complex64)


class LayoutAsyncCases:
    """Non-contiguous tensors, async work handles and barrier."""

    def run_layouts(self):
        ws, rank = self.world_size, self.rank
        for dtype in LAYOUT_DTYPES:
            if self.gloo_skip("layouts", dtype):
                continue
            seed = self.next_seed()
            ctx = self.ctx("", dtype=dtype)

            bases = self.rank_inputs(seed, (5, 9), dtype, "sum")
            t = bases[rank].clone().t()
            dist.all_reduce(t)
            assert_reduced(t, [b.t() for b in bases], "sum", "all_reduce transposed" + ctx)
            if self.gloo_skip("strided views"):
                continue

            bases = self.rank_inputs(seed, (2 * 1025,), dtype, "sum", part=1)
            buf = bases[rank].clone()
            dist.all_reduce(buf[::2])
            assert_reduced(buf[::2], [b[::2] for b in bases], "sum", "all_reduce strided" + ctx)
            assert_exact(buf[1::2], bases[rank][1::2], "all_reduce strided, gaps" + ctx)

            root = seed % ws
            src = self.rank_inputs(seed, (1025,), dtype, part=2)[root]
            buf = make_input(seed, 500 + rank, (1025, 2), dtype)
            keep = buf.clone()
            if rank == root:
                buf[:, 0].copy_(src)
            dist.broadcast(buf[:, 0], src=root)
            assert_exact(buf[:, 0], src, "broadcast strided" + ctx)
            assert_exact(buf[:, 1], keep[:, 1], "broadcast strided, gaps" + ctx)

            inputs = [b[::2] for b in self.rank_inputs(seed, (2 * 1025,), dtype, part=3)]
            buf = make_input(seed, 600 + rank, (ws, 1025, 2), dtype)
            keep = buf.clone()
            dist.all_gather([buf[r, :, 0] for r in range(ws)], inputs[rank])
            for r in range(ws):
                assert_exact(buf[r, :, 0], inputs[r], f"all_gather strided slot {r}" + ctx)
            assert_exact(buf[:, :, 1], keep[:, :, 1], "all_gather strided, gaps" + ctx)

    def _finish(self, work, output, op, in_place=False):
        """Wait on an async handle; its future must carry the output tensor."""
        ctx = self.ctx(f"async {op}")
        self.assertTrue(work.wait(), ctx)
        if self.gloo_skip(f"async {op}: is_completed() and future"):
            return
        self.assertTrue(work.is_completed(), ctx)
        value = work.get_future().wait()
        self.assertIsInstance(value, list, ctx)
        if in_place or not self.gloo_skip("future value of out-of-place ops"):
            assert_exact(value[0], output, ctx + " (future value)")

    def run_async(self):
        ws, rank = self.world_size, self.rank
        seed = self.next_seed()
        sizes = (1, 7, 1025, 65537)
        per_part = [self.rank_inputs(seed, (n,), torch.float32, part=i)
                    for i, n in enumerate(sizes)]
        ts = [inputs[rank].clone() for inputs in per_part]
        works = [dist.all_reduce(t, async_op=True) for t in ts]
        for work, t, inputs in reversed(list(zip(works, ts, per_part))):  # waited out of order
            ctx = self.ctx("async all_reduce", size=t.numel())
            self._finish(work, t, "all_reduce", in_place=True)
            assert_reduced(t, inputs, "sum", ctx)

        inputs = self.rank_inputs(self.next_seed(), (1025,), torch.int32)
        out = torch.empty(ws * 1025, dtype=torch.int32)
        work = dist.all_gather_into_tensor(out, inputs[rank], async_op=True)
        self._finish(work, out, "all_gather_into_tensor")
        assert_exact(out, torch.cat(inputs), self.ctx("async all_gather_into_tensor"))

        inputs = self.rank_inputs(self.next_seed(), (ws * 1025,), torch.float64)
        out = torch.empty(1025, dtype=torch.float64)
        work = dist.reduce_scatter_tensor(out, inputs[rank], async_op=True)
        self._finish(work, out, "reduce_scatter_tensor")
        assert_reduced(out, [x[rank * 1025:(rank + 1) * 1025] for x in inputs], "sum",
                       self.ctx("async reduce_scatter_tensor"))

        inputs = self.rank_inputs(self.next_seed(), (1025,), torch.float16)
        t = inputs[rank].clone()
        work = dist.broadcast(t, src=ws - 1, async_op=True)
        self._finish(work, t, "broadcast", in_place=True)
        assert_exact(t, inputs[ws - 1], self.ctx("async broadcast"))

        inputs = self.rank_inputs(self.next_seed(), (ws * 7,), torch.int64)
        out = torch.empty(ws * 7, dtype=torch.int64)
        work = dist.all_to_all_single(out, inputs[rank], async_op=True)
        self._finish(work, out, "all_to_all_single")
        assert_exact(out, torch.cat([x[rank * 7:(rank + 1) * 7] for x in inputs]),
                     self.ctx("async all_to_all_single"))

    def run_barrier(self):
        ws, rank = self.world_size, self.rank
        store = dist.distributed_c10d._get_default_store()
        for rnd in range(ws):
            if rank == rnd:  # the late rank: nobody may leave the barrier before it arrives
                time.sleep(0.2)
            store.set(f"barrier/{rnd}/{rank}", "1")
            dist.barrier()
            keys = [f"barrier/{rnd}/{r}" for r in range(ws)]
            self.assertTrue(store.check(keys), self.ctx("barrier", late_rank=rnd))


class CollectiveTests(ReduceCases, CopyCases, LayoutAsyncCases):
    """The test methods; concrete classes below pick world size and workspace.

    Three spawns per world size: starting a rank (importing torch's test
    harness) costs ~3 CPU-seconds, more than most families' cases together.
    """

    @spawned
    def test_reductions(self):
        self.run_all_reduce()
        self.run_reduce_scatter()
        self.run_reduce()

    @spawned
    def test_all_gather_all_to_all(self):
        self.run_all_gather()
        self.run_all_to_all()

    @spawned
    def test_rooted_layouts_async_barrier(self):
        self.run_rooted_copies()
        self.run_layouts()
        self.run_async()
        self.run_barrier()


class TestCollectivesWorld2(CollectiveTests, DistTestCase):
    WORLD_SIZE = 2


class TestCollectivesWorld3(CollectiveTests, DistTestCase):
    WORLD_SIZE = 3


class TestCollectivesWorld4(CollectiveTests, DistTestCase):
    WORLD_SIZE = 4


class TestCollectivesWorld8(CollectiveTests, DistTestCase):
    """8 ranks (more than the CI machine's cores): the CPU Atom at the largest
    world size the GPU kinds have; a smaller size set keeps it quick."""

    WORLD_SIZE = 8
    SIZES = (1, 7, 1025)


class TestCollectivesDebugDetail(CollectiveTests, DistTestCase):
    """TORCH_DISTRIBUTED_DEBUG=DETAIL: torch wraps purlin in its ProcessGroupWrapper, which checks every
    call's op, shapes and dtypes on a gloo helper group first; every collective still runs on purlin."""

    WORLD_SIZE = 3
    DEBUG_DETAIL = True
    SIZES = (0, 7, 1025)


class TestCollectivesSmallWorkspace(CollectiveTests, DistTestCase):
    """64 KiB per-rank workspace: every size from 16385 elements up is pipelined."""

    WORLD_SIZE = 3
    WORKSPACE_BYTES = 65536
    SIZES = (1, 4097, 16385, 65537)


if __name__ == "__main__":
    run_tests()
