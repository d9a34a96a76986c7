#!/usr/bin/env bash
# device_training.sh — build (sm_90) and run the DDP / FSDP2 GPU training test only.
set -uo pipefail
cd "$(dirname "$0")/.."
source tools/device_env.sh
OUT="${OUT:-$PWD/gpu_logs}"; mkdir -p "$OUT"
PURLIN_CUDA_ARCHS=90 MAX_JOBS=$(nproc) python3 setup.py build_ext --inplace >"$OUT/build.log" 2>&1 \
  || { grep -E "error" "$OUT/build.log" | head -30; exit 1; }
export PYTHONPATH="$PWD"
timeout "${TRAIN_S:-150}" python3 -m pytest -q -s -p no:cacheprovider test/test_gpu_training.py 2>&1 | tee "$OUT/training.log" | tail -25
