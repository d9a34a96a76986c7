#!/usr/bin/env bash
# run_purlin_floor.sh — builds benchmarks/probes/purlin_floor.cu against purlin's
# CUDA Atom and runs it, once as the sources are and once per ablation: a copy
# of csrc/ with one change to the line kernel (ABLATIONS, names below), so a
# difference in time per launch is that change's cost. Probes only: an
# ablation breaks a guarantee (reuse wait, Done, bounded waits), never ship one.
#   bash benchmarks/probes/run_purlin_floor.sh [ops per graph] [case filter]   (~1 min on 16 cores; on
#   one GPU both ranks share it: start CUDA MPS first, NOTE [shared GPU]; PF_DEVICE_PLAN=1 on the
#   built $W/<variant>/run passes the plan in device memory)
# ABLATIONS (default: nowait nodone nowait_nodone spin; "" = the sources only):
#   nowait (no Done wait at a line launch's start),
#   nodone (no Done stores to peers at its end: the reuse wait then hangs
#   until the timeout breaks the group, so only its first case means
#   anything), nowait_nodone (both), spin (line waits without the timer and
#   the mismatch checks), stamps (no change in behaviour: clock64() at the line
#   kernel's phase boundaries, printed as cycles since entry), stamps_op (also
#   inside the copy and reduce element loops), relaxed_reuse (the reuse wait's
#   first Done poll relaxed, not acquire), const_touch / const_touch_stamps
#   (the state phase's parameters read before griddepcontrol.wait; 2026-11-30,
#   below: no gain), state_stamps (stamps inside the launch-state phase),
#   gpu_reuse / weak_reuse / gpu_lines / gpu_both_stamps (load scopes, below),
#   stamps_last (stamps on the last
#   block), div32 (a block's share of an op in 32-bit arithmetic; 2026-11-30,
#   not run yet). Only the named copies are built. `spin` and
#   `nowait`/`nodone` need the sources they were written against: a pattern
#   that no longer matches stops the script (python assert).
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
NVCC="$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)"
W="${PURLIN_FLOOR_DIR:-/tmp/purlin_floor}"
rm -rf "$W" && mkdir -p "$W/base"
FLAGS=(-std=c++17 -O3 -arch=sm_90 -DPURLIN_WITH_CUDA)
COMMON="symmetric_workspace workspace_probe ipc_peers nvlink_probe launch_config launch_config_sm90 device_plan plan_kernel plan_kernel_int plan_kernel_copy"
# Ablated copies of csrc/ (python: exact-text replacements that must match once).
ABL="${ABLATIONS-nowait nodone nowait_nodone spin}"  # ABLATIONS="" runs the sources as they are only
python3 - "$W" "$ABL" <<'EOF'
import pathlib, shutil, sys
w = pathlib.Path(sys.argv[1])
NOWAIT = ("atom/cuda/device/line_kernel.cuh",
          "      if (seen < pbase && *reinterpret_cast<const volatile uint64_t*>(broken) == 0)",
          "      if (false)")
NODONE = ("atom/cuda/device/plan_kernel.cuh",
          "        if (line_run) ptx::st_relaxed_sys(done, next);",
          "        if (line_run) {}")
SPIN = ("atom/cuda/device/flagged_line.cuh",
        "  const uint64_t t0 = ptx::globaltimer_ns();\n  uint64_t foreign_since = 0;",
        "  for (;;) {\n    r = line_load(line);\n    if (r.f0 == f.f0 && r.f1 == f.f1) return LineWaited{r.payload, true};\n"
        "  }\n  const uint64_t t0 = ptx::globaltimer_ns();\n  uint64_t foreign_since = 0;")
