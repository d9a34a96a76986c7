"""The end of a purlin group on CUDA (NOTE [shutdown and abort], csrc/backend/c10d/group_lifecycle.cc):
dist.destroy_process_group shuts the group down (later ops refuse, a pool tensor outlives it, a new
group in the same processes works), torch's _abort_process_group ends a host wait of the CUDA path
at once, and a kernel's or copy-engine stream's wait within a millisecond (NOTE [device abort]), and the NCCL
fallback a group made is shut down with it (ProcessGroupNCCL otherwise warns
that destroy_process_group() "was not called"). A group that breaks on one rank is broken on every rank
within seconds, and a peer killed while the others' kernels wait for it is named by them within seconds
(NOTE [group health], csrc/backend/group/group_health.h). Skips cleanly without the GPUs.
"""
import os
import re
import signal
import subprocess
import sys
import threading
import time
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

from gpu_harness import gpus_missing, init_purlin_worker, run_ranks_expect_ok, write_result
from mp_util import int_floats

WORLD = int(os.environ.get("PURLIN_GPU_WORLD", "2"))  # ranks = GPUs used (tools/gpu.sh NPROC)
NCCL_UNSHUT = "destroy_process_group() was not called"  # ProcessGroupNCCL's destructor, when never shut down
NOTICE_S = 3.0  # a peer's break or death reaches every rank within this (the watcher looks every 50 ms)


def worker(rank, path, result_path):
    import torch_purlin

    timeout = timedelta(seconds=120)
    dev = init_purlin_worker(rank, WORLD, path, timeout)
    errors = []

    def check(what, got, want):
        if not torch.equal(got.cpu(), want):
            errors.append(f"{what}: {(got.cpu() != want).sum().item()} elements differ from the reference")

    def refused(what, call, text):
        try:
            call()
            errors.append(f"{what}: ran, expected the group to refuse it")
        except RuntimeError as e:
            if text not in str(e):
                errors.append(f"{what}: raised {str(e)[:300]!r}, expected {text!r}")

    # 1. destroy_process_group: the old group refuses, its pool tensor stays readable.
    t = int_floats(100 + rank, (4099,)).to(dev)
    dist.all_reduce(t)
    check("all_reduce before destroy", t, sum(int_floats(100 + r, (4099,)) for r in range(WORLD)))
    kept = torch_purlin.empty((1000,), dtype=torch.float32, device=dev)
    kept.copy_(int_floats(200 + rank, (1000,)))
    world = dist.group.WORLD
    dist.destroy_process_group()
    refused("all_reduce after destroy", lambda: world.allreduce([t]), f"purlin all_reduce on rank {rank}: the group was shut down")
    check("a pool tensor after its group's destroy", kept, int_floats(200 + rank, (1000,)))
    del kept, world

    # 2. A new group in the same processes, on a new file: native and exact again.
    dist.init_process_group("purlin", init_method=f"file://{path}_again", rank=rank, world_size=WORLD,
                            timeout=timeout, device_id=dev)
    t = int_floats(300 + rank, (65537,)).to(dev)
    dist.all_reduce(t)
    check("all_reduce on a new group", t, sum(int_floats(300 + r, (65537,)) for r in range(WORLD)))
    if torch_purlin.counters()["all_reduce"] != (1, 0):
        errors.append(f"all_reduce on the new group ran {torch_purlin.counters()['all_reduce']} (native, fallback)")

    # 3. Abort while rank 0 waits on the host for the all_to_all split sizes of ranks that never come.
    splits = [r + 1 for r in range(WORLD)]  # uneven: the sizes travel through the host exchange
    inp = int_floats(400 + rank, (sum(splits),)).to(dev)
    out = torch.empty(WORLD * (rank + 1), device=dev)
    dist.all_to_all_single(out, inp, output_split_sizes=[rank + 1] * WORLD, input_split_sizes=splits)
    want = torch.cat([int_floats(400 + r, (sum(splits),))[sum(splits[:rank]):sum(splits[:rank + 1])]
                      for r in range(WORLD)])
    check("all_to_all_single before the abort", out, want)
    store = dist.distributed_c10d._get_default_store()
    if rank == 0:
        world = dist.group.WORLD
        timer = threading.Timer(0.5, dist.distributed_c10d._abort_process_group)
        start = time.monotonic()
        timer.start()
        refused("the all_to_all_single the others never join",
                lambda: dist.all_to_all_single(out, inp, output_split_sizes=[1] * WORLD, input_split_sizes=splits),
                "the group was aborted")
        took = time.monotonic() - start
        if took > 30:
            errors.append(f"the aborted all_to_all_single returned after {took:.1f} s (timeout 120 s)")
        timer.join()
        refused("all_reduce after abort", lambda: world.allreduce([t]), f"purlin all_reduce on rank 0: the group was aborted")
        store.set("rank0_done", "1")
    else:
        store.wait(["rank0_done"])
        dist.destroy_process_group()
    torch.cuda.synchronize()

    # 4. Abort while the GPU waits (NOTE [device abort], csrc/atom/cuda/signal_pad.h): a kernel or copy-engine
    # stream wait already queued ends within about a millisecond of the abort, not at the group timeout.
    dist.init_process_group("purlin", init_method=f"file://{path}_device_abort", rank=rank, world_size=WORLD,
                            timeout=timeout, device_id=dev)
    device_errors, seen = device_abort_cases(rank, dev)
    errors += device_errors
    dist.destroy_process_group()
    write_result(result_path, rank, errors, "destroy, new group, host and device aborts as expected; " + "; ".join(seen))


