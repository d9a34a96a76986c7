"""torch-purlin: a torch.distributed backend for scale-up collectives.

    import torch_purlin
    dist.init_process_group(backend="purlin")        # cpu and cuda tensors
    dist.init_process_group(backend="cpu:purlin,cuda:nccl")

Importing this package registers the backend "purlin" for devices cpu and
cuda; `torch_purlin.set_default()` (or TORCH_PURLIN_DEFAULT=cuda,cpu) makes it the
backend torch picks when a program names none (NOTE [default backend map]). Collectives are Specs (input layout + output layout + operation), run by
SNAC plans on an Atom (see docs/DESIGN.md); `torch_purlin.layouts` names a
collective by layouts and `run_spec` runs it; the application collectives
(all_to_all_dims, all_gather_v, reduce_scatter_v, moe_dispatch/combine) are
built that way (docs/CUSTOM_COLLECTIVES.md).
"""
import torch  # noqa: F401  (loads libtorch before the extension)
import torch.distributed as dist

from . import _C
from ._C import Chunk, OpKind, Placement, RedOp, Region, Spec, env_vars, make_plan, specs
from .defaults import apply_env, default_devices, set_default, unset_default
from .registration import Options, counters, get_purlin_backend, register
from .settings_group import group_with_settings
from .spec import run_spec, interleaved_all_gather
from . import layouts
from .app_collectives import all_gather_v, all_to_all_dims, moe_combine, moe_dispatch, reduce_scatter_v
from .symmetric import empty, last_launch, protocol_counts

__all__ = [
    "Chunk", "OpKind", "Placement", "RedOp", "Region", "Spec", "specs", "make_plan", "env_vars",
    "counters", "get_purlin_backend", "run_spec", "interleaved_all_gather", "empty", "last_launch",
    "protocol_counts", "layouts", "all_to_all_dims", "all_gather_v", "reduce_scatter_v", "moe_dispatch", "moe_combine",
    "group_with_settings", "Options", "set_default", "unset_default", "default_devices",
]

register()
apply_env()  # TORCH_PURLIN_DEFAULT
