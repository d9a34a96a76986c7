"""e2e_tp_decode.py — end-to-end tensor-parallel decoding: purlin against NCCL (and torch symmetric memory).

    PYTHONPATH=. python benchmarks/e2e_tp_decode.py                         # 2 GPUs: llama3-8b layer shapes, bf16
    PYTHONPATH=. python benchmarks/e2e_tp_decode.py --layers 32 --batches 1,8,64 --json out.json --plot out.png
    PYTHONPATH=. python benchmarks/e2e_tp_decode.py --device cpu --shape tiny --batches 1,4 --steps 4   # CPU smoke test

It starts its own ranks (--world, default 2; no torchrun). Each rank holds its shard of a
Llama-architecture decoder (benchmarks/tp_decoder.py: column- and row-parallel linears, two
all_reduces per layer, a vocabulary-parallel LM head whose logits are all-gathered; random weights).
For every batch size it prefills --prompt tokens, then decodes: on CUDA one decode step is captured
in a CUDA graph per implementation and replayed --steps times, timed with CUDA events (median of
--trials); on CPU the step runs eagerly. Implementations, in the same processes:
  purlin   dist.all_reduce / all_gather_into_tensor on a purlin group
  nccl     the same on an NCCL group (CUDA; needs a GPU per rank)
  gloo     the same on a gloo group (CPU)
  symm1    torch symmetric memory: the partial sums copied into a symmetric buffer, then
           torch.ops.symm_mem.one_shot_all_reduce_out (CUDA; the logits' all_gather on NCCL)
  symm2    the same with two_shot_all_reduce_ (in place)
  none     no collective at all (wrong results): the compute alone, from which each row's share of
           time in collectives is 1 - t(none) / t(row)
Correctness: before timing, every implementation decodes --check-steps tokens from the same prompts,
and rank 0 compares their logits and tokens with a single-rank reference it computes itself from
every shard (tp_decoder.Reference); #wrong counts differing logits and tokens. At world 2 the
comparison is exact (see tp_decoder.py); at larger worlds logits are compared to --check-atol
(default 5% of their largest magnitude) and tokens are not compared (sums in another order).
--hf adds rows for HF transformers' own generate() under its tensor parallelism
(DistributedConfig(tp_size=world)) over a purlin and an NCCL (CPU: gloo) group, on a model of
--hf-layers layers of the same shapes (random, saved to a temporary folder).
Ranks sharing a GPU (more ranks than GPUs; TORCH_PURLIN_CUDA_SHARE_GPU=1 under CUDA MPS) check
correctness only: NCCL and symmetric memory are dropped and the timings mean nothing.
Rank 0 prints a table and writes --json (meta: date, commit, device, command) and --plot (tokens/s
and share of time in collectives per batch size; skipped with one line where matplotlib is missing).
"""
import argparse
import datetime
import json
import os
import shlex
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import tp_decoder as tpd  # (benchmarks/ is this script's folder)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32, "fp16": torch.float16}


# ---------------------------------------------------------------------------------------------- collectives

class Comm:
    """The collectives of one implementation: in-place all_reduce (sum) and the logits' all_gather."""

    name, about, graphable, correct = "?", "", True, True

    def __init__(self, group, world):
        self.group, self.world = group, world

    def all_reduce(self, t):
        dist.all_reduce(t, group=self.group)

    def all_gather_cols(self, local):
        """(batch, n) on every rank -> (batch, world * n), rank r's block at columns r*n..."""
        b, n = local.shape
        out = torch.empty(self.world * b, n, dtype=local.dtype, device=local.device)  # gloo takes no stacked output
        self.gather(out, local.contiguous())
        return out.view(self.world, b, n).permute(1, 0, 2).reshape(b, -1)

    def gather(self, out, local):
        dist.all_gather_into_tensor(out, local, group=self.group)

    def prepare(self, batch, shape, dtype, dev):
        """Collective set-up for a batch size, outside any capture (symmetric buffers)."""


class BackendComm(Comm):
    def __init__(self, backend, world):
        super().__init__(dist.new_group(backend=backend), world)
        self.name, self.about = backend, f"dist.all_reduce / all_gather_into_tensor on a {backend} group"
        self.graphable = backend not in ("gloo", "mpi")


