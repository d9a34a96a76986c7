"""The multi-GPU suites' harness (gpu_harness.py), run with CPU workers.

The GPU files can only run on the device; this checks here that the harness
collects every rank's case lines, reports a failing case with its rank and
traceback, notices a rank that ran fewer cases, reports a family every rank
skipped as skipped (and one skipped by some ranks only as a failure), runs
only the families PURLIN_GPU_FAMILIES names (skipping a case over every earlier family
when it leaves one out), and flags a worker's exit code; and that run_families
runs registered family listings in order, lazily, each case with the context.
"""
import pytest

import json
from types import SimpleNamespace

from gpu_harness import Case, Runner, Skip, check_exited_cleanly, check_family, family_registry, run_suite


def _fake_worker(rank, world, init_file, log_path):
    R = Runner(rank, log_path)
    R.family = "good"
    R.check("adds", lambda: None)
    R.check("also adds", lambda: None)
    R.family = "bad"

    def fails_on_rank_1():
        assert rank != 1, "rank 1 computes something else"

    R.check("differs", fails_on_rank_1)
    R.family = "short"
    for i in range(2 if rank == 0 else 1):
        R.check(f"case {i}", lambda: None)
    R.family = "skipped"
    R.skip("needs NCCL")
    R.family = "half_skipped"
    if rank == 0:
        R.skip("needs NCCL")
    else:
        R.check("runs", lambda: None)
    R.family = "after_all"
    R.check_after_all("counts every family", lambda: None)
    R.check("counts its own ops", lambda: None)
    R.family = "only_after_all"
    R.check_after_all("counts every family", lambda: None)
    R.out.close()
    raise SystemExit(3 if rank == 1 else 0)


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    return run_suite("fake", _fake_worker, 2, 60, tmp_path_factory.mktemp("harness"))


def test_passing_family(suite):
    check_family(suite, "good")
    check_family(suite, "after_all")  # nothing left out: it runs
    check_family(suite, "only_after_all")


def test_failing_case_names_rank_and_error(suite):
    with pytest.raises(AssertionError, match=r"rank 1 differs:[\s\S]*rank 1 computes something else"):
        check_family(suite, "bad")


def test_missing_cases_are_noticed(suite):
    with pytest.raises(AssertionError, match="ranks ran different numbers of cases"):
        check_family(suite, "short")


def test_skipped_family(suite):
    with pytest.raises(pytest.skip.Exception, match="needs NCCL"):
        check_family(suite, "skipped")
    with pytest.raises(AssertionError, match="every rank skips it or none"):
        check_family(suite, "half_skipped")


def test_families_filter(tmp_path, monkeypatch):
    monkeypatch.setenv("PURLIN_GPU_FAMILIES", "good,skipped,after_all,only_after_all")
    only = run_suite("fake_only", _fake_worker, 2, 60, tmp_path)
    check_family(only, "good")
    # a case over every earlier family skips when the filter left one out, rather than count its absence;
    # the family's other cases still run (and pass), a family of such cases only is skipped
    check_family(only, "after_all")
    skips = [r for r in only["rows"] if r["family"] == "after_all" and r.get("skipped")]
    assert sorted(r["rank"] for r in skips) == [0, 1] and all(r["case"] == "counts every family" for r in skips)
    assert "PURLIN_GPU_FAMILIES left out bad," in skips[0]["skipped"]
    with pytest.raises(pytest.skip.Exception, match="PURLIN_GPU_FAMILIES left out bad,"):
        check_family(only, "only_after_all")
    for family in ("bad", "short"):  # left out: reported as skipped, their failures never ran
        with pytest.raises(pytest.skip.Exception, match="not in PURLIN_GPU_FAMILIES"):
            check_family(only, family)


def test_missing_family_and_exit_codes(suite):
    with pytest.raises(AssertionError, match="no absent case ran"):
        check_family(suite, "absent")
    with pytest.raises(AssertionError):
        check_exited_cleanly(suite)
    assert suite["exitcodes"] == [0, 3]


def test_run_families_in_order(tmp_path, monkeypatch):
    monkeypatch.setenv("PURLIN_GPU_FAMILIES", "first,third")
    FAMILIES, family = family_registry()
    seen = []

    def case(c, x):
        seen.append(("case", x, c.R.seed()))

    @family("first")
    def first(c):
        seen.append(("setup", "first"))  # between cases, as written: a group made for the next ones
        yield Case("one", case, 1)
        seen.append(("setup", "between"))
        yield Case("two", case, 2)

    @family("second")
    def second(c):
        seen.append(("setup", "second"))  # a listing left out by PURLIN_GPU_FAMILIES still runs its setup
        yield Case("never", case, 0)

    @family("third")
    def third(c):
        yield Case("over every family", case, 3, after_all=True)
        yield Skip("no NCCL")

    path = tmp_path / "rank0.jsonl"
    R = Runner(0, str(path))
    R.run_families(SimpleNamespace(R=R), FAMILIES)
    R.out.close()
    assert [name for name, _ in FAMILIES] == ["first", "second", "third"]
    assert seen == [("setup", "first"), ("case", 1, 1), ("setup", "between"), ("case", 2, 2), ("setup", "second")]
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(r["family"], r["case"], bool(r.get("skipped"))) for r in rows] == [
        ("first", "one", False), ("first", "two", False), ("second", "skipped", True),
        ("third", "over every family", True), ("third", "skipped", True)]
    assert "left out second" in rows[3]["skipped"] and rows[4]["skipped"] == "no NCCL"