# stamps: block 0's thread 0 records clock64() at the line kernel's phase boundaries into
# output + 2 MiB (purlin_floor prints them): entry, after griddep_wait, after the launch state and
# reuse wait, after each op, after end_launch. Times are those of the graph's last launch.
K = "atom/cuda/device/line_kernel.cuh"
STAMPS = [(K, "  ptx::griddep_wait();  // NOTE [overlapped launch]",
           "  long long* stamps = reinterpret_cast<long long*>(p.output + (2 << 20));\n"
           "  const bool stamper = blockIdx.x == 0 && threadIdx.x == 0;\n"
           "  const long long c_entry = clock64();\n"
           "  ptx::griddep_wait();  // NOTE [overlapped launch]"),
          (K, "  ptx::griddep_launch_dependents();\n  // One memory latency",
           "  const long long c_dep = clock64();\n  ptx::griddep_launch_dependents();\n  // One memory latency"),
          (K, "  if (!__syncthreads_and(ok) || s_state[2] != 0) return;",
           "  if (!__syncthreads_and(ok) || s_state[2] != 0) return;\n"
           "  if (stamper) { stamps[0] = c_entry; stamps[1] = c_dep; stamps[2] = clock64(); }"),
          (K, "        default: break;  // Wait / Signal: carried by the lines\n      }\n",
           "        default: break;  // Wait / Signal: carried by the lines\n      }\n"
           "      if (stamper && i < 8) stamps[3 + i] = clock64();\n"),
          (K, "  detail::end_launch(p, base, lbase, lseq, G, true, true, s_pads);\n}",
           "  detail::end_launch(p, base, lbase, lseq, G, true, true, s_pads);\n"
           "  if (stamper) { unsigned sm; asm volatile(\"mov.u32 %0, %%smid;\" : \"=r\"(sm));\n"
           "    stamps[11] = clock64(); stamps[12] = p.n_ops; stamps[13] = sm; }\n}")]
# (2026-11-30 also measured here, before NOTE [staged plan] landed: the plan copied into shared
# memory after the wait, from the parameters or a device-resident plan, and __launch_bounds__(512),
# which left 62 registers and the same 192-byte stack: docs/PERFORMANCE.md.)
# stamps_op: stamps plus, inside the element loop of block 0's thread 0, clock64 after each source
# load and after the store of a Reduce (slots 16..18) and after the load and the store of a Copy
# (slots 19..20): where the push and the reduce spend their cycles.
STAMP_OP = "if (blockIdx.x == 0 && threadIdx.x == 0) reinterpret_cast<long long*>(p.output + (2 << 20))"
STAMPS_OP = STAMPS + [
    (K, "  if (!load_unit<T>(p, lines, srcs[op.src_begin], e0, k, x, flag, site)) return false;\n"
        "#pragma unroll\n  for (int j = 0; j < kK; ++j) acc[j] = Elem<T>::load(x[j]);",
        "  if (!load_unit<T>(p, lines, srcs[op.src_begin], e0, k, x, flag, site)) return false;\n"
        "#pragma unroll\n  for (int j = 0; j < kK; ++j) acc[j] = Elem<T>::load(x[j]);\n"
        "  " + STAMP_OP + "[16] = clock64();"),
    (K, "    for (int j = 0; j < kK; ++j) acc[j] = Op::step(acc[j], Elem<T>::load(x[j]));\n  }",
        "    for (int j = 0; j < kK; ++j) acc[j] = Op::step(acc[j], Elem<T>::load(x[j]));\n  }\n"
        "  " + STAMP_OP + "[17] = clock64();"),
    (K, "  store_unit<T>(p, lines, op.dst, e0, k, x, flag);\n  return true;\n}",
        "  store_unit<T>(p, lines, op.dst, e0, k, x, flag);\n  " + STAMP_OP + "[18] = clock64();\n  return true;\n}"),
    (K, "      if (!load_unit<T>(p, lines, srcs[op.src_begin], e0, k, x, flag, site)) return false;\n"
        "      store_unit<T>(p, lines, op.dst, e0, k, x, flag);\n      continue;",
        "      if (!load_unit<T>(p, lines, srcs[op.src_begin], e0, k, x, flag, site)) return false;\n"
        "      " + STAMP_OP + "[19] = clock64();\n"
        "      store_unit<T>(p, lines, op.dst, e0, k, x, flag);\n"
        "      " + STAMP_OP + "[20] = clock64();\n      continue;")]
# relaxed_reuse: the reuse wait's first poll of a peer's Done relaxed instead of acquire (no L1 invalidation).
RELAXED_REUSE = (K, "      const uint64_t seen = ptx::ld_acquire_sys(done);",
                 "      const uint64_t seen = *reinterpret_cast<const volatile uint64_t*>(done);")
# stamps_last: stamps on the launch's last block instead of block 0 (at G > 1 the last block to
# finish pays end_launch's counter round trip; which block ends last varies).
STAMPS_LAST = [(f, o, n.replace("blockIdx.x == 0 && threadIdx.x == 0;", "blockIdx.x == gridDim.x - 1 && threadIdx.x == 0;"))
               for f, o, n in STAMPS]
