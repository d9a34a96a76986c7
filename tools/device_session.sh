#!/usr/bin/env bash
# device_session.sh — what one GPU session needs, in one or two calls:
#   bash tools/device_session.sh [suite] [sanitize] [bench] [sweep]   (default: all four)
#   suite     build + GPU test suite          (test/gpu/run_gpu_suite.sh)
#   sanitize  compute-sanitizer memcheck, racecheck, synccheck over test/gpu/smoke.py
#   bench     benchmarks, purlin vs NCCL (and symm-mem), eager and graph  (BENCH_ARGS to override)
#   sweep     all_reduce / all_gather at fixed block counts (tuning of launch_config*.cu)
#   nolines   purlin alone, 1K-4M, with flagged lines off (TORCH_PURLIN_CUDA_LINE_BYTES=0), to compare
#   knobs     purlin alone, 64M-1G graph mode, under other workspace sizes and push modes (KNOBS, KNOB_ARGS,
#             KNOB_IMPLS to override; KNOB_IMPLS=purlin,purlin-sym,nccl puts the others beside each knob)
#   host      host time per eager call, purlin vs NCCL (benchmarks/host_overhead.py; + nsys CUDA API summary)
#   train     DDP / FSDP2 step time, purlin vs NCCL (benchmarks/train_step.py; TRAIN_ARGS to override)
#   floor     benchmarks/probes/nvlink_floor.cu: per-kernel cost of empty / ping / 1 KB line kernels in a graph
#   smoke     test/gpu/smoke.py (20 s) before the suite; a failure skips the suite
# PATCHES="a.patch b.patch" applies experiments (benchmarks/probes/*.patch) first.
# NPROC=N runs everything on N ranks / GPUs (default 2). With fewer GPUs than
# ranks (e.g. NPROC=4 on nvidia-h200) the ranks share GPUs: the script starts
# CUDA MPS and sets TORCH_PURLIN_CUDA_SHARE_GPU=1 (NOTE [shared GPU]); the GPU
# tests then check against CPU references only (NCCL refuses shared GPUs).
# A part after `suite` reuses the build when the machine is still warm; if
# torch_purlin/_C*.so is missing (a fresh machine) and `suite` was not asked
# for, the build runs alone first. Results come back in at
# most 8 files: $OUT/summary.txt (the important lines), $OUT/bench_cuda.md +
# .json, $OUT/bench_png.tgz, $OUT/logs.tgz (all logs).
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
# PATCHES="benchmarks/probes/x.patch ...": experiments applied to this copy of the tree before anything
# builds (each call gets a fresh copy, so every call names its patches; a second invocation in one call
# finds them applied).
for patch in ${PATCHES:-}; do
  if git apply --reverse --check "$patch" 2>/dev/null; then say "already applied: $patch"
  elif git apply "$patch" 2>>"$S"; then say "applied $patch"
  else say "PATCH FAILED: $patch"; exit 1; fi
done
parts="${*:-suite sanitize bench sweep}"
# Ranks (= GPUs) for the tests and benchmarks: NPROC=4 / 8 on the larger kinds (issue 5).
NPROC="${NPROC:-2}"
export PURLIN_GPU_WORLD="$NPROC"
has() { [[ " $parts " == *" $1 "* ]]; }
GPUS="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')"
if [ "$NPROC" -gt "${GPUS:-0}" ] && [ "${GPUS:-0}" -gt 0 ]; then
  # Ranks share GPUs: their kernels wait for each other, so they must run concurrently (MPS).
  # SHARE_GPU_RANKS: the SM budget counts every rank on the GPU, not only a subgroup's (NOTE [shared GPU]).
  export TORCH_PURLIN_CUDA_SHARE_GPU=1 TORCH_PURLIN_CUDA_SHARE_GPU_RANKS=$(( (NPROC + GPUS - 1) / GPUS )) \
    CUDA_MPS_PIPE_DIRECTORY=/tmp/purlin_mps CUDA_MPS_LOG_DIRECTORY=/tmp/purlin_mps_log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  if [ "${PURLIN_MPS:-1}" = 1 ]; then
    # A fresh MPS server for every invocation: an earlier invocation's hung ranks, killed at its
    # deadline, can leave the server refusing clients ("MPS server is not ready to accept new MPS
    # client requests", session 16: a whole copy-engine run lost after a call_tag hang).
    if echo get_server_list | timeout 5 nvidia-cuda-mps-control >/dev/null 2>&1; then
      pkill -9 -f 'from multiprocessing[.](spawn|forkserver) import' 2>/dev/null  # stray test ranks of an earlier invocation
      echo quit | timeout 10 nvidia-cuda-mps-control >/dev/null 2>&1
      for _ in $(seq 20); do pgrep -f nvidia-cuda-mps-server >/dev/null 2>&1 || break; sleep 0.5; done
      echo "MPS stopped for a fresh server" >>"$LOGS/mps.txt"
    fi
    timeout 20 nvidia-cuda-mps-control -d
    echo "MPS started (exit $?)" >>"$LOGS/mps.txt"
  fi
