"""Collective benchmark: purlin next to other implementations, in nccl-tests columns.

    PYTHONPATH=benchmarks python -m purlin_bench        # spawns its own ranks: GPUs if 2+, else CPU
    PYTHONPATH=benchmarks torchrun --nproc-per-node=N -m purlin_bench [--impls purlin,gloo] [--device cpu] ...

(from the repository root; `./purlin bench` runs the first.)

Started without torchrun it spawns --nproc ranks itself (default: one per GPU
when at least two are visible, else 2 to 4 CPU ranks as the cores allow).

Each impl (impls.py) is a process group of its own, or torch's symmetric
memory ops; all impls run at the same sizes and iteration counts, in the same
processes, one after another at each size, so their ratios are fair. Backends
share one set of buffers; purlin-sym and symm1/symm2 allocate their own
symmetric buffers. Rank 0 prints the tables (report.py). See
benchmarks/README.md.

NOTE [bench data]: each check fills the inputs with fresh pseudo-random
integers in [-4, 4], seeded by check number and rank, so any rank can rebuild
any other rank's input. Their sums are exact in every dtype up to 31 ranks, so
#wrong must be 0. Outputs are pre-filled with SENTINEL, which no correct
result equals, so an element the op never wrote counts as wrong.
"""
import argparse
import os
import statistics
import sys
import time
from collections import namedtuple

import torch
import torch.distributed as dist

from . import impls as bench_impls
from . import report as bench_report

ROOT = 0
SENTINEL = 127          # |any correct result| <= 4 * 31
GRAPH_OPS = 20          # collectives captured in one CUDA graph (--graph-ops)
QUEUE_AHEAD_S = 0.004   # --graph-timing queued: the GPU sleeps this long while the host queues the replays
FREE_AT = 64 << 20      # from this size on, cached CUDA memory is released after each size
REDOPS = {"sum": (dist.ReduceOp.SUM, torch.add), "max": (dist.ReduceOp.MAX, torch.maximum),
          "min": (dist.ReduceOp.MIN, torch.minimum)}
# torch 2.13 names, else the older *_tensor spellings
ALL_GATHER = getattr(dist, "all_gather_single", dist.all_gather_into_tensor)
REDUCE_SCATTER = getattr(dist, "reduce_scatter_single", dist.reduce_scatter_tensor)

# How each op is laid out. inp/out length in elements: "c" = count (elements per
# rank), "nc" = ranks * count; "@root" = only on ROOT. size(B) is the larger one.
# places: the placements torch's API allows (in-place: the smaller buffer is the
# rank's chunk of the larger one, as in nccl-tests).
Op = namedtuple("Op", "busbw places reduces inp out run")
INPLACE, BOTH, OOP = ("in-place",), ("out-of-place", "in-place"), ("out-of-place",)


def ring(n):
    return (n - 1) / n


def chunks(t, n):
    return None if t is None else list(t.chunk(n))


OPS = {
    "all_reduce": Op(lambda n: 2 * (n - 1) / n, INPLACE, True, "c", "c",
                     lambda k, g: dist.all_reduce(k.inp, k.red, group=g)),
    "all_gather": Op(ring, BOTH, False, "c", "nc", lambda k, g: ALL_GATHER(k.out, k.inp, group=g)),
    "reduce_scatter": Op(ring, BOTH, True, "nc", "c",
                         lambda k, g: REDUCE_SCATTER(k.out, k.inp, k.red, group=g)),
    "broadcast": Op(lambda n: 1.0, INPLACE, False, "c", "c",
                    lambda k, g: dist.broadcast(k.inp, group_src=ROOT, group=g)),
    "all_to_all": Op(ring, OOP, False, "nc", "nc",
                     lambda k, g: dist.all_to_all_single(k.out, k.inp, group=g)),
    "reduce": Op(lambda n: 1.0, INPLACE, True, "c", "c",
                 lambda k, g: dist.reduce(k.inp, op=k.red, group_dst=ROOT, group=g)),
    "gather": Op(ring, OOP, False, "c", "nc@root", lambda k, g: dist.gather(
        k.inp, chunks(k.out, k.n), group_dst=ROOT, group=g)),
    "scatter": Op(ring, OOP, False, "nc@root", "c", lambda k, g: dist.scatter(
        k.out, chunks(k.inp, k.n), group_src=ROOT, group=g)),
}
DEFAULT_OPS = "all_reduce,all_gather,reduce_scatter,broadcast,all_to_all"


