"""SNAC plan unit tests: every built-in collective, world sizes 1-8.

For each spec and options, the plans of all ranks are simulated symbolically
(test/support/snac_sim.py): every output element must be produced exactly once, from
exactly the right sources (in ascending rank order for reductions), no rank may
wait for a signal nobody sends, and random schedules must neither deadlock nor
read workspace data that was already overwritten.
"""
import random

import pytest

import torch_purlin
from torch_purlin import Chunk, OpKind, Placement, RedOp, Region, Spec, specs

from snac_sim import check_signals_match, expected_outputs, simulate

WORLDS = [1, 2, 3, 4, 5, 6, 7, 8]


def builtin_specs(W, n, rng):
    root = rng.randrange(W)
    splits = [[rng.choice([0, 1, 3, n]) for _ in range(W)] for _ in range(W)]
    return [
        specs.all_reduce(W, n, RedOp.SUM),
        specs.reduce(W, n, RedOp.MAX, root),
        specs.broadcast(W, n, root),
        specs.all_gather(W, n),
        specs.reduce_scatter(W, n, RedOp.SUM),
        specs.all_to_all(W, splits),
        specs.gather(W, n, root),
        specs.scatter(W, n, root),
        specs.barrier(W),
        specs.interleaved_all_gather(W, 3, max(n, 1)),
    ]


def check(spec, slot, align, two_shot, direct_local, seeds=(0, 1), read_peer_inputs=False, push=False,
          write_peer_outputs=False):
    plans = [
        torch_purlin.make_plan(spec, r, slot, align, two_shot=two_shot, direct_local=direct_local,
                               read_peer_inputs=read_peer_inputs, push=push, write_peer_outputs=write_peer_outputs)
        for r in range(spec.world)
    ]
    check_signals_match(plans)
    want = expected_outputs(spec)
    for seed in seeds:
        got, writes = simulate(spec, plans, seed)
        for r in range(spec.world):
            for i, (g, w) in enumerate(zip(got[r], want[r])):
                assert g == w, f"{spec.name} W={spec.world} rank {r} out[{i}]: got {g}, want {w}"
                assert writes[r][i] == (0 if w is None else 1), f"{spec.name} rank {r} out[{i}] written {writes[r][i]}x"
    return plans


@pytest.mark.parametrize("W", WORLDS)
def test_builtin_plans(W):
    rng = random.Random(W)
    for n in (0, 1, 5, 37):
        for spec in builtin_specs(W, n, rng):
            for slot, align in ((1 << 20, 1), (8, 1), (8 * W, 4)):
                for two_shot in (False, True):
                    for direct_local in (True, False):
                        check(spec, slot, align, two_shot, direct_local)


@pytest.mark.parametrize("W", WORLDS)
def test_zero_copy_plans(W):
    """NOTE [zero-copy]: peers read inputs in place, nothing is staged, and no
    rank returns (its input is poisoned in the simulation) while a peer still
    reads it."""
    rng = random.Random(100 + W)
    for n in (0, 1, 5, 37):
        for spec in builtin_specs(W, n, rng):
            for slot, align in ((1 << 20, 1), (8 * W, 4)):
                for two_shot in (False, True):
                    plans = check(spec, slot, align, two_shot, True, seeds=(0, 1, 2), read_peer_inputs=True)
                    for p in plans:
                        for op in p["ops"]:
                            if op["code"] == 2 and op["dst"][0] == 2:  # a copy into the workspace
                                assert op["srcs"][0][0] != 0, f"{spec.name}: zero-copy plan stages its input"


@pytest.mark.parametrize("W", WORLDS)
def test_push_plans(W):
    """NOTE [push]: sources write into the readers' workspaces; readers read only local memory in phase 0."""
    rng = random.Random(200 + W)
    for n in (0, 1, 5, 37):
        for spec in builtin_specs(W, n, rng):
            # (A reader's slot holds every pusher's piece: 8-element slots cannot at W=8.)
            for slot, align in ((1 << 20, 1), (8 * W, 1), (8 * W, 4)):
                for two_shot in (False, True):
                    for direct_local in (True, False):
                        plans = check(spec, slot, align, two_shot, direct_local, seeds=(0, 1, 2), push=True)
                        for p in plans:
                            for op in p["ops"]:
                                if op["phase"] in ("consume", "consume: reduce owned slice"):
                                    for buf, rank, _ in op["srcs"]:
                                        assert buf != 2 or rank == p["rank"], f"{spec.name}: push plan pulls {op}"