# div32: a block's share of an op in 32-bit arithmetic (the probe's ops are < 2^31 elements)
# instead of part_size()'s 64-bit division (a call to the division routine per op at G > 1).
DIV32 = (K, "  const int64_t per = G == 1 ? op.n : part_size(op.n, G, kE), lo = blockIdx.x * per;",
         "  constexpr uint32_t kAl = static_cast<uint32_t>(kPartBytes / kE);\n"
         "  const int64_t per = G == 1 ? op.n : static_cast<int64_t>(((static_cast<uint32_t>(op.n) + G - 1) / "
         "static_cast<uint32_t>(G) + kAl - 1) / kAl * kAl), lo = blockIdx.x * per;")
# const_touch (2026-11-30): warp 1 reads the parameters the launch-state phase and the ops use
# (pad, layout, timeout, call signature, input / output, ...) from the constant bank before
# griddepcontrol.wait and stores their xor to shared memory, so a constant-cache miss on them
# (one more round trip before the state loads can issue) overlaps the previous kernel's end.
CONST_TOUCH = (K, "  if (staged) detail::stage_plan(p, s_ops, s_srcs);\n",
               "  if (staged) detail::stage_plan(p, s_ops, s_srcs);\n"
               "  __shared__ uint64_t s_touch;\n"
               "  if (tid == 32) {  // a volatile store: the value must be computed here, before the wait\n"
               "    const uint64_t v = reinterpret_cast<uint64_t>(p.pad) ^ static_cast<uint64_t>(p.layout.world) ^\n"
               "      static_cast<uint64_t>(p.layout.blocks) ^ static_cast<uint64_t>(p.layout.line_offset) ^\n"
               "      static_cast<uint64_t>(p.layout.line_half) ^ static_cast<uint64_t>(p.layout.wide_offset) ^\n"
               "      static_cast<uint64_t>(p.layout.wide_half) ^ p.timeout_ns ^ static_cast<uint64_t>(p.rank) ^\n"
               "      p.call_sig ^ static_cast<uint64_t>(p.redop) ^ reinterpret_cast<uint64_t>(p.input) ^\n"
               "      reinterpret_cast<uint64_t>(p.output) ^ static_cast<uint64_t>(p.reuse_phase) ^ p.steps;\n"
               "    asm volatile(\"st.shared.u64 [%0], %1;\" :: \"r\"(static_cast<unsigned>(__cvta_generic_to_shared(&s_touch))),\n"
               "                 \"l\"(v) : \"memory\");\n"
               "  }\n")
# state_stamps (2026-11-30): stamps plus, inside the launch-state phase, clock64 once thread 0's four
# state loads have landed (slot 14), once the reuse poll's loads have landed (slot 15, the thread
# that polls a peer) and just before the phase's barrier (slot 21): which load the ~1460 cycles
# between griddepcontrol.wait and the first op wait for. The clock is read by an asm that takes
# the loaded values as inputs, so it cannot issue before they arrive.
STATE_STAMPS = STAMPS + [
    (K, "    s_state[0] = p.pad[L.base()];\n    s_state[1] = p.pad[L.lbase()];\n"
        "    s_state[2] = *reinterpret_cast<const volatile uint64_t*>(broken);\n    s_state[3] = p.pad[L.lseq()];\n",
        "    const uint64_t a0 = p.pad[L.base()], a1 = p.pad[L.lbase()];\n"
        "    const uint64_t a2 = *reinterpret_cast<const volatile uint64_t*>(broken), a3 = p.pad[L.lseq()];\n"
        "    long long c;\n"
        "    asm volatile(\"mov.u64 %0, %%clock64;\" : \"=l\"(c) : \"l\"(a0), \"l\"(a1), \"l\"(a2), \"l\"(a3));\n"
        "    s_state[0] = a0;\n    s_state[1] = a1;\n    s_state[2] = a2;\n    s_state[3] = a3;\n"
        "    if (blockIdx.x == 0) stamps[14] = c;\n"),
    (K, "      const uint64_t seen = ptx::ld_acquire_sys(done);\n",
        "      const uint64_t seen = ptx::ld_acquire_sys(done);\n"
        "      if (blockIdx.x == 0) {\n        long long c;\n"
        "        asm volatile(\"mov.u64 %0, %%clock64;\" : \"=l\"(c) : \"l\"(seen), \"l\"(pbase), \"l\"(lseq), \"l\"(region));\n"
        "        stamps[15] = c;\n      }\n"),
    (K, "  if (!__syncthreads_and(ok) || s_state[2] != 0) return;\n",
        "  if (stamper) stamps[21] = clock64();\n  if (!__syncthreads_and(ok) || s_state[2] != 0) return;\n")]
