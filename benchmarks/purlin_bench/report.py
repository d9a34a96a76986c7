"""Output of purlin_bench on rank 0: header, nccl-tests tables, protocol
and headline summaries, JSON, PNGs.

The text is markdown with each table in a code fence, so stdout can be saved
as a .md file as it is (--md / --out-dir do that). The summaries and plots
are functions of the saved JSON too (benchmarks/headline.py, benchmarks/plot.py).
"""
import datetime
import json
import os
import platform
import shlex
import socket
import subprocess
import sys
import time

import torch

# per-impl columns: (title, width, format); purlin impls add LAUNCH_COLS
IMPL_COLS = (("time(us)", 10, "{:.1f}"), ("algbw(GB/s)", 12, "{:.3f}"),
             ("busbw(GB/s)", 12, "{:.3f}"), ("#wrong", 7, "{}"))
LAUNCH_COLS = (("proto", 13), ("SMs", 4))
ROW_COLS = (("size(B)", 12), ("count", 11), ("type", 9), ("redop", 6))
PURLIN_KINDS = ("purlin", "purlin-sym")
HEADLINE_SIZES = (1 << 10, 64 << 10, 1 << 20, 16 << 20, 256 << 20, 1 << 30)
ENV_PREFIXES = ("TORCH_PURLIN_", "NCCL_", "TORCH_SYMM_MEM_", "TORCH_NCCL_", "CUDA_VISIBLE_DEVICES")


def kind(rec):
    """purlin | purlin-sym | backend | symm-mem (JSON files before 2026-12 have no "kind")."""
    if "kind" in rec:
        return rec["kind"]
    return "symm-mem" if rec["impl"].startswith("symm") else (
        "purlin" if rec["impl"] == "purlin" else "backend")


def ratio(t, base):
    return t / base if t and base else None


def speedups(row):
    """{X: time(X) / time(first impl)} for every other impl, the symm-mem ones
    folded into one "symm": the faster of them. Above 1: the first is faster.
    The machine limit (kind "limit", NOTE [machine limit] in impls.py) is
    the other way round, "/limit": time(first) / time(limit), 1 at the limit."""
    first, *rest = row["impls"]
    out = {r["impl"]: ratio(r["time_us"], first["time_us"]) for r in rest if kind(r) not in ("symm-mem", "limit")}
    symm = [r["time_us"] for r in rest if kind(r) == "symm-mem"]
    if symm:
        out["symm"] = ratio(min((t for t in symm if t), default=None), first["time_us"])
    for r in rest:
        if kind(r) == "limit":
            out["/" + r["impl"]] = ratio(first["time_us"], r["time_us"])
    return out


def ratio_title(key):
    return key if key.startswith("/") else f"vs {key}"


def add_bandwidth(row):
    """algbw = size / time; busbw = algbw * the op's nccl-tests factor; GB = 1e9 B."""
    for rec in row["impls"]:
        t = rec["time_us"]
        rec["algbw_GBps"] = row["size"] / t / 1e3 if t else None
        rec["busbw_GBps"] = rec["algbw_GBps"] * row["busbw_factor"] if t else None
    row["speedup"] = speedups(row) if row["impls"] else {}
    return row


def launch_cells(r):
    if r["error"]:
        return ["n/a", "n/a"]
    sms = r.get("sms")
    return [r.get("proto", "?"), "?" if sms is None else str(sms)]


