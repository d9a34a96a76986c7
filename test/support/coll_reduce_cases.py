"""Reduction collectives, as a mixin for mp_util.DistTestCase.

Each run_* method loops over dtype x reduce op x size inside one spawned test
(spawning costs seconds), checking every rank's result against the reference
it computes itself (NOTE [recomputable inputs] in mp_util).
"""
import torch
import torch.distributed as dist

from mp_util import (ALL_DTYPES, assert_exact, assert_reduced, make_input, make_op,
                     reduce_ops_for, reduce_poison)

COALESCED_SIZES = (7, 0, 1025, 1)


class ReduceCases:
    SIZES = (0, 1, 7, 1025, 65537)  # elements per rank (per output chunk for reduce_scatter)

    def _reduce_cases(self, family):
        for dtype in ALL_DTYPES:
            for op in reduce_ops_for(dtype):
                if not self.gloo_skip(family, dtype, op):
                    yield dtype, op

    def run_all_reduce(self):
        ws, rank = self.world_size, self.rank
        for dtype, op in self._reduce_cases("all_reduce"):
            for size in self.SIZES:
                seed = self.next_seed()
                inputs = self.rank_inputs(seed, (size,), dtype, op)
                t = inputs[rank].clone()
                dist.all_reduce(t, op=make_op(op))
                assert_reduced(t, inputs, op, self.ctx("all_reduce", dtype=dtype, op=op, size=size))

            seed = self.next_seed()
            sizes = COALESCED_SIZES[:-1] + (self.SIZES[-1],)
            per_part = [self.rank_inputs(seed, (n,), dtype, op, part=i)
                        for i, n in enumerate(sizes)]
            ts = [inputs[rank].clone() for inputs in per_part]
            dist.all_reduce_coalesced(ts, op=make_op(op))
            for t, inputs, n in zip(ts, per_part, sizes):
                assert_reduced(t, inputs, op,
                               self.ctx("all_reduce_coalesced", dtype=dtype, op=op, size=n))

        # Integer SUM wraps around like torch's own int8 arithmetic.
        seed = self.next_seed()
        inputs = [100 + make_input(seed, r, (1025,), torch.uint8, "sum").long() % 28
                  for r in range(ws)]  # 100..127
        t = inputs[rank].to(torch.int8)
        dist.all_reduce(t)
        wrapped = ((sum(inputs) + 128) % 256 - 128).to(torch.int8)
        assert_exact(t, wrapped, self.ctx("all_reduce int8 wrap-around"))

    def _scatter_inputs(self, seed, size, dtype, op, part=0):
        """This rank's full input (world * size) and every rank's chunk for this rank.

        Chunk c of rank r is its own random stream, so a rank builds only what
        it sends and what it must reduce, not every rank's full input.
        """
        ws, rank = self.world_size, self.rank
        def chunk(r, c):
            return make_input(seed, r * 64 + part * ws + c, (size,), dtype, op)
        return torch.cat([chunk(rank, c) for c in range(ws)]), [chunk(r, rank) for r in range(ws)]

    def run_reduce_scatter(self):
        ws, rank = self.world_size, self.rank
        for dtype, op in self._reduce_cases("reduce_scatter"):
            for size in self.SIZES:
                inp, mine = self._scatter_inputs(self.next_seed(), size, dtype, op)
                poison = reduce_poison(mine, op)
                ctx = self.ctx("", dtype=dtype, op=op, size=size)

                out = poison.clone()
                dist.reduce_scatter(out, [inp.narrow(0, i * size, size) for i in range(ws)],
                                    op=make_op(op))
                assert_reduced(out, mine, op, "reduce_scatter" + ctx)

                out = poison.clone()
                dist.reduce_scatter_tensor(out, inp.clone(), op=make_op(op))
                assert_reduced(out, mine, op, "reduce_scatter_tensor" + ctx)

                buf = inp.clone()  # in place: the output is this rank's chunk of the input
                out = buf.narrow(0, rank * size, size)
                dist.reduce_scatter_tensor(out, buf, op=make_op(op))
                assert_reduced(out, mine, op, "reduce_scatter_tensor in-place" + ctx)

                buf = inp.clone()  # in place on odd ranks only (NOTE [rank-invariant layout])
                out = buf.narrow(0, rank * size, size) if rank % 2 else poison.clone()
                dist.reduce_scatter_tensor(out, buf, op=make_op(op))
                assert_reduced(out, mine, op, "reduce_scatter_tensor in place on odd ranks" + ctx)
            self._reduce_scatter_coalesced(dtype, op)

    def _reduce_scatter_coalesced(self, dtype, op):
        seed = self.next_seed()
        sizes = COALESCED_SIZES[:-1] + (self.SIZES[-1],)
        parts = [self._scatter_inputs(seed, n, dtype, op, part=i) for i, n in enumerate(sizes)]
        outs = [reduce_poison(mine, op) for _, mine in parts]
        with dist._coalescing_manager():
            for out, (inp, _) in zip(outs, parts):
                dist.reduce_scatter_tensor(out, inp, op=make_op(op))
        for out, (_, mine), n in zip(outs, parts, sizes):
            assert_reduced(out, mine, op,
                           self.ctx("reduce_scatter_tensor coalesced", dtype=dtype, op=op, size=n))

    def run_reduce(self):
        rank = self.rank
        for i, (dtype, op) in enumerate(self._reduce_cases("reduce")):
            for j, size in enumerate(self.SIZES):
                root = (i + j) % self.world_size  # every root, across the cases
                seed = self.next_seed()
                inputs = self.rank_inputs(seed, (size,), dtype, op)
                t = inputs[rank].clone()
                dist.reduce(t, dst=root, op=make_op(op))
                if rank == root:
                    assert_reduced(t, inputs, op,
                                   self.ctx("reduce", dtype=dtype, op=op, size=size, root=root))
