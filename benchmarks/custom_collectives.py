"""Each application collective against the composed path frameworks run today, on the same
group in one run: time and ratio per size, nccl-tests-like columns.

    torchrun --nproc-per-node=2 benchmarks/custom_collectives.py                  # CPU, purlin both ways
    torchrun --nproc-per-node=2 benchmarks/custom_collectives.py --device cuda    # composed path on NCCL
    ... --out benchmarks/results/custom_collectives_cpu_np2.md   # rank 0 writes the table with its provenance

Paths (per-rank bytes = the input a rank holds):
  ulysses_fwd  all_to_all_dims [S/W, H, D] -> [S, H/W, D]   vs permute+contiguous, all_to_all_single
  ulysses_bwd  all_to_all_dims [S, H/W, D] -> [S/W, H, D]   vs all_to_all_single, permute copy into the output
  all_gather_v uneven counts along dim 0                    vs pad, all_gather_into_tensor, copy of each piece
  reduce_scatter_v uneven counts along dim 0                vs pad, reduce_scatter_tensor, narrow copy
  moe_dispatch tokens sorted by expert -> expert-major      vs all_to_all_single with splits, index permute
Timing: the two paths alternate within every repetition (the machine's load hits both alike);
per path the best repetition's mean over its iterations, the slowest rank's.
"""
import argparse
import datetime
import os
import platform
import subprocess
import time

import torch
import torch.distributed as dist

import torch_purlin


def parse_size(s):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(s[:-1]) * units[s[-1].upper()]) if s[-1].upper() in units else int(s)


class Case:
    """One collective at one size: custom() and composed() each run it once."""


