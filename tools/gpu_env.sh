# gpu_env.sh — sourced by the GPU scripts (test/gpu/run_gpu_suite.sh, tools/gpu_*.sh): the
# environment every GPU run needs, and the shared-GPU mode.
# NVLink multicast / NVLS stay off (they can take shared GPUs out of service).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
# TRAP: on images whose default g++ is another compiler than the one that built the libstdc++
# python and torch load (e.g. /opt/gcc), an extension built with it crashed at its first
# std::ostringstream integer insertion. Build with the system compiler where there is one.
if [ -x /usr/bin/g++ ] && [ -x /usr/bin/gcc ]; then
  export CC=/usr/bin/gcc CXX=/usr/bin/g++ NVCC_PREPEND_FLAGS="-ccbin /usr/bin/g++ ${NVCC_PREPEND_FLAGS:-}"
fi

# The architectures of the GPUs present, as setup.py's PURLIN_CUDA_ARCHS wants them ("90", "80;90").
gpu_archs() {
  nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | tr -d '. ' | sort -u | paste -sd';'
}

gpu_count() { nvidia-smi -L 2>/dev/null | grep -c '^GPU'; }

# gpu_share RANKS LOG_DIR: with more ranks than GPUs the ranks share GPUs (NOTE [shared GPU] in
# csrc/atom/cuda/host/symmetric_workspace.h): TORCH_PURLIN_CUDA_SHARE_GPU=1, and a CUDA MPS daemon
# of this run's own (its pipe and log folder under LOG_DIR), so the ranks' kernels run at once.
# The caller stops it with gpu_share_stop (an EXIT trap). NCCL refuses such groups: the GPU tests
# then check against CPU references only. A daemon started by an enclosing script is reused.
gpu_share() {
  local ranks=$1 logs=$2 gpus
  gpus=$(gpu_count)
  [ "$ranks" -le "${gpus:-0}" ] && return 0
  export TORCH_PURLIN_CUDA_SHARE_GPU=1
  [ -n "${PURLIN_MPS_DIR:-}" ] && return 0
  [ "${gpus:-0}" -gt 0 ] || return 0
  export PURLIN_MPS_DIR="$logs/mps" PURLIN_MPS_OWNER=$$
  mkdir -p "$PURLIN_MPS_DIR"
  export CUDA_MPS_PIPE_DIRECTORY="$PURLIN_MPS_DIR" CUDA_MPS_LOG_DIRECTORY="$PURLIN_MPS_DIR"
  timeout 20 nvidia-cuda-mps-control -d && echo "CUDA MPS daemon started in $PURLIN_MPS_DIR"
}

gpu_share_stop() {
  [ "${PURLIN_MPS_OWNER:-}" = "$$" ] || return 0
  echo quit | timeout 10 nvidia-cuda-mps-control >/dev/null 2>&1
  unset PURLIN_MPS_DIR PURLIN_MPS_OWNER
}
