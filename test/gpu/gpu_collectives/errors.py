"""errors.py — GPU collective families: mismatched calls (call tags), one-sided argument errors, checked calls, a rank that never arrives.
Run by test/gpu/test_gpu_collectives.py's one worker (families call_tag, timeout).
Each case is a function of the worker's context c (test_gpu_collectives._worker) and its arguments; each
family's listing yields its cases in order (and makes the group they share: c.to)."""
import re
from datetime import timedelta

import torch
import torch.distributed as dist

from gpu_harness import Case, assert_equal, family_registry, purlin_group

FAMILIES, family = family_registry()


def run(c):
    """The families in order."""
    c.R.run_families(c, FAMILIES)


# -- call tags: mismatched calls are named, nothing is read (NOTE [call tags]) --------------------------


def call_tag_case(c, kind):
    # "sizes" runs on (narrow) flagged lines, "sizes, wide lines" on wide ones, "sizes, parity plan" as a
    # parity plan (its tags in ptag, NOTE [parity plans]), the others on workspace plans (a pool placement
    # matters only to them).
    import torch_purlin

    rank, W, dev, host = c.rank, c.W, c.dev, c.host
    env = {"sizes": {}, "sizes, wide lines": {"TORCH_PURLIN_CUDA_LINE_FORMAT": "wide"},
           "sizes, parity plan": {"TORCH_PURLIN_CUDA_LINE_BYTES": "0"},
           "sizes far apart, parity plan": {"TORCH_PURLIN_CUDA_LINE_BYTES": "0"}}.get(
        kind, {"TORCH_PURLIN_CUDA_LINE_BYTES": "0", "TORCH_PURLIN_CUDA_PARITY_BYTES": "0"})
    bad = purlin_group(timedelta(seconds=10), **env)
    warm = torch.ones(8, device=dev)
    dist.all_reduce(warm, group=bad)
    torch.cuda.synchronize()
    if kind == "sizes far apart, parity plan":
        # NOTE [tagged waits]: rank 0 launches fewer blocks than its peers, whose extra blocks wait for flags
        # rank 0 never raises; they see its tag instead (was: a timeout at world 8, 2026-12-01)
        t = torch.ones(1000 if rank == 0 else 1_000_000, device=dev)
    elif kind.startswith("sizes"):
        t = torch.ones(1000 + 512 * rank, device=dev)  # ranks disagree on the element count
    elif kind == "output pool placement":  # NOTE [peer outputs]: rank 0 would write into rank 1's pool
        t = torch.full((1000,), rank + 1.0, device=dev)
        pool_out = torch_purlin.empty(W * 1000, device=dev, group=bad)  # collective: both ranks
        pool_out.fill_(-5)
        out = pool_out if rank == 0 else torch.empty(W * 1000, device=dev)
    else:
        p = torch_purlin.empty(1000, device=dev, group=bad)  # collective: both ranks
        t = p if rank == 0 else torch.empty(1000, device=dev)
        t.fill_(1)
        out = torch.empty(W * 1000, device=dev)
    before = t.clone()
    if kind == "pool placement":
        dist.all_gather_into_tensor(out, t, group=bad)  # rank 0 zero-copy, rank 1 staged
    elif kind == "output pool placement":
        dist.all_gather_into_tensor(out, t, group=bad)  # rank 0 writes into peers' outputs, rank 1 pushes
    else:
        dist.all_reduce(t, group=bad)
    torch.cuda.synchronize()
    try:
        dist.all_reduce(warm, group=bad)
    except RuntimeError as e:
        msg = str(e)
        named = re.search(r"rank (\d+) called this collective with other arguments", msg)
        assert f"on rank {rank}" in msg and named and int(named.group(1)) != rank, msg
    else:
        raise AssertionError("no error after a mismatched call")
    if kind == "output pool placement":
        # the call tag stopped rank 0 before it wrote: rank 1's (unused) pool block is untouched
        assert_equal(pool_out, torch.full((W * 1000,), -5.0), "nothing written into a peer's pool")
    elif kind != "pool placement":
        assert_equal(t, before, "nothing of the peer's data was read")
    dist.barrier(group=host)
    dist.destroy_process_group(bad)  # its workspace and pool


def one_sided_local_error(c, same_on_every_rank):
    # NOTE [one-sided local errors] (cuda_group_host_checks.cc): an argument error raises on its rank at once. If every
    # rank made it, the group goes on; if only the last rank did, the others entered the collective, and no
    # rank may then get a result from this group: the erring rank's next call raises (it waited for the
    # others on the host), theirs raise once their device wait timed out (at the latest one call later).
    host = c.host
    try:
        local_error_body(c, same_on_every_rank)
    finally:
        dist.barrier(group=host)  # the ranks leave this case together, whatever failed


