"""gpu_harness.py — the shape shared by the multi-GPU pytest files.

One spawn of `world` processes runs a worker that executes every case in
sequence and records one JSON line per (case, rank) through a Runner; the
pytest functions then report the cases family by family, so a suite pays for
process start-up and NCCL initialisation once.

    suite = run_suite("collectives", _worker, world=2, timeout_s=240, tmp_dir=d)
    check_family(suite, "all_reduce")       # in a parametrized test
    check_exited_cleanly(suite)

Cases are module-level functions of the worker's context c; a family is a
listing (a generator registered with family_registry's decorator) that yields
Case(name, fn, *args) items, and Runner.run_families runs the families in order
(each case as fn(c, *args)).

The worker is called as worker(rank, world, init_file, log_path). Workers
share assert_equal (exact comparison naming the first differing element) and
purlin_group (a group whose CUDA engine is created under given env settings).

Ranks sharing a GPU (NOTE [shared GPU] in csrc/atom/cuda/host/symmetric_workspace.h):
with fewer GPUs than ranks, a suite runs only under TORCH_PURLIN_CUDA_SHARE_GPU=1
(start CUDA MPS first: tools/gpu.sh and test/gpu/run_gpu_suite.sh do for NPROC > GPUs); rank r
then uses GPU r % count, and NCCL, which refuses such groups, is no reference:
workers check against the CPU references only and skip NCCL-only families
(Runner.skip, reported by pytest as skipped).

PURLIN_GPU_FAMILIES=a,b runs only those families' cases (the rest are reported
as skipped), to split a long suite over several calls (e.g. world 4 on one GPU).
Cases may rely on families before them: `counters` checks that the op families
ran, so name them with it.
"""
import json
import os
import time
import traceback

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

SHARE_ENV = "TORCH_PURLIN_CUDA_SHARE_GPU"


def gpus_missing(world):
    """Why `world` ranks cannot run on this machine's GPUs ("" if they can)."""
    if not torch.cuda.is_available():
        return "needs CUDA"
    n = torch.cuda.device_count()
    if n >= world or os.environ.get(SHARE_ENV) == "1":
        return ""
    return f"needs {world} GPUs, or {SHARE_ENV}=1 under CUDA MPS to share the {n} here"


def shares_gpu(world):
    """Whether ranks share GPUs (then NCCL cannot be the reference)."""
    return torch.cuda.device_count() < world


def device_of(rank):
    return rank % torch.cuda.device_count()


def default_backend(world):
    """The default group's backends: NCCL as the reference unless ranks share GPUs."""
    return "cpu:gloo" if shares_gpu(world) else "cpu:gloo,cuda:nccl"


def bind_rank(rank, world):
    """A worker's first step: the rank's share of the host's cores and its GPU (device_of); returns the device."""
    # The ranks share the host's cores: torch's intra-op threads (ops above 32K elements, e.g. the
    # CPU references) would oversubscribe them, and an OpenMP region stalls while its threads wait
    # for cores that spinning peer ranks hold: at world 8 on 16 cores, cases of >= 65537 elements
    # took 2-7 s each (2026-12-01), the smaller ones milliseconds.
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    dev = torch.device("cuda", device_of(rank))
    torch.cuda.set_device(dev)
    return dev


def init_worker(rank, world, init_file, timeout):
    """A worker's start: bind_rank, then the default group (default_backend) through `init_file`;
    returns the rank's device."""
    dev = bind_rank(rank, world)
    dist.init_process_group(default_backend(world), init_method=f"file://{init_file}", rank=rank, world_size=world,
                            timeout=timeout)
    return dev


def init_purlin_worker(rank, world, init_file, timeout):
    """The one-case GPU files' start (compile, device mesh, lifecycle): bind_rank, then a purlin default
    group bound to that device (`device_id=`, as torchtitan starts) through `init_file`; returns the device."""
    import torch_purlin  # noqa: F401  registers "purlin"

    dev = bind_rank(rank, world)
    dist.init_process_group("purlin", init_method=f"file://{init_file}", rank=rank, world_size=world,
                            timeout=timeout, device_id=dev)
    return dev


def all_gather_input(out, mine, rank, in_place):
    """This rank's all_gather input: `mine` copied into its own slot of `out` (c10d's in-place form), or `mine`
    moved to out's device."""
    if not in_place:
        return mine.to(out.device)
    n = mine.numel()
    inp = out[rank * n:(rank + 1) * n]
    inp.copy_(mine.to(out.device))
    return inp