class NoComm(Comm):
    name, about, correct = "none", "no collective (compute alone; wrong results)", False

    def __init__(self, world, rank):
        super().__init__(None, world)
        self.rank = rank

    def all_reduce(self, t):
        pass

    def gather(self, out, local):
        b = local.shape[0]
        out[self.rank * b:(self.rank + 1) * b].copy_(local)


class SymmComm(Comm):
    """torch symmetric memory all_reduce on buffers of the batch's partial-sum shape (prompt and decode)."""

    def __init__(self, label, world, gather_group):
        os.environ["TORCH_SYMM_MEM_DISABLE_MULTICAST"] = "1"  # never NVLink multicast (shared machines)
        import torch.distributed._symmetric_memory as sm
        super().__init__(dist.group.WORLD, world)
        self.sm, self.label, self.gather_group = sm, label, gather_group
        self.gname = dist.group.WORLD.group_name
        enable = getattr(sm, "enable_symm_mem_for_group", None)  # older torch needs it; newer ones deprecate it
        if enable is not None:
            import warnings
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                enable(self.gname)
        self.name = label
        self.about = {"symm1": "copy into a symmetric buffer + symm_mem.one_shot_all_reduce_out",
                      "symm2": "copy into a symmetric buffer + symm_mem.two_shot_all_reduce_ + copy out"}[label] \
            + "; logits all_gather on NCCL"
        self.bufs = {}

    def prepare(self, batch, shape, dtype, dev):
        for t in (1, PROMPT):
            key = (batch, t)
            if key not in self.bufs:
                buf = self.sm.empty((batch, t, shape.hidden), dtype=dtype, device=dev)
                self.sm.rendezvous(buf, self.gname)
                self.bufs[key] = buf

    def all_reduce(self, t):
        buf = self.bufs[(t.shape[0], t.shape[1])]
        buf.copy_(t)
        if self.label == "symm1":
            torch.ops.symm_mem.one_shot_all_reduce_out(buf, "sum", self.gname, t)
        else:
            torch.ops.symm_mem.two_shot_all_reduce_(buf, "sum", self.gname)
            t.copy_(buf)

    def gather(self, out, local):
        dist.all_gather_into_tensor(out, local, group=self.gather_group)


PROMPT = 16  # set from --prompt in main()


def make_comms(args, rank, world, shared_gpu):
    """[(Comm or None, why not)] for --impls; an implementation that cannot start here is reported and dropped."""
    out, nccl = [], None
    for name in args.impls.split(","):
        try:
            if name == "none":
                out.append((NoComm(world, rank), None))
            elif name in ("symm1", "symm2"):
                if args.device != "cuda" or shared_gpu:
                    raise RuntimeError("needs a GPU per rank")
                if nccl is None:
                    nccl = dist.new_group(backend="nccl")
                out.append((SymmComm(name, world, nccl), None))
            else:
                if name == "nccl" and (args.device != "cuda" or shared_gpu):
                    raise RuntimeError("needs a GPU per rank")
                if name == "gloo" and args.device == "cuda":
                    raise RuntimeError("CPU only here")
                if name == "purlin":
                    import torch_purlin  # noqa: F401  registers "purlin"
                out.append((BackendComm(name, world), None))
        except Exception as e:  # noqa: BLE001 — reported in the JSON and the table
            out.append((None, f"{name}: {type(e).__name__}: {e}"[:200]))
    return out


# ---------------------------------------------------------------------------------------------- one rank

def agree_max(x, dev):
    t = torch.tensor([float(x)], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)  # the default group's CPU backend
    return float(t[0])


