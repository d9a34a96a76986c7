# setup.py — builds torch_purlin._C against the installed torch.
#
# `pip install --no-build-isolation -e .` (torch must already be installed:
# the extension links against that torch). Sources are picked by folder, one
# folder per concern (docs/DESIGN.md, "Layout"): always csrc/common, snac,
# atom, atom/cpu and backend/{c10d,group,cpu,machines,fallback}; the CUDA datapath
# (lowering/*.cc, atom/cuda/*.cc, atom/cuda/{host,protocol}/*.cc,
# atom/cuda/device/*.cu, backend/cuda/*.cc, built with -DPURLIN_WITH_CUDA) when torch has CUDA and nvcc is found.
# PURLIN_CUDA_ARCHS="90" builds one architecture (quick device builds).
# Installing also adds torch's `torch.backends` entry point (torch_purlin_autoload.py).
import glob
import os

from setuptools import setup
from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CppExtension, CUDAExtension

ROOT = os.path.dirname(os.path.abspath(__file__))


def sources(*patterns):
    out = []
    for p in patterns:
        out += sorted(glob.glob(os.path.join("csrc", p)))
    return out


def with_cuda():
    """The CUDA datapath is built when torch has CUDA and nvcc is there (PURLIN_NO_CUDA=1 skips it)."""
    import torch

    if os.environ.get("PURLIN_NO_CUDA") == "1" or torch.version.cuda is None or CUDA_HOME is None:
        return False
    return os.path.exists(os.path.join(CUDA_HOME, "bin", "nvcc"))


def cuda_arch_flags():
    """-gencode for PURLIN_CUDA_ARCHS (default "80;90;100") plus compute_90 PTX."""
    archs = [a for a in os.environ.get("PURLIN_CUDA_ARCHS", "80;90;100").replace(",", ";").split(";") if a]
    flags = [f"-gencode=arch=compute_{a},code=sm_{a}" for a in archs]
    return flags + ["-gencode=arch=compute_90,code=compute_90"]


# No -std here: torch adds the standard its headers need (C++17 up to 2.13,
# C++20 from 2.14); the torch-free sources compile as either.
cxx_flags = ["-O3", "-fvisibility=hidden"]
srcs = sources("common/*.cc", "snac/*.cc", "atom/*.cc", "atom/cpu/*.cc", "backend/c10d/*.cc", "backend/group/*.cc",
               "backend/cpu/*.cc", "backend/machines/*.cc", "backend/fallback/*.cc")
# The CUDA datapath: the lowering of SNAC plans for the CUDA Atom (device form, protocol choice), the Atom's
# host code, settings and launch tables, its kernels, and the backend's CUDA engine.
cuda_srcs = sources("lowering/*.cc", "atom/cuda/*.cc", "atom/cuda/host/*.cc", "atom/cuda/protocol/*.cc",
                    "atom/cuda/device/*.cu", "backend/cuda/*.cc")

if with_cuda():
    ext = CUDAExtension(
        name="torch_purlin._C",
        sources=srcs + cuda_srcs,
        include_dirs=[os.path.join(ROOT, "csrc")],
        extra_compile_args={
            "cxx": cxx_flags + ["-DPURLIN_WITH_CUDA"],
            "nvcc": ["-O3", "--threads=4", "-DPURLIN_WITH_CUDA"] + cuda_arch_flags(),
        },
        libraries=["rt", "dl"],  # dl: NVML is opened at run time (atom/cuda/host/nvlink_probe.h)
    )
else:
    ext = CppExtension(
        name="torch_purlin._C",
        sources=srcs,
        include_dirs=[os.path.join(ROOT, "csrc")],
        extra_compile_args={"cxx": cxx_flags},
        libraries=["rt"],
    )

setup(
    name="torch-purlin",
    version="0.1.0",
    description="torch.distributed backend for scale-up GPU collectives (spec -> SNAC -> Atom)",
    packages=["torch_purlin"],
    # torch's device-backend autoload hook: `import torch` registers "purlin" without loading the
    # extension (NOTE [autoload] in torch_purlin_autoload.py; TORCH_PURLIN_AUTOLOAD=0 turns it off).
    py_modules=["torch_purlin_autoload"],
    entry_points={"torch.backends": ["purlin = torch_purlin_autoload:autoload"]},
    ext_modules=[ext],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True)},
    python_requires=">=3.10",
)
