"""torchtitan's llama3 debug model with torchtitan's own tensor-parallel plan (test/clients/torchtitan_tp.py) on a
purlin default group, CPU, world 2: the loss curve equals the same run over gloo bit for bit (every
all_gather, reduce_scatter and all_reduce of fp32 at world 2 adds two numbers: one result, whoever adds),
is within 1e-4 of a single-rank run (sharded matrix products sum in another order), and every
collective ran natively. World 4: torchtitan's FSDP2 (`apply_fsdp`) over a data-parallel dimension of
2 and tensor parallelism 2, within 1e-4 of the single-rank run. Skips where torchtitan is not installed (CI installs it not: it needs triton).

    python -m pytest test/clients/test_torchtitan_cpu.py -q
"""
import os
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

from gpu_harness import Runner, check_exited_cleanly, check_family, run_suite
from torchtitan_tp import compare, torchtitan_missing, train

STEPS = 4
pytestmark = pytest.mark.skipif(bool(torchtitan_missing()), reason=torchtitan_missing() or "runs")


def _worker(rank, world, init_file, log_path):
    import torch_purlin
    from torch.distributed.device_mesh import DeviceMesh
    torch.set_num_threads(1)
    torchtitan_missing()  # its stand-ins, in this process too
    runner = Runner(rank, log_path)
    runner.family = "torchtitan_tp"
    dist.init_process_group("purlin", init_method=f"file://{init_file}", rank=rank, world_size=world,
                            timeout=timedelta(seconds=60))
    gloo = dist.new_group(backend="gloo") if world == 2 else None
    cpu = torch.device("cpu")
    curves = {}

    def run(name, mesh):
        curves[name] = train(cpu, mesh, STEPS)

    runner.check("single rank", run, "local", None)
    if world == 2:
        runner.check("tensor parallel 2 on purlin", run, "purlin", DeviceMesh.from_group(dist.group.WORLD, "cpu"))
        runner.check("tensor parallel 2 on gloo", run, "gloo", DeviceMesh.from_group(gloo, "cpu"))
    else:
        from torch.distributed.device_mesh import init_device_mesh
        mesh = init_device_mesh("cpu", (world // 2, 2), mesh_dim_names=("dp", "tp"))
        runner.check("FSDP 2 x tensor parallel 2 on purlin", lambda: curves.update(
            purlin=train(cpu, mesh["tp"], STEPS, dp_mesh=mesh["dp"])))

    def same(a, b, rtol):
        err = compare(curves[a], curves[b], f"{a} vs {b}", rtol, 0.0)
        assert not err, err

    if world == 2:
        runner.check("purlin equals gloo bit for bit", same, "purlin", "gloo", 0.0)
    runner.check("purlin within 1e-4 of one rank", same, "purlin", "local", 1e-4)

    groups = [dist.group.WORLD] if world == 2 else [mesh["dp"].get_group(), mesh["tp"].get_group()]

    def native():
        for g in groups:
            c = torch_purlin.counters(g)
            fell = {op: n for op, n in c.items() if n[1]}
            assert not fell and sum(n[0] for n in c.values()) > 0, f"counters of {g.group_name}: {c}"
            print(f"rank {rank}: losses {curves.get('purlin')}; counters of {g.group_name} {c}", flush=True)

    runner.check("every collective native", native)
    dist.destroy_process_group()


@pytest.mark.parametrize("world", [2, 4])
def test_torchtitan_tensor_parallel_cpu(world, tmp_path):
    suite = run_suite(f"torchtitan_tp_w{world}", _worker, world=world, timeout_s=300, tmp_dir=tmp_path)
    check_family(suite, "torchtitan_tp")
    check_exited_cleanly(suite)
    assert len({r["case"] for r in suite["rows"]}) == (6 if world == 2 else 4)
