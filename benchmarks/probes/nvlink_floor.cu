// nvlink_floor.cu — the floor under a small collective on two NVLink GPUs:
// what a CUDA graph of back-to-back kernels costs per kernel when each kernel
// does nothing, pings its peer, or moves 1 KB as flagged lines (the line
// kernel's protocol, stripped of the plan). One process drives both GPUs
// (peer access), so no IPC and no torch. Issue 4's "3.5 us all_reduce" is
// judged against these numbers (benchmarks/results/cuda_h200x2_20261130h_probes.md).
//
//   nvcc -std=c++17 -O3 -arch=sm_90 -Icsrc benchmarks/probes/nvlink_floor.cu -o /tmp/nvlink_floor
//   /tmp/nvlink_floor [ops per graph, default 100] [procs]
//   /tmp/nvlink_floor launch        (host time per eager launch, small vs purlin-sized parameters)
//
// `procs`: two processes, one per GPU, the peer's buffers mapped through CUDA
// IPC handles (as purlin, NCCL and torch symmetric memory run), each process
// replaying its own graph; the timed replays are queued behind a 4 ms sleep
// kernel so they run back to back (as bench.py's NOTE [queued graph timing]).
//
// Variants (each: one graph of N kernels per GPU, both GPUs replayed together,
// time per kernel = replay time / N, median of 30 replays, max over GPUs):
//   empty            1 block x 128 threads, no memory access
//   empty+pdl        the same with programmatic dependent launch (griddepcontrol)
//   ping             thread 0: seq = ++own counter, relaxed store of seq into
//                    the peer's flag, poll own flag until >= seq (volatile)
//   ping+pdl         the same, overlapped launch
//   line1k+pdl       1 KB of bf16 per rank as 128 narrow flagged lines (16 B:
//                    8 B payload + two 4-byte flags, one v4 store each), the
//                    peer's lines polled, summed with the own input, stored:
//                    a one-shot all_reduce of 1 KB without plan, pad or Done
//   line1k+pdl+param the same kernel with a 2.7 KB __grid_constant__ parameter
//                    block, as purlin's KernelParams
//   line1k+pdl+code4k / code16k / loop4k / loop16k (procs mode)
//                    line1k+pdl plus 256 / 1024 FMAs before the store, as
//                    straight-line code (4 / 16 KB of instructions) or in a
//                    loop: whether a launch pays for the code it runs once
//   wide1m+pdl/G     a one-shot all_reduce of 1 MB of bf16 per rank on wide
//                    lines (120 payload bytes + flag in 128, eight lanes per
//                    line, NOTE [wide lines]) on G blocks x 512 threads: every
//                    block pushes its lines, then polls the peer's and sums
//                    them with its input: purlin's wide-line plan without the
//                    plan, pad, Done or call tags (purlin: 11.9 us, 2026-11-30)
#include <cuda_runtime.h>
#include <sys/wait.h>


#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "atom/cuda/device/ptx.cuh"
#include "probe_util.cuh"

namespace ptx = purlin::atom::cuda::ptx;

#define CHECK PROBE_CHECK

struct Args {
  uint64_t* counter;    // this GPU's kernel sequence (own memory)
  uint64_t* own_flag;   // written by the peer
  uint64_t* peer_flag;  // the peer's own_flag
  const uint64_t* input;   // 1 KB, own
  uint64_t* output;        // 1 KB, own
  uint4* own_lines;        // 2 x 128 lines (by sequence parity), written by the peer
  uint4* peer_lines;       // the peer's own_lines
  int pdl;
  uint64_t* own_done;   // written by the peer: the last collective it finished (line1k+done*)
  uint64_t* peer_done;
  int done_mode;        // 0 none; 1 Done stored at the end + reuse wait at the start; 2 end, no wait; 3 after the poll
  int code_fmas;        // line1k+code*: FMAs run before the store (code size test, see code_footprint)
  int code_unrolled;    // 1: as straight-line code (16 bytes of SASS each), 0: in a one-instruction loop
};

struct WideArgs {
  uint64_t* counter;
  const char* input;  // 1 MB bf16
  char* output;       // 1 MB bf16
  char* own_lines;    // 2 x n_lines x 128 B (by sequence parity), written by the peer
  char* peer_lines;
  int64_t bytes;
};

