"""Native tests of the CPU shared-memory Atom (csrc/atom/cpu), no torch extension needed.

Builds the standalone C++ test programs with g++ and runs them (test_shm_capacity adds the
shared-memory group and its /dev/shm sizing, csrc/backend/group/shm_{group,capacity}.cc), and checks the
float16 / bfloat16 conversions of csrc/atom/cpu/half_convert.h bit-exactly
against torch's own `.to(torch.float16 / torch.bfloat16)`.
"""
import pathlib
import shutil
import subprocess

import numpy as np
import pytest
import torch

ROOT = pathlib.Path(__file__).resolve().parents[2]
CXX = ["g++", "-O2", "-std=c++17", "-Wall", "-I", str(ROOT / "csrc")]
ATOM_SOURCES = [ROOT / "csrc/common/types.cc", ROOT / "csrc/atom/atom.cc", *sorted((ROOT / "csrc/atom/cpu").glob("*.cc"))]


def _build_all(out_dir, specs):
    """Compiles {name: (sources, extra_flags)} concurrently; returns {name: path}."""
    jobs = {}
    for name, (sources, flags) in specs.items():
        cmd = [*CXX, *flags, *map(str, sources), "-o", str(out_dir / name), "-lrt", "-pthread"]
        jobs[name] = (cmd, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    for name, (cmd, proc) in jobs.items():
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, f"compile failed: {' '.join(cmd)}\n{err}"
    return {name: out_dir / name for name in specs}


@pytest.fixture(scope="module")
def programs(tmp_path_factory):
    assert shutil.which("g++"), "g++ is required for the native Atom tests"
    reduce_test = [*ATOM_SOURCES, ROOT / "test/cpp/test_reduce_cpu.cc"]
    return _build_all(tmp_path_factory.mktemp("atom_cpu_native"), {
        "test_cpu_atom": ([*ATOM_SOURCES, ROOT / "csrc/snac/arrival.cc", ROOT / "test/cpp/test_cpu_atom.cc"], []),
        "test_reduce_cpu": (reduce_test, []),
        # Baseline ISA only: the kernels the runtime dispatch picks on CPUs without AVX2.
        "test_reduce_cpu_baseline": (reduce_test, ["-DPURLIN_CPU_NO_CLONES"]),
        "half_convert_tool": ([ROOT / "test/cpp/half_convert_tool.cc"], []),
        "test_shm_capacity": ([*ATOM_SOURCES, ROOT / "csrc/backend/group/shm_group.cc",
                               ROOT / "csrc/backend/group/shm_capacity.cc", ROOT / "test/cpp/test_shm_capacity.cc"],
                              ["-I", str(ROOT / "test/cpp")]),
    })


def _run(exe, *args, timeout=300):
    r = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"{exe.name} exited {r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    return r.stdout


@pytest.mark.parametrize("variant", ["test_reduce_cpu", "test_reduce_cpu_baseline"])
def test_reduce_cpu_program(programs, variant):
    assert " 0 failed" in _run(programs[variant])


def test_cpu_atom_program(programs):
    assert " 0 failed" in _run(programs["test_cpu_atom"])


def test_shm_capacity_program(programs):
    assert "test_shm_capacity: 0 failed" in _run(programs["test_shm_capacity"])


def _f32(bits):
    return np.asarray(bits, dtype=np.uint32).view(np.float32)


def _edge_values(torch_dtype):
    """float32 inputs that stress rounding: exact halfway points (and their float32
    neighbours) between consecutive representable values, the overflow and
    subnormal boundaries, zeros, infinities, NaNs with payloads, float32 subnormals."""
    every = torch.arange(0, 1 << 16, dtype=torch.int32).to(torch.int16).view(torch_dtype).float()
    finite = every[torch.isfinite(every)].unique().double()  # sorted, both signs
    mid = ((finite[1:] + finite[:-1]) / 2).float()  # exact in float32
    up, down = torch.nextafter(mid, torch.tensor(np.inf)), torch.nextafter(mid, torch.tensor(-np.inf))
    special = _f32([0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000, 0x7F800001,
                    0x7FBFFFFF, 0xFFC12345, 0x7FFFFFFF, 0x00000001, 0x807FFFFF, 0x00400000, 0x7F7FFFFF,
                    0xFF7FFFFF, 0x33000000, 0x33000001, 0x477FE000, 0x477FEFFF, 0x477FF000, 0x47800000])
    return torch.cat([mid, up, down, finite.float(), torch.from_numpy(special.copy())])


def _random_values(n=1 << 20):
    g = torch.Generator().manual_seed(7)
    x = torch.randn(n, generator=g) * torch.pow(2.0, torch.randint(-40, 40, (n,), generator=g).float())
    raw = torch.randint(0, 1 << 32, (n // 4,), generator=g, dtype=torch.int64).to(torch.int32).view(torch.float32)
    return torch.cat([x, raw])


@pytest.mark.parametrize("fmt,torch_dtype", [("f16", torch.float16), ("bf16", torch.bfloat16)])
def test_narrowing_bit_exact_vs_torch(programs, tmp_path, fmt, torch_dtype):
    x = torch.cat([_edge_values(torch_dtype), _random_values()]).contiguous()
    src, dst = tmp_path / "in.f32", tmp_path / "out.u16"
    x.numpy().tofile(src)
    _run(programs["half_convert_tool"], "narrow", fmt, str(src), str(dst))
    ours = torch.from_numpy(np.fromfile(dst, dtype=np.int16)).view(torch_dtype)
    ref = x.to(torch_dtype)
    assert ours.shape == ref.shape
    nan = torch.isnan(ref)
    assert torch.equal(torch.isnan(ours), nan), "NaN must stay NaN (and nothing else may become NaN)"
    ob, rb = ours.view(torch.int16)[~nan], ref.view(torch.int16)[~nan]
    bad = (ob != rb).nonzero().flatten()
    if len(bad):
        i = bad[0].item()
        v = x[~nan][i]
        pytest.fail(f"{len(bad)} mismatches; first: float32 {v.item()!r} (0x{v.view(torch.int32).item() & 0xFFFFFFFF:08x})"
                    f" -> ours 0x{ob[i].item() & 0xFFFF:04x}, torch 0x{rb[i].item() & 0xFFFF:04x}")


@pytest.mark.parametrize("fmt,torch_dtype", [("f16", torch.float16), ("bf16", torch.bfloat16)])
def test_widening_bit_exact_vs_torch(programs, tmp_path, fmt, torch_dtype):
    bits = torch.arange(0, 1 << 16, dtype=torch.int32).to(torch.int16)
    src, dst = tmp_path / "in.u16", tmp_path / "out.f32"
    bits.numpy().tofile(src)
    _run(programs["half_convert_tool"], "widen", fmt, str(src), str(dst))
    ours = torch.from_numpy(np.fromfile(dst, dtype=np.float32))
    ref = bits.view(torch_dtype).float()
    nan = torch.isnan(ref)
    assert torch.equal(torch.isnan(ours), nan)
    assert torch.equal(ours[~nan].view(torch.int32), ref[~nan].view(torch.int32))
