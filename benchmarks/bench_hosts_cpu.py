"""Collectives of a group spanning simulated hosts: purlin (hierarchical where the protocol table's
hierarchical rows say so, NOTE [hierarchical collectives]) against flat gloo over the same ranks.

Each simulated host is a set of rank processes in their own mount and UTS namespaces with a private
/dev/shm (test/support/sim_hosts.py; needs root). Across hosts the ranks talk over TCP on 127.0.0.1, so
"across hosts" here costs what loopback TCP costs, not what a network does: the times say how the
two compare on this machine, and the bytes columns what a network would carry.

    sudo PYTHONPATH=.:test/support python benchmarks/bench_hosts_cpu.py --hosts 2x2 -b 1K -e 16M -f 4
    PYTHONPATH=.:test/support python benchmarks/bench_hosts_cpu.py --hosts 2x2 --ops all_reduce,broadcast --out /tmp/hosts.md

(the repository root for torch_purlin, test/support/ for the simulated hosts: test/support/sim_hosts.py)

Columns: op, bytes (the op's larger side per rank), how purlin ran it (hier: within hosts natively,
across on gloo; flat: gloo moving the bytes among all ranks, purlin reducing: NOTE [groups spanning
hosts]), median microseconds per call of purlin and of gloo
(the slowest rank's median), gloo / purlin, and the bytes crossing hosts per call summed over all
ranks under a model: purlin's hierarchical parts as NOTE [hierarchical collectives] moves them
(all_gather / all_to_all over the H hosts within each local index), flat (purlin's and gloo's alike)
modelled as gloo as a ring over all W ranks with each host's ranks adjacent (H of its W links cross
hosts; a broadcast reaches each rank outside the root's host whole).
"""
import argparse
import os
import statistics
import sys
import time

import torch_purlin  # noqa: F401  (the ranks import what this process imports)

OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast")


def parse_bytes(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(s[-1].upper(), 1)
    return int(float(s[:-1] if s[-1].upper() in "KMG" else s) * mult)


def human(n):
    for unit, m in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= m and n % m == 0:
            return f"{n // m}{unit}"
    return str(n)


def crossing_bytes(op, n, hosts, per_host, hier):
    """Bytes crossing hosts per call, all ranks together (see the module docstring's model)."""
    H, L = hosts, per_host
    W = H * L
    if hier:
        return {"all_reduce": W * (H - 1) * n / L, "all_gather": W * (H - 1) * n / W,
                "reduce_scatter": W * (H - 1) * n / W}[op]
    return {"all_reduce": H * 2 * (W - 1) / W * n, "all_gather": H * (W - 1) * n / W,
            "reduce_scatter": H * (W - 1) * n / W, "broadcast": (W - L) * n}[op]


def rank_main(rank, world, args):
    """One rank: times every (op, size) on the purlin default group and on a gloo group."""
    import torch
    import torch.distributed as dist
    import torch_purlin

    torch.set_num_threads(1)
    dist.init_process_group("purlin")
    gloo = dist.new_group(backend="gloo")
    rows = []
    for op in args["ops"]:
        n = args["begin"]
        while n <= args["end"]:
            elems = max(world, n // 4 // world * world)  # float32, divisible by the world size
            times = {}
            for name, group in (("purlin", None), ("gloo", gloo)):
                x = torch.randn(elems)
                out = torch.empty(elems)
                small = torch.empty(elems // world)

                def call():
                    if op == "all_reduce":
                        dist.all_reduce(x, group=group)
                    elif op == "all_gather":
                        dist.all_gather_into_tensor(out, small, group=group)
                    elif op == "reduce_scatter":
                        dist.reduce_scatter_tensor(small, x, group=group)
                    else:
                        dist.broadcast(x, src=0, group=group)

                before = dict(torch_purlin.counters()) if name == "purlin" else {}
                call()  # sets up the subgroups
                t0 = time.perf_counter()
                call()
                # As many calls as fit the budget, the same count on every rank (they run in step).
                count = torch.tensor([min(args["iters"], max(3, int(args["seconds"] / (time.perf_counter() - t0))))])
                dist.all_reduce(count, op=dist.ReduceOp.MIN, group=gloo)
                samples = []
                for _ in range(int(count.item())):
                    dist.barrier(group=gloo)
                    t0 = time.perf_counter()
                    call()
                    samples.append(time.perf_counter() - t0)
                med = torch.tensor([statistics.median(samples)], dtype=torch.float64)
                dist.all_reduce(med, op=dist.ReduceOp.MAX, group=gloo)
                times[name] = med.item() * 1e6
                if name == "purlin":
                    after = torch_purlin.counters()
                    hier = any(k.endswith("across hosts") and after[k] != before.get(k) for k in after)
            # bytes: the larger side (all_gather's output, reduce_scatter's input), as the table reads it
            rows.append({"op": op, "bytes": elems * 4, "hier": hier, "purlin_us": times["purlin"],
                         "gloo_us": times["gloo"]})
            n *= args["factor"]
    dist.destroy_process_group()
    return rows if rank == 0 else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", default="2x2", help="HxL: H simulated hosts of L ranks each (default 2x2)")
    ap.add_argument("--ops", default=",".join(OPS))
    ap.add_argument("-b", "--begin", default="1K")
    ap.add_argument("-e", "--end", default="16M")
    ap.add_argument("-f", "--factor", type=int, default=4)
    ap.add_argument("--iters", type=int, default=30, help="most timed calls per cell")
    ap.add_argument("--seconds", type=float, default=1.0, help="time budget per cell")
    ap.add_argument("--out", help="also write the table (markdown) here")
    a = ap.parse_args()
    import sim_hosts

    why = sim_hosts.unshare_unavailable()
    if why:
        sys.exit(f"bench_hosts_cpu: {why}")
    H, L = (int(v) for v in a.hosts.lower().split("x"))
    hosts = [list(range(h * L, (h + 1) * L)) for h in range(H)]
    args = {"ops": a.ops.split(","), "begin": parse_bytes(a.begin), "end": parse_bytes(a.end), "factor": a.factor,
            "iters": a.iters, "seconds": a.seconds}
    results = sim_hosts.run_hosts("bench_hosts_cpu:rank_main", hosts, args=args, timeout=3600,
                                  env={"TORCH_PURLIN_LOG": "0"})
    rows = results[0]["value"]
    lines = [f"# {a.hosts} simulated hosts (float32, SUM; times: slowest rank's median)", "",
             "| op | bytes | purlin ran | purlin us | gloo us | gloo/purlin | crossing bytes purlin | "
             "crossing bytes gloo (ring) |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['op']} | {human(r['bytes'])} | {'hier' if r['hier'] else 'flat'} | "
                     f"{r['purlin_us']:.0f} | {r['gloo_us']:.0f} | {r['gloo_us'] / r['purlin_us']:.2f} | "
                     f"{crossing_bytes(r['op'], r['bytes'], H, L, r['hier']):.0f} | "
                     f"{crossing_bytes(r['op'], r['bytes'], H, L, False):.0f} |")
    text = "\n".join(lines)
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
