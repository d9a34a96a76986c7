"""A purlin group made under its own TORCH_PURLIN_* settings.

    g = torch_purlin.group_with_settings({"TORCH_PURLIN_CUDA_POOL_PLACEMENT": "local"})
    dist.all_gather_into_tensor(out, inp, group=g)

The settings travel as the group's options (torch_purlin.Options, pg_options: NOTE [group
settings] in csrc/common/env.h); the environment is neither read for them nor changed, so one
process can hold groups that differ (the tests and benchmarks compare settings this way). The
group then runs one small collective on `device` (default: CUDA if available), which sets up its
engine there: its next collective on that device may be captured in a CUDA graph. Collective: every
rank of the default group calls it, with the same settings where the variable says every rank must
agree (a difference raises on every rank as the group is made). Names outside purlin's registry
(torch_purlin.env_vars()) raise ValueError, so a misspelt setting is not silently ignored.
"""
import torch
import torch.distributed as dist

from ._C import env_vars
from .registration import Options


def group_with_settings(settings, ranks=None, timeout=None, device=None):
    """A new purlin group over `ranks` (default: all) made with `settings` (name -> value)."""
    known = {name for name, _default, _meaning in env_vars()}
    unknown = sorted(set(settings) - known)
    if unknown:
        raise ValueError(f"torch_purlin.group_with_settings: not TORCH_PURLIN_* settings: {unknown} "
                         f"(known: torch_purlin.env_vars())")
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(device)
    kwargs = {"timeout": timeout} if timeout is not None else {}
    group = dist.new_group(ranks=ranks, backend="purlin", pg_options=Options(settings, timeout), **kwargs)
    if group is not dist.GroupMember.NON_GROUP_MEMBER:
        size = dist.get_world_size(group)
        first = torch.zeros(size, device=device)
        dist.all_gather_into_tensor(first, torch.ones(1, device=device), group=group)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    return group
