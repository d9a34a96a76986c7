"""Shared helpers for the multi-process CPU tests of the purlin backend.

The tests speak only the public torch.distributed API, so the same files run
against any backend:

    PURLIN_TEST_BACKEND=gloo python -m pytest test/cpu/test_collectives_cpu.py

PURLIN_TEST_BACKEND  backend under test (default "purlin"); "gloo" validates
                     the tests themselves and skips the cases gloo cannot do
                     on CPU (see GLOO_GAPS; each skip is printed by rank 0).
PURLIN_TEST_SEED     base seed of every random input (default 1234).

NOTE [recomputable inputs]
Rank r's i-th input tensor of a case is drawn from a generator seeded with
(base seed, case number, stream r * 64 + i). Every rank can therefore rebuild
every other rank's input and compute the full expected result locally; no
rank trusts the backend to tell it what the others sent.

NOTE [never zero]
Random inputs never contain zero (floats have magnitude in [0.5, 1.5],
integers skip 0). Outputs are pre-filled with a poison value the inputs cannot
hold (0 for integers, NaN for floats, the negation of the expected value for
bool), so a backend that leaves part of an output unwritten always fails.
"""
import functools
import os
import sys
import warnings
from datetime import timedelta

import torch
import torch.distributed as dist
try:  # torch's test harness needs expecttest, which the GPU machine lacks; its GPU tests use only the helpers
    from torch.testing._internal.common_distributed import MultiProcessTestCase
except ImportError:  # pragma: no cover
    MultiProcessTestCase = object

# all_gather_into_tensor / reduce_scatter_tensor / *_coalesced are deprecated
# aliases in torch 2.13; their warnings would drown the test output.
warnings.filterwarnings("ignore", category=FutureWarning, module="torch.distributed")

BACKEND = os.environ.get("PURLIN_TEST_BACKEND", "purlin")
BASE_SEED = int(os.environ.get("PURLIN_TEST_SEED", "1234"))
WORKSPACE_ENV = "TORCH_PURLIN_CPU_WORKSPACE_BYTES"

FLOAT_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
INT_DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)
ALL_DTYPES = FLOAT_DTYPES + INT_DTYPES + (torch.bool, torch.complex64)

PREMUL_FACTOR = 0.3  # not exactly representable: the backend's rounding of it is covered by RTOL

# Relative tolerance of a float reduction, applied to the sum of the absolute
# inputs (the classic summation error bound; |result| for PRODUCT). fp16/bf16
# allow ~2 ulp: purlin accumulates in fp32 and rounds once. gloo rounds to the
# dtype after every pairwise step, so it gets (world - 1) times as much.
RTOL = {
    torch.float64: 1e-12,
    torch.float32: 1e-5,
    torch.complex64: 1e-5,
    torch.float16: 2e-3,
    torch.bfloat16: 1e-2,
}

# (family, dtype, reduce op) combinations that gloo cannot do on CPU. None is a
# wildcard. Only consulted when the backend under test is gloo.
GLOO_GAPS = (
    (None, torch.int16, None, "gloo has no int16"),
    ("gather", torch.complex64, None, "gloo gather rejects complex (torch passes it unviewed)"),
    (None, None, "premul_sum", "gloo has no PREMUL_SUM"),
    ("all_to_all uneven", None, None, "gloo's list all_to_all needs equal sizes"),
    ("strided views", None, None, "gloo reduces/copies the underlying storage, ignoring strides"),
    ("future value of out-of-place ops", None, None,
     "gloo's future carries the input, not the output"),
    ("async reduce_scatter_tensor: is_completed() and future", None, None,
     "gloo's work stays not completed after wait() and has no future"),
    ("all_gather_into_tensor stacked", None, None,
     "gloo rejects a (world, n) output: 'invalid tensor size'"),
)


def is_gloo():
    return BACKEND == "gloo"


def gloo_gap(family, dtype=None, op=None):
    """Why gloo cannot run this case, or None (always None for other backends)."""
    if not is_gloo():
        return None
    for f, d, o, why in GLOO_GAPS:
        if f in (None, family) and d in (None, dtype) and o in (None, op):
            return why
    return None


