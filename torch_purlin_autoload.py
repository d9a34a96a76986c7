"""torch's device-backend autoload hook for purlin (entry point group `torch.backends`, setup.py).

Where torch-purlin is installed, `import torch` calls autoload(): "purlin" is registered with
torch.distributed, so workers of unchanged scripts can name it without `import torch_purlin`, and
TORCH_PURLIN_DEFAULT=cuda,cpu makes it the backend torch picks when a program names none (NOTE
[default backend map] in torch_purlin/defaults.py). Switches: TORCH_PURLIN_AUTOLOAD=0 turns this
hook off; TORCH_DEVICE_BACKEND_AUTOLOAD=0 turns off every such hook (torch's own switch).

NOTE [autoload]
torch runs the hook near the end of its own import and turns any exception into a failed
`import torch`. So the hook never raises: whatever goes wrong becomes one warning and purlin
is simply not registered; but a bad TORCH_PURLIN_DEFAULT (a request the program
would otherwise silently not get) makes purlin the default and every purlin group
raise it (defaults.apply_env). It also never loads the compiled extension: it registers a creator
that loads it when the first purlin group is made. An extension built against another torch
(or not built) therefore cannot break `import torch`; it fails, with its reason, where purlin
was asked for. The hook reads torch_purlin/defaults.py by its path instead of importing the
package, whose __init__ loads the extension.
"""
import importlib.util
import os
import warnings

_warned = False


def _load_defaults():
    """torch_purlin/defaults.py as a module of its own, without importing the torch_purlin package."""
    spec = importlib.util.find_spec("torch_purlin")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("the torch_purlin package is not on the path")
    path = os.path.join(list(spec.submodule_search_locations)[0], "defaults.py")
    mod_spec = importlib.util.spec_from_file_location("_torch_purlin_autoload_defaults", path)
    module = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(module)
    return module


def autoload():
    """Registers purlin lazily and applies TORCH_PURLIN_DEFAULT; never raises (NOTE [autoload])."""
    global _warned
    if os.environ.get("TORCH_PURLIN_AUTOLOAD", "1").strip() == "0":
        return
    defaults = None
    try:
        import torch.distributed as dist

        if not dist.is_available():
            return
        defaults = _load_defaults()
        defaults.register_lazily()
        defaults.apply_env(defer_errors=True)
    except Exception as e:  # noqa: BLE001 — see NOTE [autoload]
        if not _warned:
            _warned = True
            deferred = defaults is not None and defaults._env_error is e
            unchanged = ("purlin is the default backend now and every purlin group raises it" if deferred
                         else "torch's default backends are unchanged")
            warnings.warn(f"torch_purlin: the autoload hook stopped: {type(e).__name__}: {e}; {unchanged} "
                          "(TORCH_PURLIN_AUTOLOAD=0 turns the hook off)", RuntimeWarning, stacklevel=2)