def device_abort_cases(rank, dev):
    """Each case makes a group (60 s timeout), queues a collective on rank 0 whose peers never come (kernel
    cases) or come late (the copy engine: their streams sleep first), aborts the group from a timer thread
    after 1 s, and checks that the GPU was free within seconds and that the work names the abort."""
    import torch_purlin

    errors, seen = [], []  # seen: what each case took and raised, for the log
    protocols = []

    def one(what, settings, call, all_call):
        g = torch_purlin.group_with_settings(settings, timeout=timedelta(seconds=60), device="cuda")
        dist.barrier()
        work = None
        took = 0.0
        if rank == 0 or all_call:
            if rank != 0:
                torch.cuda._sleep(10_000_000_000)  # ~5 s at ~2 GHz ahead of the collective on this stream
            timer = threading.Timer(1.0, dist.distributed_c10d._abort_process_group, args=(g,))
            start = time.monotonic()
            work = call(g)
            timer.start()
            torch.cuda.synchronize()
            took = time.monotonic() - start
            timer.join()
            if rank == 0:
                protocols.append(torch_purlin.last_launch(g)["protocol"])
        if work is not None:
            if took > 20:
                errors.append(f"{what}: the GPU stayed busy {took:.1f} s after the abort at 1 s (timeout 60 s)")
            try:  # (Work.exception() cannot return its value to Python in torch 2.11)
                work.wait()
                text = ""
            except RuntimeError as e:
                text = str(e)
            seen.append(f"{what}: {protocols[-1] if rank == 0 else ''} GPU free {took:.2f} s after the call "
                        f"(abort at 1 s): {text[:200]!r}")
            if f"on rank {rank}: the group was aborted" not in text:
                errors.append(f"{what}: work.wait() raised {text[:400]!r}, expected it to name the abort")
            elif rank == 0 and "waiting for rank" not in text:
                errors.append(f"{what}: the abort's error does not name the rank waited for: {text[:400]!r}")
        dist.barrier()
        if work is None:  # after rank 0's kernel, which wrote into this rank's buffers, ended
            dist.destroy_process_group(g)

    def all_reduce(n):
        return lambda g: dist.all_reduce(torch.ones(n, device=dev), group=g, async_op=True)

    native = {"TORCH_PURLIN_CUDA_NCCL_FROM": "none"}  # (ranks sharing a GPU run natively anyway)
    only_plans = dict(native, TORCH_PURLIN_CUDA_LINE_BYTES="0", TORCH_PURLIN_CUDA_PARITY_BYTES="0")
    cases = [  # (what, settings, call, whether every rank calls, the protocol it must run)
        ("all_reduce 4 KB", native, all_reduce(1000), False, lambda p: "lines" in p),
        ("all_reduce 4 KB, wide lines", dict(native, TORCH_PURLIN_CUDA_LINE_FORMAT="wide"), all_reduce(1000), False,
         lambda p: "wide-lines" in p),  # (auto picks narrow lines where ranks share a GPU; wide forces them)
        ("all_reduce 4 MB", native, all_reduce(1 << 20), False, lambda p: "parity" in p),
        ("all_reduce 16 MB", only_plans, all_reduce(4 << 20), False,
         lambda p: "lines" not in p and "parity" not in p and p != "nccl"),
        ("all_gather 4 MB", dict(only_plans, TORCH_PURLIN_CUDA_CE_BYTES="1"),
         lambda g: dist.all_gather_into_tensor(torch.empty(WORLD << 20, device=dev), torch.ones(1 << 20, device=dev),
                                               group=g, async_op=True), True, lambda p: p.startswith("copy-engine")),
    ]
    for what, settings, call, all_call, _ in cases:
        one(what, settings, call, all_call)
    if rank == 0:
        for (what, *_, wanted), proto in zip(cases, protocols):
            if not wanted(proto):
                errors.append(f"{what}: ran protocol {proto!r}, not the path the case is for")
    return errors, seen


