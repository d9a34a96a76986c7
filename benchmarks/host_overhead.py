"""host_overhead.py — host time per eager collective call, purlin vs NCCL.

Eager small collectives are bound by the host (docs/PERFORMANCE.md): this
times N back-to-back calls without a sync in between (the GPU keeps up, so
wall time per call is the host's cost), next to a trivial torch op for
scale. Run under torchrun on CUDA:

    torchrun --nproc-per-node=2 benchmarks/host_overhead.py [--calls 2000] [--bytes 1024]

Prints one line per case on rank 0: microseconds per call (median of 5 runs).
The "fake" rows call torch's FakeProcessGroup (a c10d backend that returns a
completed Work and moves nothing): the floor of any backend behind dist.*.
"""
import argparse
import importlib
import statistics
import time

import torch
import torch.distributed as dist


def per_call_us(fn, calls):
    runs = []
    for _ in range(5):
        torch.cuda.synchronize()
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        runs.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(runs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--bytes", type=int, default=1024)
    args = ap.parse_args()
    import torch_purlin  # noqa: F401  registers the backend

    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(rank % torch.cuda.device_count())
    purlin = dist.new_group(backend="purlin")
    nccl = dist.new_group(backend="nccl")
    try:
        importlib.import_module("torch.testing._internal.distributed.fake_pg")  # registers backend "fake"
        fake = dist.new_group(backend="fake")
    except Exception as e:  # noqa: BLE001 — an optional row
        fake = None
        if rank == 0:
            print(f"(no fake backend rows: {e})", flush=True)
    t = torch.randn(args.bytes // 2, dtype=torch.bfloat16, device="cuda")
    out = torch.empty(t.numel() * dist.get_world_size(), dtype=t.dtype, device="cuda")
    cases = [
        ("torch add_ (no communication)", lambda: t.add_(0)),
        ("purlin all_reduce", lambda: dist.all_reduce(t, group=purlin)),
        ("nccl all_reduce", lambda: dist.all_reduce(t, group=nccl)),
        ("purlin all_gather_into_tensor", lambda: dist.all_gather_into_tensor(out, t, group=purlin)),
        ("nccl all_gather_into_tensor", lambda: dist.all_gather_into_tensor(out, t, group=nccl)),
        ("purlin broadcast", lambda: dist.broadcast(t, 0, group=purlin)),
        ("purlin all_reduce async_op + wait", lambda: dist.all_reduce(t, group=purlin, async_op=True).wait()),
    ]
    if fake is not None:
        cases += [
            ("fake all_reduce (dist.* floor)", lambda: dist.all_reduce(t, group=fake)),
            ("fake all_gather_into_tensor (floor)", lambda: dist.all_gather_into_tensor(out, t, group=fake)),
        ]
    for name, fn in cases:
        for _ in range(50):  # setup and warmup
            fn()
        us = per_call_us(fn, args.calls)
        if rank == 0:
            print(f"{name:40s} {us:8.2f} us/call ({args.bytes} B)", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
