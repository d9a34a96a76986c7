"""Seeded random collectives on groups that span simulated hosts (test/support/sim_hosts.py), with a gloo twin.

Two placements: 2 x 2 (hosts [0, 2] and [1, 3]) and 2 + 1 ([0, 1] and [2]). Every rank draws the cases of
test/support/fuzz_cases.py (every native op, coalescing blocks, even and uneven all_to_all, async batches waited
out of order, strided views, 0 and 1 elements, every dtype purlin has: bool, int16, complex, half, bfloat16 ...)
from one seed (printed; PURLIN_FUZZ_SEED fixes it) and runs them on purlin groups: the whole world (at 2 x 2
the hierarchical forms, at 2 + 1 the flat ones: NOTE [groups spanning hosts]) and ranks 1.. (at 2 x 2 a
group spanning the hosts unevenly, at 2 + 1 one within a host: native), interleaved. Every rank checks every
case against references it computes itself, bit for bit (NOTE [fuzz references]: exact in any order of
reduction), so the results are what the same groups give on one host.
The gloo twin: each case gloo can run (gloo_runs: no int16, complex, AVG, PREMUL_SUM, bool reduction,
strided view, coalescing block or uneven all_to_all list) runs again on gloo groups of the same ranks,
against the same references: where gloo runs a case, purlin's result equals gloo's, bit for bit. (With
inputs that are not small integers, float sums may differ from gloo's in the last bit at 3 or more ranks:
purlin adds in rank order, gloo's ring in another.)

    python -m pytest test/cpu/test_hosts_fuzz_cpu.py -q                      # the short profile (CI)
    PURLIN_FUZZ_PROFILE=long python -m pytest test/cpu/test_hosts_fuzz_cpu.py -q
    PURLIN_FUZZ_SEED=123 PURLIN_FUZZ_CASES=17,40 python -m pytest test/cpu/test_hosts_fuzz_cpu.py -q -k uneven
"""
import os
import secrets
import time
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

import fuzz_cases
import sim_hosts

WHY_NOT = sim_hosts.unshare_unavailable()
needs_hosts = pytest.mark.skipif(WHY_NOT is not None, reason=WHY_NOT or "")

LONG = os.environ.get("PURLIN_FUZZ_PROFILE", "short") == "long"
COUNT = 6000 if LONG else 600  # the short profile: about 15 s per placement on 2 cores, mostly start-up
THRESHOLDS = (256, 1024, 4096, 16384)  # bytes per rank: sizes either side of these
MAX_ELEMS = (1 << 18) if LONG else (1 << 13)
GLOO_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8, torch.int32,
               torch.int64, torch.bool)
GLOO_OPS = ("all_reduce", "reduce", "broadcast", "all_gather", "all_gather_into_tensor", "reduce_scatter",
            "reduce_scatter_tensor", "all_to_all_single", "all_to_all_single_uneven", "gather", "scatter", "barrier")


def gloo_runs(case):
    """Whether gloo runs `case` right (module docstring); the other cases are purlin's alone."""
    if case.op == "async_batch":
        return all(gloo_runs(c) for c in case.batch)
    if case.op not in GLOO_OPS or case.strided or case.dtype not in GLOO_DTYPES:
        return False
    if case.redop in ("avg", "premul_sum"):
        return False
    return not (case.dtype == torch.bool and case.redop != "-")


def fuzz_rank(rank, world, args):
    """Runs the cases on this rank; returns the failures (strings)."""
    torch.set_num_threads(1)
    import torch_purlin  # noqa: F401  registers "purlin"
    timeout = timedelta(seconds=60)
    dist.init_process_group("purlin", timeout=timeout)
    seed, sub_ranks = args["seed"], list(range(1, world))
    sub = dist.new_group(sub_ranks, backend="purlin", timeout=timeout)
    gloo_world = dist.new_group(backend="gloo", timeout=timeout)
    gloo_sub = dist.new_group(sub_ranks, backend="gloo", timeout=timeout)
    purlin = fuzz_cases.Env(seed, rank, "cpu", {"world": (dist.group.WORLD, list(range(world))),
                                                "sub": (sub, sub_ranks)})
    gloo = fuzz_cases.Env(seed, rank, "cpu", {"world": (gloo_world, list(range(world))), "sub": (gloo_sub, sub_ranks)})
    cases = fuzz_cases.generate(seed, args["count"], world, sub_ranks, "cpu", THRESHOLDS, ("sync", "async"),
                                max_elems=MAX_ELEMS)
    failures, twins = [], 0
    start = time.monotonic()
    for case in fuzz_cases.selected(cases):
        runs = [("purlin", purlin)] + ([("the gloo twin", gloo)] if gloo_runs(case) else [])
        twins += len(runs) - 1
        stop = False
        for name, env in runs:
            try:
                fuzz_cases.run_case(env, case)
            except AssertionError as e:  # wrong data: record it, stay in step with the peers
                failures.append(f"{name}: {case.describe()}\n  {str(e)[:600]}")
            except Exception as e:  # noqa: BLE001  an error: the ranks may no longer be in step
                failures.append(f"{name}: {case.describe()}\n  {type(e).__name__}: {str(e)[:600]}")
                stop = True
                break
        if stop:
            break
    if not failures:
        dist.barrier()
    if rank == 0:
        print(f"[hosts fuzz] {len(cases)} cases ({twins} with the gloo twin) in {time.monotonic() - start:.1f} s",
              flush=True)
    dist.destroy_process_group()
    return failures


def run(hosts, name):
    seed = int(os.environ.get("PURLIN_FUZZ_SEED") or secrets.randbelow(2**31))
    print(f"\n[hosts fuzz {name}] seed {seed}", flush=True)
    results = sim_hosts.run_hosts("test_hosts_fuzz_cpu:fuzz_rank", hosts, args={"seed": seed, "count": COUNT},
                                  timeout=900 if LONG else 300)
    failures = [f"rank {r}: {f}" for r, res in enumerate(results) for f in (res["value"] or [])]
    replay = f"PURLIN_FUZZ_SEED={seed} PURLIN_FUZZ_CASES=<i,...> python -m pytest test/cpu/test_hosts_fuzz_cpu.py -k {name}"
    assert not failures, f"{len(failures)} failure(s), seed {seed}:\n" + "\n".join(failures[:8]) + f"\nreplay: {replay}"


@needs_hosts
def test_fuzz_two_by_two():
    run([[0, 2], [1, 3]], "two_by_two")


@needs_hosts
def test_fuzz_uneven():
    run([[0, 1], [2]], "uneven")