def format_table(rows):
    """One line per size: row columns, a block per impl (purlin's with its protocol
    and SMs where measured), then time(X) / time(first) per other impl and 'vs symm'."""
    first = rows[0]["impls"]
    labels = [r["impl"] for r in first]
    launch = [any("proto" in row["impls"][k] for row in rows) for k in range(len(first))]
    vs = [(ratio_title(k), max(9, len(k) + 3)) for k in speedups(rows[0])] if first else []
    blocks = [[(t, w) for t, w, _ in IMPL_COLS] + (list(LAUNCH_COLS) if la else []) for la in launch]
    cols = list(ROW_COLS) + [c for b in blocks for c in b] + vs
    top = " " * sum(w + 1 for _, w in ROW_COLS)
    top += " ".join(f" {x} ".center(sum(w + 1 for _, w in b) - 1, "-") for x, b in zip(labels, blocks))
    lines = [top, " ".join(f"{t:>{w}}" for t, w in cols)]
    for row in rows:
        cells = [row["size"], row["count"], row["dtype"], row["redop"]]
        for r, la in zip(row["impls"], launch):
            vals = (r["time_us"], r["algbw_GBps"], r["busbw_GBps"], r["wrong"])
            cells += (["n/a"] * 4 if r["error"] else
                      ["-" if v is None else f.format(v) for (_, _, f), v in zip(IMPL_COLS, vals)])
            cells += launch_cells(r) if la else []
        cells += [f"{x:.2f}x" if x else "n/a" for x in speedups(row).values()]
        lines.append(" ".join(f"{v:>{w}}" for v, (_, w) in zip(cells, cols)))
    return "\n".join(lines)


def fmt_size(b):
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if b >= 1 << shift and b % (1 << shift) == 0:
            return f"{b >> shift}{unit}"
    return f"{b}"


def fmt_us(t):
    return "-" if t is None else f"{t:.1f}" if t < 1000 else f"{t:.0f}"


def protocol_table(records):
    """Markdown: op x size -> 'protocol/SMs' of each purlin impl, one line per
    (op, impl) when every placement and mode agree, else one per variant."""
    cells, sizes = {}, {}
    for row in records:
        for r in row["impls"]:
            if kind(r) in PURLIN_KINDS and "proto" in r and not r["error"]:
                key = (row["op"], r["impl"])
                cell = "/".join(launch_cells(r))
                cells.setdefault(key, {}).setdefault((row["place"], row["mode"]), {})[row["size"]] = cell
                sizes[row["size"]] = 1
    if not any(c != "?/?" for by_var in cells.values() for v in by_var.values() for c in v.values()):
        return "not reported: torch_purlin.last_launch is not available\n" if cells else ""
    sizes = sorted(sizes)
    out = ["| op | impl | placement, mode | " + " | ".join(fmt_size(s) for s in sizes) + " |",
           "|---|---|---|" + "---|" * len(sizes)]
    for (op, impl), by_var in cells.items():
        groups = {}
        for var, v in by_var.items():
            groups.setdefault(tuple(v.get(s, "") for s in sizes), []).append(" ".join(var))
        for line, variants in groups.items():
            where = "all" if len(groups) == 1 else ", ".join(variants)
            out.append(f"| {op} | {impl} | {where} | " + " | ".join(line) + " |")
    return "\n".join(out) + "\n"


def pick_rows(records, mode, place):
    """Per op: its rows in `mode` and `place` (default: out-of-place where measured)."""
    by_op = {}
    for row in records:
        if row["mode"] == mode:
            by_op.setdefault(row["op"], {}).setdefault(row["place"], []).append(row)
    out = {}
    for op, by_place in by_op.items():
        p = place if place in by_place else "out-of-place" if "out-of-place" in by_place else \
            next(iter(by_place))
        out[(op, p)] = by_place[p]
    return out


def at_size(rows, s):
    """The row measured at nominal size s (sizes are rounded down to whole elements per rank)."""
    fit = [r for r in rows if s / 2 < r["size"] <= s]
    return max(fit, key=lambda r: r["size"]) if fit else None