def assert_equal(got, want, what):
    got, want = got.cpu(), want.cpu()
    assert got.dtype == want.dtype and got.shape == want.shape, \
        f"{what}: {got.dtype}{tuple(got.shape)} vs {want.dtype}{tuple(want.shape)}"
    if not torch.equal(got, want):
        bad = (got != want).nonzero()
        i = tuple(bad[0].tolist())
        raise AssertionError(f"{what}: {bad.shape[0]}/{got.numel()} elements differ; first at {i}: "
                             f"{got[i].item()!r} vs {want[i].item()!r}")


def purlin_group(timeout, **env):
    """A purlin group whose CUDA engine is created (by a first CUDA op) while env is set; env is restored after."""
    import torch_purlin

    return torch_purlin.group_with_settings(env, timeout=timeout, device="cuda")


class Case:
    """One case of a family: fn(c, *args) under `name`, c being the worker's context; after_all: it checks
    what every earlier family did (Runner.check_after_all)."""

    def __init__(self, name, fn, *args, after_all=False):
        self.name, self.fn, self.args, self.after_all = name, fn, args, after_all


class Skip:
    """A family's note that it does not run here, and why (Runner.skip)."""

    def __init__(self, reason):
        self.reason = reason


def family_registry():
    """(families, family): a module's list of (name, listing) and the decorator that appends to it.

        FAMILIES, family = family_registry()

        @family("all_reduce")
        def all_reduce_cases(c):      # yields Case and Skip items; may make a group first
            yield Case("f32 n=7", all_reduce_case, c.pg, torch.float32, 7)
    """
    families = []

    def family(name):
        def add(listing):
            families.append((name, listing))
            return listing
        return add

    return families, family


class Runner:
    """Runs one case after another in a worker; every outcome becomes a JSON line."""

    def __init__(self, rank, out_path):
        self.rank = rank
        self.out = open(out_path, "w")
        self.case = 0
        self.family = "?"
        self.only = {f for f in os.environ.get("PURLIN_GPU_FAMILIES", "").split(",") if f}
        self.left_out = set()

    def seed(self):
        self.case += 1
        return self.case

    def check(self, name, fn, *args):
        if self.only and self.family not in self.only:  # PURLIN_GPU_FAMILIES
            if self.family not in self.left_out:
                self.left_out.add(self.family)
                self.skip("not in PURLIN_GPU_FAMILIES")
            return
        t0 = time.time()
        try:
            fn(*args)
            err = None
        except Exception:  # noqa: BLE001 — every failure is recorded, the suite goes on
            err = traceback.format_exc(limit=4)
        self.out.write(json.dumps({"family": self.family, "case": name, "rank": self.rank, "error": err,
                                   "s": round(time.time() - t0, 4)}) + "\n")
        self.out.flush()

    def check_after_all(self, name, fn, *args):
        """A case that checks what every earlier family did (e.g. the counters of every op they ran):
        skipped when PURLIN_GPU_FAMILIES left out one of them, since it would count their absence."""
        if self.left_out and (not self.only or self.family in self.only):
            self.skip("checks every earlier family; PURLIN_GPU_FAMILIES left out " + ",".join(sorted(self.left_out)),
                      case=name)
            return
        self.check(name, fn, *args)

    def run_families(self, c, families):
        """Runs the (name, listing) families in order, each case as fn(c, *args). A listing is a generator
        read lazily, so what it does between its cases (making a group) happens between them, on every rank."""
        for name, listing in families:
            self.family = name
            for item in listing(c):
                if isinstance(item, Skip):
                    self.skip(item.reason)
                elif item.after_all:
                    self.check_after_all(item.name, item.fn, c, *item.args)
                else:
                    self.check(item.name, item.fn, c, *item.args)

    def skip(self, reason, case="skipped"):
        """Records that the current family (or one case of it) does not run here, and why; a family all of
        whose records are skips is reported as skipped by pytest."""
        self.out.write(json.dumps({"family": self.family, "case": case, "rank": self.rank, "error": None,
                                   "skipped": reason}) + "\n")
        self.out.flush()