def test_destroy_new_group_and_abort_on_cuda():
    if gpus_missing(WORLD):
        pytest.skip(gpus_missing(WORLD))
    run_ranks_expect_ok(worker, WORLD)


def pids_of(store, rank, tag):
    store.set(f"{tag}/pid{rank}", str(os.getpid()))
    return [int(store.get(f"{tag}/pid{r}")) for r in range(WORLD)]


def broken_group_worker(rank, path, result_path):
    """NOTE [group health] on CUDA tensors: (1) a call-tag mismatch raises on every rank within seconds of
    the call (group timeout 60 s), each naming another rank: as its own kernel saw it, or as the rank that
    found it; (2) a device timeout on one rank (its group's timeout 2 s, the others' 60 s) ends the kernels
    of the ranks still waiting within NOTICE_S, naming that rank, its pid and its timeout, and the next call
    of a rank that never joined raises at once naming it."""
    import torch_purlin

    dev = init_purlin_worker(rank, WORLD, path, timedelta(seconds=120))
    store = dist.distributed_c10d._get_default_store()
    pids = pids_of(store, rank, "broken")
    errors, seen = [], []
    native = {"TORCH_PURLIN_CUDA_NCCL_FROM": "none"}

    # (1) call tags: workspace plans, sizes that differ on every rank
    g = torch_purlin.group_with_settings(dict(native, TORCH_PURLIN_CUDA_LINE_BYTES="0",
                                              TORCH_PURLIN_CUDA_PARITY_BYTES="0"),
                                         timeout=timedelta(seconds=60), device="cuda")
    start = time.monotonic()
    t = torch.ones(1000 + 512 * rank, device=dev)
    text = ""
    try:
        dist.all_reduce(t, group=g)
        torch.cuda.synchronize()
        dist.all_reduce(torch.ones(8, device=dev), group=g)
        errors.append("call tags: no error after a mismatched call")
    except RuntimeError as e:
        text = str(e)
    took = time.monotonic() - start
    seen.append(f"call tags: raised after {took:.2f} s: {text[:160]!r}")
    own = re.search(r"rank (\d+) called this collective with other arguments", text)
    learned = re.search(r"rank (\d+) \(pid (\d+)\) found the group unusable", text)
    if took > 10:
        errors.append(f"call tags: raised after {took:.1f} s (group timeout 60 s)")
    if f"on rank {rank}" not in text or not (own and int(own.group(1)) != rank or
                                             learned and int(learned.group(1)) != rank
                                             and int(learned.group(2)) == pids[int(learned.group(1))]):
        errors.append(f"call tags: the error names no other rank: {text[:400]!r}")
    dist.barrier()
    dist.destroy_process_group(g)

    # (2) a device timeout on rank 0 only; the last rank never joins
    g = torch_purlin.group_with_settings(native, timeout=timedelta(seconds=2 if rank == 0 else 60), device="cuda")
    dist.barrier()
    finder = f"rank 0 (pid {pids[0]}) found the group unusable: purlin all_reduce on rank 0: timed out"
    if rank == WORLD - 1:
        store.wait(["broken/raised0"])  # rank 0's next call raised: its finding is published by then
        start = time.monotonic()
        text = ""
        try:
            dist.all_reduce(torch.ones(1000, device=dev), group=g)
            torch.cuda.synchronize()
            errors.append("device timeout: a rank that never joined ran its next call")
        except RuntimeError as e:
            text = str(e)
        if finder not in text or time.monotonic() - start > NOTICE_S:
            errors.append(f"device timeout: the next call took {time.monotonic() - start:.1f} s and raised {text[:400]!r}")
    else:
        start = time.monotonic()
        dist.all_reduce(torch.ones(1000, device=dev), group=g)
        torch.cuda.synchronize()
        synced = time.monotonic()
        if rank == 0:
            store.set("broken/synced0", repr(synced))
        elif synced - float(store.get("broken/synced0")) > NOTICE_S:
            errors.append(f"device timeout: rank {rank}'s kernel ended {synced - start:.1f} s after its launch, "
                          f"{synced - float(store.get('broken/synced0')):.1f} s after rank 0's")
        text = ""
        try:
            dist.all_reduce(torch.ones(8, device=dev), group=g)
            errors.append("device timeout: no error after the timeout")
        except RuntimeError as e:
            text = str(e)
        if rank == 0:
            store.set("broken/raised0", "1")
        want = "purlin all_reduce on rank 0: timed out" if rank == 0 else finder
        if want not in text:
            errors.append(f"device timeout: rank {rank} raised {text[:400]!r}, expected {want!r}")
        seen.append(f"device timeout: kernel ended {synced - start:.2f} s after the launch")
    dist.barrier()
    dist.destroy_process_group(g)
    dist.destroy_process_group()
    write_result(result_path, rank, errors, "; ".join(seen))