# Scope of the loads that read what a peer wrote (2026-11-30, after state_stamps showed the reuse
# poll's loads landing ~1000 cycles after thread 0's plain state loads of the same pad, ~150):
# gpu_reuse: the reuse wait's first Done poll as ld.acquire.gpu; weak_reuse: a plain (weak,
# L1-cacheable) load (measurement only: no ordering); gpu_lines: line polls as
# ld.relaxed.gpu.v4 instead of ld.volatile (which is relaxed.sys). Both .gpu variants are
# outside the PTX model for data another GPU writes (its stores are not in this GPU's scope).
GPU_REUSE = (K, "      const uint64_t seen = ptx::ld_acquire_sys(done);",
             "      const uint64_t seen = ptx::ld_acquire_gpu(done);")
WEAK_REUSE = (K, "      const uint64_t seen = ptx::ld_acquire_sys(done);",
              "      const uint64_t seen = *done;")
GPU_LINES = ("atom/cuda/device/flagged_line.cuh",
             '  asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"',
             '  asm volatile("ld.relaxed.gpu.global.v4.u32 {%0, %1, %2, %3}, [%4];"')
edits = {"gpu_reuse": [GPU_REUSE], "weak_reuse": [WEAK_REUSE], "gpu_lines": [GPU_LINES],
         "gpu_both_stamps": STATE_STAMPS + [GPU_REUSE, GPU_LINES], "state_stamps": STATE_STAMPS, "const_touch": [CONST_TOUCH], "const_touch_stamps": [CONST_TOUCH] + STAMPS, "relaxed_reuse": [RELAXED_REUSE], "stamps_last": STAMPS_LAST, "div32": [DIV32], "nowait": [NOWAIT], "nodone": [NODONE], "nowait_nodone": [NOWAIT, NODONE], "spin": [SPIN], "stamps": STAMPS,
         "stamps_op": STAMPS_OP}
for name, changes in edits.items():
    if name not in sys.argv[2].split():
        continue
    dst = w / name / "csrc"
    shutil.copytree("csrc", dst)
    for path, old, new in changes:
        text = (dst / path).read_text()
        assert text.count(old) == 1, (name, "pattern must match once")
        (dst / path).write_text(text.replace(old, new))
EOF
for f in $COMMON; do echo "csrc/atom/cuda/$f.cu"; done >"$W/cu.list"
for f in snac/planner snac/matched_waits snac/spec snac/collectives common/types; do echo "csrc/$f.cc"; done >"$W/cc.list"
export NVCC
{
  while read -r f; do echo "$f csrc $W/base/$(basename "$f").o"; done <"$W/cu.list"
  while read -r f; do echo "$f csrc $W/base/$(basename "$f").o"; done <"$W/cc.list"
  echo "benchmarks/probes/purlin_floor.cu csrc $W/base/purlin_floor.o"
  echo "csrc/atom/cuda/device/plan_kernel_float.cu csrc $W/base/plan_kernel_float.o"
  for a in $ABL; do mkdir -p "$W/$a/obj"; echo "$W/$a/csrc/atom/cuda/device/plan_kernel_float.cu $W/$a/csrc $W/$a/obj/plan_kernel_float.o"; done
} | FLAGS_STR="${FLAGS[*]}" xargs -P "$(nproc)" -L 1 sh -c '"$NVCC" $FLAGS_STR -I"$1" -x cu -c "$0" -o "$2" || echo "BUILD FAILED: $0"' 
shared=()
for f in $COMMON; do shared+=("$W/base/$f.cu.o"); done
for f in planner matched_waits spec collectives types; do shared+=("$W/base/$f.cc.o"); done
"$NVCC" -arch=sm_90 "$W/base/purlin_floor.o" "${shared[@]}" "$W/base/plan_kernel_float.o" -o "$W/base/run" -ldl || echo "LINK FAILED: base"
for a in $ABL; do
  "$NVCC" -arch=sm_90 "$W/base/purlin_floor.o" "${shared[@]}" "$W/$a/obj/plan_kernel_float.o" -o "$W/$a/run" -ldl || echo "LINK FAILED: $a"
done
for v in base $ABL; do
  echo "== $v"
  timeout 60 "$W/$v/run" "${1:-20}" ${2:+"$2"}
done
