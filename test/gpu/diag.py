"""diag.py — step-by-step bring-up of one rank (run two: rank 0 and 1).

    python3 test/gpu/diag.py RANK STORE_PATH
Prints each step before doing it, so a crash shows where it happened.
"""
import faulthandler
import sys

faulthandler.enable()
rank, path = int(sys.argv[1]), sys.argv[2]


def step(s):
    print(f"[rank {rank}] {s}", flush=True)


step("import")
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import torch_purlin  # noqa: E402,F401

step("init")
torch.cuda.set_device(rank)
dist.init_process_group("purlin", store=dist.FileStore(path, 2), rank=rank, world_size=2)
step("cpu all_reduce")
x = torch.ones(4) * (rank + 1)
dist.all_reduce(x)
step(f"cpu -> {x.tolist()}")
step("cuda all_reduce")
y = torch.ones(4, device="cuda") * (rank + 1)
dist.all_reduce(y)
torch.cuda.synchronize()
step(f"cuda -> {y.tolist()} counters {torch_purlin.counters(device='cuda')}")
z = torch.arange(1 << 20, device="cuda", dtype=torch.bfloat16)
dist.all_reduce(z)
torch.cuda.synchronize()
step(f"cuda 1M bf16 ok={bool((z == torch.arange(1 << 20, device='cuda', dtype=torch.bfloat16) * 2).all())}")
dist.destroy_process_group()
step("done")