@pytest.mark.parametrize("W", WORLDS)
def test_peer_output_plans(W):
    """NOTE [peer outputs]: copy specs write every chunk straight into its destinations' outputs,
    one round, no workspace, no consume copy; no rank writes a peer's output before that peer
    reached the collective or after it returned (simulated)."""
    rng = random.Random(400 + W)
    for n in (0, 1, 5, 37):
        for spec in builtin_specs(W, n, rng):
            if spec.kind != OpKind.COPY:
                with pytest.raises(ValueError, match="Copy spec"):
                    torch_purlin.make_plan(spec, 0, 1 << 20, write_peer_outputs=True)
                continue
            plans = check(spec, 8, 1, False, True, seeds=range(6), write_peer_outputs=True)
            for p in plans:
                assert p["rounds"] <= 1 and p["workspace_elems"] == 0, f"{spec.name}: {p['rounds']} rounds"
                for op in p["ops"]:
                    if op["code"] == 2:
                        assert tuple(op["srcs"][0][:2]) == (0, p["rank"]) and op["dst"][0] == 1, f"{spec.name}: {op}"


@pytest.mark.parametrize("drop", ["ready", "written"])
def test_peer_output_plans_need_both_waits(drop):
    """Without the destination's "free" signal awaited, or without waiting for the writers before
    returning, some schedule writes a peer's output outside its collective."""
    spec = specs.all_gather(3, 5)
    value = 1 if drop == "ready" else 2  # Staged steps: 1 output free, 2 written
    plans = [torch_purlin.make_plan(spec, r, 8, write_peer_outputs=True) for r in range(3)]
    for p in plans:
        p["ops"] = [op for op in p["ops"] if not (op["code"] == 0 and op["value"] == value)]
    failures = 0
    for seed in range(40):
        try:
            simulate(spec, plans, seed)
        except AssertionError as e:
            assert "outside its collective" in str(e), str(e)
            failures += 1
    assert failures > 0


@pytest.mark.parametrize("W", [2, 3, 4, 5, 8])
def test_direct_local_is_each_ranks_choice(W):
    """NOTE [rank-invariant layout]: ranks choosing direct_local differently (in-place on
    one rank, out-of-place on another) still agree on every workspace offset."""
    rng = random.Random(300 + W)
    for n in (1, 5, 37):
        for spec in builtin_specs(W, n, rng):
            for slot, align in ((1 << 20, 1), (8 * W, 4)):
                for two_shot in (False, True):
                    for push in (False, True):
                        direct = [rng.random() < 0.5 for _ in range(W)]
                        plans = [torch_purlin.make_plan(spec, r, slot, align, two_shot=two_shot,
                                                        direct_local=direct[r], push=push) for r in range(W)]
                        check_signals_match(plans)
                        want = expected_outputs(spec)
                        got, _ = simulate(spec, plans, seed=n)
                        for r in range(W):
                            assert got[r] == want[r], f"{spec.name} W={W} direct={direct} push={push} rank {r}"


@pytest.mark.parametrize("W", [2, 3, 5, 8])
def test_small_workspace_pipelines_in_rounds(W):
    spec = specs.all_reduce(W, 100, RedOp.SUM)
    plans = check(spec, 16, 1, two_shot=True, direct_local=False)
    assert plans[0]["rounds"] > 2
    # Slots are reused: some rank waits for readers to free a slot.
    assert any(op["code"] == 0 and op["flag"] == 2 for op in plans[0]["ops"])


def test_two_shot_is_a_distribution_of_the_same_spec():
    spec = specs.all_reduce(4, 64, RedOp.SUM)
    one = torch_purlin.make_plan(spec, 1, 1 << 20, two_shot=False)
    two = torch_purlin.make_plan(spec, 1, 1 << 20, two_shot=True)
    reduced = lambda p: sum(op["n"] for op in p["ops"] if op["code"] == 3)  # noqa: E731
    assert reduced(one) == 64 and reduced(two) == 16  # each rank reduces only its quarter


def test_custom_strided_reduce_spec():
    # Rank r contributes a 4x3 block read with stride 5; every rank gets the sum
    # written transposed-ish into a strided output (stride 7).
    W = 3
    chunk = Chunk([Placement(r, Region(1, 4, 3, 5)) for r in range(W)],
                  [Placement(r, Region(2, 4, 3, 7)) for r in range(W)])
    spec = Spec("strided_sum", OpKind.REDUCE, W, [chunk], redop=RedOp.SUM)
    assert spec.input_numel == [1 + 3 * 5 + 3] * W
    for two_shot in (False, True):
        check(spec, 4, 1, two_shot, True)


def test_bad_specs_are_rejected():
    with pytest.raises(ValueError, match="exactly one source"):
        Spec("bad", OpKind.COPY, 2,
             [Chunk([Placement(0, Region(0, 1, 4)), Placement(1, Region(0, 1, 4))], [Placement(0, Region(0, 1, 4))])])
    with pytest.raises(ValueError, match="outside the world"):
        Spec("bad", OpKind.COPY, 2, [Chunk([Placement(2, Region(0, 1, 4))], [])])
    with pytest.raises(ValueError, match="element count"):
        Spec("bad", OpKind.COPY, 2, [Chunk([Placement(0, Region(0, 1, 4))], [Placement(1, Region(0, 1, 3))])])