fi

say "== device session $(date -u +%F' '%T) UTC: $parts (NPROC=$NPROC on $GPUS GPUs${TORCH_PURLIN_CUDA_SHARE_GPU:+, shared, MPS ${PURLIN_MPS:-1}})"
if { has smoke || ! has suite; } && ! ls torch_purlin/_C*.so >/dev/null 2>&1; then
  # A fresh machine and no suite asked for: build only (the suite costs ~3 min of device time).
  OUT="$LOGS" PURLIN_BUILD_ONLY=1 bash test/gpu/run_gpu_suite.sh >"$LOGS/suite.txt" 2>&1
  say "build exit $?: $(grep -E "^build:|BUILD FAILED" "$LOGS/suite.txt")"
fi
if has smoke; then
  # 20 s over every collective (closed-form references, any NPROC, shared GPUs too); the suite only if it passed.
  timeout "${SMOKE_S:-120}" python3 test/gpu/smoke.py >"$LOGS/smoke.txt" 2>&1
  rc=$?
  say "smoke exit $rc: $(grep -c "OK " "$LOGS/smoke.txt") OK, $(grep -c FAIL "$LOGS/smoke.txt") FAIL"
  grep -E "FAIL|Error|error" "$LOGS/smoke.txt" | head -8 >>"$S"
  [ "$rc" = 0 ] || parts="${parts/suite/}"
fi
if has suite; then
  OUT="$LOGS" PURLIN_GPU_DEADLINE_S="${SUITE_S:-400}" bash test/gpu/run_gpu_suite.sh \
    ${SUITE_FILES:-test/test_gpu_collectives.py test/test_gpu_copy_engine.py test/test_gpu_training.py test/test_gpu_device_mesh.py test/test_gpu_lifecycle.py test/test_gpu_compile.py} \
    >"$LOGS/suite.txt" 2>&1
  say "suite exit $?"
  grep -E "^(FAILED|ERROR)|passed|failed|BUILD|build:|tests:|error:" "$LOGS/suite.txt" | tail -40 >>"$S"
fi

if has sanitize; then
  for tool in ${SANITIZERS:-memcheck racecheck synccheck}; do
    # synccheck reports NCCL's own kernels (a barrier in ncclDevKernel_AllReduce_*_RING_LL) and the
    # error it returns then ends smoke.py after its first cases, before purlin's kernels ran (session 6):
    # racecheck and synccheck skip kernels whose name contains "nccl" (SANITIZER_EXCLUDE="" keeps them).
    excl=()
    [ "$tool" != memcheck ] && [ -n "${SANITIZER_EXCLUDE-kns=nccl}" ] && excl=(--kernel-name-exclude "${SANITIZER_EXCLUDE-kns=nccl}")
    timeout "${SANITIZER_S:-100}" compute-sanitizer --tool "$tool" --target-processes all "${excl[@]}" \
      python3 test/gpu/smoke.py >"$LOGS/sanitizer_$tool.txt" 2>&1
    say "== compute-sanitizer $tool exit $?: $(grep -c "FAIL" "$LOGS/sanitizer_$tool.txt") smoke failures, $(grep -c "OK " "$LOGS/sanitizer_$tool.txt") smoke cases OK"
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|Race reported|Invalid|Barrier error" "$LOGS/sanitizer_$tool.txt" | sort | uniq -c | head -12 >>"$S"
    # NCCL's own init probes kernel images of other architectures (error 209
    # in ncclInitKernelsForDevice): count reports with and without NCCL frames.
    say "  reports: $(grep -c "Program hit\|Invalid\|Race reported\|Barrier error" "$LOGS/sanitizer_$tool.txt") total, \
$(grep -A14 "Program hit\|Invalid\|Race reported\|Barrier error" "$LOGS/sanitizer_$tool.txt" | grep -c "libnccl") NCCL frames, \
$(grep -A14 "Program hit\|Invalid\|Race reported\|Barrier error" "$LOGS/sanitizer_$tool.txt" | grep -c "plan_kernel\|purlin") purlin frames"
  done
fi

if has bench; then
  say "== bench"
  timeout "${BENCH_S:-420}" torchrun --nproc-per-node=$NPROC -m torch_purlin.bench --device cuda \
    ${BENCH_ARGS:---ops all_reduce,all_gather,reduce_scatter,broadcast,all_to_all -b 1K -e 256M -f 4 --mode both --time-cap 0.25} \
    --json "$OUT/bench_cuda.json" >"$OUT/bench_cuda.md" 2>"$LOGS/bench.err"
  say "bench exit $?"
  tail -5 "$LOGS/bench.err" >>"$S"
  if [ -f benchmarks/plot.py ]; then
    mkdir -p "$LOGS/png" && python3 benchmarks/plot.py "$OUT/bench_cuda.json" --out "$LOGS/png" >>"$LOGS/plot.txt" 2>&1
    tar -czf "$OUT/bench_png.tgz" -C "$LOGS" png 2>/dev/null
  fi
