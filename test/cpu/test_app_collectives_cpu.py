"""The application collectives (torch_purlin.all_to_all_dims, all_gather_v, reduce_scatter_v,
moe_dispatch / moe_combine) against the composed torch reference every rank computes from
every rank's recomputable inputs (chunk + cat, cat, narrow of the reduction, the expert-major
permute): random shapes, dims, dtypes, strided inputs and outputs, uneven counts with zeros;
async, inside a coalescing block and under torch.compile (the registered purlin:: ops).
Copies compare bit for bit; reductions use integer-valued data, so they do too.

    python -m pytest test/cpu/test_app_collectives_cpu.py -q
    PURLIN_TEST_APP_CASES=40 python -m pytest test/cpu/test_app_collectives_cpu.py -q   # a longer profile
"""
import os
import random
import re

import torch
import torch.distributed as dist
from torch.testing._internal.common_utils import run_tests

from mp_util import BACKEND, DistTestCase, assert_exact, make_input, poisoned_like, spawned

CASES = int(os.environ.get("PURLIN_TEST_APP_CASES", "6"))
DTYPES = (torch.float32, torch.bfloat16, torch.float64, torch.int64, torch.int8, torch.float16)


def strided_like(values, rng):
    """`values` in a tensor of a random layout: contiguous, padded rows (a slice of a
    wider tensor) or a permuted storage order."""
    kind = rng.choice(("contiguous", "padded", "permuted")) if values.dim() else "contiguous"
    if kind == "padded":
        wide = list(values.shape)
        wide[-1] += rng.randint(1, 3)
        base = torch.zeros(wide, dtype=values.dtype)
        out = base[..., :values.shape[-1]]
    elif kind == "permuted":
        order = list(range(values.dim()))
        rng.shuffle(order)
        inv = [order.index(d) for d in range(values.dim())]
        out = torch.zeros([values.shape[d] for d in order], dtype=values.dtype).permute(inv)
    else:
        out = torch.zeros_like(values)
    out.copy_(values)
    return out