class Run:
    """One implementation at one batch size: caches, state, prefill, the decode step (graphed on CUDA)."""

    def __init__(self, args, shard, comm, batch, dev):
        self.args, self.dev, self.batch = args, dev, batch
        self.cache = tpd.Cache(shard, len(shard.layers), batch, PROMPT + args.max_new, shard.embed.dtype, dev)
        self.model = tpd.Decoder(shard, self.cache, comm)
        self.tokens = torch.zeros(batch, 1, dtype=torch.long, device=dev)
        self.pos = torch.zeros(1, dtype=torch.long, device=dev)
        self.logits = None
        self.graph = None
        self.comm = comm

    def prefill(self, prompt):
        logits = self.model.forward(prompt, torch.arange(PROMPT, device=self.dev))
        self.tokens.copy_(logits.argmax(-1, keepdim=True))
        self.pos.fill_(PROMPT)
        return logits

    def step(self):
        logits = self.model.forward(self.tokens, self.pos)
        self.tokens.copy_(logits.argmax(-1, keepdim=True))
        self.pos.add_(1)
        if self.logits is None:
            self.logits = torch.empty_like(logits)
        self.logits.copy_(logits)

    def capture(self, prompt):
        """Warms the step up eagerly, captures it, and prefills again (capture runs nothing)."""
        if self.dev.type != "cuda" or not self.comm.graphable:
            return
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            self.prefill(prompt)
            for _ in range(2):
                self.step()
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.step()
        torch.cuda.synchronize()

    def replay(self):
        if self.graph is not None:
            self.graph.replay()
        else:
            self.step()

    def decode(self, prompt, steps):
        """Prefill, then `steps` steps: (first logits, [(logits, tokens) per step]) for the check."""
        first = self.prefill(prompt).clone()
        out = []
        for _ in range(steps):
            self.replay()
            out.append((self.logits.clone(), self.tokens[:, 0].clone()))
        return first, out

    def time_steps(self, prompt):
        """Median seconds per decode step over --trials runs of --steps steps (each from position PROMPT)."""
        a = self.args
        self.prefill(prompt)
        per_step = []
        for _ in range(a.trials):
            self.pos.fill_(PROMPT)
            sync(self.dev)
            dist.barrier()
            if self.dev.type == "cuda":
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(a.steps):
                    self.replay()
                end.record()
                end.synchronize()
                per_step.append(start.elapsed_time(end) / 1e3 / a.steps)
            else:
                t0 = time.perf_counter()
                for _ in range(a.steps):
                    self.replay()
                per_step.append((time.perf_counter() - t0) / a.steps)
        return statistics.median(per_step)

    def time_prefill(self, prompt):
        sync(self.dev)
        dist.barrier()
        t0 = time.perf_counter()
        self.prefill(prompt)
        sync(self.dev)
        return time.perf_counter() - t0


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize()


def prompts(batch, vocab, dev, seed=7):
    g = torch.Generator().manual_seed(seed + batch)
    return torch.randint(0, vocab, (batch, PROMPT), generator=g).to(dev)


def count_wrong(first, steps, ref_first, ref_steps, world, atol_frac):
    """#differing logits (exact at world 2, else to atol) and tokens (world 2 only)."""
    def diff(got, want):
        if world == 2:
            return int((got != want).sum())
        atol = atol_frac * float(want.float().abs().max())
        return int(((got.float() - want.float()).abs() > atol).sum())
    wrong = diff(first, ref_first)
    for (lg, tk), (rl, rt) in zip(steps, ref_steps):
        wrong += diff(lg, rl)
        if world == 2:
            wrong += int((tk != rt).sum())
    return wrong


def reference(args, shape, dtype, dev, world, batch):
    """Rank 0: the single-rank reference decode of the check (first logits, [(logits, tokens)])."""
    shards = [tpd.Weights(shape, args.layers, r, world, dtype, dev) for r in range(world)]
    caches = [tpd.Cache(w, args.layers, batch, PROMPT + args.max_new, dtype, dev) for w in shards]
    ref = tpd.Reference(shards, caches)
    prompt = prompts(batch, shape.vocab, dev)
    with torch.no_grad():
        first = ref.forward(prompt, torch.arange(PROMPT, device=dev))
        tokens = first.argmax(-1, keepdim=True)
        out = []
        for i in range(args.check_steps):
            lg = ref.forward(tokens, torch.tensor([PROMPT + i], device=dev))
            tokens = lg.argmax(-1, keepdim=True)
            out.append((lg, tokens[:, 0]))
    del shards, caches
    return first, out


def worker(rank, world, init_file, args, result_path):
    global PROMPT
    PROMPT = args.prompt
    try:
        _worker(rank, world, init_file, args, result_path)
    except Exception:
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)


