"""The CUDA datapath's plan protocol, emulated on the CPU (no GPU, no torch extension).

Builds test/cpp/test_cuda_plan_emulation.cc with g++ (the Atom's host code
and its protocol choice compile as C++) and runs it: W ranks x G blocks as
threads interpret lowered SNAC plans exactly as plan_kernel.cuh does, across
hundreds of back-to-back collectives, and every output is checked. And
test_plan_symmetry.cc: every rank of every identical call chooses alike. And
protocol_choice_table.cc: the choices equal the golden table's.
"""
import difflib
import pathlib
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SNAC = ["csrc/snac/planner.cc", "csrc/snac/matched_waits.cc", "csrc/snac/spec.cc", "csrc/snac/spec_traits.cc",
        "csrc/snac/collectives.cc", "csrc/common/types.cc"]
# The CUDA protocol choice as the product makes it (NOTE [protocol choice]): the lowering, the Atom's settings
# and launch tables, and the backend's torch-free request and symmetric-use rules.
CHOICE = ["csrc/backend/group/request.cc", "csrc/backend/group/symmetric_use.cc", "csrc/backend/group/protocol_table.cc",
          "csrc/common/env.cc", "csrc/lowering/device_plan.cc",
          "csrc/lowering/protocol_choice.cc", "csrc/atom/cuda/interned_names.cc",
          "csrc/atom/cuda/protocol/protocol_settings.cc", "csrc/atom/cuda/protocol/launch_config.cc",
          "csrc/atom/cuda/protocol/launch_config_sm90.cc"]


