#!/usr/bin/env bash
# run_gpu_suite.sh — builds torch_purlin in place on a machine with >= 2 GPUs
# and runs the GPU pytest files. Logs go to $OUT (else ./gpu_logs):
#   env.txt     GPUs, topology, torch / NCCL versions
#   build.log   the extension build
#   pytest.log  the tests (summary lines at its end)
#   <suite>_rank<r>.jsonl  one line per test case and rank (test/gpu_harness.py)
# Budget: about 1 to 2 minutes of build (PURLIN_CUDA_ARCHS defaults to 90
# here: one architecture; setup.py's default builds 80;90;100) and about a
# minute of tests; everything ends within PURLIN_GPU_DEADLINE_S (290 s).
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
# NVLink multicast off, and the compiler that matches the loaded libstdc++.
source "$ROOT/tools/device_env.sh"
LOG="${OUT:-$ROOT/gpu_logs}"
mkdir -p "$LOG"
cd "$ROOT"
start=$(date +%s)

{
  nvidia-smi -L
  nvidia-smi topo -m
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version(), "gpus", torch.cuda.device_count())'
} >"$LOG/env.txt" 2>&1

t0=$(date +%s)
if ! PURLIN_CUDA_ARCHS="${PURLIN_CUDA_ARCHS:-90}" MAX_JOBS="${MAX_JOBS:-$(nproc)}" \
    python3 setup.py build_ext --inplace >"$LOG/build.log" 2>&1; then
  echo "BUILD FAILED after $(( $(date +%s) - t0 )) s; last lines of build.log:"
  grep -E "error|Error" "$LOG/build.log" | head -40
  tail -20 "$LOG/build.log"
  exit 1
fi
echo "build: $(( $(date +%s) - t0 )) s"
[ "${PURLIN_BUILD_ONLY:-0}" = 1 ] && exit 0  # tools/device_session.sh parts that only need the build

# The tests get what is left of PURLIN_GPU_DEADLINE_S (default 290 s from the start).
t1=$(date +%s)
left=$(( ${PURLIN_GPU_DEADLINE_S:-290} - (t1 - start) ))
export PURLIN_GPU_SUITE_TIMEOUT="${PURLIN_GPU_SUITE_TIMEOUT:-$(( left - 25 ))}" PURLIN_GPU_LOG_DIR="$LOG"
timeout "$(( left - 5 ))" python3 -m pytest -q -p no:cacheprovider -s \
  "${@:-test/test_gpu_collectives.py}" 2>&1 | tee "$LOG/pytest.log"
rc=${PIPESTATUS[0]}
echo "tests: $(( $(date +%s) - t1 )) s, exit $rc"
exit "$rc"