def test_a_broken_group_is_broken_on_every_rank():
    if gpus_missing(WORLD):
        pytest.skip(gpus_missing(WORLD))
    run_ranks_expect_ok(broken_group_worker, WORLD)


def killed_peer_worker(rank, path, result_path):
    """NOTE [group health]: the last rank kills itself while the others' kernels wait for it (an async
    all_reduce of 4 MB, group timeout 60 s); their GPUs are free within NOTICE_S of the kill, the work and
    the next call name the dead rank and its pid, destroy_process_group works after, and no segment of the
    group is left in /dev/shm."""
    import torch_purlin

    dev = init_purlin_worker(rank, WORLD, path, timedelta(seconds=120))
    store = dist.distributed_c10d._get_default_store()
    pids = pids_of(store, rank, "killed")
    victim = WORLD - 1
    errors = []
    g = torch_purlin.group_with_settings({"TORCH_PURLIN_CUDA_NCCL_FROM": "none"}, timeout=timedelta(seconds=60),
                                         device="cuda")
    x = int_floats(500 + rank, (1 << 20,)).to(dev)
    dist.all_reduce(x, group=g)
    torch.cuda.synchronize()
    if not torch.equal(x.cpu(), sum(int_floats(500 + r, (1 << 20,)) for r in range(WORLD))):
        errors.append("all_reduce before the kill is wrong")
    store.set(f"killed/ready{rank}", "1")
    store.wait([f"killed/ready{r}" for r in range(WORLD)])
    if rank == victim:
        time.sleep(1.0)  # the others' kernels wait for this rank by now
        store.set("killed/at", repr(time.monotonic()))
        os.kill(os.getpid(), signal.SIGKILL)
    work = dist.all_reduce(torch.ones(1 << 20, device=dev), group=g, async_op=True)
    torch.cuda.synchronize()
    freed = time.monotonic() - float(store.get("killed/at"))
    if freed > NOTICE_S:
        errors.append(f"the GPU stayed busy {freed:.1f} s after the kill (group timeout 60 s)")
    name = f"rank {victim} (pid {pids[victim]}) is gone: its process ended"
    for what, call in (("work.wait()", work.wait), ("the next all_reduce",
                                                   lambda: dist.all_reduce(torch.ones(8, device=dev), group=g))):
        try:
            call()
            errors.append(f"{what} did not raise after the kill")
        except RuntimeError as e:
            if name not in str(e):
                errors.append(f"{what} raised {str(e)[:400]!r}, expected it to name {name!r}")
    start = time.monotonic()
    dist.destroy_process_group(g)
    dist.destroy_process_group()
    if time.monotonic() - start > 30:
        errors.append(f"destroy_process_group took {time.monotonic() - start:.1f} s after the kill")
    left = [f for f in os.listdir("/dev/shm") if any(f.startswith(f"purlin_{p}_") for p in pids)]
    if left:
        errors.append(f"/dev/shm still holds {left}")
    write_result(result_path, rank, errors, f"GPU free {freed:.2f} s after the kill; the errors name {name!r}")


