"""cpu_two_shot.py — where CPU all_reduce should switch from one-shot to two-shot, measured.

    PYTHONPATH=benchmarks python benchmarks/cpu_two_shot.py --worlds 2,4 \\
        --out benchmarks/results/cpu_two_shot_<date>.md

For each world W it runs purlin_bench (all_reduce in place, purlin alone, its own ranks) with
every rank on one protocol: one-shot (TORCH_PURLIN_CPU_TWO_SHOT_BYTES far above every size) and
two-shot (from 1 byte), --passes times each in alternating order, and keeps each size's fastest
time per protocol (the machine's slow stretches must then cover a protocol in every pass to
show). The switch at W is the smallest measured size from which two-shot is faster than one-shot
by --margin at that size and every larger one (none: one-shot everywhere). It prints, and writes
to --out, the table of times and ratios with the command, commit, machine and date, and the
TORCH_PURLIN_CPU_TWO_SHOT_BYTES value these switches give: the largest world's switch for every
world not measured, @W= items for the others. The variable's default (csrc/common/env.cc) is
taken from the committed table (NOTE [protocol table] in csrc/backend/group/protocol_table.h).
"""
import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile

from purlin_bench import report as bench_report

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROTOCOLS = {"one-shot": "1024G", "two-shot": "1"}
NEVER = 1 << 40   # the switch written when one-shot wins everywhere (as the CUDA default's 4G at W = 2)


def run_bench(world, protocol, args, path):
    env = dict(os.environ, TORCH_PURLIN_CPU_TWO_SHOT_BYTES=PROTOCOLS[protocol], OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([os.path.join(ROOT, "benchmarks"), ROOT]))
    cmd = [sys.executable, "-m", "purlin_bench", "--device", "cpu", "--impls", "purlin", "--ops", "all_reduce",
           "-b", args.min_bytes, "-e", args.max_bytes, "-f", "2", "--nproc", str(world), "--time-cap",
           str(args.time_cap), "-n", str(args.iters), "-w", "5", "--json", path]
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
    with open(path) as f:
        return {r["size"]: r["impls"][0]["time_us"] for r in json.load(f)["results"]
                if r["impls"] and not r["impls"][0].get("error") and not r["impls"][0].get("wrong")}


def switch(times, margin):
    """The smallest size from which two-shot wins by `margin` at every size measured from it on."""
    sizes = sorted(s for s in times["one-shot"] if s in times["two-shot"])
    best = None
    for s in reversed(sizes):
        if times["one-shot"][s] / times["two-shot"][s] < margin:
            break
        best = s
    return best


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worlds", default="2,4")
    ap.add_argument("-b", "--min-bytes", default="16K")
    ap.add_argument("-e", "--max-bytes", default="16M")
    ap.add_argument("--passes", type=int, default=2)
    ap.add_argument("--time-cap", type=float, default=0.3)
    ap.add_argument("--iters", type=int, default=40)
    ap.add_argument("--margin", type=float, default=1.05, help="time(one-shot) / time(two-shot) two-shot must reach")
    ap.add_argument("--out", help="write the markdown here")
    args = ap.parse_args(argv)
    worlds = [int(w) for w in args.worlds.split(",")]
    commit = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"], capture_output=True,
                            text=True).stdout.strip() or "?"
    lines = ["# CPU all_reduce: one-shot against two-shot", "",
             f"- command: `PYTHONPATH=benchmarks python benchmarks/cpu_two_shot.py {' '.join(argv or sys.argv[1:])}`",
             f"- commit: {commit}; date (UTC): "
             f"{datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M')}",
             f"- machine: {platform.machine()}, {os.cpu_count()} cores; one rank per process, one thread each",
             f"- all_reduce in place, float32, sum; each time the fastest of {args.passes} passes (protocols "
             f"alternating) of purlin_bench's median; two-shot chosen where it is {args.margin}x faster at that "
             "size and every larger one", ""]
    switches = {}
    with tempfile.TemporaryDirectory() as tmp:
        for w in worlds:
            times = {p: {} for p in PROTOCOLS}
            for k in range(args.passes):
                order = list(PROTOCOLS) if k % 2 == 0 else list(reversed(PROTOCOLS))
                for p in order:
                    got = run_bench(w, p, args, os.path.join(tmp, f"{w}_{p}_{k}.json"))
                    for s, t in got.items():
                        times[p][s] = min(t, times[p].get(s, t))
            switches[w] = switch(times, args.margin)
            lines += [f"## world {w}", "", "| size | one-shot (us) | two-shot (us) | one-shot / two-shot |",
                      "|---|---|---|---|"]
            for s in sorted(times["one-shot"]):
                a, b = times["one-shot"][s], times["two-shot"].get(s)
                lines.append(f"| {bench_report.fmt_size(s)} | {bench_report.fmt_us(a)} | {bench_report.fmt_us(b)} | "
                             + (f"{a / b:.2f} |" if a and b else "n/a |"))
            chosen = bench_report.fmt_size(switches[w]) if switches[w] else "none (one-shot at every size)"
            lines += ["", f"two-shot from: {chosen}", ""]
    top = max(worlds)
    value = [bench_report.fmt_size(switches[top] or NEVER)]
    value += [f"@{w}={bench_report.fmt_size(switches[w] or NEVER)}" for w in worlds if w != top]
    lines += [f"TORCH_PURLIN_CPU_TWO_SHOT_BYTES={','.join(value)}", ""]
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
