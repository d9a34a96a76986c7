// purlin_hd.h — PURLIN_HD marks functions shared by host code and kernels.
//
// Headers that describe memory both sides agree on (signal_pad.h,
// device/plan_format.h) use it, so a g++-compiled translation unit and an
// nvcc-compiled one see the same inline definitions.
#pragma once

#if defined(__CUDACC__)
#define PURLIN_HD __host__ __device__ __forceinline__
#else
#define PURLIN_HD inline
#endif