struct BigParams {
  Args a;
  char pad[2700 - sizeof(Args)];
};

__device__ __forceinline__ void begin(const Args& a) {
  if (a.pdl) {
    ptx::griddep_wait();
    ptx::griddep_launch_dependents();
  }
}

__global__ void empty_kernel(Args a) { begin(a); }

__global__ void ping_kernel(Args a) {
  begin(a);
  if (threadIdx.x != 0) return;
  const uint64_t seq = *a.counter + 1;
  *a.counter = seq;
  ptx::st_relaxed_sys(a.peer_flag, seq);
  while (*reinterpret_cast<volatile uint64_t*>(a.own_flag) < seq) {
  }
}

// The code-size test (benchmarks/results/cuda_h200x2_20261130h_probes.md): `n` FMAs on four
// independent chains, either unrolled (n x 16 bytes of instructions, each
// fetched once per launch) or in a loop (the same work from a few
// instructions). If a launch pays per instruction line fetched, unrolled
// costs more than looped by far more than the FMAs' own issue time.
// Four FMAs, one per chain, that the compiler may neither fold nor reorder away.
__device__ __forceinline__ void fma4(float& a, float& b, float& c, float& d) {
  asm volatile("fma.rn.f32 %0, %0, 0f3F800347, 0f3A83126F;" : "+f"(a));
  asm volatile("fma.rn.f32 %0, %0, 0f3F800347, 0f3A83126F;" : "+f"(b));
  asm volatile("fma.rn.f32 %0, %0, 0f3F800347, 0f3A83126F;" : "+f"(c));
  asm volatile("fma.rn.f32 %0, %0, 0f3F800347, 0f3A83126F;" : "+f"(d));
}

template <int kN>
__device__ __forceinline__ float fma_chain_unrolled(float x) {
  float a = x, b = x + 1.f, c = x + 2.f, d = x + 3.f;
#pragma unroll
  for (int i = 0; i < kN / 4; ++i) {
    fma4(a, b, c, d);
  }
  return a + b + c + d;
}

__device__ __noinline__ float fma_chain_looped(float x, int n) {
  float a = x, b = x + 1.f, c = x + 2.f, d = x + 3.f;
#pragma unroll 1
  for (int i = 0; i < n / 4; ++i) {
    fma4(a, b, c, d);
  }
  return a + b + c + d;
}

__device__ __forceinline__ float code_footprint(const Args& a, float x) {
  if (a.code_fmas == 0) return 0.f;
  if (!a.code_unrolled) return fma_chain_looped(x, a.code_fmas);
  if (a.code_fmas == 256) return fma_chain_unrolled<256>(x);
  return fma_chain_unrolled<1024>(x);
}

__device__ __forceinline__ void line1k(const Args& a) {
  begin(a);
  __shared__ uint64_t s_seq;
  const int t = threadIdx.x;  // one line per thread, 128 threads
  if (t == 0) {
    s_seq = *a.counter + 1;
    // purlin's reuse wait (NOTE [line plans]): the peer finished the collective before last
    if (a.done_mode == 1)
      while (*reinterpret_cast<volatile uint64_t*>(a.own_done) + 2 < s_seq) {
      }
  }
  const uint64_t mine = a.input[t];
  const float burn = code_footprint(a, static_cast<float>(mine & 0xff));
  __syncthreads();
  const uint32_t f = static_cast<uint32_t>(s_seq);
  const int parity = static_cast<int>(s_seq & 1) * 128;  // two halves, as purlin's line parities: no overwrite before read
  const uint32_t lo = static_cast<uint32_t>(mine), hi = static_cast<uint32_t>(mine >> 32);
  asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(a.peer_lines + parity + t), "r"(lo), "r"(f), "r"(hi),
               "r"(f)
               : "memory");
  uint32_t x0, f0, x1, f1;
  do {
    asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(x0), "=r"(f0), "=r"(x1), "=r"(f1)
                 : "l"(a.own_lines + parity + t)
                 : "memory");
  } while (f0 != f || f1 != f);
  if (a.done_mode == 3) {  // Done as soon as every line was read
    __syncthreads();
    if (t == 0) ptx::st_relaxed_sys(a.peer_done, s_seq);
  }
  const uint64_t theirs = static_cast<uint64_t>(x1) << 32 | x0;
  // bf16 x4 sum in fp32, one rounding (truncation here: a probe, not a reference)
  uint64_t out = 0;
  for (int j = 0; j < 4; ++j) {
    const uint32_t ua = static_cast<uint32_t>(mine >> (16 * j) & 0xffff) << 16;
    const uint32_t ub = static_cast<uint32_t>(theirs >> (16 * j) & 0xffff) << 16;
    const float s = __uint_as_float(ua) + __uint_as_float(ub);
    out |= static_cast<uint64_t>(__float_as_uint(s) >> 16) << (16 * j);
  }
  a.output[t] = burn == 12345.f ? 0 : out;  // keeps the FMAs (never equal: inputs are small)
  __syncthreads();
  if (t == 0) {
    *a.counter = s_seq;
    if (a.done_mode == 1 || a.done_mode == 2) ptx::st_relaxed_sys(a.peer_done, s_seq);  // as purlin's end_launch
  }
}

