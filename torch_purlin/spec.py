"""User-defined collectives: a Spec (layouts + operation) run on a group.

Name one by layouts with torch_purlin.layouts.collective (docs/CUSTOM_COLLECTIVES.md);
below, the Spec it lowers to.

A Spec lists chunks; each chunk names its sources (rank, Region of that rank's
input) and dests (rank, Region of that rank's output). With OpKind.COPY a
chunk has one source; with OpKind.REDUCE every dest receives the reduction of
all sources (in ascending source order). Regions are strided 2-D views in
elements: Region(offset, rows, row_len, stride). Every rank must build the
same Spec and call run_spec in the same order, like any collective.

Example — all-gather whose output interleaves the ranks' rows:

    spec = torch_purlin.specs.interleaved_all_gather(world, rows, row_len)
    torch_purlin.run_spec(spec, inp, out)   # out[(i*world + r)] = rank r's row i
"""
import torch
import torch.distributed as dist

from . import _C
from .registration import get_purlin_backend


def run_spec(spec, input, output, group=None, async_op=False):
    """Runs `spec` with this rank's flat `input` and `output` tensors."""
    if spec.world != dist.get_world_size(group):
        raise ValueError(f"spec '{spec.name}' is for world size {spec.world}, the group has {dist.get_world_size(group)}")
    work = get_purlin_backend(group, input.device.type).run_spec(spec, input, output)
    if async_op:
        return work
    work.wait()
    return None


def interleaved_all_gather(output, input, group=None, async_op=False):
    """All-gather of `input` (rows x row_len) into `output` ((rows*world) x row_len),
    where output row i*world + r is rank r's row i. A custom collective built
    from a Spec — the shipped example of the public API."""
    world = dist.get_world_size(group)
    rows = input.shape[0] if input.dim() > 0 else 1
    row_len = input.numel() // rows if rows else 0
    if output.numel() != input.numel() * world:
        raise ValueError("interleaved_all_gather: output must hold world size x input elements")
    spec = _C.specs.interleaved_all_gather(world, rows, row_len)
    return run_spec(spec, input, output, group, async_op)
