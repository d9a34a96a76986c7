"""purlin_bench: the collective benchmark, purlin next to NCCL, gloo and torch's
symmetric memory in nccl-tests columns (bench.py runs it, impls.py holds the
implementations, report.py prints and plots). Beside the library, not in it:
importing this package imports neither torch_purlin nor its extension.

    PYTHONPATH=benchmarks python -m purlin_bench [options]     # benchmarks/README.md
"""
