"""Prints the headline table (purlin/NCCL time ratio per op, size and mode)
from a torch_purlin.bench JSON file:

    python benchmarks/headline.py benchmarks/results/cuda_h200x2_20261130.json
"""
import json
import sys


def main(path):
    d = json.load(open(path))
    rows = {}
    sizes = set()
    for r in d["results"]:
        t = {i["impl"]: i["time_us"] for i in r["impls"] if i.get("time_us")}
        if "purlin" not in t or len(t) < 2:
            continue
        other = next(k for k in t if k != "purlin")
        key = (r["op"], r["place"], r["mode"])
        rows.setdefault(key, {})[r["size"]] = (t["purlin"], t[other] / t["purlin"])
        sizes.add(r["size"])
    sizes = sorted(sizes)
    fmt = lambda b: f"{b >> 20}M" if b >= 1 << 20 else f"{b >> 10}K"  # noqa: E731
    print("| op | placement | mode | " + " | ".join(fmt(s) for s in sizes) + " |")
    print("|---|---|---|" + "---|" * len(sizes))
    for (op, place, mode), v in sorted(rows.items()):
        cells = [f"{v[s][1]:.2f}x" if s in v else "" for s in sizes]
        print(f"| {op} | {place} | {mode} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(sys.argv[1])
