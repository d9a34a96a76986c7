"""benchmarks/suggest_table.py: protocol-table rows from a native bench run (synthetic JSON)."""
import json
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "benchmarks"))
import suggest_table  # noqa: E402

M = 1 << 20


def record(op, size, purlin_us, nccl_us, mode="graph", place="in-place", proto="one-shot", wrong=0):
    return {"op": op, "size": size, "mode": mode, "place": place,
            "impls": [{"impl": "purlin", "time_us": purlin_us, "proto": proto, "wrong": wrong},
                      {"impl": "nccl", "time_us": nccl_us, "wrong": 0}]}


def write(tmp_path, records, world=4, name="b.json"):
    path = tmp_path / name
    path.write_text(json.dumps({"meta": {"world_size": world}, "results": records}))
    return str(path)


def test_rows_start_above_the_last_size_purlin_kept_up(tmp_path, capsys):
    recs = [record("all_reduce", s * M, t, 100) for s, t in ((16, 80), (64, 95), (256, 110), (1024, 120))]
    recs += [record("all_gather", s * M, 90, 100) for s in (16, 64, 256, 1024)]  # wins everywhere: no row
    recs += [record("broadcast", s * M, t, 100) for s, t in ((16, 90), (64, 99), (256, 101), (1024, 90))]
    # eager loses at 64M although graph wins: the worst mode decides
    recs += [record("all_to_all", 16 * M, 90, 100), record("all_to_all", 64 * M, 90, 100),
             record("all_to_all", 64 * M, 120, 100, mode="eager"), record("all_to_all", 256 * M, 130, 100)]
    items = suggest_table.main([write(tmp_path, recs)])
    assert items == ["all_reduce@4=128M", "all_to_all@4=32M"]
    out = capsys.readouterr().out
    assert "slower than NCCL below the row (not expressible as a from-row): 256M" in out  # broadcast
    assert "all_reduce@4=128M,all_to_all@4=32M" in out
    # graph only: all_to_all keeps up at 64M
    assert suggest_table.main([write(tmp_path, recs), "--modes", "graph"]) == ["all_reduce@4=128M",
                                                                               "all_to_all@4=128M"]


def test_a_first_loss_before_the_next_power_of_two_and_a_margin(tmp_path):
    recs = [record("reduce_scatter", s, t, 100) for s, t in ((64 * M, 90), (96 * M, 105), (1024 * M, 130))]
    assert suggest_table.main([write(tmp_path, recs)]) == ["reduce_scatter@4=96M"]
    assert suggest_table.main([write(tmp_path, recs), "--margin", "0.8"]) == ["reduce_scatter@4=128M"]
    recs = [record("reduce", s * M, 150, 100) for s in (1, 4)]  # slower at every size measured
    assert suggest_table.main([write(tmp_path, recs)]) == ["reduce@4=1M"]


@pytest.mark.parametrize("bad,why", [
    (dict(proto="nccl"), "TORCH_PURLIN_CUDA_NCCL_FROM=none"),
    (dict(wrong=3), "#wrong"),
])
def test_refuses_runs_that_cannot_tell(tmp_path, bad, why):
    with pytest.raises(SystemExit, match=why):
        suggest_table.main([write(tmp_path, [record("all_reduce", 64 * M, 90, 100, **bad)])])


def test_refuses_mixed_world_sizes(tmp_path):
    a = write(tmp_path, [record("all_reduce", M, 1, 2)], world=2, name="a.json")
    b = write(tmp_path, [record("all_reduce", M, 1, 2)], world=4, name="b.json")
    with pytest.raises(SystemExit, match="different world sizes"):
        suggest_table.main([a, b])
