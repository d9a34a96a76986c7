"""Runs an unchanged program with purlin as the backend torch picks when none is named.

    torchrun --nproc-per-node 2 -m torch_purlin.run [--devices cuda,cpu] MODULE_OR_SCRIPT.py [ARGS...]
    torchrun --nproc-per-node 2 -m torch_purlin.run torchtitan.train --job.config_file debug_model.toml

It runs one process, as `python` would: start it the way the program is started, under torchrun
for a program that reads its rank from torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT); `python -m torch_purlin.run` alone suits programs that start their own ranks.

torch_purlin.set_default(devices) (NOTE [default backend map] in defaults.py), then the module runs
as __main__ (a path ending in .py runs as a script) with ARGS as its sys.argv. For programs that call
init_process_group() without a backend, or pick the backend from torch's default map (torchtitan),
where torch-purlin is not installed with its autoload entry point (TORCH_PURLIN_DEFAULT does the same
where it is).
"""
import argparse
import os
import runpy
import sys

from .defaults import set_default


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m torch_purlin.run", description="\n\n".join(__doc__.split("\n\n")[:3]),
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--devices", default="cuda,cpu", help="device types purlin serves by default (cuda,cpu)")
    ap.add_argument("target", help="a module (torchtitan.train) or a script (train.py)")
    ap.add_argument("args", nargs=argparse.REMAINDER, help="the program's own arguments")
    a = ap.parse_args(argv)
    import torch_purlin  # noqa: F401  loads the extension: an unusable build fails here, not in the program
    set_default([d for d in a.devices.split(",") if d.strip()])
    sys.argv = [a.target] + a.args
    try:
        if a.target.endswith(".py"):
            runpy.run_path(a.target, run_name="__main__")
        else:
            runpy.run_module(a.target, run_name="__main__", alter_sys=True)
    except ValueError as e:
        if "RANK" in os.environ or "environment variable" not in str(e):
            raise
        raise RuntimeError(f"{e}\npurlin: {a.target} reads its rank from torchrun's environment: start it under "
                           f"torchrun, e.g. torchrun --nproc-per-node=2 -m torch_purlin.run {a.target}") from e


if __name__ == "__main__":
    main()
