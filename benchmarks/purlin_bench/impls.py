"""The implementations purlin_bench times side by side, one column group each.

- a backend name (purlin, nccl, gloo, ...): a process group of its own
  (dist.new_group(backend=NAME)) running the torch.distributed call on the
  buffers every such impl shares;
- purlin-sym: purlin on buffers from torch_purlin.empty (purlin's symmetric
  pool: ops on them take the zero-copy path), input and output both;
- symm1 / symm2: torch's symmetric memory (CUDA only), on buffers from
  torch.distributed._symmetric_memory.empty rendezvoused on the world group:
  symm1 = symm_mem.one_shot_all_reduce_out (reads every peer's input, writes a
  separate output), symm2 = symm_mem.two_shot_all_reduce_ (in place) and, for
  out-of-place reduce_scatter, symm_mem.reduce_scatter_out (the two-shot
  kernel's reduce-scatter half). Sum only; bfloat16 and float32 only.

An impl that cannot start here (no GPU, missing API, NotImplementedError) is
dropped by bench.py with one line on stderr; errors at one size are n/a cells.
With fewer GPUs than local ranks (ranks sharing GPUs: NOTE [shared GPU] in
csrc/atom/cuda/host/symmetric_workspace.h; run under CUDA MPS with
TORCH_PURLIN_CUDA_SHARE_GPU=1) NCCL and torch symmetric memory are dropped:
they need a GPU per rank.

NOTE [no multicast]: never call a symm_mem multimem_* op: NVLink multicast can
take shared GPUs out of service. Symm sets TORCH_SYMM_MEM_DISABLE_MULTICAST=1
before its first allocation so rendezvous creates no multicast object either.
"""
import importlib
import os
import time
import warnings
import weakref

import torch
import torch.distributed as dist

NO_GRAPH = {"gloo", "mpi"}  # host-side backends; a capture attempt can hang, not just fail
SPECIAL = ("purlin-sym", "symm1", "symm2", "limit")


class Unavailable(Exception):
    """This impl cannot run here at all; bench.py drops it with one stderr line."""


def shares_gpu(args):
    """Whether this host's ranks share CUDA GPUs (more local ranks than GPUs)."""
    if args.device.type != "cuda":
        return False
    local = int(os.environ.get("LOCAL_WORLD_SIZE", dist.get_world_size() if dist.is_initialized() else 1))
    return local > torch.cuda.device_count()


class Impl:
    """One column group: a label, the group it runs on, its buffers and its call."""

    kind = "backend"        # purlin | purlin-sym | backend | symm-mem | limit (JSON "kind")
    graphable = True
    own_buffers = False     # True: buffers(...) says how its Case is allocated
    checked = True          # False: its outputs are not the op's result (#wrong is "-")

    def __init__(self, label, group, about):
        self.label, self.group, self.about = label, group, about

    def supports(self, op, place):
        return True

    def buffers(self, op, place):
        """bench.Case keyword arguments: layout (the buffers' placement when it
        differs from the table's), alloc_in / alloc_out (numel -> tensor; None:
        torch.empty), everywhere (allocate on every rank, also where the op
        passes no buffer: symmetric allocations are collective)."""
        raise NotImplementedError

    def ready(self, case):
        """Collective setup on a freshly allocated Case (symm-mem rendezvous)."""

    def run(self, case):
        case.op.run(case, self.group)

    def correct(self, samples, case):
        """Timed samples (seconds) as this impl reports them."""
        return samples

    def fields(self, case):
        """Extra JSON fields of this impl's record for `case`."""
        return {}

    def launch(self):
        """purlin's last kernel launch on this group, or None for other impls."""
        return last_launch(self.group) if self.kind in ("purlin", "purlin-sym") else None


def last_launch(group):
    """torch_purlin.last_launch(group) -> {'protocol', 'blocks', 'threads'}, or {} if absent."""
    fn = getattr(importlib.import_module("torch_purlin"), "last_launch", None)
    if fn is None:
        return {}
    try:
        return dict(fn(group) or {})
    except Exception as e:  # a launch report must never stop a benchmark
        return {"error": f"{type(e).__name__}: {e}"[:120]}


class Backend(Impl):
    def __init__(self, label, backend, args):
        if backend == "nccl" and shares_gpu(args):
            raise Unavailable("NCCL refuses several ranks on one GPU")
        if backend == "purlin":
            importlib.import_module("torch_purlin")     # registers the backend
        super().__init__(label, dist.new_group(backend=backend), f"backend {backend}")
        self.kind = "purlin" if backend == "purlin" else "backend"
        self.graphable = backend not in NO_GRAPH