def test_a_killed_peer_is_noticed_while_kernels_wait():
    if gpus_missing(WORLD):
        pytest.skip(gpus_missing(WORLD))
    import tempfile
    import torch.multiprocessing as mp
    with tempfile.TemporaryDirectory() as d:
        res = os.path.join(d, "result")
        ctx = mp.get_context("spawn")
        procs = [ctx.Process(target=killed_peer_worker, args=(r, os.path.join(d, "store"), res)) for r in range(WORLD)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(300)
        for p in procs:
            if p.is_alive():
                p.kill()
        codes = [p.exitcode for p in procs]
        assert codes == [0] * (WORLD - 1) + [-signal.SIGKILL], f"exit codes {codes}"
        for r in range(WORLD - 1):
            with open(f"{res}.{r}") as f:
                text = f.read()
            print(f"rank {r}: {text}")
            assert text.startswith("ok"), f"rank {r}: {text}"


# One rank, one GPU: NCCL at world 1 needs no second GPU, so this also runs where ranks share one.
NCCL_FALLBACK = r"""
import sys, gc, torch, torch.distributed as dist, torch_purlin
from datetime import timedelta
torch.cuda.set_device(0)
store = dist.HashStore()
if sys.argv[1] == "bare":  # the control: a ProcessGroupNCCL dropped without shutdown
    pg = dist.ProcessGroupNCCL(store, 0, 1)
    t = torch.ones(8, device="cuda")
    pg.allreduce([t]).wait()
    torch.cuda.synchronize()
    del pg
    gc.collect()
    print("END", flush=True)
    sys.exit(0)
dist.init_process_group("purlin", store=store, rank=0, world_size=1, timeout=timedelta(seconds=60))
t = torch.arange(1000, dtype=torch.float32, device="cuda")
dist.all_reduce(t)  # TORCH_PURLIN_FORCE_FALLBACK=cuda:all_reduce: the group's NCCL fallback runs it
assert torch.equal(t.cpu(), torch.arange(1000, dtype=torch.float32))
assert torch_purlin.counters()["all_reduce"] == (0, 1), torch_purlin.counters()
world = dist.group.WORLD
if sys.argv[1] == "destroy":
    dist.destroy_process_group()
else:
    dist.distributed_c10d._abort_process_group()
try:
    world.allreduce([t])
    print("RAN", flush=True)
except RuntimeError as e:
    print("REFUSED:", str(e).splitlines()[0], flush=True)
del world
gc.collect()
torch.cuda.synchronize()
print("END", flush=True)
"""


def run_one_rank(mode):
    env = dict(os.environ, TORCH_PURLIN_FORCE_FALLBACK="cuda:all_reduce", TORCH_NCCL_ASYNC_ERROR_HANDLING="0")
    env.pop("TORCH_PURLIN_CUDA_SHARE_GPU", None)  # one rank: nothing is shared
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # torch_purlin
    env["PYTHONPATH"] = os.pathsep.join([root, env.get("PYTHONPATH", "")])
    p = subprocess.run([sys.executable, "-c", NCCL_FALLBACK, mode], env=env, capture_output=True, text=True,
                       timeout=180)
    print(f"--- {mode}: exit {p.returncode}\n{p.stdout}\n{p.stderr[-3000:]}")
    return p


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("mode,verdict", [("destroy", "the group was shut down"), ("abort", "the group was aborted")])
def test_the_nccl_fallback_ends_with_its_group(mode, verdict):
    control = run_one_rank("bare")
    assert control.returncode == 0 and "END" in control.stdout, control.stderr[-2000:]
    if NCCL_UNSHUT not in control.stderr:
        pytest.skip(f"this torch's ProcessGroupNCCL does not warn {NCCL_UNSHUT!r} when never shut down")
    p = run_one_rank(mode)
    assert p.returncode == 0 and "END" in p.stdout, p.stderr[-2000:]
    assert f"REFUSED: purlin all_reduce on rank 0: {verdict}" in p.stdout, p.stdout
    assert NCCL_UNSHUT not in p.stderr, p.stderr[-2000:]