def reduce_ops_for(dtype):
    """Reduce ops the tests exercise for dtype (names, see make_op).

    Complex is SUM/AVG only: torch's Python API itself rejects PRODUCT, MIN and
    MAX on complex tensors. Bool SUM/MAX mean logical or, PRODUCT/MIN logical and.
    """
    if dtype.is_floating_point:
        return ("sum", "avg", "product", "min", "max", "premul_sum")
    if dtype.is_complex:
        return ("sum", "avg")
    return ("sum", "product", "min", "max")


def make_op(name):
    if name == "premul_sum":
        return dist._make_nccl_premul_sum(PREMUL_FACTOR)
    return getattr(dist.ReduceOp, name.upper())


def _int_range(dtype, op):
    """Inclusive range of random integers: sums of 8 ranks and products of 4 never overflow."""
    info = torch.iinfo(dtype)
    if op in ("min", "max"):
        return info.min, info.max  # full range: catches width and signedness bugs
    if op == "product":
        return (1, 3) if dtype == torch.uint8 else (-2, 2)
    bound = {torch.int8: 15, torch.uint8: 31, torch.int16: 4000,
             torch.int32: 2**27, torch.int64: 2**40}[dtype]
    return (1 if dtype == torch.uint8 else -bound), bound


def make_input(seed, stream, shape, dtype, op=None):
    """Random stream `stream` of case `seed`; see NOTE [recomputable inputs] and [never zero].

    op picks the integer range (small for PRODUCT, full range for MIN/MAX).
    """
    g = torch.Generator().manual_seed((BASE_SEED * 1_000_003 + seed) * 1009 + stream)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_floating_point or dtype.is_complex:
        real = torch.float32 if dtype.is_complex else torch.float64
        parts = 2 if dtype.is_complex else 1
        mag = 0.5 + torch.rand((parts,) + tuple(shape), generator=g, dtype=torch.float64)
        sign = torch.randint(0, 2, mag.shape, generator=g) * 2 - 1
        x = (mag * sign).to(real)
        return torch.complex(x[0], x[1]) if dtype.is_complex else x[0].to(dtype)
    lo, hi = _int_range(dtype, op)
    hi = hi + 1 if hi < torch.iinfo(torch.int64).max else hi  # randint's high is exclusive
    x = torch.randint(lo, hi, shape, generator=g, dtype=torch.int64)
    x[x == 0] = 1
    return x.to(dtype)


def int_floats(seed, shape):
    """Random integers in [-1000, 1000) without 0, as float32: every sum of them is exact whatever the
    order, so reduced results compare bit for bit. The same tensor on every rank."""
    x = torch.randint(-1000, 1000, shape, generator=torch.Generator().manual_seed(seed))
    x[x == 0] = 7
    return x.float()


def mesh_redistribution_cases(mesh, rank, world, seed):
    """(what, got, want) for DTensor redistributions on the 2-D `mesh` (tensors on its device; `got` moved
    to the CPU): sharding both dimensions and back, resharding, and Partial sums to Replicate and Shard."""
    from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor
    dev = mesh.device_type
    full = int_floats(seed, (8 * world, 6 * world))
    d = distribute_tensor(full.to(dev), mesh, [Shard(0), Shard(1)])
    yield "Shard(0), Shard(1) -> full_tensor", d.full_tensor().cpu(), full
    yield "-> Replicate, Shard(0)", d.redistribute(mesh, [Replicate(), Shard(0)]).full_tensor().cpu(), full
    yield "-> Shard(1), Shard(0)", d.redistribute(mesh, [Shard(1), Shard(0)]).full_tensor().cpu(), full
    part = DTensor.from_local(int_floats(seed + 1 + rank, (4, 2 * world)).to(dev), mesh, [Partial(), Partial()])
    want = sum(int_floats(seed + 1 + q, (4, 2 * world)) for q in range(world))
    yield "Partial, Partial -> Replicate", part.redistribute(mesh, [Replicate(), Replicate()]).to_local().cpu(), want
    shard = part.redistribute(mesh, [Shard(1), Partial()]).redistribute(mesh, [Shard(1), Replicate()])
    yield "Partial -> Shard(1) (reduce_scatter)", shard.full_tensor().cpu(), want