def local_error_body(c, same_on_every_rank):
    rank, W, dev = c.rank, c.W, c.dev
    g = purlin_group(timedelta(seconds=3))
    x = torch.full((5,), rank + 1.0, device=dev)
    dist.all_reduce(x, group=g)
    torch.cuda.synchronize()
    erring = same_on_every_rank or rank == W - 1
    out = torch.empty(W * 3 + (1 if erring else 0), device=dev)
    try:
        dist.all_gather_into_tensor(out, torch.ones(3, device=dev), group=g)
    except (RuntimeError, ValueError) as e:
        assert erring and "output has" in str(e), str(e)
    else:
        assert not erring, "a wrong output size did not raise"
    want = torch.full((5,), W * (W + 1) / 2, device=dev)
    if same_on_every_rank:
        y = torch.full((5,), rank + 1.0, device=dev)
        dist.all_reduce(y, group=g)
        assert_equal(y, want.cpu(), "the group after an error on every rank")
        return
    raised = None
    for _ in range(2):
        y = torch.full((5,), rank + 1.0, device=dev)
        try:
            dist.all_reduce(y, group=g)
            torch.cuda.synchronize()
        except RuntimeError as e:
            raised = str(e)
            break
        assert rank != W - 1, "the erring rank's next call ran"  # it waits for the others first
    assert raised and f"on rank {rank}" in raised, raised
    if rank == W - 1:
        assert "argument error on this rank only" in raised and "output has" in raised, raised
    else:
        assert re.search(rf"timed out.*waiting for rank {W - 1}\b", raised), raised


def checked_calls_case(c):
    # NOTE [checked calls]: sizes that put the ranks on different protocols (rank 0 on flagged lines, the others
    # on workspace plans; without the check: the group's timeout) are named on the host before anything is
    # launched, on every rank, and the group stays usable.
    rank, W, dev, host = c.rank, c.W, c.dev, c.host
    pg = purlin_group(timedelta(seconds=10), TORCH_PURLIN_CUDA_CHECK_CALLS="1")
    t = torch.ones(1000 if rank == 0 else 8_000_000, device=dev)
    try:
        dist.all_reduce(t, group=pg)
    except (RuntimeError, ValueError) as e:
        msg = str(e)
        assert f"on rank {rank}" in msg and "elements" in msg and "all_reduce" in msg, msg
    else:
        raise AssertionError("no error for sizes that differ across ranks")
    torch.cuda.synchronize()
    assert torch.all(t == 1).item(), "something ran after the checked error"
    x = torch.full((4099,), float(rank + 1), device=dev)
    dist.all_reduce(x, group=pg)
    assert torch.all(x == W * (W + 1) / 2).item(), "the group is unusable after the checked error"
    dist.barrier(group=host)


@family("call_tag")
def call_tag_cases(c):
    for kind in ("sizes", "sizes, wide lines", "sizes, parity plan", "sizes far apart, parity plan",
                 "sizes, workspace plan", "pool placement", "output pool placement"):
        yield Case(kind, call_tag_case, kind)
    yield Case("a local argument error on every rank", one_sided_local_error, True)
    yield Case("a local argument error on one rank only", one_sided_local_error, False)
    yield Case("sizes across protocols, checked calls", checked_calls_case)


# -- timeout: a rank that never arrives is named, the process stays usable ------------------------------


def timeout_case(c):
    rank, W, dev, pg, host, to = c.rank, c.W, c.dev, c.pg, c.host, c.to
    t = torch.ones(16, device=dev)
    dist.all_reduce(t, group=to)  # sets the workspace up on both ranks
    torch.cuda.synchronize()
    dist.barrier(group=host)
    if rank == 0:
        dist.all_reduce(t, group=to)  # rank 1 never joins: the kernel gives up after 3 s
        torch.cuda.synchronize()
        try:
            dist.all_reduce(t, group=to)
        except RuntimeError as e:
            msg = str(e)
            named = re.search(r"waiting for rank (\d+)", msg)  # ranks 1.. never join
            assert "purlin all_reduce on rank 0: timed out" in msg and named and int(named.group(1)) != 0, msg
        else:
            raise AssertionError("no error after a device timeout")
        x = torch.ones(4, device=dev)
        dist.all_reduce(x, group=pg)  # other groups still work
    else:
        x = torch.ones(4, device=dev)
        dist.all_reduce(x, group=pg)
    assert torch.all(x == W)
    dist.barrier(group=host)


@family("timeout")
def timeout_cases(c):
    c.to = dist.new_group(backend="purlin", timeout=timedelta(seconds=3))
    yield Case("rank 1 never arrives", timeout_case)