def _worker(rank, world, init_file, args, result_path):
    shape = tpd.SHAPES[args.shape]
    dtype = DTYPES[args.dtype]
    if args.device == "cuda":
        ngpu = torch.cuda.device_count()
        dev = torch.device("cuda", rank % ngpu)
        torch.cuda.set_device(dev)
        shared_gpu = ngpu < world
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    else:
        dev, shared_gpu = torch.device("cpu"), False
        torch.set_num_threads(args.threads)
    backend = "cpu:gloo,cuda:nccl" if args.device == "cuda" and not shared_gpu else "cpu:gloo"
    dist.init_process_group(backend, init_method=f"file://{init_file}", rank=rank, world_size=world,
                            timeout=timedelta(seconds=args.timeout))
    comms = make_comms(args, rank, world, shared_gpu)
    shard = tpd.Weights(shape, args.layers, rank, world, dtype, dev)
    rows, dropped = [], [why for c, why in comms if c is None]
    live = [c for c, _ in comms if c is not None]
    for batch in args.batch_list:
        ref = reference(args, shape, dtype, dev, world, batch) if rank == 0 and args.check_steps else None
        dist.barrier()
        for comm in live:
            row = dict(impl=comm.name, batch=batch, error=None)
            try:
                with torch.no_grad():
                    comm.prepare(batch, shape, dtype, dev)
                    run = Run(args, shard, comm, batch, dev)
                    prompt = prompts(batch, shape.vocab, dev)
                    run.capture(prompt)
                    row["cuda_graph"] = run.graph is not None
                    if args.check_steps:
                        first, steps = run.decode(prompt, args.check_steps)
                        if rank == 0 and comm.correct:
                            row["wrong"] = count_wrong(first, steps, ref[0], ref[1], world, args.check_atol)
                    step_s = agree_max(run.time_steps(prompt), dev)
                    prefill_s = agree_max(run.time_prefill(prompt), dev)
                row.update(ms_per_step=step_s * 1e3, tokens_per_s=batch / step_s, prefill_ms=prefill_s * 1e3)
                del run
            except Exception as e:  # noqa: BLE001 — one failing cell must not stop the others
                row["error"] = f"{type(e).__name__}: {e}"[:300]
                print(f"rank {rank}: {comm.name} batch {batch}: {row['error']}", file=sys.stderr, flush=True)
            rows.append(row)
        del ref
    hf_rows = hf_generate_rows(args, rank, world, dev, shared_gpu) if args.hf else []
    if rank == 0:
        with open(result_path, "w") as f:
            json.dump(dict(rows=rows, hf_rows=hf_rows, dropped=dropped,
                           about={c.name: c.about for c in live}), f)
    dist.barrier()
    dist.destroy_process_group()


# ---------------------------------------------------------------------------------------------- transformers row

def hf_generate_rows(args, rank, world, dev, shared_gpu):
    """Times HF transformers' generate() under its own tensor parallelism over a purlin and a reference group."""
    try:
        from torch.distributed.device_mesh import DeviceMesh
        from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM
        from transformers.distributed import DistributedConfig
        import torch_purlin  # noqa: F401
    except ImportError as e:
        return [dict(impl="hf", error=f"transformers unavailable: {e}")]
    s = tpd.SHAPES[args.shape]
    dtype = DTYPES[args.dtype]
    folder = os.path.join(os.path.dirname(args.init_file), "hf_model")
    if rank == 0:
        cfg = LlamaConfig(vocab_size=s.vocab, hidden_size=s.hidden, intermediate_size=s.intermediate,
                          num_hidden_layers=args.hf_layers, num_attention_heads=s.heads, num_key_value_heads=s.kv_heads,
                          head_dim=s.head_dim, max_position_embeddings=PROMPT + args.max_new + 8,
                          tie_word_embeddings=False, rope_theta=tpd.ROPE_THETA, eos_token_id=None, pad_token_id=0)
        torch.manual_seed(0)
        with torch.device(dev):  # random initialisation of an 8B-shaped layer is slow on a CPU
            LlamaForCausalLM(cfg).to(dtype).save_pretrained(folder)
    dist.barrier()
    os.environ["LOCAL_RANK"] = str(dev.index if dev.index is not None else rank)
    ref_backend = "nccl" if dev.type == "cuda" and not shared_gpu else ("gloo" if dev.type == "cpu" else None)
    rows, outputs = [], {}
    for backend in ["purlin"] + ([ref_backend] if ref_backend else []):
        group = dist.new_group(backend=backend)
        mesh = DeviceMesh.from_group(group, dev.type)
        model = AutoModelForCausalLM.from_pretrained(folder, distributed_config=DistributedConfig(tp_size=world),
                                                     device_mesh=mesh, dtype=dtype).eval()
        model.generation_config.pad_token_id = 0
        for batch in args.hf_batch_list:
            prompt = prompts(batch, s.vocab, dev)
            row = dict(impl=f"hf-{backend}", batch=batch, error=None)
            try:
                with torch.no_grad():
                    model.generate(prompt, max_new_tokens=2, do_sample=False)  # warm-up
                    sync(dev)
                    dist.barrier()
                    t0 = time.perf_counter()
                    seq = model.generate(prompt, max_new_tokens=args.steps, min_new_tokens=args.steps, do_sample=False)
                    sync(dev)
                    dt = agree_max(time.perf_counter() - t0, dev)
                outputs[(backend, batch)] = seq.cpu()
                row.update(ms_per_step=dt * 1e3 / args.steps, tokens_per_s=batch * args.steps / dt)
                if backend != "purlin" and ("purlin", batch) in outputs:
                    row["tokens_differing_from_purlin"] = int((seq.cpu() != outputs[("purlin", batch)]).sum())
            except Exception as e:  # noqa: BLE001
                row["error"] = f"{type(e).__name__}: {e}"[:300]
            rows.append(row)
        del model
    return rows


