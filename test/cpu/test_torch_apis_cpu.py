"""torch's higher-level distributed APIs over the backend under test, on CPU tensors at world 4:
object collectives, functional collectives (what DTensor and torch.compile call), DTensor on
1-D and 2-D DeviceMeshes, tensor parallelism and a distributed checkpoint round trip, each
checked against references every rank computes itself. Inputs are random integers held in
float32, so every sum is exact whatever the reduction order and results compare bit for bit.
The CUDA counterpart (device-bound group, split groups): test/gpu/test_gpu_device_mesh.py.

    python -m pytest test/cpu/test_torch_apis_cpu.py -q
    PURLIN_TEST_BACKEND=gloo python -m pytest test/cpu/test_torch_apis_cpu.py -q   # the tests themselves
"""
import os
import shutil

import torch
import torch.distributed as dist
from torch.testing._internal.common_utils import run_tests

from mp_util import BACKEND, DistTestCase, int_floats, mesh_redistribution_cases, spawned, tensor_parallel_step


class TorchApisCpuTest(DistTestCase):
    WORLD_SIZE = 4

    def assert_same(self, got, want, what):
        self.assertTrue(got.shape == want.shape and torch.equal(got, want), self.ctx(what))

    @spawned
    def test_object_and_functional_collectives(self):
        import torch.distributed._functional_collectives as funcol
        W, r = self.world_size, self.rank
        objs = [None] * W
        dist.all_gather_object(objs, {"rank": r, "pad": "x" * (37 * r)})
        self.assertEqual([(o["rank"], len(o["pad"])) for o in objs], [(q, 37 * q) for q in range(W)])
        lst = [("from", r, list(range(r * 11)))]
        dist.broadcast_object_list(lst, src=W - 1)
        self.assertEqual(lst[0], ("from", W - 1, list(range((W - 1) * 11))))
        got = [None] * W if r == 0 else None
        dist.gather_object(("g", r), got, dst=0)
        if r == 0:
            self.assertEqual(got, [("g", q) for q in range(W)])
        one = [None]
        dist.scatter_object_list(one, [{"to": q} for q in range(W)] if r == 2 else None, src=2)
        self.assertEqual(one[0], {"to": r})

        group = dist.group.WORLD
        seed = 100 * self.next_seed()
        mine = int_floats(seed + r, (1000,))
        every = [int_floats(seed + q, (1000,)) for q in range(W)]
        self.assert_same(funcol.all_reduce(mine, "sum", group), sum(every), "funcol.all_reduce")
        self.assert_same(funcol.all_gather_tensor(mine, 0, group), torch.cat(every), "funcol.all_gather_tensor")
        rows = [int_floats(seed + 10 + q, (W * 3, 5)) for q in range(W)]
        self.assert_same(funcol.reduce_scatter_tensor(rows[r], "sum", 0, group), sum(rows)[3 * r:3 * r + 3],
                         "funcol.reduce_scatter_tensor")
        self.assert_same(funcol.all_to_all_single(rows[r], None, None, group),
                         torch.cat([rows[q][3 * r:3 * r + 3] for q in range(W)]), "funcol.all_to_all_single")
        self.assert_same(funcol.broadcast(mine, 1, group), every[1], "funcol.broadcast")
        maxed = funcol.all_reduce_coalesced([mine, rows[r]], "max", group)
        self.assert_same(maxed[0], torch.stack(every).amax(0), "funcol.all_reduce_coalesced max [0]")
        self.assert_same(maxed[1], torch.stack(rows).amax(0), "funcol.all_reduce_coalesced max [1]")
        inplace = mine.clone()
        torch.ops._c10d_functional.all_reduce_(inplace, "sum", group.group_name)
        torch.ops._c10d_functional.wait_tensor(inplace)
        self.assert_same(inplace, sum(every), "_c10d_functional.all_reduce_ (in place)")
        if BACKEND == "purlin":  # and every one of them ran on purlin's own datapath
            import torch_purlin
            c = torch_purlin.counters()
            self.assertEqual({op: n for op, (_, n) in c.items() if n}, {}, self.ctx(f"fallbacks: {c}"))
            for op in ("all_gather", "broadcast", "gather", "scatter", "all_reduce", "all_reduce_coalesced",
                       "all_gather_into_tensor_coalesced", "reduce_scatter_tensor_coalesced", "all_to_all_single"):
                self.assertGreater(c.get(op, (0, 0))[0], 0, self.ctx(f"{op} never ran natively: {c}"))

    @spawned
    def test_dtensor_on_meshes_and_tensor_parallelism(self):
        from torch.distributed.device_mesh import init_device_mesh
        W = self.world_size
        seed = 100 * self.next_seed()
        mesh = init_device_mesh("cpu", (2, W // 2), mesh_dim_names=("dp", "tp"))
        for what, got, want in mesh_redistribution_cases(mesh, self.rank, W, seed):
            self.assert_same(got, want, what)
        for what, got, want in tensor_parallel_step(init_device_mesh("cpu", (W,)), W, seed):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, msg=lambda m, w=what: self.ctx(f"{w}: {m}"))

    @spawned
    def test_distributed_checkpoint_round_trip(self):
        import torch.distributed.checkpoint as dcp
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import Shard, distribute_tensor
        path = f"{self.file_name}_dcp"  # the FileStore's path: the same on every rank, new per test
        mesh = init_device_mesh("cpu", (self.world_size,))
        seed = 100 * self.next_seed()
        full = int_floats(seed, (4 * self.world_size, 6))
        dcp.save({"w": distribute_tensor(full, mesh, [Shard(0)]), "b": int_floats(seed + 1, (5,)), "step": 7},
                 checkpoint_id=path)
        back = {"w": distribute_tensor(torch.zeros_like(full), mesh, [Shard(1)]), "b": torch.zeros(5), "step": 0}
        dcp.load(back, checkpoint_id=path)
        self.assert_same(back["w"].full_tensor(), full, "checkpointed DTensor, resharded")
        self.assert_same(back["b"], int_floats(seed + 1, (5,)), "checkpointed tensor")
        self.assertEqual(back["step"], 7)
        dist.barrier()
        if self.rank == 0:
            shutil.rmtree(path, ignore_errors=True)


class TorchApisCpuDebugDetailTest(TorchApisCpuTest):
    """The same under TORCH_DISTRIBUTED_DEBUG=DETAIL: torch's ProcessGroupWrapper around the backend."""

    DEBUG_DETAIL = True


if __name__ == "__main__":
    run_tests()