class PurlinSym(Impl):
    kind = "purlin-sym"
    own_buffers = True

    def __init__(self, label, args):
        self.empty = getattr(importlib.import_module("torch_purlin"), "empty", None)
        if self.empty is None:
            raise Unavailable("torch_purlin.empty does not exist in this build")
        super().__init__(label, dist.new_group(backend="purlin"),
                         "purlin on torch_purlin.empty buffers (input and output)")
        self.args = args

    def alloc(self, numel):
        a = self.args
        return self.empty(numel, dtype=a.dtype, device=a.device, group=self.group)

    def buffers(self, op, place):
        return dict(alloc_in=self.alloc, alloc_out=self.alloc, everywhere=True)


# (op, placement of the table) -> (placement of the buffers, the symmetric one, call).
# symm1 sits in the in-place all_reduce table but writes a separate output.
SYMM_CALLS = {
    "symm1": {("all_reduce", "in-place"): ("out-of-place", "inp", lambda c, g: (
        torch.ops.symm_mem.one_shot_all_reduce_out(c.inp, "sum", g, c.out)))},
    "symm2": {("all_reduce", "in-place"): ("in-place", "inp", lambda c, g: (
        torch.ops.symm_mem.two_shot_all_reduce_(c.inp, "sum", g))),
              ("reduce_scatter", "out-of-place"): ("out-of-place", "inp", lambda c, g: (
                  torch.ops.symm_mem.reduce_scatter_out(c.inp, g, False, c.out)))},
}
SYMM_ABOUT = {"symm1": "torch symm_mem one_shot_all_reduce_out (out-of-place)",
              "symm2": "torch symm_mem two_shot_all_reduce_ (in-place), reduce_scatter_out"}


def check_symm_args(args):
    if args.redop != "sum" or args.dtype not in (torch.bfloat16, torch.float32):
        raise Unavailable("torch symm_mem ops take only sum on bfloat16/float32")


class Symm(Impl):
    kind = "symm-mem"
    own_buffers = True

    def __init__(self, label, args):
        if args.device.type != "cuda":
            raise Unavailable("torch symmetric memory needs --device cuda")
        if shares_gpu(args):
            raise Unavailable("torch symmetric memory needs a GPU per rank")
        check_symm_args(args)
        os.environ["TORCH_SYMM_MEM_DISABLE_MULTICAST"] = "1"     # NOTE [no multicast]
        try:
            self.sm = importlib.import_module("torch.distributed._symmetric_memory")
        except ImportError as e:
            raise Unavailable(f"torch.distributed._symmetric_memory: {e}") from e
        world = dist.group.WORLD
        enable = getattr(self.sm, "enable_symm_mem_for_group", None)
        if enable:                  # older torch needs it; newer ones deprecate it (a warning)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)
                try:
                    enable(world.group_name)
                except Exception:   # noqa: BLE001  the probe's rendezvous decides
                    pass
        super().__init__(label, world, SYMM_ABOUT[label])
        self.gname, self.calls, self.args = world.group_name, SYMM_CALLS[label], args

    def supports(self, op, place):
        return (op, place) in self.calls

    def alloc(self, numel):
        return self.sm.empty(numel, dtype=self.args.dtype, device=self.args.device)

    def buffers(self, op, place):
        layout, sym, _ = self.calls[(op, place)]
        return dict(layout=layout, everywhere=True,
                    alloc_in=self.alloc if sym == "inp" else None,
                    alloc_out=self.alloc if sym == "out" else None)

    def ready(self, case):
        self.sm.rendezvous(case.inp, self.gname)

    def run(self, case):
        self.calls[(case.name, case.place)][2](case, self.gname)


