#!/usr/bin/env bash
# run_gpu_suite.sh — builds torch_purlin in place for the GPUs present and runs GPU test files:
#   bash test/gpu/run_gpu_suite.sh [-l LOG_DIR] [TEST_FILE ...]      (default: test/gpu/test_gpu_collectives.py)
# PURLIN_GPU_WORLD ranks (default 2): one per GPU where there are enough GPUs, else the ranks share
# them under a CUDA MPS daemon this script starts and stops (tools/gpu_env.sh gpu_share).
# Logs in LOG_DIR (default ./gpu_logs): env.txt (GPUs, topology, versions), build.log, pytest.log and
# <suite>_rank<r>.jsonl (one line per test case and rank, test/support/gpu_harness.py).
# PURLIN_GPU_DEADLINE_S bounds the whole run (default 600 s; the tests get what the build left);
# PURLIN_BUILD_ONLY=1 stops after the build; PURLIN_CUDA_ARCHS overrides the architectures built.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
LOG="$ROOT/gpu_logs"
if [ "${1:-}" = "-l" ]; then LOG="$2"; shift 2; fi
source "$ROOT/tools/gpu_env.sh"
mkdir -p "$LOG"
LOG="$(cd "$LOG" && pwd)"
cd "$ROOT"
start=$(date +%s)
export PURLIN_GPU_WORLD="${PURLIN_GPU_WORLD:-2}"

{
  nvidia-smi -L
  nvidia-smi topo -m
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version(), "gpus", torch.cuda.device_count())'
} >"$LOG/env.txt" 2>&1

t0=$(date +%s)
archs="${PURLIN_CUDA_ARCHS:-$(gpu_archs)}"
if ! PURLIN_CUDA_ARCHS="${archs:-90}" MAX_JOBS="${MAX_JOBS:-$(nproc)}" \
    python3 setup.py build_ext --inplace >"$LOG/build.log" 2>&1; then
  echo "BUILD FAILED after $(( $(date +%s) - t0 )) s; last lines of build.log:"
  grep -E "error|Error" "$LOG/build.log" | head -40
  tail -20 "$LOG/build.log"
  exit 1
fi
echo "build: $(( $(date +%s) - t0 )) s for sm_${archs//;/, sm_}"
[ "${PURLIN_BUILD_ONLY:-0}" = 1 ] && exit 0

gpu_share "$PURLIN_GPU_WORLD" "$LOG"
trap gpu_share_stop EXIT
t1=$(date +%s)
left=$(( ${PURLIN_GPU_DEADLINE_S:-600} - (t1 - start) ))
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export PURLIN_GPU_SUITE_TIMEOUT="${PURLIN_GPU_SUITE_TIMEOUT:-$(( left - 25 ))}" PURLIN_GPU_LOG_DIR="$LOG"
# timeout signals its whole process group: the test ranks end with it.
timeout "$(( left - 5 ))" python3 -m pytest -q -p no:cacheprovider -s \
  "${@:-test/gpu/test_gpu_collectives.py}" 2>&1 | tee "$LOG/pytest.log"
rc=${PIPESTATUS[0]}
echo "tests: $(( $(date +%s) - t1 )) s, exit $rc"
exit "$rc"
