// ptx.cuh — the raw instructions the CUDA Atom is built from (sm_70 and up;
// nothing here differs between sm_80, sm_90 and sm_100 but griddep_*).
//
//   st_release_{sys,gpu}   st.release: publishes this thread's (and, after a
//                          barrier, its block's) earlier writes with the value
//   st_relaxed_sys         st.relaxed.sys: a value, visible to peers, ordering nothing
//   ld_acquire_{sys,gpu}   ld.acquire: pairs with the release
//   ld_relaxed_sys         ld.relaxed.sys: a peer's latest value, ordering nothing
//   globaltimer_ns         %globaltimer, nanoseconds, for bounded waits
//   ld_cg                  ld.global.cg: a load served by L2, never a stale
//                          L1 line (sources may be a peer's reused workspace)
//   griddep_wait           griddepcontrol.wait: returns once the grids this one
//                          depends on completed and their writes are visible
//                          (NOTE [overlapped launch]); sm_90+, a no-op before
//   griddep_launch_dependents  griddepcontrol.launch_dependents: the next
//                          kernel of the stream may start its blocks (they
//                          wait in griddep_wait); sm_90+, a no-op before
#pragma once

#include <cstdint>
#include <cstring>

namespace purlin::atom::cuda::ptx {

__device__ __forceinline__ void st_release_sys(uint64_t* p, uint64_t v) {
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ void st_relaxed_sys(uint64_t* p, uint64_t v) {
  asm volatile("st.relaxed.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ uint64_t ld_acquire_sys(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ uint64_t ld_relaxed_sys(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.relaxed.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st_release_gpu(uint64_t* p, uint64_t v) {
  asm volatile("st.release.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ uint64_t ld_acquire_gpu(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ uint64_t globaltimer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ void griddep_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void griddep_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// ld.global.cg of any 1/2/4/8/16-byte trivially copyable T.
template <class T>
__device__ __forceinline__ T ld_cg(const T* p) {
  static_assert(sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8 || sizeof(T) == 16,
                "ld_cg: unsupported size");
  T out;
  if constexpr (sizeof(T) == 1) {
    const unsigned char u = __ldcg(reinterpret_cast<const unsigned char*>(p));
    memcpy(&out, &u, 1);
  } else if constexpr (sizeof(T) == 2) {
    const unsigned short u = __ldcg(reinterpret_cast<const unsigned short*>(p));
    memcpy(&out, &u, 2);
  } else if constexpr (sizeof(T) == 4) {
    const unsigned int u = __ldcg(reinterpret_cast<const unsigned int*>(p));
    memcpy(&out, &u, 4);
  } else if constexpr (sizeof(T) == 8) {
    const unsigned long long u = __ldcg(reinterpret_cast<const unsigned long long*>(p));
    memcpy(&out, &u, 8);
  } else {
    const uint4 u = __ldcg(reinterpret_cast<const uint4*>(p));
    memcpy(&out, &u, 16);
  }
  return out;
}

}  // namespace purlin::atom::cuda::ptx
