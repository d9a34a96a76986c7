"""purlin as the backend torch picks when a program names none (torch_purlin/defaults.py), and the
`torch.backends` autoload hook (torch_purlin_autoload.py), each in fresh Python processes:

- set_default() / TORCH_PURLIN_DEFAULT / `python -m torch_purlin.run`: init_process_group() without a
  backend, and
  init_device_mesh() with no group yet, make purlin groups whose all_reduce is exact and native;
  without them torch's gloo stays the default.
- the entry point setup.py declares (installed here as the metadata `setup.py egg_info` writes):
  `import torch` registers purlin without loading the extension; TORCH_PURLIN_DEFAULT applies
  then; TORCH_PURLIN_AUTOLOAD=0 and TORCH_DEVICE_BACKEND_AUTOLOAD=0 turn it off; a torch_purlin
  that cannot be loaded (an extension built against another torch) never breaks `import torch`
  and fails, naming why, only where a purlin group is made; a bad TORCH_PURLIN_DEFAULT warns once
  at `import torch` and is raised by every purlin group, those made without a named backend included.

    python -m pytest test/cpu/test_defaults_cpu.py -q
"""
import os
import shutil
import subprocess
import sys
import textwrap

import pytest
import torch.distributed as dist

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# One rank of a check: argv = rank, world, init file, mode. Prints "OK" lines the test reads.
RANK_SCRIPT = textwrap.dedent('''
    import os, sys
    rank, world, init, mode = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    import torch
    import torch.distributed as dist
    print("LOADED_AT_IMPORT", "torch_purlin._C" in sys.modules, flush=True)
    print("REGISTERED", "PURLIN" in dist.Backend._plugins, flush=True)
    print("MAP", dist.Backend.default_device_backend_map.get("cpu"), flush=True)
    if mode == "import":
        import torch_purlin
    elif mode == "set_default":
        import torch_purlin
        torch_purlin.set_default(["cpu"])
    torch.set_num_threads(1)
    if mode == "purlin":
        dist.init_process_group("purlin", init_method="file://" + init, rank=rank, world_size=world)
    elif mode == "mesh":
        os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
                          MASTER_PORT=os.environ["TEST_PORT"])
        from torch.distributed.device_mesh import init_device_mesh
        init_device_mesh("cpu", (world,))
    else:
        dist.init_process_group(init_method="file://" + init, rank=rank, world_size=world)
    kind = type(dist.group.WORLD._get_backend(torch.device("cpu"))).__name__
    print("CPU_BACKEND", kind, flush=True)
    print("GET_BACKEND", dist.get_backend(), flush=True)
    g = torch.Generator().manual_seed(17)
    every = [torch.randint(-1000, 1000, (4099,), generator=g).float() for _ in range(world)]
    x = every[rank].clone()
    dist.all_reduce(x)
    assert torch.equal(x, sum(every)), f"rank {rank}: all_reduce differs from the sum of every rank's input"
    if kind == "PurlinBackend":
        import torch_purlin
        native, fallback = torch_purlin.counters()["all_reduce"]
        assert native == 1 and fallback == 0, f"rank {rank}: all_reduce counters {(native, fallback)}"
    dist.destroy_process_group()
    print("OK", flush=True)
''')


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    """{script, egg: a folder holding the installed metadata of setup.py (its entry point), broken: a
    torch_purlin that cannot be loaded}."""
    d = tmp_path_factory.mktemp("defaults")
    script = d / "rank.py"
    script.write_text(RANK_SCRIPT)
    egg = d / "egg"
    egg.mkdir()
    r = subprocess.run([sys.executable, "setup.py", "-q", "egg_info", "-e", str(egg)], cwd=ROOT,
                       capture_output=True, text=True, timeout=120, env=dict(os.environ, PURLIN_NO_CUDA="1"))
    assert r.returncode == 0, r.stderr
    [info] = [p for p in egg.iterdir() if p.name.endswith(".egg-info")]
    assert "purlin = torch_purlin_autoload:autoload" in (info / "entry_points.txt").read_text()
    # What an extension built against another torch looks like from Python: the package fails to import.
    broken = d / "broken"
    (broken / "torch_purlin").mkdir(parents=True)
    (broken / "torch_purlin" / "__init__.py").write_text(
        'raise ImportError("_C.so: undefined symbol: _ZN3c1010some_other_torch")\n')
    shutil.copy(os.path.join(ROOT, "torch_purlin", "defaults.py"), broken / "torch_purlin" / "defaults.py")
    return {"script": str(script), "egg": str(egg), "broken": str(broken), "dir": d}


