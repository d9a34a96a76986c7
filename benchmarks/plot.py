"""Draws one PNG per collective from a purlin_bench JSON file (the same
plots `--png-dir` / `--out-dir` make), e.g. for results measured where
matplotlib is absent:

    python benchmarks/plot.py benchmarks/results/cuda_h200x2_20261130.json benchmarks/results/cuda_h200x2_20261130_png
    python benchmarks/plot.py RESULTS.json --out DIR                 # the same

Each PNG: latency (time per op) and busbw against size, log2 x-axis; a colour
per impl (purlin, purlin-sym, nccl, symm1, symm2, ...), solid lines for graph
mode and dashed for eager, round markers out-of-place and square in-place.
Without matplotlib it says so and exits 1.
"""
import argparse
import json
import os
import sys

from purlin_bench import report as bench_report  # (benchmarks/ is this script's folder; no torch_purlin needed)

if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("json")
    p.add_argument("dir", nargs="?", help="where the PNGs go (or --out DIR)")
    p.add_argument("--out", help="the same as DIR")
    a = p.parse_args()
    if not (a.dir or a.out):
        p.error("give the output directory: plot.py RESULTS.json DIR")
    d = json.load(open(a.json))
    made = bench_report.plot(d["results"], d["meta"], a.out or a.dir)
    for path in made:
        print(path)
    sys.exit(0 if made else 1)
