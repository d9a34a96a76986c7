"""Registers "purlin" with torch.distributed and builds its fallbacks.

The C++ backend (torch_purlin._C.PurlinBackend) serves native ops; everything
else goes to a fallback backend created lazily, on first need, on a prefixed
store: gloo (pairs connected lazily, so point-to-point between two ranks needs
no other rank) for CPU tensors, torch's own ProcessGroupNCCL for CUDA tensors.
"""
import torch.distributed as dist

from . import _C

BACKEND_NAME = "purlin"


def _make_fallback(store, rank, size, timeout, device_type):
    """The fallback backend of one purlin group (its store, rank, size, timeout) for `device_type`.
    Also what groups split from it build theirs with (NOTE [split groups])."""
    prefix = dist.PrefixStore(f"purlin_fallback_{device_type}/", store)
    if device_type == "cpu":
        opts = dist.ProcessGroupGloo._Options()
        opts._timeout = timeout
        opts._devices = [dist.ProcessGroupGloo.create_default_device(lazy_init=True)]
        return dist.ProcessGroupGloo(prefix, rank, size, opts)
    if not dist.is_nccl_available():
        raise RuntimeError("purlin: the NCCL fallback is not available in this torch build")
    opts = dist.ProcessGroupNCCL.Options()
    opts._timeout = timeout
    return dist.ProcessGroupNCCL(prefix, rank, size, opts)


def _create(dist_opts, backend_opts):
    # This process's rank in the default group, which the group's health messages name (NOTE [group
    # health]): torch lists a new group's global ranks; the default group's list is empty.
    ranks = list(getattr(dist_opts, "global_ranks_in_group", None) or [])
    global_rank = ranks[dist_opts.group_rank] if dist_opts.group_rank < len(ranks) else dist_opts.group_rank
    return _C.PurlinBackend(dist_opts.store, dist_opts.group_rank, dist_opts.group_size, dist_opts.timeout,
                            _make_fallback, global_rank)


def register():
    if BACKEND_NAME.upper() in dist.Backend._plugins:
        return
    dist.Backend.register_backend(BACKEND_NAME, _create, extended_api=True, devices=["cpu", "cuda"])


def get_purlin_backend(group=None, device="cpu"):
    """The PurlinBackend serving `device` tensors in `group` (default group if None)."""
    import torch

    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    backend = pg._get_backend(torch.device(device))
    if not isinstance(backend, _C.PurlinBackend):
        raise RuntimeError(
            f"purlin: the group's {device} backend is {type(backend).__name__}, not purlin "
            "(with TORCH_DISTRIBUTED_DEBUG=DETAIL torch wraps backends; run custom collectives without it)"
        )
    return backend


def counters(group=None, device="cpu"):
    """{op: (native calls, fallback calls)} of the purlin backend of `group`."""
    return dict(get_purlin_backend(group, device).counters())
