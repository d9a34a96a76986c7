"""train_step.py — time per training step, DDP and FSDP2 (fully_shard), purlin vs NCCL, in one run.

    torchrun --nproc-per-node=2 benchmarks/train_step.py [--layers 8] [--hidden 4096] [--batch 16]
        [--steps 20] [--impls nccl,purlin,purlin-pool,purlin-pool-local,purlin-pool-ce] [--json PATH] [--profile N]

The collectives of a real step (DDP's bucketed all_reduce; FSDP2's all-gathers and
reduce-scatters, one pair per layer) under the same model, data and processes:
  nccl         groups of backend nccl
  purlin       groups of backend purlin
  purlin-pool  FSDP2 with set_allocate_memory_from_process_group_for_comm(True): its all-gather
               outputs and reduce-scatter inputs come from purlin's symmetric pool, so
               all-gathers write straight into the peers' outputs (NOTE [peer outputs]) and
               reduce-scatters read their inputs in place (NOTE [zero-copy]); every block is
               placed collectively (NOTE [pool agreement on the host]). FSDP2 rows only.
  purlin-pool-local  the same on a group with TORCH_PURLIN_CUDA_POOL_PLACEMENT=local: every rank
               places its blocks alone, no host rendezvous per allocation (NOTE [local placement]).
  purlin-pool-ce  purlin-pool with TORCH_PURLIN_CUDA_CE_BYTES=1M: FSDP2's all-gathers (eager, >= 1M)
               pulled by the copy engines from the peers' pool inputs, no SMs (NOTE [copy-engine
               zero-copy]); its reduce-scatters stay on the kernel.
Model: --layers bf16 Linear(hidden, hidden) + ReLU blocks, each its own FSDP2 unit.
Rank 0 prints one row per (wrapper, impl): median step ms over --steps steps after 3 warm-up
steps, and the speedup over nccl in the same run; then the protocols purlin's groups ran
(torch_purlin.protocol_counts) and the host cost of one torch_purlin.empty() next to a
Store round trip (what each agreement cost before it moved to shared memory).
--profile N: N more steps of each FSDP2 row under torch.profiler; rank 0 prints the ops and kernels
that took the most self CUDA time and self CPU time (where a pool row's extra time goes).
Ranks sharing a GPU (TORCH_PURLIN_CUDA_SHARE_GPU, NOTE [shared GPU]): no nccl rows.
"""
import argparse
import json
import os
import statistics
import time

import torch
import torch.distributed as dist


def make_model(layers, hidden, dev):
    torch.manual_seed(0)
    blocks = [torch.nn.Sequential(torch.nn.Linear(hidden, hidden), torch.nn.ReLU()) for _ in range(layers)]
    return torch.nn.Sequential(*blocks).to(device=dev, dtype=torch.bfloat16)


def wrap_fsdp(net, group, pool):
    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:  # older torch
        from torch.distributed._composable.fsdp import fully_shard
    from torch.distributed.device_mesh import DeviceMesh

    mesh = DeviceMesh.from_group(group, "cuda")
    units = [fully_shard(b, mesh=mesh) for b in net] + [fully_shard(net, mesh=mesh)]
    if pool:
        for u in units:
            u.set_allocate_memory_from_process_group_for_comm(True)
    return net


def _fsdp_has_pool_api():
    fsdp_module = getattr(getattr(torch.distributed, "fsdp", None), "FSDPModule", None)
    return hasattr(fsdp_module, "set_allocate_memory_from_process_group_for_comm")


def step_ms(model, data, steps):
    """Median wall ms per optimizer step (synchronized) over `steps` steps after 3 warm-up steps."""
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    times = []
    for i in range(3 + steps):
        x, y = data[i % len(data)]
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        torch.cuda.synchronize()
        if i >= 3:
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def profile_table(model, data, steps):
    """The top self-CUDA and self-CPU entries of `steps` profiled steps (after step_ms warmed the model up)."""
    from torch.profiler import ProfilerActivity, profile

    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for i in range(steps):
            x, y = data[i % len(data)]
            opt.zero_grad(set_to_none=True)
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
        torch.cuda.synchronize()
    avg = prof.key_averages()
    ours = [f"{e.key}: {e.count} calls, {e.cpu_time_total / max(e.count, 1):.1f} us CPU each, "
            f"{e.cpu_time_total / 1e3 / steps:.2f} ms per step" for e in avg if e.key.startswith("purlin::")]
    return (avg.table(sort_by="self_cuda_time_total", row_limit=12, max_name_column_width=60) + "\n" +
            avg.table(sort_by="self_cpu_time_total", row_limit=12, max_name_column_width=60) + "\n" +
            "purlin host ranges (allocation and its agreement): " + ("; ".join(ours) or "none"))


def empty_us(group, dev, calls=200):
    """Host microseconds per torch_purlin.empty(1 MB) + free, ranks started together."""
    import torch_purlin

    torch_purlin.empty(1 << 20, dtype=torch.uint8, device=dev, group=group)  # the pool exists
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(calls):
        torch_purlin.empty(1 << 20, dtype=torch.uint8, device=dev, group=group)
    return (time.perf_counter() - t0) / calls * 1e6


