"""checks.py — inputs and references of the GPU collective families (NOTE [recomputable inputs] in
mp_util.py): every rank rebuilds every rank's input and checks against a float64/int64 CPU reduction."""
from datetime import timedelta

import torch
import torch.distributed as dist

from gpu_harness import assert_equal
from mp_util import PREMUL_FACTOR, reference

PURLIN_TIMEOUT = timedelta(seconds=20)  # bounded device waits: a hang fails a case, not the suite
RTOL = {torch.float64: 1e-12, torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}

FLOATS = (torch.float32, torch.bfloat16, torch.float16, torch.float64)
INTS = (torch.int32, torch.int8, torch.uint8, torch.int64, torch.int16)
SIZES = (1, 3, 7, 127, 1000, 4099, 65537, 1_000_003)

def ops_for(dtype):
    if dtype.is_floating_point:
        return ("sum", "avg", "product", "min", "max", "premul_sum")
    return ("sum", "product", "min", "max")

def make_op(name):
    if name == "premul_sum":
        return dist._make_nccl_premul_sum(PREMUL_FACTOR)
    return getattr(dist.ReduceOp, name.upper())

def make_input(seed, rank, n, dtype, op=None):
    g = torch.Generator().manual_seed(seed * 1_000_003 + rank)
    if dtype == torch.bool:
        return torch.randint(0, 2, (n,), generator=g).bool()
    if dtype.is_complex:
        return torch.complex(torch.rand(n, generator=g) + 0.5, -torch.rand(n, generator=g) - 0.5).to(dtype)
    if dtype.is_floating_point:
        mag = 0.5 + torch.rand(n, generator=g, dtype=torch.float64)
        sign = torch.randint(0, 2, (n,), generator=g) * 2 - 1
        return (mag * sign).to(dtype)
    info = torch.iinfo(dtype)
    if op in ("min", "max"):
        lo, hi = info.min, info.max
    elif op == "product":
        lo, hi = (1, 3) if dtype == torch.uint8 else (-3, 3)
    else:
        lo, hi = (0, 100) if dtype == torch.uint8 else (-100, 100)
    hi = min(hi, torch.iinfo(torch.int64).max - 1)  # randint's bound is exclusive and an int64
    x = torch.randint(lo, hi + 1, (n,), generator=g, dtype=torch.int64)
    x[x == 0] = 1
    return x.to(dtype)

def assert_reduced(got, xs, op, what):
    """got (any device) is the reduction of xs under op."""
    got = got.cpu()
    dtype = xs[0].dtype
    ref = reference(xs, op)
    if not dtype.is_floating_point:
        # integers wrap like the device arithmetic (two's complement of the width)
        return assert_equal(got, ref.to(dtype), what)
    if op in ("min", "max"):
        return assert_equal(got, ref.to(dtype), what)
    scale = ref.abs() if op == "product" else torch.stack([t.double().abs() for t in xs]).sum(0) * {
        "sum": 1.0, "avg": 1.0 / len(xs), "premul_sum": PREMUL_FACTOR}[op]
    err = (got.double() - ref).abs()
    bad = ~(err <= RTOL[dtype] * scale + 1e-300)
    if bad.any():
        i = int(bad.nonzero()[0])
        raise AssertionError(f"{what}: {int(bad.sum())}/{got.numel()} elements off; first at {i}: got {got[i].item()!r}, "
                             f"expected {ref[i].item()!r} (rtol {RTOL[dtype]})")

def assert_close_to(got, ref, xs, op, what):
    """got vs another backend's result ref: exact where the arithmetic is exact, else the reduction tolerance."""
    if not xs[0].dtype.is_floating_point or op in ("min", "max"):
        return assert_equal(got, ref, what)
    if op == "premul_sum" and xs[0].dtype in (torch.float16, torch.bfloat16):
        # NCCL rounds the factor to the tensor's dtype first (0.3 -> 0.30078125 in
        # bf16); purlin keeps it in fp32. Both are checked against float64 by
        # assert_reduced; they need not agree with each other.
        return
    scale = torch.stack([t.double().abs() for t in xs]).sum(0)
    err = (got.cpu().double() - ref.cpu().double()).abs()
    bad = ~(err <= 2 * RTOL[xs[0].dtype] * scale + 1e-300)
    assert not bad.any(), f"{what}: differs from NCCL at {int(bad.sum())} elements"

def nccl_has(dtype, op=None):
    return dtype not in (torch.int16,) and not (op in ("avg", "premul_sum") and not dtype.is_floating_point)
