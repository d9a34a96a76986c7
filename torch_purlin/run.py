"""Runs an unchanged program with purlin as the backend torch picks when none is named.

    python -m torch_purlin.run [--devices cuda,cpu] MODULE_OR_SCRIPT.py [ARGS...]
    torchrun --nproc-per-node 2 -m torch_purlin.run torchtitan.train --job.config_file debug_model.toml

torch_purlin.set_default(devices) (NOTE [default backend map] in defaults.py), then the module runs
as __main__ (a path ending in .py runs as a script) with ARGS as its sys.argv. For programs that call
init_process_group() without a backend, or pick the backend from torch's default map (torchtitan),
where torch-purlin is not installed with its autoload entry point (TORCH_PURLIN_DEFAULT does the same
where it is).
"""
import argparse
import runpy
import sys

from .defaults import set_default


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m torch_purlin.run", description=__doc__.split("\n\n")[0])
    ap.add_argument("--devices", default="cuda,cpu", help="device types purlin serves by default (cuda,cpu)")
    ap.add_argument("target", help="a module (torchtitan.train) or a script (train.py)")
    ap.add_argument("args", nargs=argparse.REMAINDER, help="the program's own arguments")
    a = ap.parse_args(argv)
    import torch_purlin  # noqa: F401  loads the extension: an unusable build fails here, not in the program
    set_default([d for d in a.devices.split(",") if d.strip()])
    sys.argv = [a.target] + a.args
    if a.target.endswith(".py"):
        runpy.run_path(a.target, run_name="__main__")
    else:
        runpy.run_module(a.target, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
