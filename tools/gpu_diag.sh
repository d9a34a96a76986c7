#!/usr/bin/env bash
# gpu_diag.sh — build, then bring up 2 ranks step by step (test/gpu/diag.py), rank 0 under
# cuda-gdb for a native backtrace on a crash:  bash tools/gpu_diag.sh [LOG_DIR]  (default ./gpu_logs)
set -uo pipefail
cd "$(dirname "$0")/.."
source tools/gpu_env.sh
{ command -v g++; g++ --version | head -1; $CXX --version | head -1; ls /opt/gcc/lib*/libstdc++.so* 2>/dev/null; } 2>&1 | sed "s/^/[env] /"
OUT="${1:-$PWD/gpu_logs}"; mkdir -p "$OUT"
PURLIN_CUDA_ARCHS="$(gpu_archs)" MAX_JOBS=$(nproc) python3 setup.py build_ext --inplace >"$OUT/build.log" 2>&1 || { grep -E "error" "$OUT/build.log" | head -30; exit 1; }
export PYTHONPATH="$PWD"
store=$(mktemp -u)
timeout 120 python3 test/gpu/diag.py 1 "$store" >"$OUT/rank1.txt" 2>&1 &
timeout 120 cuda-gdb -q -batch -ex run -ex bt -ex "info threads" --args python3 test/gpu/diag.py 0 "$store" >"$OUT/rank0.txt" 2>&1
wait
ldd torch_purlin/_C*.so | grep -E "stdc|gcc_s" | sed "s/^/[ldd] /"
grep -v "^\[New Thread\|^\[Thread .* exited" "$OUT/rank0.txt" | tail -60
echo ---- rank1; tail -30 "$OUT/rank1.txt"