def headline_table(records, sizes=HEADLINE_SIZES, mode=None, place=None):
    """Markdown for the README: per op and size, the time of each impl (symm1 and
    symm2 as the faster of them, "symm") and reference / purlin time ratios
    (above 1: purlin faster), plus purlin's protocol and SMs."""
    modes = {r["mode"] for r in records}
    mode = mode or ("graph" if "graph" in modes else "eager")
    chosen = pick_rows(records, mode, place)
    cols, purlins, limits = {}, [], []
    for rows in chosen.values():
        for r in rows[0]["impls"]:
            name = "symm" if kind(r) == "symm-mem" else r["impl"]
            cols[name] = 1
            if kind(r) in PURLIN_KINDS and r["impl"] not in purlins:
                purlins.append(r["impl"])
            if kind(r) == "limit" and name not in limits:
                limits.append(name)
    refs = [c for c in cols if c not in purlins and c not in limits]
    ratios = [(ref, p) for ref in refs for p in purlins] + [(p, lim) for p in purlins for lim in limits]
    head = ["op", "size"] + [f"{c} (us)" for c in cols] + [f"{a} / {b}" for a, b in ratios]
    proto = purlins and any("proto" in r for rows in chosen.values() for row in rows
                            for r in row["impls"] if r["impl"] == purlins[0])
    head += [f"{purlins[0]} proto/SMs"] if proto else []
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for (op, p), rows in chosen.items():
        for s in sizes:
            row = at_size(rows, s)
            if row is None:
                continue
            t = {}
            for r in row["impls"]:
                name = "symm" if kind(r) == "symm-mem" else r["impl"]
                if r["time_us"]:
                    t[name] = min(t.get(name, r["time_us"]), r["time_us"])
            cells = [f"{op} ({p})", fmt_size(s)] + [fmt_us(t.get(c)) for c in cols]
            cells += [f"{t[a] / t[b]:.2f}x" if a in t and b in t else "n/a" for a, b in ratios]
            if proto:
                rec = next((r for r in row["impls"] if r["impl"] == purlins[0]), {})
                cells.append("/".join(launch_cells(rec)) if "proto" in rec else "")
            out.append("| " + " | ".join(cells) + " |")
    note = "; symm = the faster of symm1 and symm2" if "symm" in cols else ""
    note += "; purlin / limit: 1.00 at the machine's limit (NOTE [machine limit])" if limits else ""
    return f"{mode} mode{note}; time per op in us; other ratios above 1: purlin faster\n\n" + "\n".join(out) + "\n"


