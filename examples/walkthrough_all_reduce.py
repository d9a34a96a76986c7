"""Walk one all_reduce through Purlin's three layers: Spec -> SNAC plan -> Atom.

    python examples/walkthrough_all_reduce.py

1. Semantics: all_reduce of n elements over 3 ranks is ONE chunk whose sources
   are every rank's input [0, n) and whose dests are every rank's output [0, n),
   with operation Reduce(SUM).
2. Orchestration: SNAC derives each rank's plan from that spec alone: stage my
   input into my workspace, notify the ranks that read it, wait for theirs,
   reduce (ascending rank order) into my output, ack. With a small workspace
   the same plan pipelines in rounds; with two_shot=True each rank reduces only
   its third and the others copy it (the same spec, distributed differently).
3. Datapath: the backend runs the plan on an Atom: here the CPU shared-memory
   Atom, through torch.distributed with backend="purlin".
"""
import os
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import torch_purlin

WORLD, N = 3, 8


def show_layers():
    spec = torch_purlin.specs.all_reduce(WORLD, N, torch_purlin.RedOp.SUM)
    print("== 1. Spec:", spec.name, spec.kind, spec.redop)
    for c, ch in enumerate(spec.chunks):
        print(f"   chunk {c}: sources {[(p.rank, p.region) for p in ch.sources]}")
        print(f"            dests   {[(p.rank, p.region) for p in ch.dests]}")
    print("== 2. SNAC plan of rank 1 (one-shot, roomy workspace):")
    print(torch_purlin.make_plan(spec, 1, slot_elems=1 << 20)["text"])
    print("== 2b. same spec, two-shot, workspace of 4 elements per slot (pipelined):")
    print(torch_purlin.make_plan(spec, 1, slot_elems=4, two_shot=True)["text"])


def worker(rank, path):
    dist.init_process_group("purlin", store=dist.FileStore(path, WORLD), rank=rank, world_size=WORLD)
    x = torch.arange(N, dtype=torch.float32) * (rank + 1)
    dist.all_reduce(x)
    if rank == 0:
        print("== 3. all_reduce on the CPU Atom, rank 0 got:", x.tolist())
        print("   expected:", (torch.arange(N, dtype=torch.float32) * 6).tolist())
        print("   counters (native, fallback):", torch_purlin.counters())
    dist.destroy_process_group()


if __name__ == "__main__":
    show_layers()
    with tempfile.TemporaryDirectory() as d:
        mp.spawn(worker, args=(os.path.join(d, "store"),), nprocs=WORLD)
