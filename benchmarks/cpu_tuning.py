"""cpu_tuning.py — the CPU engine's two tuning defaults, measured: the all_reduce two-shot switch
(TORCH_PURLIN_CPU_TWO_SHOT_BYTES) and the round size (TORCH_PURLIN_CPU_ROUND_BYTES).

    PYTHONPATH=benchmarks python benchmarks/cpu_tuning.py two-shot --worlds 2,4 --out FILE.md
    PYTHONPATH=benchmarks python benchmarks/cpu_tuning.py rounds --values 256K,1M,4M,16M --out FILE.md

Each runs purlin_bench (purlin alone, its own ranks, float32, eager) once per value of the
variable, --passes times in alternating order, and keeps each cell's fastest time (the machine's
slow stretches must then cover a value in every pass to show).
- two-shot: all_reduce in place at each world of --worlds, every rank one-shot
  (TORCH_PURLIN_CPU_TWO_SHOT_BYTES far above every size) or two-shot (from 1 byte). The switch at
  W is the smallest measured size from which two-shot is faster by --margin at that size and every
  larger one (none: one-shot everywhere); the value printed holds the largest world's switch for
  worlds not measured and @W= items for the others.
- rounds: every --ops collective at world --world for each --values round size; the value
  printed is the one whose times, each over its cell's best, have the smallest geometric mean.
The output (stdout, and --out) is a markdown table with the command, commit, machine and date.
The defaults in csrc/common/env.cc are taken from the committed tables (docs/PERFORMANCE.md,
"Where each default comes from").
"""
import argparse
import datetime
import json
import math
import os
import platform
import subprocess
import sys
import tempfile

from purlin_bench import report as bench_report

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NEVER = 1 << 40   # the two-shot switch written when one-shot wins everywhere


