# device_env.sh — sourced by the device scripts: environment every GPU run needs.
# NVLink multicast / NVLS stay off (they can take shared GPUs out of service).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
# TRAP (seen 2026-11-30 on nvidia-h200-x2): the image's default g++ is /opt/gcc,
# whose C++ runtime differs from the libstdc++ python/torch load; an extension
# built with it crashed in the first std::ostringstream integer insertion.
# Build with the system compiler, which matches the loaded libstdc++.
if [ -x /usr/bin/g++ ] && [ -x /usr/bin/gcc ]; then
  export CC=/usr/bin/gcc CXX=/usr/bin/g++ NVCC_PREPEND_FLAGS="-ccbin /usr/bin/g++ ${NVCC_PREPEND_FLAGS:-}"
fi