# ---------------------------------------------------------------------------------------------- report

def source_version():
    try:
        r = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"], capture_output=True, text=True,
                           timeout=10)
        return r.stdout.strip() or "?"
    except (OSError, subprocess.SubprocessError):
        return "?"


def add_shares(rows):
    """share of time in collectives = 1 - t(none) / t(row), per batch size."""
    base = {r["batch"]: r.get("ms_per_step") for r in rows if r["impl"] == "none" and not r.get("error")}
    for r in rows:
        b = base.get(r["batch"])
        if b and r.get("ms_per_step") and r["impl"] != "none":
            r["collective_share"] = max(0.0, 1.0 - b / r["ms_per_step"])


def print_table(res):
    rows = [r for r in res["rows"] + res["hf_rows"] if "batch" in r]
    print(f"{'impl':>12} {'batch':>6} {'ms/step':>10} {'tokens/s':>12} {'coll.share':>10} {'#wrong':>7} "
          f"{'prefill ms':>10}  graph")
    for r in rows:
        if r.get("error"):
            print(f"{r['impl']:>12} {r['batch']:>6}  n/a: {r['error']}")
            continue
        share = f"{r['collective_share']:.1%}" if "collective_share" in r else "-"
        wrong = r.get("wrong", r.get("tokens_differing_from_purlin", "-"))
        print(f"{r['impl']:>12} {r['batch']:>6} {r['ms_per_step']:>10.3f} {r['tokens_per_s']:>12.1f} {share:>10} "
              f"{wrong!s:>7} {r.get('prefill_ms', float('nan')):>10.2f}  {r.get('cuda_graph', '-')}")
    for why in res["dropped"]:
        print(f"dropped: {why}")


