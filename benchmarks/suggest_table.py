"""Protocol-table NCCL rows for one world size, from a bench run of purlin's native datapath.

    TORCH_PURLIN_CUDA_NCCL_FROM=none PYTHONPATH=benchmarks torchrun --nproc-per-node=W -m purlin_bench --device cuda \\
        --impls purlin,nccl -b 1K -e 1G -f 2 --mode both --json native.json
    python benchmarks/suggest_table.py native.json [more.json ...] [--modes graph,eager] [--margin 1.0]

For each family of the table (NOTE [protocol table] in csrc/backend/group/protocol_table.h) it
finds the sizes where NCCL was faster than purlin, time(nccl) / time(purlin) below
--margin, in any mode and placement asked for; the row starts above the largest size where
purlin was not slower (the next power of two), so that no measured size gets slower and the
unmeasured sizes between a win and a loss stay native only up to the next power of two. It
prints a ratio table per family and the family@W=bytes items for TORCH_PURLIN_CUDA_NCCL_FROM.
Gather and scatter never consult the table (their sizes differ between ranks) and are left
out. A bench run with the table active (purlin rows whose protocol is "nccl") is refused:
its purlin times are NCCL's.
"""
import argparse
import json
import os
import sys

from purlin_bench import report as bench_report  # (benchmarks/ is this script's folder; no torch_purlin needed)

FAMILIES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all", "reduce")


def ratios(records, modes):
    """{family: {size: [(mode, place, time(nccl) / time(purlin))]}} of the rows with both impls."""
    out = {}
    for r in records:
        if r["op"] not in FAMILIES or r["mode"] not in modes:
            continue
        t = {i["impl"]: i for i in r["impls"]}
        p, n = t.get("purlin"), t.get("nccl")
        if not p or not n or not p.get("time_us") or not n.get("time_us"):
            continue
        if p.get("proto") == "nccl":
            raise SystemExit(f"{r['op']} {bench_report.fmt_size(r['size'])} {r['mode']}: purlin ran on NCCL "
                             "(the protocol table); measure with TORCH_PURLIN_CUDA_NCCL_FROM=none")
        if p.get("wrong") or n.get("wrong"):
            raise SystemExit(f"{r['op']} {bench_report.fmt_size(r['size'])} {r['mode']}: #wrong is not 0")
        out.setdefault(r["op"], {}).setdefault(r["size"], []).append(
            (r["mode"], r["place"], n["time_us"] / p["time_us"]))
    return out


def row_from(by_size, margin):
    """(bytes from which the family should run on NCCL, 0: never; the losing sizes a row cannot
    cover). The row starts above the largest size where purlin kept up in every mode and
    placement: at the next power of two, or at the first losing size if that comes earlier."""
    sizes = sorted(by_size)
    losing = [s for s in sizes if min(x[2] for x in by_size[s]) < margin]
    kept = [s for s in sizes if s not in losing]
    if not losing or kept and kept[-1] == sizes[-1]:
        return 0, losing
    if not kept:
        return sizes[0], []
    row = min([1 << kept[-1].bit_length()] + [s for s in losing if s > kept[-1]])
    return row, [s for s in losing if s < row]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("json", nargs="+")
    p.add_argument("--modes", default="graph,eager", help="modes that must not be slower (default graph,eager)")
    p.add_argument("--margin", type=float, default=1.0,
                   help="NCCL rows where time(nccl) / time(purlin) is below this (default 1.0)")
    a = p.parse_args(argv)
    records, worlds = [], set()
    for path in a.json:
        d = json.load(open(path))
        worlds.add(d["meta"].get("world_size"))
        records += d["results"]
    if len(worlds) != 1:
        raise SystemExit(f"the files come from different world sizes: {sorted(worlds, key=str)}")
    world = worlds.pop()
    by_family = ratios(records, set(a.modes.split(",")))
    items = []
    for fam in FAMILIES:
        if fam not in by_family:
            continue
        by_size = by_family[fam]
        print(f"## {fam} (W = {world}): worst time(nccl) / time(purlin) per size")
        for s in sorted(by_size):
            mode, place, r = min(by_size[s], key=lambda x: x[2])
            print(f"  {bench_report.fmt_size(s):>6}  {r:5.2f}x  ({mode}, {place})")
        row, uncovered = row_from(by_size, a.margin)
        if row:
            items.append(f"{fam}@{world}={bench_report.fmt_size(row)}")
        if uncovered:
            print("  slower than NCCL below the row (not expressible as a from-row): "
                  + ", ".join(bench_report.fmt_size(s) for s in uncovered))
    print("TORCH_PURLIN_CUDA_NCCL_FROM rows for W = %s: %s" % (world, ",".join(items) or "none"))
    return items


if __name__ == "__main__":
    main()
