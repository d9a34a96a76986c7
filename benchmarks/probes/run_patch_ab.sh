#!/usr/bin/env bash
# run_patch_ab.sh — an A/B of a patch against the tree, on a machine with GPUs, in one run:
#   bash benchmarks/probes/run_patch_ab.sh PATCH [ROUNDS]
# Builds the tree (A) and the tree with PATCH applied (B; ninja rebuilds only what the patch
# touches), keeps both extensions, then runs the bench ROUNDS times (default 3) on each, taking
# turns A1 B1 A2 B2 ... so a drift of the machine falls on both alike. BENCH_ARGS as for
# tools/gpu.sh bench (default: all_reduce and all_gather, 1K-1M, graph, purlin alone).
# Writes LOG_DIR/ab.md (every run's tables, in turn order, with the exact commands) and
# LOG_DIR/ab_logs.tgz (LOG_DIR: $PURLIN_AB_LOGS, default ./gpu_logs); leaves the tree as it found it (patch reverted, A's extension in place).
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
PATCH="${1:?usage: run_patch_ab.sh PATCH [ROUNDS]}"
ROUNDS="${2:-3}"
OUT="${PURLIN_AB_LOGS:-$ROOT/gpu_logs}"
export BENCH_ARGS="${BENCH_ARGS:---ops all_reduce,all_gather -b 1K -e 1M -f 4 --mode graph --impls purlin --time-cap 0.25}"
W="$(mktemp -d)"
mkdir -p "$OUT"
so() { ls torch_purlin/_C*.so 2>/dev/null | head -1; }
build() {  # $1: A or B
  local t0=$SECONDS
  PURLIN_BUILD_ONLY=1 bash test/gpu/run_gpu_suite.sh -l "$W/build_$1" >"$W/build_$1.txt" 2>&1 || {
    echo "BUILD $1 FAILED"; tail -30 "$W/build_$1.txt"; exit 1; }
  cp "$(so)" "$W/$1.so"
  echo "build $1: $(( SECONDS - t0 )) s"
}
build A
git apply "$PATCH" || { echo "PATCH FAILED: $PATCH"; exit 1; }
trap 'git apply --reverse "$PATCH"' EXIT  # reverted also when B's build fails
build B
git apply --reverse "$PATCH" && trap - EXIT
{
  echo "# A/B of $(basename "$PATCH") ($(date -u +%F' '%T) UTC, $(nvidia-smi -L | head -1 | cut -d'(' -f1), $ROUNDS rounds)"
  echo
  echo "- A = the tree ($(git rev-parse --short HEAD)), B = the tree with $PATCH"
  echo "- each run: \`BENCH_ARGS=\"$BENCH_ARGS\" bash tools/gpu.sh bench\` (NPROC=${NPROC:-2})"
} >"$OUT/ab.md"
for r in $(seq "$ROUNDS"); do
  for v in A B; do
    cp "$W/$v.so" "$(so)"
    bash tools/gpu.sh -l "$W/run_$v$r" bench >"$W/run_$v$r.txt" 2>&1
    echo "run $v$r exit $?"
    { echo; echo "## $v$r"; echo; cat "$W/run_$v$r/bench/bench.md" 2>/dev/null || echo "(no table: see ab_logs.tgz)"; } >>"$OUT/ab.md"
  done
done
cp "$W/A.so" "$(so)"
tar -C "$W" -czf "$OUT/ab_logs.tgz" --exclude='*.so' . 2>/dev/null
echo "wrote $OUT/ab.md"
