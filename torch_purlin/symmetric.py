"""Symmetric memory: tensors every peer of a group can read in place.

    buf = torch_purlin.empty(n, dtype=torch.bfloat16, device="cuda")   # collective
    dist.all_reduce(buf)                                               # no staging copy

`empty` carves the tensor out of the group's symmetric pool (CUDA memory each
rank allocates once and every peer maps, TORCH_PURLIN_CUDA_POOL_BYTES) at the
same offset on every rank, so collectives whose input lives there read it
straight from the owner (NOTE [zero-copy] in csrc/snac/plan.h): the staging
copy disappears. Every rank must call it in the same order with the same
sizes, like a collective. Passing such a tensor on some ranks and an ordinary
one (or one at another offset) on others, or the in-place form of an op on
some ranks only, is detected on the GPU and raises. gather and scatter never
read in place (only their root may alias input and output); collectives up to
TORCH_PURLIN_CUDA_PARITY_BYTES per rank run as line or parity plans, which
stage through their regions whatever the tensors.
torch's own spelling works too: `group._get_backend(device).allocateTensor(n)`
(Backend.supportsTensorAlloc is true on CUDA builds). A freed tensor's block comes back as the
CUDA caching allocator's do: at once for the stream that was current when it was allocated, for
other streams once the work queued there by the time it was freed has completed (NOTE [pool
streams] in csrc/atom/cuda/host/symmetric_pool.h); using it on another stream needs the same care as
a caching-allocator tensor (order that use before the free).
"""
import torch

from .registration import get_purlin_backend


def empty(*size, dtype=None, device=None, group=None):
    """An uninitialised CUDA tensor from `group`'s symmetric pool (collective)."""
    if len(size) == 1 and isinstance(size[0], (tuple, list, torch.Size)):
        size = tuple(size[0])
    dtype = dtype if dtype is not None else torch.get_default_dtype()
    device = torch.device(device if device is not None else "cuda")
    if device.type != "cuda":
        raise ValueError(f"torch_purlin.empty: symmetric memory is for CUDA tensors, got device {device}")
    if device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return get_purlin_backend(group, "cuda").empty(list(size), dtype, device)


def last_launch(group=None):
    """What the group's last CUDA collective ran: {'protocol', 'blocks' (SMs used), 'threads', 'overlapped'
    (launched with programmatic dependent launch, NOTE [overlapped launch])}."""
    return dict(get_purlin_backend(group, "cuda").last_launch())


def protocol_counts(group=None):
    """{op: {protocol: launches}} of the group's native CUDA collectives so far (the protocols
    last_launch names; what ran on NCCL is counters(group, "cuda")'s fallback column)."""
    return {op: dict(by) for op, by in get_purlin_backend(group, "cuda").protocol_counts().items()}
