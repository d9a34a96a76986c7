#!/usr/bin/env bash
# gpu.sh — the GPU work of a change, in one run, on any machine with GPUs:
#   bash tools/gpu.sh [-l LOG_DIR] PART...        (default parts: smoke suite)
#   smoke     test/gpu/smoke.py: every collective once (closed-form references); a failure skips `suite`
#   suite     build + the GPU test files (test/gpu/run_gpu_suite.sh; SUITE_FILES overrides the list)
#   sanitize  compute-sanitizer memcheck, racecheck, synccheck over test/gpu/smoke.py
#   bench     the benchmark, purlin vs NCCL (and torch symmetric memory), eager and graph (BENCH_ARGS)
#   train     DDP / FSDP2 step time, purlin vs NCCL (benchmarks/train_step.py; TRAIN_ARGS)
#   knobs     purlin alone at 64M-1G in graph mode under other settings (KNOBS: VAR=value[,VAR=value] items)
# NPROC=N ranks (default 2): one per GPU, or sharing GPUs where there are fewer (tools/gpu_env.sh).
# Everything lands in LOG_DIR (default ./gpu_logs): summary.txt (the important lines) and the logs.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
LOGS="$ROOT/gpu_logs"
if [ "${1:-}" = "-l" ]; then LOGS="$2"; shift 2; fi
mkdir -p "$LOGS"
LOGS="$(cd "$LOGS" && pwd)"
cd "$ROOT"
source tools/gpu_env.sh
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
S="$LOGS/summary.txt"
say() { echo "$@" | tee -a "$S"; }
parts="${*:-smoke suite}"
has() { [[ " $parts " == *" $1 "* ]]; }
NPROC="${NPROC:-2}"
export PURLIN_GPU_WORLD="$NPROC"
gpu_share "$NPROC" "$LOGS"
trap gpu_share_stop EXIT

say "== GPU run $(date -u +%F' '%T) UTC: $parts (NPROC=$NPROC on $(gpu_count) GPUs${TORCH_PURLIN_CUDA_SHARE_GPU:+, shared})"
if { has smoke || ! has suite; } && ! ls torch_purlin/_C*.so >/dev/null 2>&1; then  # built before the suite
  PURLIN_BUILD_ONLY=1 bash test/gpu/run_gpu_suite.sh -l "$LOGS" >"$LOGS/build.txt" 2>&1
  say "build exit $?: $(grep -E "^build:|BUILD FAILED" "$LOGS/build.txt")"
fi
if has smoke; then
  timeout "${SMOKE_S:-120}" python3 test/gpu/smoke.py >"$LOGS/smoke.txt" 2>&1
  rc=$?
  say "smoke exit $rc: $(grep -c "OK " "$LOGS/smoke.txt") OK, $(grep -c FAIL "$LOGS/smoke.txt") FAIL"
  grep -E "FAIL|Error|error" "$LOGS/smoke.txt" | head -8 >>"$S"
  [ "$rc" = 0 ] || parts="${parts/suite/}"
fi
if has suite; then
  PURLIN_GPU_DEADLINE_S="${SUITE_S:-600}" bash test/gpu/run_gpu_suite.sh -l "$LOGS" \
    ${SUITE_FILES:-$(ls test/gpu/test_*.py test/clients/test_gpu_*.py)} >"$LOGS/suite.txt" 2>&1
  say "suite exit $?"
  grep -E "^(FAILED|ERROR)|passed|failed|BUILD|build:|tests:|error:" "$LOGS/suite.txt" | tail -40 >>"$S"
fi
if has sanitize; then
  for tool in ${SANITIZERS:-memcheck racecheck synccheck}; do
    # NCCL's own kernels trip synccheck (a barrier in its ring kernels): racecheck and synccheck skip
    # kernels whose name contains "nccl" (SANITIZER_EXCLUDE="" keeps them).
    excl=()
    [ "$tool" != memcheck ] && [ -n "${SANITIZER_EXCLUDE-kns=nccl}" ] && excl=(--kernel-name-exclude "${SANITIZER_EXCLUDE-kns=nccl}")
    timeout "${SANITIZER_S:-100}" compute-sanitizer --tool "$tool" --target-processes all "${excl[@]}" \
      python3 test/gpu/smoke.py >"$LOGS/sanitizer_$tool.txt" 2>&1
    say "== compute-sanitizer $tool exit $?: $(grep -c "FAIL" "$LOGS/sanitizer_$tool.txt") smoke failures, $(grep -c "OK " "$LOGS/sanitizer_$tool.txt") smoke cases OK"
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|Race reported|Invalid|Barrier error" "$LOGS/sanitizer_$tool.txt" | sort | uniq -c | head -12 >>"$S"
  done
fi
if has bench; then
  timeout "${BENCH_S:-420}" PYTHONPATH=benchmarks torchrun --nproc-per-node="$NPROC" -m purlin_bench --device cuda \
    ${BENCH_ARGS:---ops all_reduce,all_gather,reduce_scatter,broadcast,all_to_all -b 1K -e 256M -f 4 --mode both --time-cap 0.25} \
    --out-dir "$LOGS/bench" >"$LOGS/bench.txt" 2>&1
  say "bench exit $?"
  tail -5 "$LOGS/bench.txt" >>"$S"
fi
if has train; then
  timeout "${TRAIN_S:-240}" torchrun --nproc-per-node="$NPROC" benchmarks/train_step.py ${TRAIN_ARGS:-} \
    --json "$LOGS/train_step.json" >"$LOGS/train_step.txt" 2>"$LOGS/train.err"
  say "train exit $?"
  cat "$LOGS/train_step.txt" >>"$S"
  tail -5 "$LOGS/train.err" >>"$S"
fi
if has knobs; then
  for knob in ${KNOBS:-default TORCH_PURLIN_CUDA_WORKSPACE_BYTES=256M}; do
    env $( [ "$knob" = default ] || echo "${knob//,/ }" ) timeout 90 PYTHONPATH=benchmarks torchrun --nproc-per-node="$NPROC" -m purlin_bench \
      --device cuda ${KNOB_ARGS:---ops all_reduce,all_gather,reduce_scatter,all_to_all -b 64M -e 1G -f 4 --mode graph} \
      --impls "${KNOB_IMPLS:-purlin}" --time-cap 0.15 >"$LOGS/knob_${knob//[=,]/_}.md" 2>&1
    say "knob $knob exit $?"
    awk '/^## /{op=$2" "$3} /^ +[0-9]+ /{print "  " op, $1, $5}' "$LOGS/knob_${knob//[=,]/_}.md" >>"$S"
  done
fi