def store_round_trip_us(rank, world, calls=200):
    """Host microseconds per Store all-gather of a short value (set one key, get every peer's)."""
    store = dist.distributed_c10d._get_default_store()
    dist.barrier()
    t0 = time.perf_counter()
    for i in range(calls):
        store.set(f"train_step/{i}/{rank}", "0")
        for r in range(world):
            if r != rank:
                store.get(f"train_step/{i}/{r}")
    return (time.perf_counter() - t0) / calls * 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--impls", default="nccl,purlin,purlin-pool,purlin-pool-local,purlin-pool-ce")
    ap.add_argument("--json", default="")
    ap.add_argument("--profile", type=int, default=0, help="profile N more steps of each FSDP2 row (rank 0 prints)")
    a = ap.parse_args()

    import torch_purlin
    from torch.nn.parallel import DistributedDataParallel as DDP

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    dev = torch.device("cuda", local % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    dist.init_process_group(backend="gloo")
    shared = os.environ.get("TORCH_PURLIN_CUDA_SHARE_GPU") == "1" and world > torch.cuda.device_count()
    impls = [i for i in a.impls.split(",") if i and not (shared and i == "nccl")]

    def settings_group(impl, **settings):
        return torch_purlin.group_with_settings(settings, device=dev) if impl in impls else None

    groups = {"nccl": dist.new_group(backend="nccl") if "nccl" in impls else None,
              "purlin": dist.new_group(backend="purlin"),
              "purlin-pool-local": settings_group("purlin-pool-local", TORCH_PURLIN_CUDA_POOL_PLACEMENT="local"),
              "purlin-pool-ce": settings_group("purlin-pool-ce", TORCH_PURLIN_CUDA_CE_BYTES="1M")}
    g = torch.Generator().manual_seed(1 + rank)
    data = [(torch.randn(a.batch, a.hidden, generator=g).to(dev, torch.bfloat16),
             torch.randn(a.batch, a.hidden, generator=g).to(dev, torch.bfloat16)) for _ in range(4)]

    rows = []
    for wrapper in ("ddp", "fsdp2"):
        for impl in impls:
            pool = impl.startswith("purlin-pool")
            if wrapper == "ddp" and pool:
                continue
            if pool and not _fsdp_has_pool_api():
                if rank == 0:
                    print("purlin-pool skipped: this torch's FSDP2 has no set_allocate_memory_from_process_group_for_comm")
                continue
            group = groups[impl if impl in ("nccl", "purlin-pool-local", "purlin-pool-ce") else "purlin"]
            net = make_model(a.layers, a.hidden, dev)
            if wrapper == "ddp":
                model = DDP(net, device_ids=[dev.index], process_group=group)
            else:
                model = wrap_fsdp(net, group, pool)
            ms = step_ms(model, data, a.steps)
            rows.append({"wrapper": wrapper, "impl": impl, "step_ms": ms})
            if a.profile and wrapper == "fsdp2":
                table = profile_table(model, data, a.profile)
                if rank == 0:
                    print(f"== profile: {wrapper} {impl}, {a.profile} steps, rank 0\n{table}", flush=True)
            del model, net
            torch.cuda.empty_cache()
    base = {r["wrapper"]: r["step_ms"] for r in rows if r["impl"] == "nccl"}
    for r in rows:
        r["speedup_vs_nccl"] = base[r["wrapper"]] / r["step_ms"] if r["wrapper"] in base else None
    extra = {"protocols": torch_purlin.protocol_counts(groups["purlin"]),
             "empty_us": empty_us(groups["purlin"], dev), "store_round_trip_us": store_round_trip_us(rank, world)}
    if groups["purlin-pool-local"] is not None:
        extra["empty_local_us"] = empty_us(groups["purlin-pool-local"], dev)
    if groups["purlin-pool-ce"] is not None:
        extra["protocols_ce"] = torch_purlin.protocol_counts(groups["purlin-pool-ce"])
    if rank == 0:
        print(f"train_step: {a.layers} x Linear({a.hidden}) bf16, batch {a.batch}, world {world}"
              f"{' (ranks share a GPU: no nccl)' if shared else ''}, {torch.cuda.get_device_name(dev)}, "
              f"torch {torch.__version__}")
        print("| wrapper | impl | step ms (median) | speedup vs nccl |\n|---|---|---|---|")
        for r in rows:
            s = f"{r['speedup_vs_nccl']:.2f}x" if r["speedup_vs_nccl"] else "-"
            print(f"| {r['wrapper']} | {r['impl']} | {r['step_ms']:.3f} | {s} |")
        local_us = f" ({extra['empty_local_us']:.1f} us with local placement)" if "empty_local_us" in extra else ""
        print(f"torch_purlin.empty(1 MB): {extra['empty_us']:.1f} us per call{local_us}; "
              f"a Store all-gather of one short value: {extra['store_round_trip_us']:.1f} us")
        print(f"protocols (purlin's group, every row): {extra['protocols']}")
        if "protocols_ce" in extra:
            print(f"protocols (purlin-pool-ce's group): {extra['protocols_ce']}")
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"args": vars(a), "world": world, "shared_gpu": shared, "rows": rows, **extra}, f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
