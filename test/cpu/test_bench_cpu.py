"""purlin_bench on CPU (benchmarks/purlin_bench): a short run at world 2 of purlin, gloo and the
machine's limit (NOTE [machine limit] in benchmarks/purlin_bench/impls.py), checked for what a
result needs: purlin and gloo right on fresh data, the limit timed but never checked, its ratio
column time(purlin) / time(limit), and the headline's "purlin / limit".

    python -m pytest test/cpu/test_bench_cpu.py -q
"""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))


@pytest.fixture(scope="module")
def bench_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    r = subprocess.run([sys.executable, "-m", "purlin_bench", "--device", "cpu", "--nproc", "2", "--ops",
                        "all_reduce,reduce_scatter,all_gather", "-b", "4K", "-e", "64K", "-f", "16", "--time-cap", "0.02",
                        "-n", "5", "-w", "1", "--json", str(out / "b.json"), "--md", str(out / "b.md")],
                       capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, OMP_NUM_THREADS="1",
                                PYTHONPATH=os.pathsep.join([os.path.join(ROOT, "benchmarks"), ROOT])))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return json.loads((out / "b.json").read_text()), (out / "b.md").read_text()


def test_limit_is_timed_next_to_purlin_and_gloo(bench_run):
    res, md = bench_run
    assert list(res["meta"]["impls"]) == ["purlin", "gloo", "limit"]
    rows = res["results"]
    assert {(r["op"], r["size"]) for r in rows} >= {("all_reduce", 4096), ("all_reduce", 65536)}
    for row in rows:
        by = {i["impl"]: i for i in row["impls"]}
        assert by["purlin"]["wrong"] == 0 and by["gloo"]["wrong"] == 0, row
        lim = by["limit"]
        assert lim["kind"] == "limit" and lim["error"] is None and lim["wrong"] is None, lim
        assert lim["time_us"] > 0 and lim["copy_calls_us"] > 0
        assert row["speedup"]["/limit"] == pytest.approx(by["purlin"]["time_us"] / lim["time_us"])
        assert "limit" not in row["speedup"]
    assert "/limit" in md and "purlin / limit" in md


def test_limit_copies():
    from purlin_bench import impls

    assert impls.LIMIT_COPIES["all_reduce"](2) == 2.5
    import torch

    pairs = impls.copy_pairs(1000, 2.5, torch.float32)
    assert [d.numel() for d, _ in pairs] == [1000, 1000, 500]
    assert all(d.data_ptr() != s.data_ptr() for d, s in pairs)
