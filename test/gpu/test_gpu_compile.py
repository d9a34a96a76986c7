"""torch.compile over purlin on CUDA: functional collectives (what compiled tensor-parallel code
calls) inside an Inductor-compiled function, in the default mode and in "reduce-overhead" (CUDA
graph trees: warm-up calls run eagerly, later ones replay a captured graph), compared bit for bit
with references every rank computes, and every collective counted native. Skips cleanly without
the GPUs.
"""
import os
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

from gpu_harness import gpus_missing, init_purlin_worker, native_cuda_errors, run_ranks_expect_ok, write_result
from mp_util import int_floats

WORLD = int(os.environ.get("PURLIN_GPU_WORLD", "2"))  # ranks = GPUs used (tools/gpu.sh NPROC)

pytestmark = pytest.mark.skipif(bool(gpus_missing(WORLD)), reason=gpus_missing(WORLD) or "runs")


def collectives(x, y, group):
    """The function compiled: an all_reduce, an all_gather and a reduce_scatter, with compute between."""
    import torch.distributed._functional_collectives as funcol
    a = funcol.all_reduce(x * 2, "sum", group)
    g = funcol.all_gather_tensor(y, 0, group)
    r = funcol.reduce_scatter_tensor(g + 1, "sum", 0, group)
    return a + 1, g, r


def references(seed, rank, world, n):
    """What collectives() returns on `rank` for the inputs int_floats(seed + q, ...) of every rank q."""
    xs = [int_floats(seed + q, (n,)) for q in range(world)]
    ys = [int_floats(seed + 100 + q, (n // 4,)) for q in range(world)]
    g = torch.cat(ys)
    return sum(x * 2 for x in xs) + 1, g, world * (ys[rank] + 1)


def run_compiled(rank, world, dev, errors, modes=("default", "reduce-overhead"), n=4096, calls=4):
    group = dist.group.WORLD
    for mode in modes:
        fn = torch.compile(lambda x, y: collectives(x, y, group), mode=mode, fullgraph=True)
        for call in range(calls):  # fresh inputs every call (graph replays included)
            seed = 1000 * (modes.index(mode) + 1) + 10 * call
            x = int_floats(seed + rank, (n,)).to(dev)
            y = int_floats(seed + 100 + rank, (n // 4,)).to(dev)
            got = [t.clone().cpu() for t in fn(x, y)]
            for name, g, w in zip(("all_reduce", "all_gather", "reduce_scatter"), got, references(seed, rank, world, n)):
                if g.shape != w.shape or not torch.equal(g, w):
                    errors.append(f"{mode} call {call}: {name} differs from the reference")


def worker(rank, path, result_path):
    dev = init_purlin_worker(rank, WORLD, path, timedelta(seconds=120))
    errors = []
    run_compiled(rank, WORLD, dev, errors)
    torch.cuda.synchronize()
    more, cnt = native_cuda_errors(None, "the default group")
    errors += more
    write_result(result_path, rank, errors, f"compiled default and reduce-overhead: {cnt!r}")
    dist.destroy_process_group()


def test_compiled_functional_collectives_default_and_cuda_graphs():
    run_ranks_expect_ok(worker, WORLD)
