"""Output of torch_purlin.bench on rank 0: header, nccl-tests tables, JSON, PNGs.

The text is markdown with each table in a code fence, so stdout can be saved
as a .md file as it is.
"""
import datetime
import json
import os
import platform
import shlex
import socket
import sys

import torch

# per-impl columns: (title, width, format)
IMPL_COLS = (("time(us)", 10, "{:.1f}"), ("algbw(GB/s)", 12, "{:.3f}"),
             ("busbw(GB/s)", 12, "{:.3f}"), ("#wrong", 7, "{}"))
ROW_COLS = (("size(B)", 12), ("count", 11), ("type", 9), ("redop", 6))


def add_bandwidth(row):
    """algbw = size / time; busbw = algbw * the op's nccl-tests factor; GB = 1e9 B."""
    for rec in row["impls"]:
        t = rec["time_us"]
        rec["algbw_GBps"] = row["size"] / t / 1e3 if t else None
        rec["busbw_GBps"] = rec["algbw_GBps"] * row["busbw_factor"] if t else None
    return row


def format_table(rows, labels):
    """One line per size: row columns, a block per impl, then time(X) / time(first)."""
    vs = [(f"vs {lab}", max(9, len(lab) + 3)) for lab in labels[1:]]
    block = sum(w + 1 for _, w, _ in IMPL_COLS) - 1
    cols = list(ROW_COLS) + [(t, w) for t, w, _ in IMPL_COLS] * len(labels) + vs
    top = " " * sum(w + 1 for _, w in ROW_COLS)
    top += " ".join(f" {x} ".center(block, "-") for x in labels)
    lines = [top, " ".join(f"{t:>{w}}" for t, w in cols)]
    for row in rows:
        cells = [row["size"], row["count"], row["dtype"], row["redop"]]
        for r in row["impls"]:
            vals = (r["time_us"], r["algbw_GBps"], r["busbw_GBps"], r["wrong"])
            cells += (["n/a"] * 4 if r["error"] else
                      ["-" if v is None else f.format(v) for (_, _, f), v in zip(IMPL_COLS, vals)])
        base = row["impls"][0]["time_us"]
        cells += [f"{r['time_us'] / base:.2f}x" if base and r["time_us"] else "n/a"
                  for r in row["impls"][1:]]
        lines.append(" ".join(f"{v:>{w}}" for v, (_, w) in zip(cells, cols)))
    return "\n".join(lines)


class Printer:
    """Prints the header at once and each table when done; silent off rank 0."""

    def __init__(self, enabled, args, labels, world, module):
        self.enabled, self.seen = enabled, set()
        local = int(os.environ.get("LOCAL_WORLD_SIZE", world))
        nodes = f"--nnodes={world // local} " if world != local else ""
        prog = module if module.endswith(".py") else f"-m {module}"
        device = (f"cuda ({torch.cuda.get_device_name()})" if args.device.type == "cuda"
                  else f"cpu ({platform.machine()}, {os.cpu_count()} cores)")
        purlin = sys.modules.get("torch_purlin")
        self.meta = m = dict(
            command=f"torchrun {nodes}--nproc-per-node={local} {prog} {shlex.join(sys.argv[1:])}",
            date_utc=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S"),
            host=socket.gethostname(), torch=torch.__version__, world_size=world, device=device,
            purlin=getattr(purlin, "__version__", "?") if "purlin" in args.impls else "not used",
            dtype=str(args.dtype).removeprefix("torch."), redop=args.redop, iters=args.iters,
            warmup=args.warmup, time_cap_s=args.time_cap, check=args.check, modes=args.modes,
            impls=dict(zip(labels, args.impls)), notes=args.notes)
        self.print("\n".join([
            "# torch-purlin collective benchmark\n",
            f"- command: `{m['command']}`", f"- date (UTC): {m['date_utc']}",
            f"- host: {m['host']}", f"- torch: {m['torch']}; torch_purlin: {m['purlin']}",
            f"- world size: {m['world_size']}", f"- device: {m['device']}",
            f"- dtype {m['dtype']}, redop {m['redop']}, iters {m['iters']}, warmup "
            f"{m['warmup']}, time cap {m['time_cap_s']} s per size and impl, check "
            f"{'on' if m['check'] else 'off'}, modes {', '.join(m['modes'])}",
            f"- impls: {', '.join(f'{k} (backend {v})' for k, v in m['impls'].items())}; "
            f"vs X = time(X) / time({labels[0]}), above 1 means {labels[0]} is faster",
            "- time(us): median over iterations on each rank, max over ranks",
            *[f"- note: {x}" for x in m["notes"]], ""]))

    def print(self, text):
        if self.enabled:
            print(text, flush=True)

    def table(self, rows, labels):
        if not rows:
            return
        errors = dict.fromkeys((r["impl"], r["error"]) for row in rows
                               for r in row["impls"] if r["error"])
        new = [f"- n/a {k}: {e}" for k, e in errors if (rows[0]["op"], k, e) not in self.seen]
        self.seen.update((rows[0]["op"], k, e) for k, e in errors)
        self.print(f"## {rows[0]['op']} ({rows[0]['place']}, {rows[0]['mode']})\n\n```\n"
                   + format_table(rows, labels) + "\n```\n" + "".join(x + "\n" for x in new))

    def finish(self, records, json_path, png_dir):
        if self.enabled and json_path:
            os.makedirs(os.path.dirname(os.path.abspath(json_path)), exist_ok=True)
            with open(json_path, "w") as f:
                json.dump(dict(meta=self.meta, results=records), f, indent=1)
        if self.enabled and png_dir:
            plot(records, self.meta, png_dir)


def plot(records, meta, png_dir):
    """One PNG per op: time and busbw against size, one curve per impl (and variant)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not importable; skipping plots", file=sys.stderr)
        return
    os.makedirs(png_dir, exist_ok=True)
    for op in dict.fromkeys(r["op"] for r in records):
        rows = [r for r in records if r["op"] == op]
        variants = dict.fromkeys((r["place"], r["mode"]) for r in rows)
        fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
        for (place, mode), (i, label) in [(v, il) for v in variants
                                          for il in enumerate(meta["impls"])]:
            pts = [(r["size"], r["impls"][i]) for r in rows
                   if (r["place"], r["mode"]) == (place, mode) and r["impls"][i]["time_us"]]
            name = label if len(variants) == 1 else f"{label} {place} {mode}"
            for ax, key in zip(axes, ("time_us", "busbw_GBps")):
                ax.plot([s for s, _ in pts], [c[key] for _, c in pts], "o-", label=name)
        for ax, ylabel in zip(axes, ("time (us)", "busbw (GB/s)")):
            ax.set_xscale("log", base=2)
            ax.set(xlabel="size (B)", ylabel=ylabel)
            ax.grid(True, which="both", alpha=0.3)
            ax.legend()
        axes[0].set_yscale("log")
        fig.suptitle(f"{op}, {meta['dtype']}, {meta['world_size']} ranks, {meta['device']}")
        fig.tight_layout()
        fig.savefig(os.path.join(png_dir, f"{op}.png"), dpi=100)
        plt.close(fig)