def run_ranks(paths, mode, world=2, autoload=False, broken=False, launcher=(), **env):
    """Runs RANK_SCRIPT on `world` ranks; returns [(returncode, stdout, stderr)] per rank."""
    path = [ROOT]
    if broken:
        path.insert(0, paths["broken"])
    if autoload:
        path.insert(0, paths["egg"])
    full_env = {k: v for k, v in os.environ.items()
                if not k.startswith("TORCH_PURLIN_") and k != "TORCH_DEVICE_BACKEND_AUTOLOAD"}
    if not autoload:
        full_env["TORCH_PURLIN_AUTOLOAD"] = "0"  # an installed torch-purlin's own hook must not blur the case
    full_env.update(PYTHONPATH=os.pathsep.join(path), OMP_NUM_THREADS="1", TEST_PORT=str(_free_port()), **env)
    init = str(paths["dir"] / f"init_{mode}_{os.getpid()}_{_free_port()}")
    procs = [subprocess.Popen([sys.executable, *launcher, paths["script"], str(r), str(world), init, mode],
                              env=full_env, cwd=str(paths["dir"]), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for r in range(world)]
    out = []
    for p in procs:
        try:
            so, se = p.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            p.kill()
            so, se = p.communicate()
        out.append((p.returncode, so, se))
    return out


def _free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def field(stdout, key):
    for line in stdout.splitlines():
        if line == key:
            return ""
        if line.startswith(key + " "):
            return line.split(" ", 1)[1]
    return None


def expect(results, backend, registered="True", cpu_map=None, loaded="False"):
    for rank, (rc, so, se) in enumerate(results):
        where = f"rank {rank}: rc {rc}\n{so}\n{se[-3000:]}"
        assert rc == 0 and field(so, "OK") is not None, where
        assert field(so, "CPU_BACKEND") == backend, where
        # a purlin group names its backend, also when made from the default map (NOTE [groups made from
        # the default map]), and its end warns of no missing backend
        if backend == "PurlinBackend":
            assert field(so, "GET_BACKEND") == "purlin", where
        assert "No backend of type" not in se, where
        assert field(so, "LOADED_AT_IMPORT") == loaded, where
        if registered is not None:
            assert field(so, "REGISTERED") == registered, where
        if cpu_map is not None:
            assert field(so, "MAP") == cpu_map, where


def test_set_default_in_process():
    import torch_purlin
    from torch_purlin import defaults

    table = dist.Backend.default_device_backend_map
    before = dict(table)
    try:
        previous = torch_purlin.set_default()
        assert previous == {"cuda": before["cuda"], "cpu": before["cpu"]}
        assert table["cuda"] == table["cpu"] == "purlin" and torch_purlin.default_devices() == ["cpu", "cuda"]
        assert dist.get_default_backend_for_device("cpu") == "purlin"
        torch_purlin.unset_default(["cuda"])
        assert table["cuda"] == "nccl" and torch_purlin.default_devices() == ["cpu"]
        with pytest.raises(ValueError, match=r"not \['tpu'\]"):
            torch_purlin.set_default(["cpu", "tpu"])
        os.environ[defaults.DEFAULT_ENV] = " cuda ,cpu"
        assert defaults.devices_from_env() == ["cuda", "cpu"]
        os.environ[defaults.DEFAULT_ENV] = "cuda,xla"
        with pytest.raises(ValueError, match="TORCH_PURLIN_DEFAULT='cuda,xla'.*xla"):
            defaults.devices_from_env()
    finally:
        os.environ.pop(defaults.DEFAULT_ENV, None)
        table.clear()
        table.update(before)
    registry = {name: default for name, default, _ in torch_purlin.env_vars()}
    for name, default in defaults.ENV_DEFAULTS.items():
        assert registry[name] == default, f"{name}: the Python default differs from csrc/common/env.cc's"


def test_torch_default_without_asking(paths):
    expect(run_ranks(paths, "default", world=1), "ProcessGroupGloo", registered="False", cpu_map="gloo")


def test_set_default_init_process_group(paths):
    expect(run_ranks(paths, "set_default"), "PurlinBackend", registered="False")


def test_set_default_env_at_import(paths):
    expect(run_ranks(paths, "import", TORCH_PURLIN_DEFAULT="cpu"), "PurlinBackend", registered="False")


def test_set_default_env_device_mesh(paths):
    expect(run_ranks(paths, "mesh", autoload=True, TORCH_PURLIN_DEFAULT="cpu,cuda"), "PurlinBackend",
           cpu_map="purlin")


def test_run_launcher(paths):
    # python -m torch_purlin.run --devices cpu SCRIPT ARGS: the unchanged script's init_process_group() is purlin.
    expect(run_ranks(paths, "default", launcher=("-m", "torch_purlin.run", "--devices", "cpu")), "PurlinBackend",
           registered="True", loaded="True", cpu_map="purlin")


def test_autoload_registers_without_changing_defaults(paths):
    # Registered at `import torch`, the extension not yet loaded, gloo still the default ...
    expect(run_ranks(paths, "default", world=1, autoload=True), "ProcessGroupGloo", cpu_map="gloo")
    # ... and named by a script that never imports torch_purlin, it serves the group.
    expect(run_ranks(paths, "purlin", autoload=True), "PurlinBackend", cpu_map="gloo")


def test_autoload_default_from_env(paths):
    expect(run_ranks(paths, "default", autoload=True, TORCH_PURLIN_DEFAULT="cpu"), "PurlinBackend",
           cpu_map="purlin")


@pytest.mark.parametrize("switch", ["TORCH_PURLIN_AUTOLOAD", "TORCH_DEVICE_BACKEND_AUTOLOAD"])
def test_autoload_switched_off(paths, switch):
    expect(run_ranks(paths, "default", world=1, autoload=True, TORCH_PURLIN_DEFAULT="cpu", **{switch: "0"}),
           "ProcessGroupGloo", registered="False", cpu_map="gloo")


def test_autoload_never_breaks_import_torch(paths):
    # A torch_purlin that cannot be loaded: `import torch` and other backends work, silently ...
    [(rc, so, se)] = run_ranks(paths, "default", world=1, autoload=True, broken=True)
    assert rc == 0 and field(so, "OK") is not None and field(so, "REGISTERED") == "True", so + se
    assert "Warning" not in se, se
    # ... and asking for purlin fails there, naming why.
    [(rc, so, se)] = run_ranks(paths, "purlin", world=1, autoload=True, broken=True)
    assert rc != 0 and "torch_purlin cannot be loaded" in se and "undefined symbol" in se, so + se
    assert "rebuilt against this one" in se, se
    # A bad TORCH_PURLIN_DEFAULT: `import torch` works with one warning; a group made from the default
    # map raises, naming the value, instead of running on another backend than the one asked for.
    [(rc, so, se)] = run_ranks(paths, "default", world=1, autoload=True, TORCH_PURLIN_DEFAULT="cpu,tpu")
    assert rc != 0 and field(so, "REGISTERED") == "True" and field(so, "CPU_BACKEND") is None, so + se
    assert se.count("torch_purlin: the autoload hook") == 1, se
    assert "ValueError: purlin: rank 0 of 1: TORCH_PURLIN_DEFAULT='cpu,tpu'" in se and "not ['tpu']" in se, se


def test_run_launcher_without_torchrun_says_so(tmp_path):
    # A program that reads its rank from torchrun's environment, started without torchrun: the error says how.
    script = tmp_path / "train.py"
    script.write_text("import torch.distributed as dist\ndist.init_process_group()\n")
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    env.update(PYTHONPATH=ROOT, TORCH_PURLIN_AUTOLOAD="0")
    r = subprocess.run([sys.executable, "-m", "torch_purlin.run", "--devices", "cpu", str(script)], env=env,
                       cwd=str(tmp_path), capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "start it under torchrun" in r.stderr, r.stderr
    assert f"torchrun --nproc-per-node=2 -m torch_purlin.run {script}" in r.stderr, r.stderr
