#!/usr/bin/env bash
# Compiles every torch-free CUDA source without a GPU: the kernels
# (csrc/atom/cuda/device/*.cu) with nvcc for sm_80 (A100), sm_90 (H100/H200)
# and sm_100 (B200); the Atom's host code, settings and launch tables
# (csrc/atom/cuda/{,host/,protocol/}*.cc) and the lowering (csrc/lowering/*.cc)
# with the host compiler against the CUDA headers. Fails (loudly) when nvcc is absent.
set -euo pipefail
cd "$(dirname "$0")/.."
shopt -s nullglob
kernels=(csrc/atom/cuda/device/*.cu)
host=(csrc/atom/cuda/*.cc csrc/atom/cuda/host/*.cc csrc/atom/cuda/protocol/*.cc csrc/lowering/*.cc)
if [ ${#kernels[@]} -eq 0 ]; then echo "compile_cuda: no CUDA sources"; exit 0; fi
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
if [ ! -x "$NVCC" ]; then echo "compile_cuda: nvcc not found, CUDA sources NOT compiled"; exit 1; fi
CUDA_INC="${CUDA_HOME:-/usr/local/cuda}/include"
[ -f "$CUDA_INC/cuda_runtime.h" ] || CUDA_INC=$(dirname "$(dirname "$(readlink -f "$NVCC")")")/include
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# The plan and line kernels also report their stack frames (ptxas -v): on sm_90 none may keep one
# beyond .ci/check_kernel_stack.py's ALLOWED (NOTE [register units]).
for f in "${kernels[@]}"; do
  for arch in 80 90 100; do
    v=()
    case "$f" in */plan_kernel_*.cu) v=(-Xptxas -v) ;; esac
    "$NVCC" -std=c++17 -O2 -Icsrc -DPURLIN_WITH_CUDA -gencode "arch=compute_${arch},code=sm_${arch}" "${v[@]}" -c "$f" \
      -o "$out/$(basename "$f").sm${arch}.o" 2>>"$out/ptxas_sm${arch}.txt"
  done
  echo "compile_cuda: $f ok for sm_80 sm_90 sm_100"
done
for arch in 80 90 100; do
  python3 .ci/check_kernel_stack.py "$arch" <"$out/ptxas_sm${arch}.txt"
done
for f in "${host[@]}"; do
  g++ -std=c++17 -O1 -Wall -Icsrc -I"$CUDA_INC" -DPURLIN_WITH_CUDA -c "$f" -o "$out/$(basename "$f").o"
  echo "compile_cuda: $f ok (host code)"
done
# The probes (benchmarks/probes/, run on the device only) compile for sm_90, so they do not rot.
for f in benchmarks/probes/*.cu; do
  "$NVCC" -std=c++17 -O2 -Icsrc -DPURLIN_WITH_CUDA -gencode "arch=compute_90,code=sm_90" -c "$f" -o "$out/$(basename "$f").o"
  echo "compile_cuda: $f ok for sm_90"
done