def source_version():
    """git describe of this checkout (the device copies may have no .git: '?')."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        out = subprocess.run(["git", "-C", root, "describe", "--always", "--dirty"],
                             capture_output=True, text=True, timeout=10)
        return out.stdout.strip() or "?"
    except (OSError, subprocess.SubprocessError):
        return "?"


def versions(args):
    """torch, CUDA, NCCL and GPU of this run (what results/README.md asks to record)."""
    v = dict(torch=torch.__version__, cuda=torch.version.cuda or "none")
    try:
        v["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
    except Exception:  # cpu-only builds have no NCCL
        v["nccl"] = "none"
    if args.device.type == "cuda":
        p = torch.cuda.get_device_properties(torch.cuda.current_device())
        v["gpu"] = f"{p.name}, {p.multi_processor_count} SMs, {p.total_memory / 2**30:.0f} GiB"
    return v


class Printer:
    """Prints the header at once and each table when done; silent off rank 0."""

    def __init__(self, enabled, args, impls, world):
        self.enabled, self.seen, self.args = enabled, set(), args
        self.t0 = getattr(args, "t0", time.perf_counter())     # from argument parsing on
        self.md = None
        if enabled and args.md:
            os.makedirs(os.path.dirname(os.path.abspath(args.md)), exist_ok=True)
            self.md = open(args.md, "w")
        local = int(os.environ.get("LOCAL_WORLD_SIZE", world))
        nodes = f"--nnodes={world // local} " if world != local else ""
        device = (f"cuda ({torch.cuda.get_device_name()})" if args.device.type == "cuda"
                  else f"cpu ({platform.machine()}, {os.cpu_count()} cores)")
        purlin = sys.modules.get("torch_purlin")
        first = impls[0].label if impls else "?"
        kinds = {i.kind for i in impls}
        env = {k: v for k, v in sorted(os.environ.items()) if k.startswith(ENV_PREFIXES)}
        self.meta = m = dict(
            command=f"PYTHONPATH=benchmarks torchrun {nodes}--nproc-per-node={local} -m purlin_bench "
                    f"{shlex.join(sys.argv[1:])}",
            date_utc=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S"),
            host=socket.gethostname(), torch=torch.__version__, world_size=world, device=device,
            versions=versions(args),
            purlin=getattr(purlin, "__version__", source_version()) if purlin else "not used",
            dtype=str(args.dtype).removeprefix("torch."), redop=args.redop, iters=args.iters,
            warmup=args.warmup, time_cap_s=args.time_cap, check=args.check, modes=args.modes,
            eager_passes=getattr(args, "eager_passes", 1),
            graph_ops=args.graph_ops, graph_timing=args.graph_timing,
            impls={i.label: i.backend for i in impls},
            impl_about={i.label: i.about for i in impls}, env=env, notes=args.notes)
        v = m["versions"]
        self.print("\n".join([
            "# torch-purlin collective benchmark\n",
            f"- command: `{m['command']}`", f"- date (UTC): {m['date_utc']}",
            f"- host: {m['host']}",
            f"- torch: {v['torch']}; CUDA: {v['cuda']}; NCCL: {v['nccl']}; torch_purlin: {m['purlin']}",
            f"- world size: {m['world_size']}", f"- device: {m['device']}"
            + (f"; {v['gpu']}" if "gpu" in v else ""),
            f"- dtype {m['dtype']}, redop {m['redop']}, iters {m['iters']}, warmup "
            f"{m['warmup']}, time cap {m['time_cap_s']} s per size and impl, check "
            f"{'on' if m['check'] else 'off'}, modes {', '.join(m['modes'])}"
            + (f"; eager: the fastest of {m['eager_passes']} passes per impl, impls in alternating order"
               if "eager" in m["modes"] and m["eager_passes"] > 1 else ""),
            f"- impls: {'; '.join(f'{k} = {a}' for k, a in m['impl_about'].items())}",
            f"- vs X = time(X) / time({first}), above 1 means {first} is faster"
            + ("; vs symm: the faster of symm1 and symm2" if "symm-mem" in kinds else "")
            + (f"; /limit = time({first}) / time(limit), 1.00 at the machine's limit" if "limit" in kinds else ""),
            *(["- proto, SMs: purlin's protocol and blocks (SMs) of its last launch "
               "(torch_purlin.last_launch; ? = not reported)"]
              if args.device.type == "cuda" and kinds & set(PURLIN_KINDS) else []),
            "- time(us): median over iterations on each rank, max over ranks; on CUDA an eager iteration is a batch of "
            "back-to-back calls (iters / 5 per batch, time per call), a graph "
            f"iteration one replay of {m['graph_ops']} captured calls, "
            + ("the replays queued while the GPU slept, so they ran back to back"
               if m["graph_timing"] == "queued" else "each replay as launched (launch gaps included)"),
            f"- env: {' '.join(f'{k}={x}' for k, x in env.items()) or 'none of ' + '*, '.join(ENV_PREFIXES)}",
            *[f"- note: {x}" for x in m["notes"]], ""]))

    def print(self, text):
        if self.enabled:
            print(text, flush=True)
            if self.md:
                self.md.write(text + "\n")
                self.md.flush()

    def table(self, rows):
        if not rows:
            return
        errors = dict.fromkeys((r["impl"], r["error"]) for row in rows
                               for r in row["impls"] if r["error"])
        new = [f"- n/a {k}: {e}" for k, e in errors if (rows[0]["op"], k, e) not in self.seen]
        self.seen.update((rows[0]["op"], k, e) for k, e in errors)
        self.print(f"## {rows[0]['op']} ({rows[0]['place']}, {rows[0]['mode']})\n\n```\n"
                   + format_table(rows) + "\n```\n" + "".join(x + "\n" for x in new))

    def finish(self, records):
        self.meta["elapsed_s"] = round(time.perf_counter() - self.t0, 1)
        if not self.enabled:
            return
        protocols = protocol_table(records)
        if protocols:
            self.print("## purlin protocols\n\nprotocol/SMs of purlin's last launch at each size "
                       "(torch_purlin.last_launch after warmup)\n\n" + protocols)
        if records:
            self.print("## headline\n\n" + headline_table(records))
        self.print(f"elapsed: {self.meta['elapsed_s']} s")
        a = self.args
        if a.json:
            os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
            with open(a.json, "w") as f:
                json.dump(dict(meta=self.meta, results=records), f, indent=1)
        if a.png_dir:
            plot(records, self.meta, a.png_dir)
        if self.md:
            self.md.close()


def plot(records, meta, png_dir):
    """One PNG per op: time and busbw against size (log2), a colour per impl, a
    line style per mode (graph solid, eager dashed), a marker per placement."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not importable here; no plots (pip install matplotlib, then "
              "python benchmarks/plot.py RESULTS.json DIR)", file=sys.stderr)
        return []
    os.makedirs(png_dir, exist_ok=True)
    style, marker = {"graph": "-", "eager": "--"}, {"out-of-place": "o", "in-place": "s"}
    v = meta.get("versions", {})
    made = []
    for op in dict.fromkeys(r["op"] for r in records):
        rows = [r for r in records if r["op"] == op]
        labels = list(dict.fromkeys(i["impl"] for r in rows for i in r["impls"]))
        variants = list(dict.fromkeys((r["place"], r["mode"]) for r in rows))
        fig, axes = plt.subplots(1, 2, figsize=(13, 4.8))
        for n, label in enumerate(labels):
            for place, mode in variants:
                pts = [(r["size"], i) for r in rows if (r["place"], r["mode"]) == (place, mode)
                       for i in r["impls"] if i["impl"] == label and i["time_us"]]
                if not pts:
                    continue
                name = label if len(variants) == 1 else f"{label} {place} {mode}"
                for ax, key in zip(axes, ("time_us", "busbw_GBps")):
                    ax.plot([s for s, _ in pts], [i[key] for _, i in pts], color=f"C{n % 10}",
                            linestyle=style.get(mode, ":"), marker=marker.get(place, "x"),
                            markersize=3, label=name)
        sizes = sorted({r["size"] for r in rows})
        ticks = sizes[::-(-len(sizes) // 12)]               # at most 12 labelled sizes
        for ax, ylabel in zip(axes, ("latency: time per op (us)", "bandwidth: busbw (GB/s)")):
            ax.set_xscale("log", base=2)
            ax.set_xticks(ticks, [fmt_size(t) for t in ticks])
            ax.minorticks_off()
            ax.set(xlabel="size (B)", ylabel=ylabel)
            ax.grid(True, which="both", alpha=0.3)
        axes[0].set_yscale("log")
        handles, names = axes[0].get_legend_handles_labels()
        fig.legend(handles, names, loc="center left", bbox_to_anchor=(0.85, 0.5), fontsize=7)
        nccl = f", NCCL {v['nccl']}" if v.get("nccl", "none") != "none" else ""
        only = f" ({', '.join(variants[0])})" if len(variants) == 1 else ""
        fig.suptitle(f"{op}{only}, {meta['dtype']}, {meta['world_size']} ranks, {meta['device']}, "
                     f"torch {v.get('torch', meta.get('torch', '?'))}{nccl}, "
                     f"{meta['date_utc'][:10]}", fontsize=10)
        fig.tight_layout(rect=(0, 0, 0.85, 1))
        path = os.path.join(png_dir, f"{op}.png")
        fig.savefig(path, dpi=100)
        plt.close(fig)
        made.append(path)
    return made
