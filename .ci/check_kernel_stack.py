"""check_kernel_stack.py — fails when a plan or line kernel compiled for sm_90
keeps a stack frame (ptxas -v output on stdin; .ci/compile_cuda.sh feeds it).

NOTE [register units] (csrc/atom/cuda/device/line_kernel.cuh): a small collective is
a chain of memory round trips, and a kernel with a stack adds local-memory
ones (2026-11-30: 5.1 -> 3.5 us per 1K all_reduce on 2x H200 once the line
kernel had none). Allowed, listed in ALLOWED: the 1-byte element types
(sixteen elements per lane of a wide line; their reductions spill), and up to
16 B in plan_kernel<int64>, whose tagged-wait slow path (NOTE [tagged waits],
plan_kernel.cuh) spills the op loop's `ops` pointer and a predicate: a load
per op, never per element. Other architectures are printed for information
only.

    python3 .ci/check_kernel_stack.py ARCH < ptxas_output.txt
"""
import re
import sys

# (kernel name pattern, most stack bytes allowed; None: any)
ALLOWED = [
    (re.compile(r"(line_kernelI[ha]Lb1E|plan_kernelI[ha]E)"), None),  # uint8 / int8
    (re.compile(r"plan_kernelIlE"), 16),  # int64: NOTE [tagged waits]
]


def allowed(name, frame):
    return any(pat.search(name) and (most is None or frame <= most) for pat, most in ALLOWED)
CHECKED_ARCH = "90"


def stacks(text):
    """(kernel name, stack bytes, spill store bytes, spill load bytes) per kernel."""
    out, fn = [], None
    for line in text.splitlines():
        m = re.search(r"Function properties for (\S+)", line)
        if m:
            fn = m.group(1)
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m and fn:
            if "plan_kernel" in fn or "line_kernel" in fn:
                out.append((fn, *map(int, m.groups())))
            fn = None
    return out


def main():
    arch = sys.argv[1]
    found = stacks(sys.stdin.read())
    with_stack = [k for k in found if k[1] > 0]
    bad = [k for k in with_stack if not allowed(k[0], k[1])]
    for name, frame, st, ld in with_stack:
        note = "" if allowed(name, frame) else "  <- not allowed" if arch == CHECKED_ARCH else "  (not checked)"
        print(f"check_kernel_stack: sm_{arch} {name}: {frame} B stack, {st} B spill stores, {ld} B spill loads{note}")
    print(f"check_kernel_stack: sm_{arch}: {len(found)} kernels, {len(with_stack)} with a stack")
    if arch == CHECKED_ARCH and (bad or not found):
        print("check_kernel_stack: FAILED: kernels above keep a stack on sm_90 (NOTE [register units])"
              if bad else "check_kernel_stack: FAILED: no kernel found in the ptxas output")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