def length(layout, n, c, rank):
    """Elements of one buffer on `rank` (rank None: on ROOT)."""
    if layout.endswith("@root") and rank not in (None, ROOT):
        return 0
    return n * c if layout.startswith("nc") else c


class Case:
    """The buffers of one (op, placement, count): shared by every backend impl;
    purlin-sym and symm-mem impls make their own from their allocators
    (bench_impls.Impl.buffers), `layout` being their buffers' placement where
    it differs from the table's (symm1's one-shot all_reduce writes a separate
    output in the in-place table)."""

    def __init__(self, name, place, c, args, n, rank, layout=None, alloc_in=None, alloc_out=None,
                 everywhere=False):
        self.name, self.op, self.c, self.args, self.n, self.rank = name, OPS[name], c, args, n, rank
        self.place, self.red, self.reduce_fn = place, *REDOPS[args.redop]
        n_in, n_out = (length(x, n, c, None if everywhere else rank) for x in (self.op.inp, self.op.out))
        if (layout or place) == "out-of-place":
            self.inp, self.out = self.new(n_in, alloc_in), self.new(n_out, alloc_out)
        else:
            big = self.new(max(n_in, n_out), alloc_in if n_in >= n_out else alloc_out)
            small = big if n_in == n_out else big[rank * c:(rank + 1) * c]
            self.inp, self.out = (big, small) if n_in > n_out else (small, big)
        self.held = (self.inp, self.out)    # freed with the Case, at the same point on every rank
        if everywhere and rank != ROOT:     # allocated collectively, passed only on ROOT
            self.inp = self.inp if length(self.op.inp, n, c, rank) else None
            self.out = self.out if length(self.op.out, n, c, rank) else None

    def new(self, numel, alloc=None):
        if not numel:
            return None
        if alloc:
            return alloc(numel)
        return torch.empty(numel, dtype=self.args.dtype, device=self.args.device)

    def data(self, seed, r):
        """Rank r's input for check number `seed` (NOTE [bench data])."""
        numel, dev = length(self.op.inp, self.n, self.c, r), self.args.device
        g = torch.Generator(device=dev).manual_seed(seed * 1_000_003 + r)
        low = 0 if self.args.dtype == torch.uint8 else -4
        x = torch.randint(low, 5, (numel,), generator=g, dtype=torch.int8, device=dev)
        return x.to(self.args.dtype)

    def fill(self, seed):
        if self.out is not None:
            self.out.fill_(SENTINEL)
        if self.inp is not None:
            self.inp.copy_(self.data(seed, self.rank))

    def expected(self, seed):
        name, n, mine = self.name, self.n, slice(self.rank * self.c, (self.rank + 1) * self.c)
        if name in ("broadcast", "scatter"):
            return self.data(seed, ROOT)[mine if name == "scatter" else slice(None)]
        if name in ("all_gather", "gather"):
            return torch.cat([self.data(seed, j) for j in range(n)])
        if name == "all_to_all":
            return torch.cat([self.data(seed, j)[mine] for j in range(n)])
        wide = self.exact_dtype()                   # all_reduce, reduce, reduce_scatter
        acc = self.data(seed, 0).to(wide)
        for j in range(1, n):
            acc = self.reduce_fn(acc, self.data(seed, j).to(wide))
        return acc[mine] if name == "reduce_scatter" else acc

    def exact_dtype(self):
        """Exact for every value of NOTE [bench data]; float32 halves the check's memory at 1 GiB."""
        return torch.float64 if self.args.dtype.itemsize >= 8 else torch.float32

    def count_wrong(self, seed) -> int:
        if self.out is None or (self.name == "reduce" and self.rank != ROOT):
            return 0
        dt = self.args.dtype
        rtol = self.n * torch.finfo(dt).eps if dt.is_floating_point and self.op.reduces else 0.0
        wide = self.exact_dtype()
        ok = torch.isclose(self.out.to(wide), self.expected(seed).to(wide), rtol=rtol, atol=0.0)
        return int((~ok).sum())


