"""Data-movement collectives (no arithmetic), as a mixin for mp_util.DistTestCase.

Every result must be bit-exact. Rooted ops rotate the root across cases so
that each rank is root many times.
"""
import torch
import torch.distributed as dist

from mp_util import ALL_DTYPES, assert_exact, make_input, poisoned_like

COALESCED_SIZES = (7, 0, 1025, 1)


class CopyCases:
    SIZES = (0, 1, 7, 1025, 65537)  # elements per rank

    def _copy_dtypes(self, family):
        return [d for d in ALL_DTYPES if not self.gloo_skip(family, d)]

    def run_all_gather(self):
        ws, rank = self.world_size, self.rank
        for dtype in self._copy_dtypes("all_gather"):
            for size in self.SIZES:
                seed = self.next_seed()
                inputs = self.rank_inputs(seed, (size,), dtype)
                ctx = self.ctx("all_gather", dtype=dtype, size=size)

                outs = [poisoned_like(x) for x in inputs]
                dist.all_gather(outs, inputs[rank].clone())
                for r in range(ws):
                    assert_exact(outs[r], inputs[r], f"{ctx} (list) slot {r}")

                full = torch.cat(inputs)
                out = poisoned_like(full)
                dist.all_gather_into_tensor(out, inputs[rank])
                assert_exact(out, full, f"{ctx} (into_tensor)")

                out = poisoned_like(full)  # in place: the input is this rank's slot of the output
                slot = out.narrow(0, rank * size, size)
                slot.copy_(inputs[rank])
                dist.all_gather_into_tensor(out, slot)
                assert_exact(out, full, f"{ctx} (into_tensor in-place)")

                # Odd ranks in place, even ranks out of place: a valid call
                # (NOTE [rank-invariant layout] in csrc/snac/planner.cc).
                out = poisoned_like(full)
                if rank % 2:
                    src = out.narrow(0, rank * size, size)
                    src.copy_(inputs[rank])
                else:
                    src = inputs[rank].clone()
                dist.all_gather_into_tensor(out, src)
                assert_exact(out, full, f"{ctx} (into_tensor, in place on odd ranks)")

                if self.gloo_skip("all_gather_into_tensor stacked"):
                    continue
                stacked = torch.stack(inputs)
                out = poisoned_like(stacked)
                dist.all_gather_into_tensor(out, inputs[rank])
                assert_exact(out, stacked, f"{ctx} (into_tensor stacked)")
            self._all_gather_coalesced(dtype)

    def _all_gather_coalesced(self, dtype):
        ws, rank = self.world_size, self.rank
        seed = self.next_seed()
        sizes = COALESCED_SIZES[:-1] + (self.SIZES[-1],)
        per_part = [self.rank_inputs(seed, (n,), dtype, part=i) for i, n in enumerate(sizes)]
        ctx = self.ctx("all_gather coalesced", dtype=dtype, sizes=sizes)

        outs = [[poisoned_like(inputs[r]) for inputs in per_part] for r in range(ws)]
        dist.all_gather_coalesced(outs, [inputs[rank] for inputs in per_part])
        for r in range(ws):
            for i, inputs in enumerate(per_part):
                assert_exact(outs[r][i], inputs[r],
                             f"{ctx} (all_gather_coalesced) rank {r} part {i}")

        fulls = [torch.cat(inputs) for inputs in per_part]
        outs = [poisoned_like(full) for full in fulls]
        with dist._coalescing_manager():
            for out, inputs in zip(outs, per_part):
                dist.all_gather_into_tensor(out, inputs[rank])
        for i, (out, full) in enumerate(zip(outs, fulls)):
            assert_exact(out, full, f"{ctx} (into_tensor under _coalescing_manager) part {i}")

    def _split_matrix(self, seed, kind):
        """n[s][d]: elements rank s sends to rank d."""
        ws = self.world_size
        if kind == "even":
            return [[7] * ws for _ in range(ws)]
        g = torch.Generator().manual_seed(seed)
        if kind == "large":  # each rank's input exceeds the largest SIZES entry
            lo = self.SIZES[-1] // ws + 1
            return (lo + torch.randint(0, 64, (ws, ws), generator=g)).tolist()
        n = torch.randint(0, 10, (ws, ws), generator=g)
        n[n == 0] = 3
        if kind == "zeros":  # rank 0 sends nothing, the last rank receives nothing
            n[0, :] = 0
            n[:, ws - 1] = 0
            n[1, 1] = 0
        return n.tolist()

    def run_all_to_all(self):
        ws, rank = self.world_size, self.rank
        for dtype in self._copy_dtypes("all_to_all"):
            for kind in ("even", "uneven", "zeros", "large"):
                seed = self.next_seed()
                n = self._split_matrix(seed, kind)
                chunk = lambda s, d: make_input(seed, s * 64 + d, (n[s][d],), dtype)  # noqa: E731
                sent = [chunk(rank, d) for d in range(ws)]
                expected = [chunk(s, rank) for s in range(ws)]
                ctx = self.ctx("all_to_all", dtype=dtype, splits=kind)

                if kind == "even" or not self.gloo_skip("all_to_all uneven"):
                    outs = [poisoned_like(x) for x in expected]
                    dist.all_to_all(outs, sent)
                    for s in range(ws):
                        assert_exact(outs[s], expected[s], f"{ctx} (list) from rank {s}")

                flat = torch.cat(expected)
                out = poisoned_like(flat)
                if kind == "even":
                    dist.all_to_all_single(out, torch.cat(sent))
                else:
                    dist.all_to_all_single(out, torch.cat(sent),
                                           output_split_sizes=[n[s][rank] for s in range(ws)],
                                           input_split_sizes=n[rank])
                assert_exact(out, flat, f"{ctx} (single) splits {n}")

            # NOTE [in-place all_to_all] (backend_ops.cc): one buffer as input and output, its input slots
            # of other sizes than its output slots (a circulant: every rank sends and receives as many in
            # all); past the workspace, so a plan in rounds would overwrite input not yet sent.
            if self.gloo_skip("all_to_all in place", dtype):
                continue
            seed = self.next_seed()
            c = [3000 * (1 + k % 3) + k for k in range(ws)]
            n = [[c[(d - s) % ws] for d in range(ws)] for s in range(ws)]
            chunk = lambda s, d: make_input(seed, s * 64 + d, (n[s][d],), dtype)  # noqa: E731
            buf = torch.cat([chunk(rank, d) for d in range(ws)])
            dist.all_to_all_single(buf, buf, output_split_sizes=[n[s][rank] for s in range(ws)],
                                   input_split_sizes=n[rank])
            assert_exact(buf, torch.cat([chunk(s, rank) for s in range(ws)]),
                         self.ctx("all_to_all in place", dtype=dtype) + f" splits {n}")

    def run_rooted_copies(self):
        ws, rank = self.world_size, self.rank
        for i, dtype in enumerate(ALL_DTYPES):
            for j, size in enumerate(self.SIZES):
                root = (i + j) % ws
                seed = self.next_seed()
                inputs = self.rank_inputs(seed, (size,), dtype)
                ctx = self.ctx("", dtype=dtype, size=size, root=root)

                if not self.gloo_skip("broadcast", dtype):
                    t = inputs[rank].clone() if rank == root else poisoned_like(inputs[root])
                    dist.broadcast(t, src=root)
                    assert_exact(t, inputs[root], "broadcast" + ctx)

                if not self.gloo_skip("gather", dtype):
                    outs = [poisoned_like(x) for x in inputs] if rank == root else None
                    dist.gather(inputs[rank].clone(), gather_list=outs, dst=root)
                    for r in range(ws if rank == root else 0):
                        assert_exact(outs[r], inputs[r], f"gather{ctx} slot {r}")

                if not self.gloo_skip("scatter", dtype):
                    chunks = [make_input(seed, 1000 + d, (size,), dtype) for d in range(ws)]
                    out = poisoned_like(chunks[rank])
                    dist.scatter(out, scatter_list=chunks if rank == root else None, src=root)
                    assert_exact(out, chunks[rank], "scatter" + ctx)
