#!/usr/bin/env bash
# device_session.sh — everything one GPU session needs, in one call:
#   1. build + GPU test suite      (test/gpu/run_gpu_suite.sh)
#   2. benchmarks, purlin vs NCCL  (torch_purlin.bench, eager and graph)
#   3. compute-sanitizer memcheck over the 2-GPU smoke program
# Results come back in at most 8 files: $OUT/summary.txt (the important lines),
# $OUT/bench_cuda.md + .json (tables), $OUT/logs.tgz (all logs).
#   SUITE_S / BENCH_S / SANITIZER_S: seconds for each part.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
source tools/device_env.sh
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
OUT="${OUT:-$ROOT/gpu_logs}"
LOGS="$OUT/logs"
mkdir -p "$LOGS"
S="$OUT/summary.txt"
say() { echo "$@" | tee -a "$S"; }

say "== device session $(date -u +%F' '%T) UTC"
OUT="$LOGS" PURLIN_GPU_DEADLINE_S="${SUITE_S:-280}" bash test/gpu/run_gpu_suite.sh "$@" >"$LOGS/suite.txt" 2>&1
say "suite exit $?"
grep -E "^(FAILED|ERROR)|passed|failed|BUILD|build:|tests:" "$LOGS/suite.txt" | tail -40 >>"$S"

if [ -f torch_purlin/_C*.so ] || ls torch_purlin/_C*.so >/dev/null 2>&1; then
  say "== bench"
  timeout "${BENCH_S:-200}" torchrun --nproc-per-node=2 -m torch_purlin.bench --device cuda \
    --ops "${BENCH_OPS:-all_reduce,all_gather,reduce_scatter,broadcast,all_to_all}" \
    -b "${BENCH_MIN:-1K}" -e "${BENCH_MAX:-256M}" -f "${BENCH_STEP:-4}" --mode both --time-cap 0.25 \
    --json "$OUT/bench_cuda.json" >"$OUT/bench_cuda.md" 2>"$LOGS/bench.err"
  say "bench exit $?"
  tail -5 "$LOGS/bench.err" >>"$S"

  # Tuning probe: all_reduce at large sizes with more blocks per launch.
  for g in ${BLOCK_SWEEP:-64 128}; do
    TORCH_PURLIN_CUDA_BLOCKS=$g timeout 60 torchrun --nproc-per-node=2 -m torch_purlin.bench --device cuda \
      --ops all_reduce,all_gather -b 1M -e 256M -f 16 --mode graph --time-cap 0.25 >"$LOGS/bench_blocks$g.md" 2>&1
    say "bench TORCH_PURLIN_CUDA_BLOCKS=$g exit $?"
    grep -E "^ +[0-9]+ " "$LOGS/bench_blocks$g.md" | awk -v g=$g '{print "  G=" g, $1, $5, $9, $NF}' >>"$S"
  done

  say "== compute-sanitizer memcheck (smoke)"
  timeout "${SANITIZER_S:-90}" compute-sanitizer --tool memcheck --target-processes all \
    python3 test/gpu/smoke.py >"$LOGS/sanitizer.txt" 2>&1
  say "sanitizer exit $?"
  grep -E "ERROR SUMMARY|FAIL|Invalid" "$LOGS/sanitizer.txt" | head -20 >>"$S"
  # NCCL's own init probes kernel images of other architectures (error 209 in
  # ncclInitKernelsForDevice); count what is left outside NCCL.
  say "sanitizer reports outside NCCL init: $(grep -c "Program hit\|Invalid" "$LOGS/sanitizer.txt") total, \
$(grep -A12 "Program hit\|Invalid" "$LOGS/sanitizer.txt" | grep -c "libnccl") with NCCL frames"
fi
tar -czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$LOGS"
