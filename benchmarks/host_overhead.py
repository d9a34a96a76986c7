"""host_overhead.py — host time per eager collective call, purlin vs NCCL.

Eager small collectives are bound by the host (docs/PERFORMANCE.md): this
times N back-to-back calls without a sync in between (the GPU keeps up, so
wall time per call is the host's cost), next to a trivial torch op for
scale. Run under torchrun on CUDA:

    torchrun --nproc-per-node=2 benchmarks/host_overhead.py [--calls 1000] [--rounds 7] [--bytes 1024] [--profile]

Prints one line per case on rank 0: microseconds per call, the fastest and
the median of --rounds runs of --calls calls.

NOTE [host rounds] The cases take turns, one run each per round. The device
VM's host has slow spells of seconds (2026-11-30 saw torch add_ at 6.5 and
at 10.5 us per call in two device calls), which a case timed all at once
takes whole; taking turns spreads them over every case, and the fastest run
is the one a spell missed.

With --profile, also where a call's host time goes (no perf / nsys on the
device VM): torch.profiler over --profile-calls calls of each collective
case, each event's self CPU time per call (the CUDA runtime calls, e.g.
cudaLaunchKernelExC, appear as their own events). The profiler adds its own
cost per event, so read the shares, not the totals.
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
    """One run: wall time per call of `calls` back-to-back calls, ranks started together."""
    torch.cuda.synchronize()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / calls * 1e6


def profile_breakdown(name, fn, calls, rank):
    """Self CPU time per call of each profiler event over `calls` calls of fn (rank 0 prints)."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    dist.barrier()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
    if rank != 0:
        return
    rows = [(e.self_cpu_time_total / calls, e.cpu_time_total / calls, e.count / calls, e.key)
            for e in prof.key_averages() if e.self_cpu_time_total > 0]
    rows.sort(reverse=True)
    print(f"## profile: {name}: {(t1 - t0) / calls * 1e6:.2f} us/call under the profiler ({calls} calls)")
    print(f"   {'self us/call':>12s} {'total us/call':>13s} {'count/call':>10s}  event")
    for self_us, total_us, per, key in rows[:14]:
        print(f"   {self_us:12.2f} {total_us:13.2f} {per:10.2f}  {key[:70]}")
    print(flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--bytes", type=int, default=1024)
    ap.add_argument("--profile", action="store_true", help="also print a torch.profiler breakdown per case")
    ap.add_argument("--profile-calls", type=int, default=300)
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
    for _, fn in cases:
        for _ in range(50):  # setup and warmup
            fn()
    runs = {name: [] for name, _ in cases}
    for _ in range(args.rounds):  # NOTE [host rounds]: the cases take turns
        for name, fn in cases:
            runs[name].append(per_call_us(fn, args.calls))
    if rank == 0:
        print(f"# us per call, {args.bytes} B, {args.rounds} rounds of {args.calls} calls: fastest run, median run")
        for name, _ in cases:
            print(f"{name:40s} {min(runs[name]):8.2f} {statistics.median(runs[name]):8.2f} us/call", flush=True)
    if args.profile:
        for name, fn in cases:
            if "async_op" not in name and "all_gather" not in name:
                profile_breakdown(name, fn, args.profile_calls, rank)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