def build(out_dir, test, sources, libs=()):
    """Builds test/cpp/<test>.cc with `sources` (paths from the repository root, or g++ flags)."""
    if not shutil.which("g++"):
        pytest.skip("g++ is required")
    exe = out_dir / test
    cmd = ["g++", "-O2", "-std=c++17", "-Wall", "-I", str(ROOT / "csrc"),
           *[s if s.startswith("-") or s in ("c++", "none") else str(ROOT / s) for s in sources],
           str(ROOT / "test/cpp" / f"{test}.cc"), *libs, "-o", str(exe)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"compile failed: {' '.join(cmd)}\n{r.stderr}"
    return exe


def run_host_unit(tmp_path, test, cu_sources, libs=()):
    """Builds test/cpp/<test>.cc with csrc/atom/cuda/<cu_sources> (host code, paths under csrc/atom/cuda) and runs
    it; returns its stdout after checking that it built and exited 0."""
    exe = build(tmp_path, test, ["-x", "c++", *[f"csrc/atom/cuda/{c}" for c in cu_sources], "-x", "none"], libs)
    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


@pytest.fixture(scope="module")
def emulator(tmp_path_factory):
    return build(tmp_path_factory.mktemp("cuda_plan"), "test_cuda_plan_emulation", SNAC + CHOICE, ["-pthread"])


def test_plan_symmetry(tmp_path):
    """NOTE [symmetric use is rank-invariant], [protocol choice]: for every built-in collective x pool or plain
    x in place or not x every root x every size class x worlds 2-8, every rank derives the same call tag and
    block count, and the plans the ranks chose, run together, give the Spec's result."""
    exe = build(tmp_path, "test_plan_symmetry", SNAC + CHOICE)
    r = subprocess.run([str(exe), "8"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and r.stdout.strip().endswith("0 failed"), r.stdout[-4000:] + r.stderr
    # Every protocol class ran, and reduce read the pool in place (the 20 MB reduce of the pool that once
    # sent its root and its peers to different plans).
    for proto in ("+lines", "+wide-lines", "+parity", "one-shot+push", "copy+push", "one-shot+zero-copy",
                  "copy+zero-copy", "copy+peer-outputs", "two-shot+zero-copy"):
        assert proto in r.stdout, (proto, r.stdout[-2000:])


def test_protocol_choice_golden(tmp_path):
    """NOTE [golden protocol table]: the protocol every built-in collective gets (CPU and CUDA, plain and pool,
    in place or not, every size class, worlds 2-8) equals test/cpp/golden/protocol_choice.txt. A change meant to
    alter a choice regenerates the file with the table program and shows its diff."""
    exe = build(tmp_path, "protocol_choice_table",
                SNAC + CHOICE)
    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    golden = (ROOT / "test/cpp/golden/protocol_choice.txt").read_text()
    if r.stdout != golden:
        diff = list(difflib.unified_diff(golden.splitlines(), r.stdout.splitlines(), "golden", "now", lineterm="", n=0))
        pytest.fail(f"{len(diff)} lines of the protocol table changed (regenerate with {exe} > "
                    f"test/cpp/golden/protocol_choice.txt if meant):\n" + "\n".join(diff[:80]))


def test_custom_specs_get_the_builtin_protocol(tmp_path):
    """NOTE [custom Specs share the built-ins' protocols]: a built-in's Spec run as a custom Spec (run_spec, on the
    same tensors) gets the built-in's CPU and CUDA choices at every size class, worlds 2-8, both roots, plain and
    pool tensors, out of place and in place, but for the two differences the note names (broadcast into pool
    outputs, all_to_all in place); any other difference fails."""
    exe = build(tmp_path, "test_custom_protocol", SNAC + CHOICE)
    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and " 0 failed" in r.stdout, f"stdout:\n{r.stdout}\nstderr:\n{r.stderr}"


def test_plan_protocol_emulation(emulator):
    r = subprocess.run([str(emulator), "100"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and " 0 failed" in r.stdout, f"stdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    # Every region kind ran (NOTE [line plans], [parity plans], [wide lines]).
    assert " 0 on flagged lines" not in r.stdout and " 0 parity plans" not in r.stdout, r.stdout
    assert " 0 on wide lines" not in r.stdout, r.stdout
    # NOTE [matched waits]: own-slot waits ran, and so did catch-ups before unclean ops.
    assert " 0 own-slot waits" not in r.stdout and " 0 catch-up waits" not in r.stdout, r.stdout


def test_matched_wait_plans(tmp_path):
    """NOTE [matched waits] on large plans as the CUDA datapath makes them: every Wait matched where rounds
    are equal, catch-ups only where an op meets a shorter round, nothing matched without the option."""
    exe = build(tmp_path, "test_matched_waits", SNAC)
    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip().endswith("0 failed") and "FAIL" not in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize("mutation", ["no-reuse-wait", "one-parity", "short-flag-period", "one-tag-slot",
                                      "relaxed-parity-done", "wide-unaligned", "all-own-slot", "no-peer-ready",
                                      "tag-zero"])
def test_plan_protocol_mutations_fail(emulator, mutation):
    """Each deliberate protocol bug (region reuse without the pbase wait, one parity, short line-flag period,
    parity plans' call tags in the shared slot, a parity plan's Done without release, wide-line pieces not
    starting on a line, every Wait on the block's own slot whether SNAC matched it or not) must be caught:
    wrong outputs or reported races."""
    r = subprocess.run([str(emulator), "100", mutation], capture_output=True, text=True, timeout=300)
    assert r.returncode != 0 and " 0 failed" not in r.stdout, f"{mutation} went unnoticed:\n{r.stdout}\n{r.stderr}"
    assert "parity plans" in r.stdout and not r.stdout.split("flagged lines, ")[1].startswith("0 parity"), r.stdout


def test_launch_config_tables(tmp_path):
    """Block counts by size and the line launch shapes (launch_config*.cu): tables, caps and the fixed override."""
    out = run_host_unit(tmp_path, "test_launch_config", ["protocol/launch_config.cc", "protocol/launch_config_sm90.cc"])
    assert "0 failed" in out, out


def test_nvlink_probe_refuses_unknown_gpus(tmp_path):
    """NOTE [wide lines]: auto takes wide lines only where NVML confirms NVLink; GPUs it cannot find
    (or a machine without NVML, like CI) get a refusal with a reason."""
    out = run_host_unit(tmp_path, "test_nvlink_probe", ["host/nvlink_probe.cc"], libs=["-ldl"])
    assert "0 failed" in out and "refused: " in out, out


def test_pool_blocks(tmp_path):
    """The symmetric pool's bookkeeping (pool_blocks.h): first fit, and freed blocks back in stream order
    (NOTE [pool streams]): at once for their own stream, for others when their event is done."""
    out = run_host_unit(tmp_path, "test_pool_blocks", ["host/pool_blocks.cc"])
    assert out.strip().endswith("0 failed"), out


def test_workspace_probe_rules(tmp_path):
    """The setup probes of a CUDA group (workspace_probe.h): encoding, one host, one GPU per rank unless every
    rank sets TORCH_PURLIN_CUDA_SHARE_GPU=1 (NOTE [shared GPU]), and the SM budget of ranks sharing a GPU."""
    out = run_host_unit(tmp_path, "test_workspace_probe", ["host/workspace_probe.cc"])
    assert out.strip().endswith("0 failed"), out


def test_host_executor_peer_refs(tmp_path):
    """snac::execute on plans naming other ranks' buffers (NOTE [zero-copy], [peer outputs]) as the copy-engine
    Atom runs them (NOTE [copy-engine zero-copy]): W threads as ranks, every output checked; without the peer
    tables such a plan is refused, never run on this rank's own buffers."""
    exe = build(tmp_path, "test_host_executor", SNAC + ["csrc/snac/executor.cc", "csrc/atom/atom.cc"], ["-pthread"])
    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip().endswith("0 failed") and "FAIL" not in r.stdout, r.stdout + r.stderr
    assert r.stdout.count("ok   all_gather in place reading peer inputs") == 3, r.stdout


def test_abort_signal_and_look_rule(tmp_path):
    """NOTE [device abort]: the abort request raises every attached host word (also one attached after the
    raise, never one detached before it, with raise() racing attach/detach), and wait_flag's clock rule looks
    at the word never in a wait's first period and at least once in every later one."""
    out = run_host_unit(tmp_path, "test_abort_signal", [], libs=["-pthread"])
    assert out.strip().endswith("0 failed") and "FAIL" not in out, out