__global__ void line1k_kernel(Args a) { line1k(a); }
__global__ void line1k_param_kernel(const __grid_constant__ BigParams p) { line1k(p.a); }

constexpr int kWidePayload = 120;

__device__ __forceinline__ float bf16_lo(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }
__device__ __forceinline__ uint32_t bf16_pack(float lo, float hi) {
  return (__float_as_uint(lo) >> 16) | (__float_as_uint(hi) & 0xffff0000u);
}
__device__ __forceinline__ uint64_t add4(uint64_t a, uint64_t b) {
  const uint32_t a0 = static_cast<uint32_t>(a), a1 = static_cast<uint32_t>(a >> 32);
  const uint32_t b0 = static_cast<uint32_t>(b), b1 = static_cast<uint32_t>(b >> 32);
  return bf16_pack(bf16_lo(a0) + bf16_lo(b0), bf16_hi(a0) + bf16_hi(b0)) |
         static_cast<uint64_t>(bf16_pack(bf16_lo(a1) + bf16_lo(b1), bf16_hi(a1) + bf16_hi(b1))) << 32;
}

__global__ void __launch_bounds__(512) wide1m_kernel(WideArgs a) {
  ptx::griddep_wait();
  ptx::griddep_launch_dependents();
  __shared__ uint64_t s_seq;
  if (threadIdx.x == 0) s_seq = *a.counter + 1;
  __syncthreads();
  const uint64_t seq = s_seq;
  const int64_t n_lines = (a.bytes + kWidePayload - 1) / kWidePayload;
  const int64_t per = (n_lines + gridDim.x - 1) / gridDim.x;
  const int64_t lo = blockIdx.x * per, hi = n_lines < lo + per ? n_lines : lo + per;
  const int lane = threadIdx.x & 31, j = lane & 7;
  const int64_t half = ((n_lines * 128 + 4095) / 4096) * 4096;
  char* mine_in = a.own_lines + (seq & 1) * half;
  char* theirs = a.peer_lines + (seq & 1) * half;
  const int64_t step = (blockDim.x >> 5) * 4;
  // push: this lane's 16 bytes (lane 7: 8 bytes + the flag) of each line
  for (int64_t l0 = lo + (threadIdx.x >> 5) * 4; l0 < hi; l0 += step) {
    const int64_t line = l0 + lane / 8;
    const int64_t byte = line * kWidePayload + j * 16;
    uint64_t w0 = 0, w1 = seq;
    if (line < hi) {
      if (byte < a.bytes) w0 = *reinterpret_cast<const uint64_t*>(a.input + byte);
      if (j != 7 && byte + 8 < a.bytes) w1 = *reinterpret_cast<const uint64_t*>(a.input + byte + 8);
      asm volatile("st.volatile.global.v2.u64 [%0], {%1, %2};" ::"l"(theirs + line * 128 + j * 16), "l"(w0), "l"(w1)
                   : "memory");
    }
  }
  __syncthreads();
  // poll the peer's lines, add the own input, store
  for (int64_t l0 = lo + (threadIdx.x >> 5) * 4; l0 < hi; l0 += step) {
    const int64_t line = l0 + lane / 8;
    const bool active = line < hi;
    const int64_t byte = line * kWidePayload + j * 16;
    uint64_t w0 = 0, w1 = 0;
    for (;;) {
      if (active)
        asm volatile("ld.volatile.global.v2.u64 {%0, %1}, [%2];" : "=l"(w0), "=l"(w1) : "l"(mine_in + line * 128 + j * 16)
                     : "memory");
      if (__all_sync(0xffffffffu, !active || j != 7 || w1 == seq)) break;
    }
    if (active && byte < a.bytes) {
      const uint64_t x0 = *reinterpret_cast<const uint64_t*>(a.input + byte);
      *reinterpret_cast<uint64_t*>(a.output + byte) = add4(x0, w0);
      if (j != 7 && byte + 8 < a.bytes) {
        const uint64_t x1 = *reinterpret_cast<const uint64_t*>(a.input + byte + 8);
        *reinterpret_cast<uint64_t*>(a.output + byte + 8) = add4(x1, w1);
      }
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) atomicMax(reinterpret_cast<unsigned long long*>(a.counter), seq);
}

enum Variant { kEmpty, kPing, kLine, kLineParam, kWide };

void launch(Variant v, const Args& a, const WideArgs& w, int blocks, cudaStream_t s) {
  cudaLaunchAttribute attr;
  cudaLaunchConfig_t cfg = probe::launch_config(1, 128, s, a.pdl != 0, &attr);
  switch (v) {
    case kEmpty: CHECK(cudaLaunchKernelEx(&cfg, empty_kernel, a)); break;
    case kPing: CHECK(cudaLaunchKernelEx(&cfg, ping_kernel, a)); break;
    case kLine: CHECK(cudaLaunchKernelEx(&cfg, line1k_kernel, a)); break;
    case kWide:
      cfg.gridDim = dim3(blocks);
      cfg.blockDim = dim3(512);
      CHECK(cudaLaunchKernelEx(&cfg, wide1m_kernel, w));
      break;
    case kLineParam: {
      BigParams p{};
      p.a = a;
      CHECK(cudaLaunchKernelEx(&cfg, line1k_param_kernel, p));
      break;
    }
  }
}

struct IpcExchange {  // the procs mode's part of the shared page
  cudaIpcMemHandle_t handle[2];
};

// One process per GPU; returns the child's exit status to the parent.
int run_procs(int n_ops) {
  setvbuf(stdout, nullptr, _IONBF, 0);
  int rank = 0, gen = 0;
  pid_t child = 0;
  auto* sh = probe::fork_pair<IpcExchange>(&rank, &child);
  using probe::barrier;
  const int64_t kWideBytes = 1 << 20;
  CHECK(cudaSetDevice(probe::device_for(rank)));
  char* mem = nullptr;
  CHECK(cudaMalloc(&mem, (8 << 20) + (1 << 16)));
  CHECK(cudaMemset(mem, 0, (8 << 20) + (1 << 16)));
  CHECK(cudaIpcGetMemHandle(&sh->extra.handle[rank], mem));
  barrier(sh, rank, gen);
  char* peer = nullptr;
  CHECK(cudaIpcOpenMemHandle(reinterpret_cast<void**>(&peer), sh->extra.handle[1 - rank], cudaIpcMemLazyEnablePeerAccess));
  auto carve = [](char* m, Args& a, WideArgs& w) {
    a.counter = reinterpret_cast<uint64_t*>(m);
    a.own_flag = reinterpret_cast<uint64_t*>(m + 256);
    a.input = reinterpret_cast<const uint64_t*>(m + 4096);
    a.output = reinterpret_cast<uint64_t*>(m + 8192);
    a.own_lines = reinterpret_cast<uint4*>(m + 16384);
    a.own_done = reinterpret_cast<uint64_t*>(m + 1024);
    w.counter = reinterpret_cast<uint64_t*>(m + 512);
    w.input = m + (1 << 16);
    w.output = m + (1 << 16) + (1 << 20);
    w.own_lines = m + (1 << 16) + (2 << 20);
    w.bytes = 1 << 20;
  };
  Args a{}, pa{};
  WideArgs w{}, pw{};
  carve(mem, a, w);
  carve(peer, pa, pw);
  a.peer_flag = pa.own_flag;
  a.peer_lines = pa.own_lines;
  a.peer_done = pa.own_done;
  w.peer_lines = pw.own_lines;
  std::vector<uint16_t> in(kWideBytes / 2);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<uint16_t>(0x3f80 + (i * 7 + rank) % 13);
  CHECK(cudaMemcpy(const_cast<char*>(w.input), in.data(), kWideBytes, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(const_cast<uint64_t*>(a.input), in.data(), 1024, cudaMemcpyHostToDevice));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  constexpr int kReps = 30;
  struct Case {
    const char* name;
    Variant v;
    int pdl;
    int blocks;
    int done_mode;
    int code_fmas = 0, code_unrolled = 0;
  };
  const Case cases[] = {{"empty+pdl", kEmpty, 1, 1, 0},       {"ping+pdl", kPing, 1, 1, 0},
                        {"line1k+pdl", kLine, 1, 1, 0},       {"line1k", kLine, 0, 1, 0},
                        {"line1k+pdl+param", kLineParam, 1, 1, 0}, {"line1k+pdl+done", kLine, 1, 1, 1},
                        {"line1k+pdl+done_nowait", kLine, 1, 1, 2}, {"line1k+pdl+done_early", kLine, 1, 1, 3},
                        {"line1k+pdl+code4k", kLine, 1, 1, 0, 256, 1}, {"line1k+pdl+loop4k", kLine, 1, 1, 0, 256, 0},
                        {"line1k+pdl+code16k", kLine, 1, 1, 0, 1024, 1}, {"line1k+pdl+loop16k", kLine, 1, 1, 0, 1024, 0},
                        {"wide1m+pdl/128", kWide, 1, 128, 0}};
  if (rank == 0)
    std::printf("# nvlink_floor procs: 2 processes (CUDA IPC), %d kernels per graph, time per kernel (us), median of "
                "%d queued replays, max over ranks\n%-20s %10s %10s %10s\n",
                n_ops, kReps - 1, "variant", "median", "min", "max");
  for (const Case& c : cases) {
    Args x = a;
    x.pdl = c.pdl;
    x.done_mode = c.done_mode;
    x.code_fmas = c.code_fmas;
    x.code_unrolled = c.code_unrolled;
    // Done words start at this case's sequence: earlier cases raised none (both ranks ran the same kernels).
    CHECK(cudaStreamSynchronize(s));
    barrier(sh, rank, gen);
    CHECK(cudaMemcpy(a.own_done, a.counter, 8, cudaMemcpyDeviceToDevice));
    CHECK(cudaDeviceSynchronize());
    barrier(sh, rank, gen);
    const probe::Spread t =
        probe::time_graph_pair(sh, rank, gen, s, n_ops, kReps, [&] { launch(c.v, x, w, c.blocks, s); });
    if (rank == 0) std::printf("%-20s %10.2f %10.2f %10.2f\n", c.name, t.median, t.lo, t.hi);
    barrier(sh, rank, gen);
  }
  CHECK(cudaIpcCloseMemHandle(peer));
  if (rank == 1) std::_Exit(0);
  int status = 0;
  waitpid(child, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

// Host time per eager launch (no graph): an empty kernel with 16 bytes or
// 2.9 KB of parameters (purlin's KernelParams is 2872 bytes), with and
// without the overlapped-launch attribute. Eager collectives are bound by the
// host on this VM (bench NOTE [eager timing]); this says what the launch
// itself costs there.
__global__ void empty_big_kernel(const __grid_constant__ BigParams p) { begin(p.a); }

int run_launch_cost() {
  CHECK(cudaSetDevice(0));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  std::printf("# nvlink_floor launch: host time per eager launch of an empty kernel (us), median of 9 runs of 2000\n");
  for (int big = 0; big < 2; ++big)
    for (int pdl = 0; pdl < 2; ++pdl) {
      Args a{};
      a.pdl = pdl;
      BigParams b{};
      b.a = a;
      cudaLaunchAttribute attr;
      cudaLaunchConfig_t cfg = probe::launch_config(1, 128, s, pdl != 0, &attr);
      std::vector<double> runs;
      for (int r = 0; r < 10; ++r) {
        CHECK(cudaStreamSynchronize(s));
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < 2000; ++i) {
          if (big) CHECK(cudaLaunchKernelEx(&cfg, empty_big_kernel, b));
          else CHECK(cudaLaunchKernelEx(&cfg, empty_kernel, a));
        }
        const auto t1 = std::chrono::steady_clock::now();
        if (r > 0) runs.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / 2000);
      }
      std::sort(runs.begin(), runs.end());
      std::printf("%-28s %8.2f\n", big ? (pdl ? "2872 B params + pdl" : "2872 B params") : (pdl ? "16 B params + pdl" : "16 B params"),
                  runs[runs.size() / 2]);
    }
  CHECK(cudaStreamSynchronize(s));
  return 0;
}

int main(int argc, char** argv) {
  const int n_ops = argc > 1 ? std::atoi(argv[1]) : 100;
  if (argc > 2 && std::strcmp(argv[2], "procs") == 0) return run_procs(n_ops);
  if (argc > 1 && std::strcmp(argv[1], "launch") == 0) return run_launch_cost();
  int ndev = 0;
  CHECK(cudaGetDeviceCount(&ndev));
  if (ndev < 2) {
    std::printf("needs 2 GPUs\n");
    return 0;
  }
  Args a[2] = {};
  WideArgs w[2];
  const int64_t kWideBytes = 1 << 20;
  cudaStream_t s[2];
  cudaEvent_t e0[2], e1[2];
  for (int d = 0; d < 2; ++d) {
    CHECK(cudaSetDevice(d));
    int ok = 0;
    CHECK(cudaDeviceCanAccessPeer(&ok, d, 1 - d));
    if (!ok) {
      std::printf("no peer access %d -> %d\n", d, 1 - d);
      return 1;
    }
    CHECK(cudaDeviceEnablePeerAccess(1 - d, 0));
    char* m = nullptr;
    CHECK(cudaMalloc(&m, 1 << 16));
    CHECK(cudaMemset(m, 0, 1 << 16));
    a[d].counter = reinterpret_cast<uint64_t*>(m);
    a[d].own_flag = reinterpret_cast<uint64_t*>(m + 256);
    a[d].input = reinterpret_cast<const uint64_t*>(m + 4096);
    a[d].output = reinterpret_cast<uint64_t*>(m + 8192);
    a[d].own_lines = reinterpret_cast<uint4*>(m + 16384);
    std::vector<uint16_t> in(512);
    for (int i = 0; i < 512; ++i) in[i] = static_cast<uint16_t>(0x3f80 + (i + d) % 7);  // small bf16 values
    CHECK(cudaMemcpy(m + 4096, in.data(), 1024, cudaMemcpyHostToDevice));
    char* wm = nullptr;
    CHECK(cudaMalloc(&wm, 8 << 20));
    CHECK(cudaMemset(wm, 0, 8 << 20));
    std::vector<uint16_t> win(kWideBytes / 2);
    for (size_t i = 0; i < win.size(); ++i) win[i] = static_cast<uint16_t>(0x3f80 + (i * 7 + d) % 13);
    CHECK(cudaMemcpy(wm, win.data(), kWideBytes, cudaMemcpyHostToDevice));
    w[d].counter = reinterpret_cast<uint64_t*>(m + 512);
    w[d].input = wm;
    w[d].output = wm + kWideBytes;
    w[d].own_lines = wm + 2 * kWideBytes;
    w[d].bytes = kWideBytes;
    CHECK(cudaStreamCreateWithFlags(&s[d], cudaStreamNonBlocking));
    CHECK(cudaEventCreate(&e0[d]));
    CHECK(cudaEventCreate(&e1[d]));
  }
  for (int d = 0; d < 2; ++d) {
    a[d].peer_flag = a[1 - d].own_flag;
    a[d].peer_lines = a[1 - d].own_lines;
    w[d].peer_lines = w[1 - d].own_lines;
  }
  struct Case {
    const char* name;
    Variant v;
    int pdl;
    int blocks;
  };
  const Case cases[] = {{"empty", kEmpty, 0, 1},          {"empty+pdl", kEmpty, 1, 1},
                        {"ping", kPing, 0, 1},            {"ping+pdl", kPing, 1, 1},
                        {"line1k+pdl", kLine, 1, 1},      {"line1k", kLine, 0, 1},
                        {"line1k+pdl+param", kLineParam, 1, 1}, {"wide1m+pdl/64", kWide, 1, 64},
                        {"wide1m+pdl/128", kWide, 1, 128}, {"wide1m+pdl/132", kWide, 1, 132}};
  std::printf("# nvlink_floor: %d kernels per graph, time per kernel (us), median of 30 replays, max over 2 GPUs\n",
              n_ops);
  std::printf("%-20s %10s %10s %10s\n", "variant", "median", "min", "max");
  for (const Case& c : cases) {
    cudaGraphExec_t exec[2];
    for (int d = 0; d < 2; ++d) {
      CHECK(cudaSetDevice(d));
      Args x = a[d];
      x.pdl = c.pdl;
      cudaGraph_t g;
      CHECK(cudaStreamBeginCapture(s[d], cudaStreamCaptureModeThreadLocal));
      for (int i = 0; i < n_ops; ++i) launch(c.v, x, w[d], c.blocks, s[d]);
      CHECK(cudaStreamEndCapture(s[d], &g));
      CHECK(cudaGraphInstantiate(&exec[d], g, 0));
      CHECK(cudaGraphDestroy(g));
    }
    std::vector<double> per;
    for (int rep = 0; rep < 35; ++rep) {
      for (int d = 0; d < 2; ++d) {
        CHECK(cudaSetDevice(d));
        CHECK(cudaEventRecord(e0[d], s[d]));
        CHECK(cudaGraphLaunch(exec[d], s[d]));
        CHECK(cudaEventRecord(e1[d], s[d]));
      }
      float worst = 0;
      for (int d = 0; d < 2; ++d) {
        CHECK(cudaSetDevice(d));
        CHECK(cudaEventSynchronize(e1[d]));
        float ms = 0;
        CHECK(cudaEventElapsedTime(&ms, e0[d], e1[d]));
        worst = std::max(worst, ms);
      }
      if (rep >= 5) per.push_back(1000.0 * worst / n_ops);
    }
    std::sort(per.begin(), per.end());
    std::printf("%-20s %10.2f %10.2f %10.2f\n", c.name, per[per.size() / 2], per.front(), per.back());
    for (int d = 0; d < 2; ++d) CHECK(cudaGraphExecDestroy(exec[d]));
  }
  // line1k's result: every output word is the bf16 sum of both inputs (truncated), same on both GPUs.
  std::vector<uint64_t> out0(128), out1(128);
  CHECK(cudaSetDevice(0));
  CHECK(cudaMemcpy(out0.data(), a[0].output, 1024, cudaMemcpyDeviceToHost));
  CHECK(cudaSetDevice(1));
  CHECK(cudaMemcpy(out1.data(), a[1].output, 1024, cudaMemcpyDeviceToHost));
  std::printf("line1k outputs equal on both GPUs: %s\n", out0 == out1 ? "yes" : "NO");
  // wide1m: the same sums on both GPUs, and word 0 is the sum of both inputs' word 0.
  std::vector<uint16_t> o0(kWideBytes / 2), o1(kWideBytes / 2);
  CHECK(cudaSetDevice(0));
  CHECK(cudaMemcpy(o0.data(), w[0].output, kWideBytes, cudaMemcpyDeviceToHost));
  CHECK(cudaSetDevice(1));
  CHECK(cudaMemcpy(o1.data(), w[1].output, kWideBytes, cudaMemcpyDeviceToHost));
  size_t wrong = 0;
  for (size_t i = 0; i < o0.size(); ++i) {
    auto f = [](uint16_t h) {
      const uint32_t u = static_cast<uint32_t>(h) << 16;
      float x;
      std::memcpy(&x, &u, 4);
      return x;
    };
    const float want = f(static_cast<uint16_t>(0x3f80 + (i * 7) % 13)) + f(static_cast<uint16_t>(0x3f80 + (i * 7 + 1) % 13));
    wrong += o0[i] != o1[i] || std::fabs(f(o0[i]) - want) > 0.02f * want;
  }
  std::printf("wide1m outputs: %zu of %zu elements wrong\n", wrong, o0.size());
  return 0;
}
