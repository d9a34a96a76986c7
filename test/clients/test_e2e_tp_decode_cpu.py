"""The end-to-end tensor-parallel decode benchmark (benchmarks/e2e_tp_decode.py) as a CPU smoke test:
a tiny Llama-architecture decoder at world 2 decodes on purlin and on gloo, each checked against
rank 0's single-rank reference (bit for bit at world 2: #wrong must be 0), the compute-only row
gives a share of time in collectives, and the JSON carries what a result needs (command, date,
commit, device). Also checks that the check itself catches wrong results: the row without
collectives would differ from the reference.

    python -m pytest test/test_e2e_tp_decode_cpu.py -q
"""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))


def test_e2e_tp_decode_cpu_smoke(tmp_path):
    out = tmp_path / "e2e.json"
    r = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "e2e_tp_decode.py"), "--device", "cpu",
                        "--world", "2", "--batches", "1,3", "--steps", "3", "--trials", "1", "--check-steps", "3",
                        "--json", str(out), "--plot", str(tmp_path / "e2e.png")],
                       capture_output=True, text=True, timeout=300, env=dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=ROOT))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    res = json.loads(out.read_text())
    rows = {(x["impl"], x["batch"]): x for x in res["rows"]}
    assert set(rows) == {(i, b) for i in ("purlin", "gloo", "none") for b in (1, 3)}, sorted(rows)
    for impl in ("purlin", "gloo"):
        for b in (1, 3):
            x = rows[(impl, b)]
            assert x["error"] is None and x["wrong"] == 0, x
            assert x["tokens_per_s"] > 0 and 0.0 <= x["collective_share"] < 1.0, x
    assert "wrong" not in rows[("none", 1)]  # not a correct implementation: never checked
    for key in ("command", "date_utc", "commit", "device", "torch", "shape_dims", "check"):
        assert key in res["meta"], key
    assert res["meta"]["check"] == "exact"


def test_reference_catches_a_missing_all_reduce():
    """The benchmark's check is not vacuous: skipping one all_reduce changes the logits."""
    import torch
    import tp_decoder as tpd
    shape, world, dev = tpd.SHAPES["tiny"], 2, torch.device("cpu")
    shards = [tpd.Weights(shape, 2, r, world, torch.bfloat16, dev) for r in range(world)]
    prompt = torch.randint(0, shape.vocab, (2, 5), generator=torch.Generator().manual_seed(3))
    pos = torch.arange(5)
    ref = tpd.Reference(shards, [tpd.Cache(w, 2, 2, 8, torch.bfloat16, dev) for w in shards]).forward(prompt, pos)

    class LocalOnly:  # every rank keeps its own partial sums: what a broken all_reduce would leave
        def all_reduce(self, t):
            pass

        def all_gather_cols(self, local):
            return torch.cat([local] * world, dim=-1)

    got = tpd.Decoder(shards[0], tpd.Cache(shards[0], 2, 2, 8, torch.bfloat16, dev), LocalOnly()).forward(prompt, pos)
    assert got.shape == ref.shape and not torch.equal(got, ref)