fi

if has sweep; then
  # Tuning probe: graph-mode times at fixed block counts.
  for g in ${BLOCK_SWEEP:-2 8 32 128}; do
    TORCH_PURLIN_CUDA_BLOCKS=$g timeout 60 torchrun --nproc-per-node=$NPROC -m torch_purlin.bench --device cuda \
      --ops all_reduce,all_gather -b 1K -e 256M -f 8 --mode graph --impls purlin --time-cap 0.15 \
      >"$LOGS/bench_blocks$g.md" 2>&1
    say "sweep TORCH_PURLIN_CUDA_BLOCKS=$g exit $?"
    grep -E "^ +[0-9]+ " "$LOGS/bench_blocks$g.md" | awk -v g=$g '{print "  G=" g, $1, $5}' >>"$S"
  done
fi
if has nolines; then
  # Tuning probe for TORCH_PURLIN_CUDA_LINE_BYTES: the same sizes on workspace plans.
  TORCH_PURLIN_CUDA_LINE_BYTES=0 timeout 120 torchrun --nproc-per-node=$NPROC -m torch_purlin.bench --device cuda \
    --ops all_reduce,all_gather,reduce_scatter,broadcast,all_to_all -b 1K -e 4M -f 4 --mode both --impls purlin \
    --time-cap 0.15 >"$OUT/bench_nolines.md" 2>"$LOGS/bench_nolines.err"
  say "nolines exit $?"
fi
if has knobs; then
  # Tuning probe: large collectives under other settings (each a list of VAR=value, comma-separated).
  for knob in ${KNOBS:-default TORCH_PURLIN_CUDA_WORKSPACE_BYTES=256M TORCH_PURLIN_CUDA_PUSH=all \
      TORCH_PURLIN_CUDA_WORKSPACE_BYTES=256M,TORCH_PURLIN_CUDA_PUSH=all}; do
    env $( [ "$knob" = default ] || echo "${knob//,/ }" ) timeout 90 torchrun --nproc-per-node=$NPROC -m torch_purlin.bench \
      --device cuda ${KNOB_ARGS:---ops all_reduce,all_gather,reduce_scatter,all_to_all -b 64M -e 1G -f 4 --mode graph} \
      --impls "${KNOB_IMPLS:-purlin}" --time-cap 0.15 >"$LOGS/knob_${knob//[=,]/_}.md" 2>&1
    say "knob $knob exit $?"
    awk '/^## /{op=$2" "$3} /^ +[0-9]+ /{print "  " op, $1, $5}' "$LOGS/knob_${knob//[=,]/_}.md" >>"$S"
  done
fi
if has host; then
  # Host cost per eager call (benchmarks/host_overhead.py), and where it goes when nsys is installed.
  timeout 150 torchrun --nproc-per-node=$NPROC benchmarks/host_overhead.py --profile >"$OUT/host_overhead.txt" 2>"$LOGS/host.err"
  say "host exit $?"
  cat "$OUT/host_overhead.txt" >>"$S"
  if command -v nsys >/dev/null; then
    timeout 150 nsys profile -t cuda,osrt -o "$LOGS/host_prof" --force-overwrite true \
      torchrun --nproc-per-node=$NPROC benchmarks/host_overhead.py --calls 500 >"$LOGS/nsys.txt" 2>&1
    nsys stats -r cuda_api_sum "$LOGS/host_prof.nsys-rep" >"$OUT/nsys_api.txt" 2>&1
    say "nsys exit $?"
  else
    say "nsys: not installed"
  fi
fi
if has train; then
  # A training step's collectives as DDP and FSDP2 issue them, purlin vs NCCL (and FSDP2 on purlin's pool).
  timeout 240 torchrun --nproc-per-node=$NPROC benchmarks/train_step.py ${TRAIN_ARGS:-} --json "$OUT/train_step.json" \
    >"$OUT/train_step.txt" 2>"$LOGS/train.err"
  say "train exit $?"
  cat "$OUT/train_step.txt" >>"$S"
  tail -5 "$LOGS/train.err" >>"$S"
fi
if has floor; then
  # The floor under a small collective (no torch, one process, both GPUs): docs/PERFORMANCE.md, session 8.
  "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)" -std=c++17 -O3 -arch=sm_90 -Icsrc benchmarks/probes/nvlink_floor.cu -o "$LOGS/nvlink_floor" >"$LOGS/floor_build.txt" 2>&1
  say "floor build exit $?"
  for n in ${FLOOR_RUNS:-20,procs 100,procs launch}; do
    timeout 60 "$LOGS/nvlink_floor" ${n//,/ } >>"$OUT/nvlink_floor.txt" 2>&1
    say "floor (${n//,/ }) exit $?"
  done
  cat "$OUT/nvlink_floor.txt" >>"$S"
  rm -f "$LOGS/nvlink_floor"
fi
tar -czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$LOGS"
