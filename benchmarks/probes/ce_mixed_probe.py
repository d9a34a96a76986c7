"""Where the time of test_gpu_copy_engine.py's `mixed` family goes (probe, not a test).

    torchrun --nproc-per-node=2 benchmarks/probes/ce_mixed_probe.py [n]

The family's n=300001 cases took ~5.5 s for 10 iterations of four collectives on 2x H200
(2026-11-30 to 2026-12-01) and on one shared H200: ~137 ms per collective. This times each
collective of the same loop alone (synchronised before and after), with the copy-engine
Atom on (TORCH_PURLIN_CUDA_CE_BYTES=1, as the test) and, for comparison, its ops on the SM
kernel, plus the CPU work the test does per iteration.

2026-12-01, one H200 shared by two ranks (MPS), fastest of 5: every collective of the loop
took 0.023-0.073 ms on either path at n=300001 and n=4099 (copy engine: all_gather 0.073 ms,
broadcast 0.053; SM kernel 0.026-0.036), all four in a row 0.151 / 0.083 ms, while generating
this probe's share of the test's CPU work (inputs and a reference) took 42.9 ms. So the
family's ~550 ms per iteration are spent around the collectives (the test's inputs,
references and checks on the CPU, tensor copies), not in them; not traced further.
"""
import os
import sys
import time

import torch
import torch.distributed as dist


def timed(fn, reps=5):
    best = float("inf")
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return best * 1e3


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 300_001
    for k, v in (("TORCH_PURLIN_CUDA_NCCL_FROM", "none"), ("TORCH_PURLIN_CUDA_LINE_BYTES", "0"),
                 ("TORCH_PURLIN_CUDA_PARITY_BYTES", "0")):
        os.environ[k] = v
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(rank % torch.cuda.device_count())
    dev = torch.device("cuda", torch.cuda.current_device())
    import torch_purlin  # noqa: F401
    dist.init_process_group("purlin")
    groups = {}
    for name, ce in (("copy-engine", "1"), ("sm-kernel", "0")):
        os.environ["TORCH_PURLIN_CUDA_CE_BYTES"] = ce
        g = dist.new_group(backend="purlin")
        dist.all_reduce(torch.ones(1, device=dev), group=g)  # creates the CUDA engine under this setting
        groups[name] = g
    x = torch.randn(n, device=dev)
    big = torch.randn(world * n, device=dev)
    out = torch.empty(world * n, device=dev)
    rs = torch.empty(n, device=dev)
    for name, g in groups.items():
        ops = {
            "all_reduce": lambda: dist.all_reduce(x, group=g),
            "all_gather_into_tensor": lambda: dist.all_gather_into_tensor(out, x, group=g),
            "reduce_scatter_tensor": lambda: dist.reduce_scatter_tensor(rs, big, group=g),
            "broadcast": lambda: dist.broadcast(x, src=0, group=g),
        }
        for op, fn in ops.items():
            ms = timed(fn)
            proto = torch_purlin.last_launch(g)["protocol"]
            if rank == 0:
                print(f"{name:12s} {op:24s} n={n}: {ms:8.3f} ms ({proto})", flush=True)
        ms = timed(lambda: [f() for f in ops.values()])
        if rank == 0:
            print(f"{name:12s} {'all four in a row':24s} n={n}: {ms:8.3f} ms", flush=True)
    g = torch.Generator().manual_seed(1)
    t0 = time.perf_counter()
    xs = [0.5 + torch.rand(n, generator=g, dtype=torch.float64) for _ in range(world)]
    total = torch.stack(xs).double().sum(0)
    torch.allclose(total, total)
    if rank == 0:
        print(f"cpu work of one test iteration (inputs, reference): {(time.perf_counter() - t0) * 1e3:.1f} ms",
              flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
