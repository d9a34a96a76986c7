"""Draws one PNG per collective from a torch_purlin.bench JSON file (the same
plots `--png-dir` makes), e.g. for results measured where matplotlib is absent:

    python benchmarks/plot.py benchmarks/results/cuda_h200x2_20261130.json benchmarks/results/cuda_h200x2_20261130_png
"""
import json
import sys

from torch_purlin.bench_report import plot

if __name__ == "__main__":
    d = json.load(open(sys.argv[1]))
    plot(d["results"], d["meta"], sys.argv[2])