def ulysses(W, nbytes, dev, fwd, comp_group):
    H, D = 4 * W, 64
    S = W * max(1, nbytes // 4 // (H * D))  # a rank's input: S/W x H x D floats = nbytes
    c = Case()
    c.bytes = S // W * H * D * 4
    if fwd:
        x = torch.randn(S // W, H, D, device=dev)
        out = torch.empty(S, H // W, D, device=dev)

        def composed():
            send = x.view(S // W, W, H // W, D).permute(1, 0, 2, 3).contiguous()
            dist.all_to_all_single(out.view(W, S // W, H // W, D), send, group=comp_group)
        c.custom = lambda: torch_purlin.all_to_all_dims(out, x, 1, 0)
    else:
        x = torch.randn(S, H // W, D, device=dev)
        out = torch.empty(S // W, H, D, device=dev)
        recv = torch.empty(W, S // W, H // W, D, device=dev)

        def composed():
            dist.all_to_all_single(recv, x, group=comp_group)
            out.view(S // W, W, H // W, D).copy_(recv.permute(1, 0, 2, 3))
        c.custom = lambda: torch_purlin.all_to_all_dims(out, x, 0, 1)
    c.composed = composed
    return c


def uneven_counts(W, rows):
    # Rank r holds (r + 1) / mean shares: the last rank about twice the mean.
    w = [r + 1 for r in range(W)]
    return [rows * x // sum(w) for x in w]


def all_gather_v(W, me, nbytes, dev, comp_group):
    row = 256
    counts = uneven_counts(W, max(W, W * nbytes // 4 // row))
    m = max(counts)
    x = torch.randn(counts[me], row, device=dev)
    out = torch.empty(sum(counts), row, device=dev)
    padded_in = torch.zeros(m, row, device=dev)
    gathered = torch.empty(W * m, row, device=dev)
    starts = [sum(counts[:r]) for r in range(W)]
    c = Case()
    c.bytes = sum(counts) * row * 4 // W  # the mean a rank sends

    def composed():
        padded_in[:counts[me]].copy_(x)
        dist.all_gather_into_tensor(gathered, padded_in, group=comp_group)
        for r in range(W):
            out[starts[r]:starts[r] + counts[r]].copy_(gathered[r * m:r * m + counts[r]])
    c.custom = lambda: torch_purlin.all_gather_v(out, x, counts)
    c.composed = composed
    return c


def reduce_scatter_v(W, me, nbytes, dev, comp_group):
    row = 256
    counts = uneven_counts(W, max(W, nbytes // 4 // row))
    m = max(counts)
    x = torch.randn(sum(counts), row, device=dev)
    out = torch.empty(counts[me], row, device=dev)
    padded = torch.zeros(W * m, row, device=dev)
    part = torch.empty(m, row, device=dev)
    starts = [sum(counts[:r]) for r in range(W)]
    c = Case()
    c.bytes = x.numel() * 4

    def composed():
        for r in range(W):
            padded[r * m:r * m + counts[r]].copy_(x[starts[r]:starts[r] + counts[r]])
        dist.reduce_scatter_tensor(part, padded, group=comp_group)
        out.copy_(part[:counts[me]])
    c.custom = lambda: torch_purlin.reduce_scatter_v(out, x, counts)
    c.composed = composed
    return c


def moe_dispatch(W, me, nbytes, dev, comp_group):
    H, L = 512, 4
    E = W * L
    T = max(E, nbytes // 4 // H)
    g = torch.Generator().manual_seed(7)
    counts = [torch.multinomial(torch.ones(E), T, replacement=True, generator=g).bincount(minlength=E).tolist()
              for _ in range(W)]
    x = torch.randn(sum(counts[me]), H, device=dev)
    mine = [sum(counts[s][me * L + l] for l in range(L)) for s in range(W)]  # tokens from each source
    out = torch.empty(sum(counts[s][me * L + l] for s in range(W) for l in range(L)), H, device=dev)
    recv = torch.empty_like(out)
    in_splits = [sum(counts[me][d * L:(d + 1) * L]) for d in range(W)]
    # recv is source-major (s, l); the expert-major order (l, s) is an index permutation of its rows.
    starts, at = {}, 0
    for s in range(W):
        for l in range(L):
            starts[s, l] = at
            at += counts[s][me * L + l]
    perm = torch.cat([torch.arange(starts[s, l], starts[s, l] + counts[s][me * L + l]) for l in range(L)
                      for s in range(W)]).to(dev)
    c = Case()
    c.bytes = sum(map(sum, counts)) * H * 4 // W  # the mean a rank sends

    def composed():
        dist.all_to_all_single(recv, x, mine, in_splits, group=comp_group)
        torch.index_select(recv, 0, perm, out=out)
    c.custom = lambda: torch_purlin.moe_dispatch(out, x, counts)
    c.composed = composed
    return c


def timed(fn, iters, dev):
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    if dev.type == "cuda":
        torch.cuda.synchronize()
    t = torch.tensor([(time.perf_counter() - t0) / iters])
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def provenance():
    def run(*cmd):
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=10).stdout.strip()
        except OSError:
            return "?"
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": run("git", "rev-parse", "--short", "HEAD")
        + (" (dirty)" if run("git", "status", "--porcelain", "-uno") else ""),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.platform()}",
        "load": run("uptime"),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--sizes", default="64K,1M,4M,16M", help="per-rank bytes")
    ap.add_argument("--ops", default="ulysses_fwd,ulysses_bwd,all_gather_v,reduce_scatter_v,moe_dispatch")
    ap.add_argument("--reps", type=int, default=5, help="repetitions; the best counts")
    ap.add_argument("--iters", type=int, default=0, help="iterations per repetition (0: by size)")
    ap.add_argument("--out", default="", help="rank 0 writes the table (markdown) here")
    args = ap.parse_args()

    dev = torch.device(args.device)
    if dev.type == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group("cpu:gloo,cuda:purlin")
        comp_group = dist.new_group(backend="nccl")
        dev = torch.device("cuda", torch.cuda.current_device())
    else:
        torch.set_num_threads(1)
        dist.init_process_group("purlin")
        comp_group = None  # the same purlin group: its native all_to_all_single / all_gather / reduce_scatter
    W, me = dist.get_world_size(), dist.get_rank()
    makers = {
        "ulysses_fwd": lambda n: ulysses(W, n, dev, True, comp_group),
        "ulysses_bwd": lambda n: ulysses(W, n, dev, False, comp_group),
        "all_gather_v": lambda n: all_gather_v(W, me, n, dev, comp_group),
        "reduce_scatter_v": lambda n: reduce_scatter_v(W, me, n, dev, comp_group),
        "moe_dispatch": lambda n: moe_dispatch(W, me, n, dev, comp_group),
    }
    composed_on = "NCCL" if dev.type == "cuda" else "purlin"
    lines = [f"| op | size (B) | count | type | custom time (us) | algbw (GB/s) | composed time (us) | algbw (GB/s) "
             f"| composed / custom |", "|---|---:|---:|---|---:|---:|---:|---:|---:|"]
    for op in args.ops.split(","):
        for size in args.sizes.split(","):
            c = makers[op](parse_size(size))
            iters = args.iters or max(3, min(200, (64 << 20) // parse_size(size) // 4))  # alike on every rank
            c.custom(), c.composed()  # warm-up (and the Spec cache)
            best = {"custom": float("inf"), "composed": float("inf")}
            for rep in range(args.reps):
                order = ("custom", "composed") if rep % 2 == 0 else ("composed", "custom")
                for path in order:
                    best[path] = min(best[path], timed(getattr(c, path), iters, dev))
            line = (f"| {op} | {c.bytes} | {c.bytes // 4} | float | {best['custom'] * 1e6:.1f} | "
                    f"{c.bytes / best['custom'] / 1e9:.2f} | {best['composed'] * 1e6:.1f} | "
                    f"{c.bytes / best['composed'] / 1e9:.2f} | {best['composed'] / best['custom']:.2f} |")
            lines.append(line)
            if me == 0:
                print(line, flush=True)
    if me == 0 and args.out:
        p = provenance()
        with open(args.out, "w") as f:
            f.write(f"# Application collectives vs the composed path ({args.device}, world {W})\n\n")
            f.write(f"- command: `torchrun --nproc-per-node={W} benchmarks/custom_collectives.py "
                    f"--device {args.device} --sizes {args.sizes} --reps {args.reps}`\n")
            f.write(f"- commit: {p['commit']}\n- machine: {p['machine']}\n- date: {p['date']}\n")
            f.write(f"- load at the end (`uptime`): {p['load']}\n")
            f.write(f"- composed path on: {composed_on}; custom: torch_purlin's application collectives on purlin\n")
            f.write("- time: best of the repetitions (the two paths alternate), mean per call, slowest rank;"
                    " size = bytes a rank sends (its input)\n\n")
            f.write("\n".join(lines) + "\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
