#!/usr/bin/env bash
# Compiles every torch-free CUDA source for sm_80 (A100), sm_90 (H100/H200)
# and sm_100 (B200) without a GPU. Skips (loudly) only when nvcc is absent.
set -euo pipefail
cd "$(dirname "$0")/.."
shopt -s nullglob
srcs=(csrc/atom/cuda/*.cu)
if [ ${#srcs[@]} -eq 0 ]; then echo "compile_cuda: no CUDA sources"; exit 0; fi
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
if [ ! -x "$NVCC" ]; then echo "compile_cuda: nvcc not found, CUDA sources NOT compiled"; exit 1; fi
out=$(mktemp -d)
# The plan and line kernels also report their stack frames (ptxas -v): on sm_90 none may keep one
# beyond .ci/check_kernel_stack.py's ALLOWED (NOTE [register units]).
for f in "${srcs[@]}"; do
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
# The probes (benchmarks/probes/, run on the device only) compile for sm_90, so they do not rot.
for f in benchmarks/probes/*.cu; do
  "$NVCC" -std=c++17 -O2 -Icsrc -DPURLIN_WITH_CUDA -gencode "arch=compute_90,code=sm_90" -c "$f" -o "$out/$(basename "$f").o"
  echo "compile_cuda: $f ok for sm_90"
done
rm -rf "$out"