# NOTE [machine limit]: what a CPU collective staged through shared memory
# needs at least: torch's own per-call cost (the same call on torch's "fake"
# backend, one element per rank: it copies data for some ops) plus the bytes
# its busiest rank reads and writes, at one core's copy speed.
# LIMIT_COPIES[op](W) is that traffic in copies of the table's size(B) (a
# copy reads and writes its size): all_reduce stages its input (1), then
# reads what it reduces and writes the result (1.5 at least: one-shot at
# W = 2, two-shot at any W); reduce_scatter stages N, reads N, writes N/W;
# all_gather and all_to_all stage what others read and read what they write;
# broadcast, gather and scatter move size(B) once through the busiest rank.
# The copies are torch copies on this rank's core, timed after the fake call,
# less the calls' own cost, measured at each size (purlin's copies pay none). Not counted: moving
# the peers' bytes between cores, which even a hand-written protocol pays
# (4K-256K on a 2-core VM: benchmarks/probes/cpu_cross_core.cc). Below 1:
# rounds whose staged bytes stay in cache (NOTE [cpu rounds]) against copies
# of whole buffers through memory, and all_gather / reduce_scatter at small
# sizes, for which the fake backend is not free (it gathers through a list).
LIMIT_COPIES = {
    "all_reduce": lambda w: 2.5,
    "reduce_scatter": lambda w: (3 + 1 / w) / 2,
    "all_gather": lambda w: 1 + 1 / w,
    "all_to_all": lambda w: (2 * w - 1) / w,
    "broadcast": lambda w: 1.0,
    "reduce": lambda w: (w + 1) / 2,
    "gather": lambda w: 1.0,
    "scatter": lambda w: 1.0,
}


def copy_pairs(numel, copies, dtype):
    """(dst, src) views for `copies` copies of numel elements: whole ones, then a part."""
    src, dst = torch.zeros(numel, dtype=dtype), torch.empty(numel, dtype=dtype)
    part = int(numel * (copies - int(copies)))
    return [(dst, src)] * int(copies) + ([(dst[:part], src[:part])] if part else [])


class Limit(Impl):
    """The machine's limit for a CPU collective (NOTE [machine limit]): the op
    on torch's no-op backend, then LIMIT_COPIES copies of size(B) bytes on
    this rank's core, less the copies' own per-call cost. Its outputs are
    not the op's."""

    kind = "limit"
    graphable = False
    checked = False

    def __init__(self, label, args):
        if args.device.type != "cpu":
            raise Unavailable("the machine limit is defined for --device cpu")
        try:
            importlib.import_module("torch.testing._internal.distributed.fake_pg")  # registers "fake"
        except ImportError as e:
            raise Unavailable(f"torch's fake backend: {e}") from e
        super().__init__(label, dist.new_group(backend="fake"),
                         "torch's per-call cost (fake backend) + the op's bytes at one core's copy speed")
        self.case, self.tiny, self.pairs, self.call_cost, self.tinies = lambda: None, None, [], None, {}

    def run(self, case):
        if self.case() is not case:         # a new size: prepared once, outside the timed calls
            self.prepare(case)
        case.op.run(self.tiny, self.group)
        for d, s in self.pairs:
            d.copy_(s)

    def prepare(self, case):
        """The op's buffers at one element per rank (torch's fake backend copies data for some
        ops, and torch's own per-call cost does not depend on the size), and the copies'
        buffers: one set at a time, the bench frees each size's Case."""
        self.pairs = []
        key = (case.name, case.place, case.args.dtype)
        if key not in self.tinies:
            self.tinies[key] = type(case)(case.name, case.place, 1, case.args, case.n, case.rank)
        size = case.c * (case.n if "nc" in case.op.inp + case.op.out else 1)   # size(B), as on the root
        self.case, self.tiny = weakref.ref(case), self.tinies[key]
        self.pairs = copy_pairs(size, LIMIT_COPIES[case.name](case.n), case.args.dtype)

    def correct(self, samples, case):
        """Samples less the copy calls' own cost, measured now: the same number of copies of 64
        elements, the fastest of 5 batches."""
        pairs = [(d[:64], s[:64]) for d, s in self.pairs]
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(200):
                for d, s in pairs:
                    d.copy_(s)
            times.append((time.perf_counter() - t0) / 200)
        self.call_cost = min(times)
        return [max(0.0, x - self.call_cost) for x in samples]

    def fields(self, case):
        """copy_calls_us: the copy calls' own cost taken off (time_us + it: the copies as torch calls)."""
        return {} if self.call_cost is None else {"copy_calls_us": self.call_cost * 1e6}


def make(label, backend, args):
    """The impl for one --impls entry (label: unique column title)."""
    if backend == "purlin-sym":
        impl = PurlinSym(label, args)
    elif backend in ("symm1", "symm2"):
        impl = Symm(label, args)
    elif backend == "limit":
        impl = Limit(label, args)
    else:
        impl = Backend(label, backend, args)
    impl.backend = backend          # the --impls name, kept in the JSON's meta.impls
    return impl
