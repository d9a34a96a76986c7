"""Registers "purlin" with torch.distributed, builds its fallbacks, and takes per-group settings.

The C++ backend (torch_purlin._C.PurlinBackend) serves native ops; everything
else goes to a fallback backend created lazily, on first need, on a prefixed
store: gloo (pairs connected lazily, so point-to-point between two ranks needs
no other rank) for CPU tensors, torch's own ProcessGroupNCCL for CUDA tensors.

A group's TORCH_PURLIN_* settings (NOTE [group settings] in csrc/common/env.h)
may be given per group through torch's pg_options:

    opts = torch_purlin.Options(settings={"TORCH_PURLIN_CPU_WORKSPACE_BYTES": "1M"})
    g = dist.new_group(ranks, backend="purlin", pg_options=opts)
    dist.init_process_group("purlin", pg_options=opts)       # the default group too

torch hands pg_options to the backend's creator (_create below, as backend_opts);
dist.split_group passes a copy of the parent's options, settings included, when
given none. Names outside the registry (torch_purlin.env_vars()) raise ValueError.
"""
import os

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


def Options(settings=None, timeout=None):
    """pg_options for a purlin group: its own TORCH_PURLIN_* `settings` (name -> value; values of any
    type are passed as text) over the environment's. `timeout` is only what dist.split_group copies
    to the groups it makes (torch passes the group's own timeout separately)."""
    settings = {str(k): str(v) for k, v in (settings or {}).items()}
    return _C.PurlinBackend.Options(timeout if timeout is not None else dist.default_pg_timeout, settings)


def _host_ranks(group_size):
    """The job's ranks on this host (NOTE [shared GPU]): torchrun's LOCAL_WORLD_SIZE, else the
    default group's size (purlin serves one host), else this group's (it is the default one)."""
    local = os.environ.get("LOCAL_WORLD_SIZE", "")
    if local.isdigit() and int(local) > 0:
        return int(local)
    return dist.get_world_size() if dist.is_initialized() else group_size


def _create(dist_opts, backend_opts):
    settings = dict(backend_opts.settings) if isinstance(backend_opts, _C.PurlinBackend.Options) else {}
    return _C.PurlinBackend(dist_opts.store, dist_opts.group_rank, dist_opts.group_size, dist_opts.timeout,
                            _make_fallback, settings=settings,
                            # the group's global ranks, which messages and the group's health name
                            global_ranks=list(dist_opts.global_ranks_in_group or []),
                            host_ranks=_host_ranks(dist_opts.group_size))


def register():
    if BACKEND_NAME.upper() in dist.Backend._plugins:
        return
    dist.Backend.register_backend(BACKEND_NAME, _create, extended_api=True, devices=["cpu", "cuda"])


def unwrap(backend):
    """The backend inside torch's wrappers: with TORCH_DISTRIBUTED_DEBUG=DETAIL torch wraps every
    backend in a _ProcessGroupWrapper (its collective checks run on a gloo helper group, then the call
    goes to the wrapped backend), exposed as `wrapped_pg`; wrappers may nest."""
    seen = 0
    while not isinstance(backend, _C.PurlinBackend) and hasattr(backend, "wrapped_pg") and seen < 16:
        backend, seen = backend.wrapped_pg, seen + 1
    return backend


def get_purlin_backend(group=None, device="cpu"):
    """The PurlinBackend serving `device` tensors in `group` (default group if None), also behind
    torch's wrappers (TORCH_DISTRIBUTED_DEBUG=DETAIL)."""
    import torch

    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    backend = unwrap(pg._get_backend(torch.device(device)))
    if not isinstance(backend, _C.PurlinBackend):
        raise RuntimeError(f"purlin: the group's {device} backend is {type(backend).__name__}, not purlin")
    return backend


def counters(group=None, device="cpu"):
    """{op: (native calls, fallback calls)} of the purlin backend of `group`."""
    return dict(get_purlin_backend(group, device).counters())