def plot(res, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"e2e_tp_decode: matplotlib is not installed; no plot ({path})")
        return
    rows = [r for r in res["rows"] + res["hf_rows"] if not r.get("error") and "tokens_per_s" in r]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
    for impl in dict.fromkeys(r["impl"] for r in rows):
        rr = [r for r in rows if r["impl"] == impl]
        a1.plot([r["batch"] for r in rr], [r["tokens_per_s"] for r in rr], marker="o", label=impl)
        sh = [r for r in rr if "collective_share" in r]
        if sh:
            a2.plot([r["batch"] for r in sh], [100 * r["collective_share"] for r in sh], marker="o", label=impl)
    m = res["meta"]
    for a, yl in ((a1, "tokens/s"), (a2, "% of decode step in collectives")):
        a.set_xscale("log", base=2)
        a.set_xlabel("batch size")
        a.set_ylabel(yl)
        a.grid(True, alpha=0.3)
        a.legend()
    fig.suptitle(f"TP decode, {m['shape']} x {m['layers']} layers, world {m['world']}, {m['device']}, "
                 f"{m['date_utc'][:10]}, {m['commit']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"e2e_tp_decode: plot written to {path}")


def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--shape", choices=sorted(tpd.SHAPES), default=None, help="default: llama3-8b on cuda, tiny on cpu")
    ap.add_argument("--layers", type=int, default=None, help="default: 8 on cuda, 2 on cpu")
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    ap.add_argument("--batches", default=None, help="comma list (default: 1,2,4,8,16,32,64 on cuda, 1,4 on cpu)")
    ap.add_argument("--prompt", type=int, default=16, help="prompt tokens per sequence")
    ap.add_argument("--steps", type=int, default=32, help="decode steps per timed trial")
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--check-steps", type=int, default=4, help="decode steps checked against the reference (0: none)")
    ap.add_argument("--check-atol", type=float, default=0.05,
                    help="world > 2: logits tolerance, a fraction of max |ref| (bf16 sums rounded in another order "
                         "drift through the layers)")
    ap.add_argument("--impls", default=None, help="default: purlin,nccl,symm1,symm2,none on cuda; purlin,gloo,none on cpu")
    ap.add_argument("--hf", action="store_true", help="also time transformers' generate() under its tensor parallelism")
    ap.add_argument("--hf-layers", type=int, default=2)
    ap.add_argument("--hf-batches", default=None, help="default: --batches")
    ap.add_argument("--threads", type=int, default=1, help="CPU: intra-op threads per rank")
    ap.add_argument("--timeout", type=int, default=300, help="group timeout, seconds")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--plot", help="write a PNG plot here (needs matplotlib)")
    a = ap.parse_args(argv)
    cuda = a.device == "cuda"
    a.shape = a.shape or ("llama3-8b" if cuda else "tiny")
    a.layers = a.layers or (8 if cuda else 2)
    a.batches = a.batches or ("1,2,4,8,16,32,64" if cuda else "1,4")
    a.batch_list = [int(b) for b in a.batches.split(",")]
    a.hf_batch_list = [int(b) for b in (a.hf_batches or a.batches).split(",")]
    a.impls = a.impls or ("purlin,nccl,symm1,symm2,none" if cuda else "purlin,gloo,none")
    a.max_new = max(a.steps, a.check_steps) + 4
    tpd.check_divisible(tpd.SHAPES[a.shape], a.world)
    return a


def main(argv=None):
    args = parse(argv)
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="e2e_tp_decode_") as d:
        args.init_file = os.path.join(d, "init")
        result_path = os.path.join(d, "result.json")
        ctx = mp.get_context("spawn")
        procs = [ctx.Process(target=worker, args=(r, args.world, args.init_file, args, result_path))
                 for r in range(args.world)]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
        codes = [p.exitcode for p in procs]
        if any(codes) or not os.path.exists(result_path):
            raise SystemExit(f"e2e_tp_decode: ranks exited with {codes}")
        with open(result_path) as f:
            res = json.load(f)
    add_shares(res["rows"])
    dev_name = torch.cuda.get_device_name() if args.device == "cuda" else f"cpu ({os.cpu_count()} cores)"
    res["meta"] = dict(
        command="python " + shlex.join([os.path.relpath(os.path.abspath(__file__), ROOT)] + (argv or sys.argv[1:])),
        date_utc=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S"),
        host=socket.gethostname(), commit=source_version(), torch=torch.__version__, device=dev_name,
        gpus=torch.cuda.device_count() if args.device == "cuda" else 0, world=args.world, shape=args.shape,
        shape_dims=vars(tpd.SHAPES[args.shape]), layers=args.layers, dtype=args.dtype, prompt=args.prompt,
        steps=args.steps, trials=args.trials, check_steps=args.check_steps,
        check="exact" if args.world == 2 else f"logits to {args.check_atol} of max |ref|",
        timing="CUDA graph of one decode step, CUDA events" if args.device == "cuda" else "eager, wall clock",
        collective_share="1 - t(none) / t(impl) per batch size", seconds=round(time.time() - t0, 1))
    print_table(res)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    if args.plot:
        plot(res, args.plot)
    wrong = sum(r.get("wrong") or 0 for r in res["rows"])
    errors = [r for r in res["rows"] if r.get("error")]
    print(f"e2e_tp_decode: {len(res['rows'])} rows, #wrong {wrong}, {len(errors)} errors, {time.time() - t0:.0f} s")
    return 1 if wrong or errors else 0


if __name__ == "__main__":
    sys.exit(main())
