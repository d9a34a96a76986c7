"""A small /dev/shm (a container's: Docker gives 64 MB by default) on CPU, with one simulated host
(test/support/sim_hosts.py: the ranks in their own mount namespace with a private tmpfs of a given
size on /dev/shm). Needs root for the namespace; skips with the reason elsewhere.

Before NOTE [reserved segments] (csrc/atom/cpu/shm_segment.h) the segments were only ftruncate'd,
so tmpfs reserved nothing and a rank died of SIGBUS when it first touched a page /dev/shm could not
hold: `all_reduce(torch.ones(4 << 20))` killed every rank of 4 on 64 MB, and of 2 on 40 MB. Now
(NOTE [shm capacity], csrc/backend/group/shm_capacity.h), for worlds 2, 4 and 8 on 40, 64 and
8 MB, every rank either gets every collective right or raises a clear error:

- the default workspace shrinks to what /dev/shm holds, rank 0 logs the choice once, and every
  collective (inputs larger than the workspace, so pipelined in rounds) is right and native;
- a group made later with TORCH_PURLIN_CPU_WORKSPACE_BYTES set to a size that does not fit raises
  on every rank, naming /dev/shm's size and free bytes, the bytes needed and the remedy; one with
  the default still finds room (a shrinking group takes at most half the free bytes);
- on a /dev/shm filled by something else, a new group raises on every rank (too small even for the
  smallest workspace); the groups made before keep working;
- no rank dies of a signal and nothing is left in /dev/shm (run_hosts checks both).

    python -m pytest test/cpu/test_shm_capacity_cpu.py -q
"""
import os
import re
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

import sim_hosts

WHY_NOT = sim_hosts.unshare_unavailable()
needs_namespaces = pytest.mark.skipif(WHY_NOT is not None, reason=WHY_NOT or "")
MiB = 1 << 20


# ---------------------------------------------------------------- what each rank runs

def capture_stderr(path):
    """Sends this process's stderr (fd 2, where purlin logs) to `path`; returns a reader of it."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(fd, 2)
    os.close(fd)
    return lambda: open(path).read()


def inputs(seed, rank, n):
    """Rank `rank`'s input: integers in float32, so every sum is exact whatever the order."""
    g = torch.Generator().manual_seed(seed * 1000 + rank)
    return torch.randint(-1000, 1000, (n,), generator=g).float()