def tensor_parallel_step(mesh, world, seed):
    """A two-layer MLP column/row-parallel on the 1-D `mesh` and the same MLP alone on the CPU, one step
    forward and back on the same batch: [(what, got on the CPU, want)] for the output and both weight
    gradients (float sums in another order: compare with a tolerance)."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    torch.manual_seed(seed)
    ref = torch.nn.Sequential(torch.nn.Linear(16, 8 * world), torch.nn.ReLU(), torch.nn.Linear(8 * world, 16))
    net = torch.nn.Sequential(torch.nn.Linear(16, 8 * world), torch.nn.ReLU(), torch.nn.Linear(8 * world, 16))
    net.load_state_dict(ref.state_dict())
    net = parallelize_module(net.to(mesh.device_type), mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    x = torch.randn(5, 16, generator=torch.Generator().manual_seed(seed))
    y = net(x.to(mesh.device_type))
    y.sum().backward()
    yr = ref(x)
    yr.sum().backward()
    return [("tensor-parallel output", y.cpu(), yr),
            ("tensor-parallel gradient of layer 0", net[0].weight.grad.full_tensor().cpu(), ref[0].weight.grad),
            ("tensor-parallel gradient of layer 2", net[2].weight.grad.full_tensor().cpu(), ref[2].weight.grad)]


def poisoned_like(expected):
    """A tensor shaped like expected that differs from it everywhere; see NOTE [never zero]."""
    if expected.dtype == torch.bool:
        return ~expected
    floating = expected.dtype.is_floating_point or expected.dtype.is_complex
    return torch.full_like(expected, float("nan") if floating else 0)


def reduce_poison(inputs, op):
    """Poison for the output of reducing inputs (only bool needs the reference)."""
    if inputs[0].dtype == torch.bool:
        return poisoned_like(reference(inputs, op))
    return poisoned_like(inputs[0])


def reference(inputs, op):
    """Exact (integers, bool) or float64/complex128 reduction of the per-rank inputs."""
    dtype = inputs[0].dtype
    if dtype.is_complex:
        wide = torch.complex128
    elif dtype.is_floating_point:
        wide = torch.float64
    else:
        wide = torch.int64
    x = torch.stack([t.to(wide) for t in inputs])
    if op in ("sum", "avg", "premul_sum"):
        r = x.sum(0)
        if op == "avg":
            r = r / len(inputs)
        elif op == "premul_sum":
            r = r * PREMUL_FACTOR
    elif op == "product":
        r = x.prod(0)
    elif op == "min":
        r = x.amin(0)
    elif op == "max":
        r = x.amax(0)
    else:
        raise ValueError(op)
    return r != 0 if dtype == torch.bool else r


def _describe_mismatch(out, expected, bad, ctx):
    first = tuple(bad.nonzero()[0].tolist())
    return (f"{ctx}: {int(bad.sum())}/{bad.numel()} elements wrong; first at {first}: "
            f"got {out[first].item()!r}, expected {expected[first].item()!r}")


def assert_exact(out, expected, ctx):
    """Equal values (NaN never equals), same dtype and shape: copies, integer and min/max."""
    assert out.dtype == expected.dtype, f"{ctx}: dtype {out.dtype} != {expected.dtype}"
    assert out.shape == expected.shape, \
        f"{ctx}: shape {tuple(out.shape)} != {tuple(expected.shape)}"
    if not torch.equal(out, expected):
        raise AssertionError(_describe_mismatch(out, expected, out != expected, ctx))


def assert_reduced(out, inputs, op, ctx):
    """out must be the reduction of inputs (one tensor per rank) under op."""
    dtype = inputs[0].dtype
    ref = reference(inputs, op)
    exact = not (dtype.is_floating_point or dtype.is_complex) or op in ("min", "max")
    if exact:
        return assert_exact(out, ref.to(dtype), ctx)
    assert out.dtype == dtype, f"{ctx}: dtype {out.dtype} != {dtype}"
    assert out.shape == ref.shape, f"{ctx}: shape {tuple(out.shape)} != {tuple(ref.shape)}"
    if op == "product":
        scale = ref.abs()
    else:
        scale = torch.stack([t.to(ref.dtype).abs() for t in inputs]).sum(0).real
        scale = scale * {"sum": 1.0, "avg": 1.0 / len(inputs), "premul_sum": PREMUL_FACTOR}[op]
    rtol = RTOL[dtype]
    if is_gloo() and dtype in (torch.float16, torch.bfloat16):
        rtol *= max(1, len(inputs) - 1)
    err = (out.to(ref.dtype) - ref).abs()
    bad = ~(err <= rtol * scale)  # also catches NaN
    if bad.any():
        raise AssertionError(_describe_mismatch(out.to(ref.dtype), ref, bad, ctx)
                             + f" (rtol {rtol} of {'|result|' if op == 'product' else 'sum|x|'})")


class DistTestCase(MultiProcessTestCase):
    """One process per rank (spawned, FileStore rendezvous), group built by init_pg.

    Subclasses set WORLD_SIZE, PG_TIMEOUT, WORKSPACE_BYTES and DEBUG_DETAIL; test bodies are
    decorated with @spawned, which builds the group first.
    """

    WORLD_SIZE = 2
    PG_TIMEOUT = timedelta(seconds=60)
    WORKSPACE_BYTES = None  # exported as TORCH_PURLIN_CPU_WORKSPACE_BYTES before init
    DEBUG_DETAIL = False    # True: the ranks run with TORCH_DISTRIBUTED_DEBUG=DETAIL (torch wraps the backend)

    @property
    def world_size(self):
        return self.WORLD_SIZE

    def setUp(self):
        super().setUp()
        self._spawn_processes()

    @classmethod
    def _run(cls, rank, test_name, file_name, parent_pipe, **kwargs):
        # A rank that passed (failures and skips leave through sys.exit inside
        # super()._run) exits at once: tearing down the interpreter with torch
        # loaded costs seconds per process, which adds up on 2 cores.
        super()._run(rank, test_name, file_name, parent_pipe, **kwargs)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)

    def init_pg(self):
        # All ranks share a few cores: intra-op threads would only oversubscribe
        # them, and an OpenMP region stalls badly while a peer rank spin-waits.
        torch.set_num_threads(1)
        if self.WORKSPACE_BYTES is not None:
            os.environ[WORKSPACE_ENV] = str(self.WORKSPACE_BYTES)
        if self.DEBUG_DETAIL:
            os.environ["TORCH_DISTRIBUTED_DEBUG"] = "DETAIL"
            dist.set_debug_level_from_env()  # torch read the variable at its import
        if BACKEND == "purlin":
            import torch_purlin  # noqa: F401  registers the "purlin" backend
        store = dist.FileStore(self.file_name, self.world_size)
        dist.init_process_group(BACKEND, store=store, rank=self.rank,
                                world_size=self.world_size, timeout=self.PG_TIMEOUT)
        self._case = 0
        self.skipped = []

    def next_seed(self):
        """A fresh case number; identical on all ranks since they loop identically."""
        self._case += 1
        return self._case

    def rank_inputs(self, seed, shape, dtype, op=None, part=0):
        """Every rank's input for case seed (part i: a rank's i-th tensor)."""
        return [make_input(seed, r * 64 + part, shape, dtype, op) for r in range(self.world_size)]

    def ctx(self, what, **kw):
        args = " ".join(f"{k}={v}" for k, v in kw.items())
        where = f"{BACKEND} world={self.world_size} rank={self.rank} case={self._case}"
        return f"[{where}] {what} {args}"

    def gloo_skip(self, family, dtype=None, op=None):
        """True (and remember why) when the backend is gloo and gloo lacks this case."""
        why = gloo_gap(family, dtype, op)
        if why is not None:
            args = "".join(f" {k}={v}" for k, v in (("dtype", dtype), ("op", op)) if v is not None)
            self.skipped.append(f"{family}{args}: {why}")
        return why is not None


def spawned(fn):
    """Run fn in every rank after building the group; rank 0 prints gloo skips."""
    @functools.wraps(fn)
    def wrapper(self):
        self.init_pg()
        fn(self)
        if self.rank == 0 and self.skipped:
            lines = sorted(set(self.skipped))
            print(f"\n[{type(self).__name__}.{fn.__name__}] skipped on gloo ({len(lines)}):\n  "
                  + "\n  ".join(lines), flush=True)
    return wrapper
