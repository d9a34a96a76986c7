#!/usr/bin/env bash
# CPU sweep: the 5 default ops over 4K..64M, purlin next to gloo, at 2 and 4 ranks.
# Writes benchmarks/results/cpu_<date>_np<N>.{md,json} (and PNGs when matplotlib is there).
#
#   benchmarks/run_cpu_sweep.sh                                 # the real sweep
#   benchmarks/run_cpu_sweep.sh --impls gloo,gloo --max-bytes 256K   # a quick dry run
#
# Extra options go to purlin_bench after the defaults, so they win.
# NPROCS="2 4" (default) picks the world sizes. `--impls gloo` runs without the built
# extension (purlin_bench imports torch_purlin only for purlin's columns).
set -euo pipefail
cd "$(dirname "$0")/.."
out=benchmarks/results
date=$(date -u +%Y%m%d)
mkdir -p "$out"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
for np in ${NPROCS:-2 4}; do
    base="$out/cpu_${date}_np${np}"
    PYTHONPATH=benchmarks${PYTHONPATH:+:$PYTHONPATH} torchrun --nproc-per-node="$np" -m purlin_bench --device cpu \
        --ops all_reduce,all_gather,reduce_scatter,broadcast,all_to_all \
        --min-bytes 4K --max-bytes 64M --json "$base.json" --png-dir "${base}_png" "$@" \
        | tee "$base.md"
done
