"""The GPU collective families of test/gpu/test_gpu_collectives.py, one module per concern; one worker
runs them all in order (process start-up and NCCL initialisation paid once)."""
