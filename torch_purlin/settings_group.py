"""A purlin group made under its own TORCH_PURLIN_* settings.

    g = torch_purlin.group_with_settings({"TORCH_PURLIN_CUDA_POOL_PLACEMENT": "local"})
    dist.all_gather_into_tensor(out, inp, group=g)

A group reads its settings when its engine is created: the CPU engine with the group, the CUDA
engine (workspace, pool, protocol table, ...) at the group's first CUDA collective. This makes
the group, runs one small collective on `device` while the settings are in the environment, and
restores the environment, so one process can hold groups that differ (the tests and benchmarks
compare settings this way). Collective: every rank of the default group calls it, with the same
settings where the variable says every rank must agree. Names outside purlin's registry
(torch_purlin.env_vars()) raise, so a misspelt setting is not silently ignored.
"""
import os

import torch
import torch.distributed as dist

from ._C import env_vars


def group_with_settings(settings, ranks=None, timeout=None, device=None):
    """A new purlin group over `ranks` (default: all) whose engine reads `settings` (name -> value)."""
    known = {name for name, _default, _meaning in env_vars()}
    unknown = sorted(set(settings) - known)
    if unknown:
        raise ValueError(f"torch_purlin.group_with_settings: not TORCH_PURLIN_* settings: {unknown} "
                         f"(known: torch_purlin.env_vars())")
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(device)
    saved = {k: os.environ.get(k) for k in settings}
    os.environ.update({k: str(v) for k, v in settings.items()})
    try:
        kwargs = {"timeout": timeout} if timeout is not None else {}
        group = dist.new_group(ranks=ranks, backend="purlin", **kwargs)
        if group is not dist.GroupMember.NON_GROUP_MEMBER:
            size = dist.get_world_size(group)
            first = torch.zeros(size, device=device)
            dist.all_gather_into_tensor(first, torch.ones(1, device=device), group=group)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return group