def run_suite(name, worker, world, timeout_s, tmp_dir):
    """Spawns the workers, waits at most timeout_s, returns {rows, exitcodes, hung}.

    Case logs go to $PURLIN_GPU_LOG_DIR (else tmp_dir) as <name>_rank<r>.jsonl.
    """
    logs = os.environ.get("PURLIN_GPU_LOG_DIR") or str(tmp_dir)
    paths = [os.path.join(logs, f"{name}_rank{r}.jsonl") for r in range(world)]
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=worker, args=(r, world, os.path.join(str(tmp_dir), "init"), paths[r]))
             for r in range(world)]
    t0 = time.time()
    for p in procs:
        p.start()
    for p in procs:
        p.join(max(1.0, timeout_s - (time.time() - t0)))
    hung = [i for i, p in enumerate(procs) if p.is_alive()]
    for i in hung:
        procs[i].kill()
    rows = []
    for path in paths:
        if os.path.exists(path):
            with open(path) as f:
                rows += [json.loads(line) for line in f if line.strip()]
    exitcodes = [p.exitcode for p in procs]
    print(f"\n[purlin {name} suite] {len(rows)} case results in {time.time() - t0:.1f} s; exit codes {exitcodes}; "
          f"hung ranks {hung}")
    return {"rows": rows, "exitcodes": exitcodes, "hung": hung, "world": world}


def native_cuda_errors(group, what):
    """(errors, counters): what is wrong with `group`'s CUDA counters (None: the default group)
    if every op was to run natively: an op that fell back to NCCL, or no native op at all."""
    import torch_purlin
    cnt = torch_purlin.counters(group, "cuda")
    errors = []
    fell_back = {op: c for op, c in cnt.items() if c[1]}
    if fell_back:
        errors.append(f"ops of {what} fell back to NCCL: {fell_back}")
    if not any(c[0] for c in cnt.values()):
        errors.append(f"no native CUDA op ran on {what}: {cnt}")
    return errors, cnt


def write_result(result_path, rank, errors, ok_text):
    """A worker's verdict for run_ranks_expect_ok: "ok ..." or its errors, one a line."""
    with open(f"{result_path}.{rank}", "w") as f:
        f.write("\n".join(errors) if errors else f"ok {ok_text}")


def run_ranks_expect_ok(worker, world):
    """Spawns worker(rank, store_file, result_path) on `world` ranks; each rank writes to
    f"{result_path}.{rank}" a text that starts with "ok" or lists what went wrong. Prints every
    rank's text and asserts each is ok (the one-case GPU files: training, device mesh)."""
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        res = os.path.join(d, "result")
        mp.spawn(worker, args=(os.path.join(d, "store"), res), nprocs=world)
        for r in range(world):
            with open(f"{res}.{r}") as f:
                text = f.read()
            print(f"rank {r}: {text}")
            assert text.startswith("ok"), f"rank {r}: {text}"


def check_family(suite, family):
    """Every rank ran every case of the family, and none failed."""
    rows = [r for r in suite["rows"] if r["family"] == family]
    failed = [r for r in rows if r["error"]]
    assert rows, f"no {family} case ran (exit codes {suite['exitcodes']}, hung ranks {suite['hung']})"
    skipped = [r for r in rows if r.get("skipped")]
    for name in {r["case"] for r in skipped}:  # a family or a case: skipped by every rank or by none
        ranks = [r["rank"] for r in skipped if r["case"] == name]
        ran = [r["rank"] for r in rows if r["case"] == name and not r.get("skipped")]
        assert sorted(ranks) == list(range(suite["world"])) and not ran, \
            f"{family}: '{name}' skipped by ranks {sorted(ranks)} of {suite['world']} (every rank skips it or none)"
    if skipped and len(skipped) == len(rows):
        pytest.skip(skipped[0]["skipped"])
    names = {r["case"] for r in rows}
    per_rank = {r: sum(1 for x in rows if x["rank"] == r) for r in range(suite["world"])}
    assert not failed, f"{len(failed)} of {len(rows)} {family} case results failed; first:\n" + "\n".join(
        f"rank {f['rank']} {f['case']}:\n{f['error']}" for f in failed[:3])
    assert all(v == len(names) for v in per_rank.values()), f"ranks ran different numbers of cases: {per_rank}"


def check_exited_cleanly(suite):
    assert not suite["hung"] and all(c == 0 for c in suite["exitcodes"]), suite["exitcodes"]