def agree(values, op=dist.ReduceOp.MAX):
    """Combine per-rank numbers on the default group, CPU tensors (gloo)."""
    t = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(t, op)
    return t.tolist()


def sync(args):
    if args.device.type == "cuda":
        torch.cuda.synchronize()


EAGER_BATCHES = 5       # CUDA eager mode: samples of back-to-back calls (NOTE [eager timing])


def time_calls(fn, iters, args, per=1, batched=False, queued=False):
    """Seconds per op, one sample per call of fn (which runs `per` ops), or,
    when batched, one sample per batch of back-to-back calls.

    NOTE [eager timing]: CUDA eager mode times batches of calls between two
    events, as nccl-tests does (its time is the mean over back-to-back
    iterations): whatever bounds a stream of calls, host or GPU, is what it
    measures. Events around each single call added each rank's host jitter
    and the ranks' skew to every sample; the same op swung 2x between runs.

    NOTE [queued graph timing]: a graph replay is timed by events around it.
    When the host needs longer to launch a replay than the GPU to run it
    (small collectives on this VM: a 20-kernel replay runs in ~30 us), the
    GPU idles between replays and every sample holds the launch gap and, for
    collectives that wait on each other, the ranks' launch skew. With
    `queued` (--graph-timing queued, the default) the GPU first sleeps
    QUEUE_AHEAD_S, long enough for the host to queue every timed replay, so
    the replays run back to back and a sample is the GPU's time for one.
    `replay` keeps the launch gaps (the method used until 2026-11-30 16:00 UTC)."""
    sync(args)
    agree([0.0])                        # ranks start each timed batch together
    if args.device.type == "cpu":
        samples = []
        for _ in range(iters):
            t0 = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - t0)
        return samples
    calls = max(1, iters // EAGER_BATCHES) if batched else 1
    ev = [[torch.cuda.Event(enable_timing=True) for _ in range(2)] for _ in range(max(1, iters // calls))]
    if queued:
        torch.cuda._sleep(int(QUEUE_AHEAD_S * args.gpu_clock_hz))
    for start, end in ev:
        start.record()
        for _ in range(calls):
            fn()
        end.record()
    sync(args)
    return [s.elapsed_time(e) / 1e3 / per / calls for s, e in ev]


def capture(run, ops):
    """A CUDA graph of --graph-ops calls, after one warm call on a side stream."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        run()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(ops):
            run()
    return g


def attempt(fn):
    """Run fn on every rank; if it raised on any, every rank gets (None, error)."""
    try:
        value, err = fn(), None
    except Exception as e:  # an impl lacking an op, dtype or mode: report n/a
        value, err = None, f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:160]}"
    if agree([1.0 if err else 0.0])[0]:
        return None, err or "failed on another rank"
    return value, None


def own_case(shared, impl):
    """The Case of an impl with its own (symmetric, collectively allocated) buffers."""
    a = shared
    case = Case(a.name, a.place, a.c, a.args, a.n, a.rank, **impl.buffers(a.name, a.place))
    impl.ready(case)
    return case


def launch_fields(impl, args):
    """proto / sms / threads of purlin's last CUDA launch (after warmup); {} for
    other impls and on cpu. '?' where torch_purlin.last_launch is missing or fails."""
    info = impl.launch() if args.device.type == "cuda" else None
    if info is None:
        return {}
    return dict(proto=str(info.get("protocol") or "?"), sms=info.get("blocks"),
                threads=info.get("threads"), launch=info)


def measure(shared, impl, mode, seed, args):
    """One impl on one case: time, #wrong, or the error that makes it n/a."""
    t_start = time.perf_counter()
    rec = dict(impl=impl.label, kind=impl.kind, error=None, wrong=None, time_us=None)
    if mode == "graph" and not impl.graphable:
        rec["error"] = f"{impl.label} cannot be captured in a CUDA graph"
        return rec
    case = shared
    if impl.own_buffers:
        case, rec["error"] = attempt(lambda: own_case(shared, impl))
        if case is None:
            return rec

    def run():
        impl.run(case)

    def first_calls():
        case.fill(seed)
        run()
        sync(args)
        wrong = case.count_wrong(seed) if args.check and impl.checked else 0
        t0 = time.perf_counter()        # probe the cost after any lazy setup
        run()
        sync(args)
        return wrong, time.perf_counter() - t0
    got, rec["error"] = attempt(first_calls)
    if got is None:
        return rec
    wrong, est = got[0], agree([got[1]])[0]
    per_call = est * (args.graph_ops if mode == "graph" else 1)
    iters = max(1, min(args.iters, int(args.time_cap / max(per_call, 1e-9))))
    warmup = min(args.warmup, iters)
    if mode == "graph":
        graph, rec["error"] = attempt(lambda: capture(run, args.graph_ops))
        if graph is None:
            return rec
        time_calls(graph.replay, warmup, args)
        rec.update(launch_fields(impl, args))
        samples = time_calls(graph.replay, iters, args, per=args.graph_ops, queued=args.graph_timing == "queued")
        if args.check and impl.checked and not (case.op.reduces and args.redop == "sum"):
            # only repeatable ops can be checked after --graph-ops calls; else the eager check stands
            case.fill(seed + 1)
            graph.replay()
            sync(args)
            wrong += case.count_wrong(seed + 1)
        del graph
    else:
        time_calls(run, warmup, args)
        rec.update(launch_fields(impl, args))
        samples = impl.correct(time_calls(run, iters, args, batched=True), case)
        rec.update(impl.fields(case))
    med = [0.0] * case.n
    med[case.rank] = statistics.median(samples) * 1e6
    rec["rank_median_us"] = agree(med, dist.ReduceOp.SUM)
    rec["time_us"] = max(rec["rank_median_us"])      # the slowest rank ends the op
    rec["samples_us"] = [s * 1e6 for s in samples]   # rank 0's are the ones saved
    rec["iters"], rec["warmup"] = iters, warmup
    rec["wrong"] = int(agree([wrong], dist.ReduceOp.SUM)[0]) if args.check and impl.checked else None
    rec["wall_s"] = time.perf_counter() - t_start    # setup, check and timing of this cell
    return rec


def parse_bytes(text):
    text = text.strip().upper().removesuffix("B")
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:])
    return int(float(text[:-1]) * scale) if scale else int(text)


# --preset: values for the options not given on the command line. "full" is the
# issue's sweep (1K..1G, x4, eager and graph), "quick" a 6-size look at it; no
# preset keeps the historical defaults. Cost estimates: benchmarks/README.md.
PRESETS = {
    # "start": what `./purlin bench` runs: under a minute on a 2-core machine (CPU), the
    # issue's sweep on GPUs.
    "start-cpu": dict(min_bytes=4 << 10, max_bytes=16 << 20, step_factor=4, iters=20, warmup=3,
                      time_cap=0.3, mode="eager"),
    "start-cuda": dict(min_bytes=1 << 10, max_bytes=1 << 30, step_factor=4, iters=20, warmup=5,
                       time_cap=0.2, mode="both"),
    None: dict(min_bytes=4 << 10, max_bytes=64 << 20, step_factor=2, iters=20, warmup=5,
               time_cap=2.0, mode="eager"),
    "full": dict(min_bytes=1 << 10, max_bytes=1 << 30, step_factor=4, iters=20, warmup=5,
                 time_cap=0.25, mode="both"),
    "quick": dict(min_bytes=1 << 10, max_bytes=1 << 30, step_factor=16, iters=10, warmup=2,
                  time_cap=0.05, mode="both"),
}
DEFAULT_IMPLS = {"cuda": "purlin,purlin-sym,nccl,symm1,symm2", "cpu": "purlin,gloo,limit"}


def default_nproc(device):
    """One rank per GPU; on CPU 2 to 4 ranks, no more than the cores (a rank per core)."""
    if device == "cuda":
        return max(2, torch.cuda.device_count())
    return max(2, min(4, os.cpu_count() or 2))


def parse_args(argv):
    gpu = torch.cuda.is_available() and torch.cuda.device_count() >= 2
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add = p.add_argument
    add("--device", choices=("cpu", "cuda"), default="cuda" if gpu else "cpu",
        help="default cuda when at least two GPUs are visible, else cpu")
    add("--nproc", type=int, help="ranks to spawn when not started by torchrun (default: one per GPU, "
        "or 2 to 4 CPU ranks as the cores allow)")
    add("--ops", default=DEFAULT_OPS, help=f"comma list of: {','.join(OPS)}")
    add("--dtype", help="torch dtype name; default float32 on cpu, bfloat16 on cuda")
    add("--redop", choices=tuple(REDOPS), default="sum")
    add("--preset", choices=["start"] + [k for k in PRESETS if k and not k.startswith("start")],
        help="defaults for the options not given: start = what ./purlin bench runs (CPU: -b 4K -e 16M -f 4 "
        "--time-cap 0.3; cuda: -b 1K -e 1G -f 4 --mode both --time-cap 0.2); full = -b 1K -e 1G -f 4 --mode both "
        "--time-cap 0.25 (the issue's sweep); quick = -b 1K -e 1G -f 16 --mode both "
        "--time-cap 0.05 -n 10 -w 2")
    add("--quick", dest="preset", action="store_const", const="quick", help="--preset quick")
    add("-b", "--min-bytes", type=parse_bytes, help="K/M/G suffixes; default 4K")
    add("-e", "--max-bytes", type=parse_bytes, help="default 64M")
    add("-f", "--step-factor", type=int, help="default 2")
    add("-n", "--iters", type=int, help="default 20")
    add("-w", "--warmup", type=int, help="default 5")
    add("--time-cap", type=float,
        help="seconds of timed calls per size and impl, fewer iters when needed; default 2.0")
    add("--impls", help="comma list, the first is the speedup baseline: backend names "
        "(purlin, nccl, gloo, ...), purlin-sym, symm1, symm2 (symm = both); default "
        + "; ".join(f"{k}: {v}" for k, v in DEFAULT_IMPLS.items()))
    add("--mode", choices=("eager", "graph", "both"), help="default eager")
    add("--warm-up-s", type=float, default=0.3,
        help="seconds of GPU work, then one untimed cell per impl and mode, before the first cell "
             "(0: neither); default 0.3")
    add("--eager-passes", type=int, default=2,
        help="eager mode: measure each size this many times, the impls in alternating order, and keep each "
             "impl's fastest pass; default 2")
    add("--graph-ops", type=int, default=GRAPH_OPS, help=f"collectives per captured graph; default {GRAPH_OPS}")
    add("--graph-timing", choices=("queued", "replay"), default="queued",
        help="queued (default): the host queues the timed replays while the GPU sleeps, so they run back to back; "
        "replay: as launched, launch gaps included")
    place = p.add_mutually_exclusive_group()
    place.add_argument("--inplace", dest="place", action="store_const", const="in-place")
    place.add_argument("--out-of-place", dest="place", action="store_const", const="out-of-place")
    add("--check", action=argparse.BooleanOptionalAction, default=True)
    add("--seed", type=int, default=0)
    add("--json", metavar="PATH")
    add("--png-dir", metavar="DIR")
    add("--md", metavar="PATH", help="also write the markdown printed on stdout to PATH")
    add("--out-dir", metavar="DIR", help="bench.md, bench.json and one PNG per op in DIR "
        "(--md, --json, --png-dir given as well win)")
    a = p.parse_args(argv)
    preset = f"start-{a.device}" if a.preset == "start" else a.preset
    for k, v in PRESETS[preset].items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    if a.out_dir:
        a.md = a.md or os.path.join(a.out_dir, "bench.md")
        a.json = a.json or os.path.join(a.out_dir, "bench.json")
        a.png_dir = a.png_dir or a.out_dir
    a.device = torch.device(a.device)
    a.gpu_clock_hz = 2.0e9
    if a.device.type == "cuda":
        clock_khz = getattr(torch.cuda.get_device_properties(0), "clock_rate", 0)  # not in every torch
        a.gpu_clock_hz = clock_khz * 1e3 if clock_khz else 2.0e9
    a.dtype = getattr(torch, a.dtype or ("bfloat16" if a.device.type == "cuda" else "float32"))
    names = (a.impls or DEFAULT_IMPLS[a.device.type]).split(",")
    a.impls = [x for name in names for x in (("symm1", "symm2") if name == "symm" else (name,))]
    a.ops = a.ops.split(",")
    if set(a.ops) - set(OPS):
        p.error(f"unknown ops {sorted(set(a.ops) - set(OPS))}")
    if a.step_factor < 2 or a.min_bytes > a.max_bytes:
        p.error("need --step-factor >= 2 and --min-bytes <= --max-bytes")
    if a.eager_passes < 1:
        p.error("need --eager-passes >= 1")
    a.modes, a.notes = ["eager", "graph"] if a.mode == "both" else [a.mode], []
    if a.device.type == "cpu" and "graph" in a.modes:
        a.modes = ["eager"]
        a.notes.append("graph mode needs cuda; ran eager only")
    return a


def width(name, n):
    """Counts per size: size(B) = width * count * elem (n for ops whose layout has a rank axis)."""
    op = OPS[name]
    return n if "nc" in op.inp + op.out else 1


def places(name, args):
    op = OPS[name]
    return [p for p in op.places if args.place in (None, p)] or op.places


def make_impls(args, rank, n):
    """The impls in --impls order, made in the same order on every rank; an impl
    that cannot start here is dropped with one line on stderr (and a note)."""
    impls = []

    def drop(label, why):
        args.notes.append(f"skipped {label}: {why}")
        if rank == 0:
            print(f"torch_purlin.bench: skipping {label}: {why}", file=sys.stderr, flush=True)

    for name in args.impls:
        k = sum(i.label.rstrip("0123456789") == name for i in impls)
        label = f"{name}{k + 1}" if k and name not in bench_impls.SPECIAL else name
        if label in [i.label for i in impls]:
            continue                                   # symm1,symm1: once is enough
        try:
            impl = bench_impls.make(label, name, args)
        except bench_impls.Unavailable as e:
            drop(label, str(e))
            continue
        if impl.own_buffers:
            where = [(op, p) for op in args.ops for p in places(op, args) if impl.supports(op, p)]
            if not where:
                args.notes.append(f"{label} has none of --ops; not run")
                continue
            probe = Case(*where[0], 64 * n, args, n, rank)   # 64 elements per rank
            _, err = attempt(lambda: try_once(probe, impl))
            if err:
                drop(label, err)
                continue
        impls.append(impl)
    return impls


def try_once(shared, impl):
    """Allocate, fill and run impl once on a small case (NotImplementedError: not here)."""
    case = own_case(shared, impl)
    case.fill(0)
    impl.run(case)
    sync(case.args)


def free_memory(args, size):
    """Give cached CUDA memory back after a big size, so the next one starts clean."""
    if args.device.type == "cuda" and size >= FREE_AT:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


def warm_up_gpu(seconds):
    """Busy GPU work before the first cell. The first cell of a fresh bench
    process measured inflated on 2x H200 (all_reduce 1K in graph mode 8.6-15.9
    us against 6.0 in the same run's later cells, 2026-11-30; the GPU idles at
    a low clock and loads modules lazily); METHOD: warm up first."""
    if seconds <= 0:
        return
    a = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(8):
            a = (a @ a).clamp_(-1, 1)
        torch.cuda.synchronize()


def keep_pass(old, new):
    """NOTE [eager passes] Eager cells are host-bound, and the device VM's host
    has slow stretches longer than a cell: in cuda_h200x2_20261130o all five
    batches of purlin's reduce_scatter in-place 16K cell ran at 76-115 us per
    call (14 us is usual) while NCCL's cell, measured next, did not, and the
    table showed 0.65x. So each eager size is measured --eager-passes times,
    the impls in alternating order (forward, then reversed, ...), and each
    impl keeps its fastest pass: a slow stretch then has to cover the same
    impl in every pass to show. `passes_us` keeps every pass's time; a failed
    pass wins (errors show), #wrong is the most of any pass."""
    if old is None:
        new["passes_us"] = [new.get("time_us")]
        return new
    passes = old["passes_us"] + [new.get("time_us")]
    if old.get("error") or new.get("error"):
        keep = old if old.get("error") else new
    else:
        faster = (new.get("time_us") or float("inf")) < (old.get("time_us") or float("inf"))
        keep = new if faster else old
        wrong = [w for w in (old.get("wrong"), new.get("wrong")) if w is not None]
        keep["wrong"] = max(wrong) if wrong else None     # None: not checked (the limit)
    keep["passes_us"] = passes
    return keep


def warm_up_cell(impls, args, n, rank):
    """NOTE [warm-up cell] The first measured cell of a fresh bench process ran
    slow even after warm_up_gpu: all_reduce 1K eager, the bench's first cell,
    115-191 us per call in cuda_h200x2_20261130l against 19 us at 4K right
    after it (first launches load kernels lazily and set up workspaces, and a
    slow probe call in measure() cuts a cell to a few samples). So, when
    --warm-up-s > 0, every impl first runs the first op's smallest case once
    in each mode, untimed; the results are dropped."""
    name = args.ops[0]
    place = places(name, args)[0]
    case = Case(name, place, max(1, args.min_bytes // args.dtype.itemsize // width(name, n)), args, n, rank)
    for mode in args.modes:
        for impl in impls:
            if impl.supports(name, place):
                measure(case, impl, mode, args.seed - 1, args)
    del case


def _spawned_rank(rank, nproc, port, argv):
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(nproc), LOCAL_WORLD_SIZE=str(nproc),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)  # one intra-op thread per rank (docs/DESIGN.md, traps: ranks share the cores)
    main(argv)


def spawn(argv, nproc):
    """Runs main(argv) on nproc ranks of this machine, as torchrun would."""
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    mp.start_processes(_spawned_rank, args=(nproc, port, argv), nprocs=nproc, start_method="spawn")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if "RANK" not in os.environ:  # not started by torchrun: start the ranks here
        return spawn(argv, args.nproc or default_nproc(args.device.type))
    args.t0 = time.perf_counter()
    if args.device.type == "cuda":  # ranks beyond the GPUs share them (bench_impls.shares_gpu)
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)) % torch.cuda.device_count())
        warm_up_gpu(args.warm_up_s)
    nccl = dist.is_nccl_available() and not bench_impls.shares_gpu(args)
    dist.init_process_group("cpu:gloo,cuda:nccl" if nccl else "gloo")
    rank, n = dist.get_rank(), dist.get_world_size()
    impls = make_impls(args, rank, n)
    if args.warm_up_s > 0:
        warm_up_cell(impls, args, n, rank)
    out = bench_report.Printer(rank == 0, args, impls, n)
    sizes = [args.min_bytes]
    while sizes[-1] * args.step_factor <= args.max_bytes:
        sizes.append(sizes[-1] * args.step_factor)
    seed, records = args.seed, []
    for name in args.ops:
        op = OPS[name]
        wide = width(name, n)
        for place in places(name, args):
            here = [i for i in impls if i.supports(name, place)]
            if not here:
                continue
            for mode in args.modes:
                rows = []
                for c in dict.fromkeys(size // args.dtype.itemsize // wide for size in sizes):
                    if c == 0:
                        continue
                    case = Case(name, place, c, args, n, rank)
                    row = dict(op=name, place=place, mode=mode, size=wide * c * args.dtype.itemsize,
                               count=c, dtype=str(args.dtype).removeprefix("torch."),
                               redop=args.redop if op.reduces else "none",
                               busbw_factor=op.busbw(n), impls=[])
                    passes = args.eager_passes if mode == "eager" else 1
                    kept = [None] * len(here)
                    for p in range(passes):  # NOTE [eager passes]
                        order = range(len(here)) if p % 2 == 0 else reversed(range(len(here)))
                        for k in order:
                            seed += 2
                            kept[k] = keep_pass(kept[k], measure(case, here[k], mode, seed, args))
                    row["impls"] = kept
                    rows.append(bench_report.add_bandwidth(row))
                    del case
                    free_memory(args, row["size"])
                out.table(rows)
                records += rows
    out.finish(records)
    dist.destroy_process_group()


