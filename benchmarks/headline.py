"""Headline tables from a purlin_bench JSON file.

    python benchmarks/headline.py RESULTS.json            # ratio grid: time(nccl) / time(purlin)
                                                          # per op, placement, mode and size
    python benchmarks/headline.py RESULTS.json --vs symm  # the same against torch symm-mem
    python benchmarks/headline.py RESULTS.json --table    # the README table: graph-mode times of
                                                          # every impl at 1K 64K 1M 16M 256M 1G,
                                                          # ratios, purlin's protocol and SMs

Ratios are time(other) / time(base): above 1, the base (purlin) is faster.
"""
import argparse
import json
import os
import sys

from purlin_bench import report as bench_report  # (benchmarks/ is this script's folder; no torch_purlin needed)


def times(row):
    """{label: time_us} of a row, symm-mem impls also folded into "symm" (the faster)."""
    t = {r["impl"]: r["time_us"] for r in row["impls"] if r.get("time_us")}
    symm = [r["time_us"] for r in row["impls"] if bench_report.kind(r) == "symm-mem" and r.get("time_us")]
    if symm:
        t["symm"] = min(symm)
    return t


def grid(records, base, vs, mode):
    rows, sizes = {}, set()
    for r in records:
        if mode and r["mode"] != mode:
            continue
        t = times(r)
        other = vs or next((k for k in ("nccl", "gloo") if k in t), None)
        if base not in t or other not in t:
            continue
        rows.setdefault((r["op"], r["place"], r["mode"]), {})[r["size"]] = t[other] / t[base]
        sizes.add(r["size"])
    sizes = sorted(sizes)
    out = ["| op | placement | mode | " + " | ".join(bench_report.fmt_size(s) for s in sizes) + " |",
           "|---|---|---|" + "---|" * len(sizes)]
    for (op, place, mode_), v in sorted(rows.items()):
        cells = [f"{v[s]:.2f}x" if s in v else "" for s in sizes]
        out.append(f"| {op} | {place} | {mode_} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("json")
    p.add_argument("--table", action="store_true", help="the README headline table")
    p.add_argument("--base", default="purlin", help="grid: the impl in the denominator")
    p.add_argument("--vs", help="grid: the impl in the numerator (default nccl, else gloo; "
                   "symm = the faster of symm1 and symm2)")
    p.add_argument("--mode", choices=("eager", "graph"),
                   help="grid: default every mode; table: default graph (eager if none)")
    p.add_argument("--place", choices=("in-place", "out-of-place"),
                   help="table: the placement shown for ops that have both (default out-of-place)")
    p.add_argument("--sizes", help="table: comma list with K/M/G suffixes (default 1K,64K,1M,16M,256M,1G)")
    a = p.parse_args(argv)
    d = json.load(open(a.json))
    if a.table:
        sizes = bench_report.HEADLINE_SIZES
        if a.sizes:
            scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
            sizes = [int(x[:-1]) * scale[x[-1].upper()] if x[-1].upper() in scale else int(x)
                     for x in a.sizes.split(",")]
        print(bench_report.headline_table(d["results"], sizes, a.mode, a.place), end="")
    else:
        print(grid(d["results"], a.base, a.vs, a.mode))


if __name__ == "__main__":
    main()
