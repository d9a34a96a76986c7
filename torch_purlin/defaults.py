"""Makes purlin the backend torch.distributed picks when a program names none.

    import torch_purlin
    torch_purlin.set_default()                   # cuda and cpu tensors
    dist.init_process_group()                    # purlin, as would be init_device_mesh("cuda", ...)

or, without changing the program, TORCH_PURLIN_DEFAULT=cuda,cpu in the environment of every rank:
read when torch_purlin is imported, and at `import torch` where the package is installed (its
`torch.backends` entry point, torch_purlin_autoload.py).

NOTE [default backend map]
A program that names no backend gets the one torch finds for the device in
`dist.Backend.default_device_backend_map`: init_process_group() (for the machine's
accelerator, or for `device_id`'s type), init_device_mesh() when no group exists yet,
dist.get_default_backend_for_device(), and the frameworks that start torch.distributed
this way (torchtitan). `register_backend(..., devices=[...])` only fills entries that are
missing, and cpu and cuda always have one (gloo, nccl), so registering purlin changes
nothing there; set_default() replaces the entries. unset_default() puts torch's own back.

NOTE [groups made from the default map]
torch records a group made without a named backend as backend "undefined" and gives its
ProcessGroup torch's default type (gloo's) as its default backend type; purlin is
registered under the type "custom". dist.get_backend() then says "undefined", and
destroy_process_group() warns on every rank that no backend of that type exists. So once
set_default() was called, a group whose every device backend is purlin is recorded as
"purlin" with purlin's type as the default, right after torch made it
(_name_default_map_groups, around torch's group-making helper); other groups are left as
torch made them.

This file imports nothing of the compiled extension: torch_purlin_autoload.py loads it
alone while torch itself is being imported (NOTE [autoload]), so it must stay pure Python
on top of torch.distributed.
"""
import functools
import os

import torch.distributed as dist

BACKEND_NAME = "purlin"
DEVICES = ("cpu", "cuda")                        # the device types purlin serves
TORCH_DEFAULTS = {"cpu": "gloo", "cuda": "nccl"}  # torch's own entries for them
DEFAULT_ENV = "TORCH_PURLIN_DEFAULT"             # registered in csrc/common/env.cc
AUTOLOAD_ENV = "TORCH_PURLIN_AUTOLOAD"           # registered in csrc/common/env.cc
ENV_DEFAULTS = {DEFAULT_ENV: "", AUTOLOAD_ENV: "1"}  # the registry's defaults (test/cpu/test_defaults_cpu.py checks)


def _check_devices(devices, what):
    if isinstance(devices, str):
        devices = [devices]
    devices = [str(d).strip().lower() for d in devices]
    bad = [d for d in devices if d not in DEVICES]
    if bad:
        raise ValueError(f"{what}: purlin serves device types {list(DEVICES)}, not {bad}")
    return devices


_env_error = None  # a bad TORCH_PURLIN_DEFAULT met by the autoload hook (apply_env(defer_errors=True))


def _create_lazily(dist_opts, backend_opts):
    """The creator registered before the extension is loaded: loads it at the first purlin group."""
    if _env_error is not None:
        raise ValueError(f"purlin: rank {dist_opts.group_rank} of {dist_opts.group_size}: {_env_error}")
    try:
        from torch_purlin import registration
    except ImportError as e:
        raise RuntimeError(
            f"purlin: a purlin group was asked for (rank {dist_opts.group_rank} of {dist_opts.group_size}) but "
            f"torch_purlin cannot be loaded: {e}. An extension built against another torch must be rebuilt "
            f"against this one (torch {_torch_version()})") from e
    return registration._create(dist_opts, backend_opts)


def _torch_version():
    import torch
    return getattr(torch, "__version__", "?")


def register_lazily():
    """Registers "purlin" (cpu and cuda) with a creator that loads the extension only when a group is made."""
    if BACKEND_NAME.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(BACKEND_NAME, _create_lazily, extended_api=True, devices=list(DEVICES))


def set_default(devices=("cuda", "cpu")):
    """Makes purlin the backend torch picks for `devices` (types among cpu, cuda) when none is named
    (NOTE [default backend map]); returns their previous entries. Call it before the group is made;
    every rank must make the same choice."""
    devices = _check_devices(devices, "torch_purlin.set_default")
    register_lazily()
    table = dist.Backend.default_device_backend_map
    previous = {d: table.get(d) for d in devices}
    for d in devices:
        table[d] = BACKEND_NAME
    _name_default_map_groups()
    return previous


def _name_default_map_groups():
    """NOTE [groups made from the default map]: wraps torch's group-making helper once."""
    c10d = dist.distributed_c10d
    helper = getattr(c10d, "_new_process_group_helper", None)
    if helper is None or getattr(helper, "_purlin_names_groups", False):
        return

    @functools.wraps(helper)
    def make_group(*args, **kwargs):
        made = helper(*args, **kwargs)
        try:
            _name_if_purlin(made[0])
        except Exception:  # noqa: BLE001  a torch without these internals keeps its own naming
            pass
        return made

    make_group._purlin_names_groups = True
    c10d._new_process_group_helper = make_group


def _name_if_purlin(pg):
    c10d = dist.distributed_c10d
    entry = c10d._world.pg_map.get(pg)
    if entry is None or str(entry[0]) != dist.Backend.UNDEFINED:
        return
    config = str(c10d._world.pg_backend_config.get(pg, ""))
    backends = {pair.split(":")[-1].strip() for pair in config.split(",") if pair.strip()}
    if backends != {BACKEND_NAME}:
        return
    c10d._world.pg_map[pg] = (dist.Backend(BACKEND_NAME), entry[1])
    pg._set_default_backend(dist.ProcessGroup.BackendType.CUSTOM)


def unset_default(devices=DEVICES):
    """Puts torch's own default back (gloo for cpu, nccl for cuda) where purlin is the default."""
    devices = _check_devices(devices, "torch_purlin.unset_default")
    table = dist.Backend.default_device_backend_map
    for d in devices:
        if table.get(d) == BACKEND_NAME:
            table[d] = TORCH_DEFAULTS[d]


def default_devices():
    """The device types whose default backend is purlin now."""
    return [d for d in DEVICES if dist.Backend.default_device_backend_map.get(d) == BACKEND_NAME]


def devices_from_env():
    """The device types TORCH_PURLIN_DEFAULT names (empty when unset); ValueError names a bad entry."""
    value = os.environ.get(DEFAULT_ENV, ENV_DEFAULTS[DEFAULT_ENV])
    items = [v for v in value.replace(";", ",").split(",") if v.strip()]
    return _check_devices(items, f"{DEFAULT_ENV}={value!r}")


def apply_env(defer_errors=False):
    """set_default() for the devices TORCH_PURLIN_DEFAULT names; returns them. A bad value raises
    ValueError; with `defer_errors` (the autoload hook, which must not raise: NOTE [autoload]) purlin
    becomes the default for every device type instead and every purlin group, those made from the
    default map included, raises that error: a program never runs on a backend it did not ask for."""
    global _env_error
    try:
        devices = devices_from_env()
    except ValueError as e:
        if not defer_errors:
            raise
        _env_error = e
        set_default(DEVICES)
        raise
    if devices:
        set_default(devices)
    return devices
