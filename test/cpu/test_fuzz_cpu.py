"""Seeded random collectives on CPU tensors at worlds 2, 3 and 4 (test/support/fuzz_cases.py).

Each world runs a fresh seed (printed; PURLIN_FUZZ_SEED fixes it) through two purlin groups made with
small workspaces, so pipelining in rounds and the two-shot switch happen at small sizes: the whole
world (16K workspace, two-shot from 1K) and a subgroup (8K, two-shot from 4K; at worlds 3 and 4
ranks 1.., renumbered), interleaved. Every rank checks every case against references it computes
itself, bit for bit (NOTE [fuzz references]). A failing case prints how to replay it.

    python -m pytest test/cpu/test_fuzz_cpu.py -q                    # the short profile (CI)
    PURLIN_FUZZ_PROFILE=long python -m pytest test/cpu/test_fuzz_cpu.py -q
    PURLIN_FUZZ_SEED=123 PURLIN_FUZZ_CASES=17,40 python -m pytest test/cpu/test_fuzz_cpu.py -q -k World3
"""
import os
import secrets
import time
import unittest
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.testing._internal.common_utils import run_tests

import fuzz_cases
from mp_util import BACKEND, DistTestCase, spawned

if BACKEND != "purlin":
    raise unittest.SkipTest("purlin-specific tests")

import torch_purlin  # noqa: E402

LONG = os.environ.get("PURLIN_FUZZ_PROFILE", "short") == "long"
WORLD_SETTINGS = {"TORCH_PURLIN_CPU_WORKSPACE_BYTES": "16K", "TORCH_PURLIN_CPU_TWO_SHOT_BYTES": "1K"}
SUB_SETTINGS = {"TORCH_PURLIN_CPU_WORKSPACE_BYTES": "8K", "TORCH_PURLIN_CPU_TWO_SHOT_BYTES": "4K"}
# Bytes per rank where a CPU protocol changes: the two-shot switches, a pipelining slot (half the
# workspace) and the workspace of each group.
THRESHOLDS = (1024, 4096, 4096 * 2, 8192 * 2, 16384)
COUNTS = {2: 600, 3: 500, 4: 400}  # the short profile: about 60 s for the three worlds on 2 cores, mostly start-up


class FuzzBase(DistTestCase):
    PG_TIMEOUT = timedelta(seconds=30)

    def agreed_seed(self):
        store = dist.distributed_c10d._get_default_store()
        if self.rank == 0:
            store.set("fuzz_seed", os.environ.get("PURLIN_FUZZ_SEED") or str(secrets.randbelow(2**31)))
        return int(store.get("fuzz_seed").decode())

    def fuzz(self):
        W = self.world_size
        seed = self.agreed_seed()
        sub_ranks = list(range(1, W)) if W > 2 else [0, 1]
        world = dist.new_group(backend="purlin", pg_options=torch_purlin.Options(WORLD_SETTINGS),
                               timeout=self.PG_TIMEOUT)
        sub = dist.new_group(sub_ranks, backend="purlin", pg_options=torch_purlin.Options(SUB_SETTINGS),
                             timeout=self.PG_TIMEOUT)
        groups = {"world": (world, list(range(W))), "sub": (sub, sub_ranks)}
        count = COUNTS[W] * (10 if LONG else 1)
        cases = fuzz_cases.generate(seed, count, W, sub_ranks, "cpu", THRESHOLDS, ("sync", "async"),
                                    max_elems=(1 << 20) if LONG else (1 << 16))
        env = fuzz_cases.Env(seed, self.rank, "cpu", groups)
        replay = (f"replay: PURLIN_FUZZ_SEED={seed} PURLIN_FUZZ_CASES={{}} python -m pytest test/cpu/test_fuzz_cpu.py "
                  f"-q -k World{W}")
        if self.rank == 0:
            print(f"\n[fuzz cpu world {W}] seed {seed}, {len(cases)} cases ({replay.format('<i,...>')})", flush=True)
        failures = []
        start = time.monotonic()
        for case in fuzz_cases.selected(cases):
            try:
                fuzz_cases.run_case(env, case)
            except AssertionError as e:  # wrong data: record it, stay in step with the peers
                failures.append((case, str(e)))
            except Exception as e:  # noqa: BLE001  an error: the ranks may no longer be in step
                failures.append((case, f"{type(e).__name__}: {e}"))
                break
        if failures:
            first = "\n".join(f"{c.describe()}\n  {msg[:600]}" for c, msg in failures[:3])
            raise AssertionError(f"rank {self.rank}: {len(failures)} fuzz case(s) failed (seed {seed}):\n{first}\n"
                                 + replay.format(",".join(str(c.index) for c, _ in failures[:10])))
        dist.barrier()
        if self.rank == 0:
            print(f"[fuzz cpu world {W}] {len(cases)} cases in {time.monotonic() - start:.1f} s", flush=True)


class FuzzWorld2(FuzzBase):
    WORLD_SIZE = 2

    @spawned
    def test_fuzz(self):
        self.fuzz()


class FuzzWorld3(FuzzBase):
    WORLD_SIZE = 3

    @spawned
    def test_fuzz(self):
        self.fuzz()


class FuzzWorld4(FuzzBase):
    WORLD_SIZE = 4

    @spawned
    def test_fuzz(self):
        self.fuzz()


if __name__ == "__main__":
    run_tests()
