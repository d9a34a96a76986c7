"""purlin_bench on CPU with stand-ins for its CUDA-only parts, to check
their plumbing without a GPU: purlin-sym's own buffers (torch_purlin.empty),
symm1/symm2 (symm-mem allocation, rendezvous and ops, here done with gloo),
the proto/SMs columns (torch_purlin.last_launch), 'vs symm', the protocol and
headline summaries, the JSON and the plots. The times mean nothing.

    PYTHONPATH=. torchrun --nproc-per-node=2 benchmarks/bench_plumbing_cpu.py --ops all_reduce,reduce_scatter,gather \
        -b 1K -e 64K -f 8 --out-dir /tmp/plumbing

Arguments go to purlin_bench (--device cpu and every impl are added).
Exits 1 if any cell is n/a or has #wrong > 0.
"""
import json
import os
import sys
import tempfile
import types

import torch
import torch.distributed as dist

import torch_purlin
from purlin_bench import bench
from purlin_bench import impls as bench_impls


def fake_empty(*size, dtype=None, device=None, group=None):
    assert group is not None, "the bench passes its purlin-sym group"
    return torch.empty(*size, dtype=dtype, device=device)


def one_shot(c, group_name):
    c.out.copy_(c.inp)
    dist.all_reduce(c.out)


def two_shot(c, group_name):
    assert c.inp is c.out, "symm2's all_reduce is in place"
    dist.all_reduce(c.inp)


def reduce_scatter(c, group_name):
    full = c.inp.clone()
    dist.all_reduce(full)
    c.out.copy_(full.chunk(c.n)[c.rank])


class FakeSymmMem:
    """What Symm uses of torch.distributed._symmetric_memory."""

    empty = staticmethod(lambda n, dtype=None, device=None: torch.empty(n, dtype=dtype, device=device))

    @staticmethod
    def rendezvous(tensor, group_name):
        assert isinstance(group_name, str)


FAKE_CALLS = {"symm1": {("all_reduce", "in-place"): one_shot},
              "symm2": {("all_reduce", "in-place"): two_shot,
                        ("reduce_scatter", "out-of-place"): reduce_scatter}}


def fake_symm_init(self, label, args):
    """Symm.__init__ without its cuda check, on FakeSymmMem and the gloo stand-ins."""
    bench_impls.check_symm_args(args)
    bench_impls.Impl.__init__(self, label, dist.group.WORLD, bench_impls.SYMM_ABOUT[label])
    self.sm, self.gname, self.args = FakeSymmMem, dist.group.WORLD.group_name, args
    self.calls = {k: (layout, sym, FAKE_CALLS[label][k])
                  for k, (layout, sym, _) in bench_impls.SYMM_CALLS[label].items()}


def main():
    torch_purlin.empty = fake_empty
    torch_purlin.last_launch = lambda group: {"protocol": "one-shot", "blocks": 8, "threads": 512}
    bench_impls.Symm.__init__ = fake_symm_init
    real_fields, on_cuda = bench.launch_fields, types.SimpleNamespace(device=torch.device("cuda"))
    bench.launch_fields = lambda impl, args: real_fields(impl, on_cuda)   # it skips cpu runs
    argv = sys.argv[1:]
    path = next((argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--json"), None)
    if path is None and "--out-dir" not in argv:
        path = os.path.join(tempfile.gettempdir(), "bench_plumbing_cpu.json")
        argv += ["--json", path]
    bench.main(["--device", "cpu", "--impls", "purlin,purlin-sym,gloo,symm1,symm2"] + argv)
    if int(os.environ.get("RANK", 0)) != 0:
        return
    if path is None:
        path = os.path.join(argv[argv.index("--out-dir") + 1], "bench.json")
    bad = [(r["op"], r["place"], r["size"], i["impl"], i["error"], i["wrong"])
           for r in json.load(open(path))["results"] for i in r["impls"] if i["error"] or i["wrong"]]
    print("plumbing:", "ok" if not bad else f"FAILED {bad[:5]}", file=sys.stderr)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
