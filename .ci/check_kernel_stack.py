"""check_kernel_stack.py — fails when a plan or line kernel compiled for sm_90
keeps a stack frame (ptxas -v output on stdin; .ci/compile_cuda.sh feeds it).

NOTE [register units] (csrc/atom/cuda/line_kernel.cuh): a small collective is
a chain of memory round trips, and a kernel with a stack adds local-memory
ones (session 10: 5.1 -> 3.5 us per 1K all_reduce on 2x H200 once the line
kernel had none). Allowed: the 1-byte element types (sixteen elements per lane
of a wide line; their reductions spill), listed in ALLOWED. Other
architectures are printed for information only.

    python3 .ci/check_kernel_stack.py ARCH < ptxas_output.txt
"""
import re
import sys

ALLOWED = re.compile(r"(line_kernelI[ha]Lb1E|plan_kernelI[ha]E)")  # uint8 / int8
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
    bad = [k for k in with_stack if not ALLOWED.search(k[0])]
    for name, frame, st, ld in with_stack:
        note = "" if ALLOWED.search(name) else "  <- not allowed" if arch == CHECKED_ARCH else "  (not checked)"
        print(f"check_kernel_stack: sm_{arch} {name}: {frame} B stack, {st} B spill stores, {ld} B spill loads{note}")
    print(f"check_kernel_stack: sm_{arch}: {len(found)} kernels, {len(with_stack)} with a stack")
    if arch == CHECKED_ARCH and (bad or not found):
        print("check_kernel_stack: FAILED: kernels above keep a stack on sm_90 (NOTE [register units])"
              if bad else "check_kernel_stack: FAILED: no kernel found in the ptxas output")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