def run_bench(env_items, world, ops, args, path):
    """{(op, size): time_us} of one bench run with env_items set on every rank."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join([os.path.join(ROOT, "benchmarks"), ROOT]),
               **env_items)
    cmd = [sys.executable, "-m", "purlin_bench", "--device", "cpu", "--impls", "purlin", "--ops", ops,
           "-b", args.min_bytes, "-e", args.max_bytes, "-f", str(args.step), "--nproc", str(world), "--time-cap",
           str(args.time_cap), "-n", str(args.iters), "-w", "5", "--json", path]
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
    with open(path) as f:
        return {(r["op"], r["size"]): r["impls"][0]["time_us"] for r in json.load(f)["results"]
                if r["impls"] and not r["impls"][0].get("error") and not r["impls"][0].get("wrong")}


def sweep(var, values, world, ops, args, tmp):
    """{value: {(op, size): fastest time_us over --passes}}, the values alternating in order."""
    times = {v: {} for v in values}
    for k in range(args.passes):
        for v in (values if k % 2 == 0 else list(reversed(values))):
            got = run_bench({var: v}, world, ops, args, os.path.join(tmp, f"{world}_{v}_{k}.json"))
            for cell, t in got.items():
                times[v][cell] = min(t, times[v].get(cell, t))
    return times


def header(args, argv, what):
    git = ["git", "-C", ROOT]
    commit = subprocess.run(git + ["rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    changed = subprocess.run(git + ["status", "--porcelain", "--untracked-files=no", "--", ".",
                                    ":(exclude)benchmarks/results"], capture_output=True, text=True).stdout.strip()
    commit = (commit or "?") + ("-dirty" if changed else "")   # the results being written do not count
    return [f"# CPU tuning: {what}", "",
            f"- command: `PYTHONPATH=benchmarks python benchmarks/cpu_tuning.py {' '.join(argv)}`",
            f"- commit: {commit}; date (UTC): "
            f"{datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M')}",
            f"- machine: {platform.machine()}, {os.cpu_count()} cores; one rank per process, one thread each",
            f"- purlin_bench, float32, eager; each time the fastest of {args.passes} passes (values alternating) of "
            "the bench's median", ""]


def switch(one, two, margin):
    """The smallest size from which two-shot wins by `margin` at every size measured from it on."""
    best = None
    for s in sorted((s for s in one if s in two), reverse=True):
        if one[s] / two[s] < margin:
            break
        best = s
    return best


def two_shot(args, argv, tmp):
    worlds = [int(w) for w in args.worlds.split(",")]
    lines = header(args, argv, "one-shot against two-shot all_reduce (in place)")
    lines[-2] += f"; two-shot chosen where it is {args.margin}x faster at that size and every larger one"
    switches = {}
    for w in worlds:
        t = sweep("TORCH_PURLIN_CPU_TWO_SHOT_BYTES", ["1024G", "1"], w, "all_reduce", args, tmp)
        one = {s: x for (_, s), x in t["1024G"].items()}
        two = {s: x for (_, s), x in t["1"].items()}
        switches[w] = switch(one, two, args.margin)
        lines += [f"## world {w}", "", "| size | one-shot (us) | two-shot (us) | one-shot / two-shot |",
                  "|---|---|---|---|"]
        for s in sorted(one):
            a, b = one[s], two.get(s)
            lines.append(f"| {bench_report.fmt_size(s)} | {bench_report.fmt_us(a)} | {bench_report.fmt_us(b)} | "
                         + (f"{a / b:.2f} |" if b else "n/a |"))
        chosen = bench_report.fmt_size(switches[w]) if switches[w] else "none (one-shot at every size)"
        lines += ["", f"two-shot from: {chosen}", ""]
    top = max(worlds)
    value = [bench_report.fmt_size(switches[top] or NEVER)]
    value += [f"@{w}={bench_report.fmt_size(switches[w] or NEVER)}" for w in worlds if w != top]
    return lines + [f"TORCH_PURLIN_CPU_TWO_SHOT_BYTES={','.join(value)}", ""]


def rounds(args, argv, tmp):
    values = args.values.split(",")
    t = sweep("TORCH_PURLIN_CPU_ROUND_BYTES", values, args.world, args.ops, args, tmp)
    cells = sorted(set.intersection(*(set(t[v]) for v in values)))
    best = {c: min(t[v][c] for v in values) for c in cells}
    score = {v: math.exp(sum(math.log(t[v][c] / best[c]) for c in cells) / len(cells)) for v in values}
    lines = header(args, argv, f"round size (TORCH_PURLIN_CPU_ROUND_BYTES), world {args.world}")
    lines += ["| op | size | " + " | ".join(f"{v} (us)" for v in values) + " |", "|---|---|" + "---|" * len(values)]
    for op, s in cells:
        lines.append(f"| {op} | {bench_report.fmt_size(s)} | "
                     + " | ".join(bench_report.fmt_us(t[v][(op, s)]) for v in values) + " |")
    lines += ["", "time over each cell's best, geometric mean: "
              + ", ".join(f"{v} {score[v]:.3f}" for v in values), ""]
    return lines + [f"TORCH_PURLIN_CPU_ROUND_BYTES={min(values, key=score.get)}", ""]


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=("two-shot", "rounds"))
    ap.add_argument("--worlds", default="2,4", help="two-shot: the worlds measured")
    ap.add_argument("--world", type=int, default=2, help="rounds: the world measured")
    ap.add_argument("--values", default="256K,1M,4M,16M", help="rounds: the round sizes measured")
    ap.add_argument("--ops", default="all_reduce,all_gather,reduce_scatter,broadcast,all_to_all,reduce,gather,scatter",
                    help="rounds: the collectives measured")
    ap.add_argument("-b", "--min-bytes", default=None, help="default: 16K (two-shot), 256K (rounds)")
    ap.add_argument("-e", "--max-bytes", default="16M")
    ap.add_argument("-f", "--step", type=int, default=None, help="default: 2 (two-shot), 4 (rounds)")
    ap.add_argument("--passes", type=int, default=2)
    ap.add_argument("--time-cap", type=float, default=0.3)
    ap.add_argument("--iters", type=int, default=40)
    ap.add_argument("--margin", type=float, default=1.05, help="two-shot: time(one-shot) / time(two-shot) to reach")
    ap.add_argument("--out", help="write the markdown here")
    args = ap.parse_args(argv)
    args.min_bytes = args.min_bytes or ("16K" if args.what == "two-shot" else "256K")
    args.step = args.step or (2 if args.what == "two-shot" else 4)
    with tempfile.TemporaryDirectory() as tmp:
        lines = (two_shot if args.what == "two-shot" else rounds)(args, argv, tmp)
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
