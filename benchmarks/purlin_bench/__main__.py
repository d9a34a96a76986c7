"""`python -m purlin_bench`: runs the benchmark (bench.py)."""
from purlin_bench.bench import main

main()