class AppCollectiveCases:
    def case_rng(self):
        return random.Random(self.next_seed() * 7919 + self.world_size)

    # Two spawns per world (process start-up dominates on a small machine): each runs several checks.
    @spawned
    def test_all_to_all_dims_all_gather_v_reduce_scatter_v(self):
        self.check_all_to_all_dims()
        self.check_v_collectives()
        self.check_custom_in_place()

    @spawned
    def test_moe_coalescing_compile_and_errors(self):
        self.check_moe()
        self.check_coalescing_compile_and_errors()

    def check_all_to_all_dims(self):
        import torch_purlin
        W, me = self.world_size, self.rank
        for _ in range(CASES):
            case = self._case + 1
            rng = self.case_rng()
            n = rng.randint(1, 4)
            s, g = rng.randrange(n), rng.randrange(n)
            X = [rng.randint(1, 5) for _ in range(n)]
            X[s] *= W
            dtype = rng.choice(DTYPES)
            xs = [make_input(case, r, X, dtype) for r in range(W)]
            want = torch.cat([x.chunk(W, s)[me] for x in xs], g)
            inp = strided_like(xs[me], rng)
            out = strided_like(poisoned_like(want), rng)
            what = self.ctx("all_to_all_dims", X=X, s=s, g=g, dtype=dtype, strides=(inp.stride(), out.stride()))
            if rng.random() < 0.5:
                torch_purlin.all_to_all_dims(out, inp, s, g)
            else:
                torch_purlin.all_to_all_dims(out, inp, s, g, async_op=True).wait()
            assert_exact(out, want, what)
            assert_exact(inp, xs[me], what + " (input untouched)")
            # And back: the inverse direction restores the input.
            back = torch.full_like(xs[me], 0)
            torch_purlin.all_to_all_dims(back, out, g, s)
            assert_exact(back, xs[me], what + " (inverse)")

    def check_v_collectives(self):
        import torch_purlin
        W, me = self.world_size, self.rank
        for _ in range(CASES):
            case = self._case + 1
            rng = self.case_rng()
            n = rng.randint(1, 3)
            d = rng.randrange(n)
            shape = [rng.randint(1, 4) for _ in range(n)]
            counts = [rng.choice((0, 1, 2, 5)) for _ in range(W)]
            counts[rng.randrange(W)] = 0
            dtype = rng.choice(DTYPES)
            pieces = []
            for r in range(W):
                sz = list(shape)
                sz[d] = counts[r]
                pieces.append(make_input(case, r, sz, dtype))
            want = torch.cat(pieces, d)
            inp = strided_like(pieces[me], rng)
            out = strided_like(poisoned_like(want), rng)
            what = self.ctx("all_gather_v", counts=counts, dim=d, dtype=dtype)
            torch_purlin.all_gather_v(out, inp, counts, dim=d)
            assert_exact(out, want, what)

            whole = list(shape)
            whole[d] = sum(counts)
            op = rng.choice(("sum", "max", "min"))
            ints = rng.choice((torch.int32, torch.int64, torch.float32, torch.float64))
            full = [make_input(case, 64 + r, whole, torch.int64, op).clamp(-2**20, 2**20).to(ints) for r in range(W)]
            stacked = torch.stack(full)
            red = {"sum": stacked.sum(0), "max": stacked.amax(0), "min": stacked.amin(0)}[op].to(ints)
            start = sum(counts[:me])
            want = red.narrow(d, start, counts[me])
            inp = strided_like(full[me], rng)
            out = strided_like(poisoned_like(want), rng)
            what = self.ctx("reduce_scatter_v", counts=counts, dim=d, op=op, dtype=ints)
            work = torch_purlin.reduce_scatter_v(out, inp, counts, dim=d, op=getattr(dist.ReduceOp, op.upper()),
                                                 async_op=True)
            work.wait()
            assert_exact(out, want, what)

    def check_custom_in_place(self):
        """NOTE [custom call buffers]: run_spec on overlapping tensors equals the composed result, in the
        forms its Spec makes safe (a rank's own chunk in place: all_gather's and reduce_scatter's block,
        gather's root) and in the others, which run from a copy of the input (all_to_all in place, an
        all_gather input at a peer's block)."""
        import torch_purlin
        from torch_purlin.layouts import Partial, Replicate, Shard, collective
        W, me = self.world_size, self.rank
        for _ in range(max(1, CASES // 2)):
            case = self._case + 1
            rng = self.case_rng()
            n = rng.randint(1, 40)
            dtype = rng.choice(DTYPES)
            pieces = [make_input(case, r, (n,), dtype) for r in range(W)]
            want = torch.cat(pieces)
            ag = collective("ag_in_place", (W * n,), Shard(0), Replicate(), W)
            for at in (me, (me + 1) % W):  # its own block (in place), a peer's block (from a copy)
                buf = poisoned_like(want)
                buf[at * n:(at + 1) * n] = pieces[me]
                torch_purlin.run_spec(ag, buf[at * n:(at + 1) * n], buf)
                assert_exact(buf, want, self.ctx("all_gather-shaped Spec with its input in its output", n=n,
                                                 block=at, dtype=dtype))

            root = rng.randrange(W)
            g = collective("gather_in_place", (W * n,), Shard(0), [Replicate() if r == root else None
                                                                   for r in range(W)], W)
            out = poisoned_like(want) if me == root else torch.empty(0, dtype=dtype)
            if me == root:
                out[me * n:(me + 1) * n] = pieces[me]
            inp = out[me * n:(me + 1) * n] if me == root else pieces[me].clone()
            torch_purlin.run_spec(g, inp, out)
            if me == root:
                assert_exact(out, want, self.ctx("gather-shaped Spec, root in place", n=n, root=root, dtype=dtype))

            blocks = [make_input(case, 16 + r, (W, n), dtype) for r in range(W)]  # rank r's block d goes to d
            a2a = collective("a2a_in_place", (W, W, n), Shard(0), Shard(1), W)
            buf = blocks[me].clone().view(-1)
            torch_purlin.run_spec(a2a, buf, buf)
            assert_exact(buf.view(W, n), torch.stack([blocks[r][me] for r in range(W)]),
                         self.ctx("all_to_all-shaped Spec in place", n=n, dtype=dtype))

            ints = rng.choice((torch.int32, torch.int64, torch.float32))
            full = [make_input(case, 64 + r, (W * n,), torch.int64, "sum").clamp(-2**20, 2**20).to(ints)
                    for r in range(W)]
            rs = collective("rs_in_place", (W * n,), Partial(), Shard(0), W, op="sum")
            buf = full[me].clone()
            torch_purlin.run_spec(rs, buf, buf[me * n:(me + 1) * n])
            assert_exact(buf[me * n:(me + 1) * n], torch.stack(full).sum(0).to(ints)[me * n:(me + 1) * n],
                         self.ctx("reduce_scatter-shaped Spec, output its own block", n=n, dtype=ints))

    def check_moe(self):
        import torch_purlin
        W, me = self.world_size, self.rank
        for _ in range(max(1, CASES // 2)):
            case = self._case + 1
            rng = self.case_rng()
            E = W * rng.randint(1, 3)
            H = rng.randint(1, 6)
            counts = [[rng.choice((0, 0, 1, 3)) for _ in range(E)] for _ in range(W)]
            dtype = rng.choice(DTYPES)
            toks = [make_input(case, r, (sum(counts[r]), H), dtype) for r in range(W)]
            L = E // W

            def block(s, e):
                a = sum(counts[s][:e])
                return toks[s][a:a + counts[s][e]]
            want = torch.cat([block(s, me * L + l) for l in range(L) for s in range(W)])
            out = poisoned_like(want)
            what = self.ctx("moe_dispatch", counts=counts, dtype=dtype)
            torch_purlin.moe_dispatch(out, toks[me], counts)
            assert_exact(out, want, what)
            back = poisoned_like(toks[me])
            torch_purlin.moe_combine(back, out, torch.tensor(counts), async_op=True).wait()
            assert_exact(back, toks[me], what + " (combine)")

    def check_coalescing_compile_and_errors(self):
        import torch_purlin
        W, me = self.world_size, self.rank
        case = self.next_seed()
        xs = [make_input(case, r, (2, 3 * W, 4), torch.float32) for r in range(W)]
        want = torch.cat([x.chunk(W, 1)[me] for x in xs], 0)
        # Inside a coalescing block, like a built-in: the block's Work covers it.
        outs = [torch.zeros_like(want), torch.zeros(W * 5)]
        with dist._coalescing_manager(async_ops=True) as cm:
            torch_purlin.all_to_all_dims(outs[0], xs[me], 1, 0)
            torch_purlin.all_gather_v(outs[1], xs[me].view(-1)[:5], [5] * W)
        cm.wait()
        assert_exact(outs[0], want, self.ctx("all_to_all_dims in a coalescing block"))
        assert_exact(outs[1], torch.cat([x.view(-1)[:5] for x in xs]), self.ctx("all_gather_v in a coalescing block"))

        # Under torch.compile: the registered op, traced into the graph.
        def step(x):
            y = torch.empty(want.shape, dtype=x.dtype)
            torch_purlin.all_to_all_dims(y, x * 2, 1, 0)
            z = torch.empty(2, 3, 4)
            torch_purlin.reduce_scatter_v(z, y, [2] * W, dim=0)
            return y + 1, z
        torch._dynamo.reset()
        y, z = torch.compile(step, backend="aot_eager", fullgraph=True)(xs[me])
        assert_exact(y, want * 2 + 1, self.ctx("compiled all_to_all_dims"))
        ys = [torch.cat([x.chunk(W, 1)[q] for x in xs], 0) * 2 for q in range(W)]
        assert_exact(z, sum(ys).narrow(0, 2 * me, 2), self.ctx("compiled reduce_scatter_v"))

        # Bad arguments: the error names the function, the rank and what is wrong (raised before any data moves).
        bad = (
            (lambda: torch_purlin.all_to_all_dims(torch.empty(1), torch.empty(2, W + 1), 1, 0),
             re.escape(f"all_to_all_dims on rank {me}: input dim 1 (scatter_dim) has size {W + 1}, not a multiple")),
            (lambda: torch_purlin.all_to_all_dims(torch.empty(3, 1), torch.empty(2, W), 1, 0),
             f"all_to_all_dims on rank {me}: output has shape \\(3, 1\\), expected \\({2 * W}, 1\\)"),
            (lambda: torch_purlin.all_gather_v(torch.empty(W + 1), torch.empty(1), [1] * W),
             f"all_gather_v on rank {me}: output dim 0 has size {W + 1}, counts sum to {W}"),
            (lambda: torch_purlin.reduce_scatter_v(torch.empty(2), torch.empty(2 * W), [2] * W, op=dist.ReduceOp.BAND),
             f"reduce_scatter_v on rank {me}: reduce op .* is not supported"),
            (lambda: torch_purlin.moe_dispatch(torch.empty(0, 2), torch.empty(1, 2), [[1]] * W),
             f"moe_dispatch on rank {me}: counts names 1 experts, not a positive multiple"),
            (lambda: torch_purlin.all_gather_v(torch.empty(W, dtype=torch.int32), torch.empty(1), [1] * W),
             f"all_gather_v on rank {me}: output dtype torch.int32 differs"),
        )
        for call, match in bad:
            with self.assertRaisesRegex(ValueError, match):
                call()
        # NOTE [layouts of the caller's tensors]: ranks whose inputs are strided differently name
        # different Specs; the call tag refuses the call on every rank, nothing is moved.
        x = torch.zeros(2, 2 * W, 5)[..., :3] if me == 1 else torch.zeros(2, 2 * W, 3)
        refused = f"purlin custom on rank {me}: rank .* passed a different custom spec"
        with self.assertRaisesRegex(RuntimeError, refused):
            torch_purlin.all_to_all_dims(torch.empty(2 * W, 2, 3), x, 1, 0)
        # The group still works after refused calls.
        t = torch.ones(3)
        dist.all_reduce(t)
        assert_exact(t, torch.full((3,), float(W)), self.ctx("all_reduce after refused calls"))


if BACKEND == "purlin":
    class TestAppCollectivesWorld2(AppCollectiveCases, DistTestCase):
        WORLD_SIZE = 2

    class TestAppCollectivesWorld3(AppCollectiveCases, DistTestCase):
        WORLD_SIZE = 3

    class TestAppCollectivesWorld4(AppCollectiveCases, DistTestCase):
        WORLD_SIZE = 4


if __name__ == "__main__":
    run_tests()