def collectives(group, rank, world, n, seed, repro=True):
    """Every collective family on inputs of n elements per rank, against references this rank computes
    from every rank's seeds, and the issue's all_reduce (`repro`); returns what differs (empty when all
    is right)."""
    bad = []
    xs = [inputs(seed, r, n) for r in range(world)]
    total = torch.stack(xs).sum(0)

    def same(what, got, want):
        if not torch.equal(got, want):
            bad.append(f"rank {rank}: {what} differs at {(got != want).nonzero()[:3].flatten().tolist()}")

    if repro:
        t = torch.ones(4 << 20)  # the reproduction
        dist.all_reduce(t, group=group)
        same("all_reduce of torch.ones(4 << 20)", t, torch.full_like(t, world))
    x = xs[rank].clone()
    dist.all_reduce(x, group=group)
    same("all_reduce", x, total)
    out = torch.empty(world * n)
    dist.all_gather_into_tensor(out, xs[rank], group=group)
    same("all_gather_into_tensor", out, torch.cat(xs))
    m = n // world * world
    rs = torch.empty(m // world)
    dist.reduce_scatter_tensor(rs, xs[rank][:m].clone(), group=group)
    same("reduce_scatter_tensor", rs, total[:m].view(world, -1)[rank])
    b = xs[rank].clone()
    dist.broadcast(b, group_src=world - 1, group=group)
    same("broadcast", b, xs[world - 1])
    a2a = torch.empty(m)
    dist.all_to_all_single(a2a, xs[rank][:m].clone(), group=group)
    same("all_to_all_single", a2a, torch.cat([x[:m].view(world, -1)[rank] for x in xs]))
    import torch_purlin
    counters = torch_purlin.counters(group)
    for op in ("all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor", "broadcast", "all_to_all_single"):
        if counters.get(op, (0, 0))[1] != 0:
            bad.append(f"rank {rank}: {op} ran on the fallback: {counters}")
    return bad


def error_of(fn):
    try:
        fn()
    except RuntimeError as e:
        return str(e)
    return None


def small_shm(rank, world, args):
    """Runs on every rank of one simulated host: the cases of the module docstring (args: n, explicit, fill)."""
    log = capture_stderr(os.path.join(args["tmp"], f"rank{rank}.err"))
    torch.set_num_threads(1)
    import torch_purlin
    dist.init_process_group("purlin", timeout=timedelta(seconds=60))
    out = {"bad": collectives(None, rank, world, args["n"], 1, args["repro"])}
    if args["explicit"]:  # set explicitly, too large: refused on every rank
        g = dist.new_group(backend="purlin", pg_options=torch_purlin.Options(
            {"TORCH_PURLIN_CPU_WORKSPACE_BYTES": "32M"}))
        out["explicit"] = error_of(lambda: dist.all_reduce(torch.ones(10), group=g))
        g2 = dist.new_group(backend="purlin")  # the default shrinks into what is left
        out["bad"] += collectives(g2, rank, world, args["n"], 2, repro=False)
    if args["fill"]:  # something else fills /dev/shm: a new group cannot fit even the smallest workspace
        filler = "/dev/shm/not_purlin_filler"
        if rank == 0:
            free = os.statvfs("/dev/shm").f_bavail * os.statvfs("/dev/shm").f_frsize
            with open(filler, "wb") as f:
                os.posix_fallocate(f.fileno(), 0, free - 256 * 1024)
        dist.barrier()
        g = dist.new_group(backend="purlin")
        out["filled"] = error_of(lambda: dist.all_reduce(torch.ones(10), group=g))
        out["bad"] += collectives(None, rank, world, 1000, 3, repro=False)  # the group made before still works
        dist.barrier()
        if rank == 0:
            os.unlink(filler)
    dist.barrier()
    dist.destroy_process_group()
    out["log"] = [line for line in log().splitlines() if line.startswith("[purlin]")]
    return out


# ---------------------------------------------------------------- pytest

def run(tmp_path, world, shm_mb, n, repro=True, explicit=False, fill=False):
    """Every rank's outcome of small_shm on `world` ranks sharing a /dev/shm of `shm_mb` MB; n elements
    per rank and collective (more than the workspace, so pipelined in rounds)."""
    results = sim_hosts.run_hosts("test_shm_capacity_cpu:small_shm", [list(range(world))], shm_bytes=shm_mb * MiB,
                                  args=dict(n=n, repro=repro, explicit=explicit, fill=fill, tmp=str(tmp_path)),
                                  timeout=240)
    values = [r["value"] for r in results]
    bad = [b for v in values for b in v["bad"]]
    assert not bad, "\n".join(bad[:20])
    return values


def check_note(values, workspaces):
    """Rank 0, and only rank 0, logs the workspace each group chose (`workspaces`, in the order the groups
    were made), once."""
    notes = [[line for line in v["log"] if "the CPU workspace is" in line] for v in values]
    assert len(notes[0]) == len(workspaces) and all(not n for n in notes[1:]), notes
    for note, ws in zip(notes[0], workspaces):
        assert f"the CPU workspace is {ws} per rank, not the default 32 MiB" in note, note
        assert "docker run --shm-size=" in note, note


def check_error(errors, *needles):
    """Every rank raised, with the sizes and the remedy."""
    assert all(e is not None for e in errors), errors
    for e in errors:
        for needle in needles:
            assert re.search(needle, e), f"{needle!r} not in {e!r}"


@needs_namespaces
def test_four_ranks_on_docker_default_64mb(tmp_path):
    values = run(tmp_path, 4, 64, (1 << 20) + 123, explicit=True)
    check_note(values, ["4 MiB", "4 MiB"])  # the default group, then g2
    check_error([v["explicit"] for v in values], r"on rank \d: rank 0 could not set up the group: /dev/shm is too "
                r"small for TORCH_PURLIN_CPU_WORKSPACE_BYTES=32M \(set explicitly", r"/dev/shm has 64 MiB, [\d.]+ MiB "
                r"free", r"4 ranks x 32 MiB workspace need 128\.\d MiB", r"docker run --shm-size=256m",
                r"TORCH_PURLIN_CPU_WORKSPACE_BYTES smaller \(\d+[MK] fits now\)")


@needs_namespaces
def test_two_ranks_on_40mb_and_a_filled_shm(tmp_path):
    values = run(tmp_path, 2, 40, (2 << 20) + 7, fill=True)
    check_note(values, ["8 MiB"])
    check_error([v["filled"] for v in values], r"/dev/shm is too small for this group's shared memory",
                r"/dev/shm has 40 MiB, [\d.]+ KiB free", r"even the smallest workspace, 256 KiB, needs",
                r"Remedy: give /dev/shm more room \(a container: docker run --shm-size=\d+m")


@needs_namespaces
def test_eight_ranks_on_8mb(tmp_path):
    check_note(run(tmp_path, 8, 8, (1 << 16) + 5, repro=False), ["256 KiB"])
