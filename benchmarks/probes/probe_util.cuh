// probe_util.cuh — what the device probes (nvlink_floor.cu, purlin_floor.cu)
// share: error checks, two processes on one host (fork + a shared page with a
// barrier), the launch configuration with or without overlapped launch, and
// the queued timing of graph replays (bench.py's NOTE [queued graph timing]).
#pragma once

#include <cuda_runtime.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <vector>

#define PROBE_CHECK(x)                                                                          \
  do {                                                                                          \
    cudaError_t e_ = (x);                                                                       \
    if (e_ != cudaSuccess) {                                                                    \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));   \
      std::_Exit(1);                                                                            \
    }                                                                                           \
  } while (0)

namespace probe {

// The page two processes share: a sense-free barrier (generations) and
// per-rank result slots; `Extra` holds a probe's own exchange fields.
template <class Extra>
struct Shared {
  std::atomic<int> arrived[2];
  double median[2], lo[2], hi[2];
  int wrong[2];
  Extra extra;
};

// Forks once: returns this process's rank (parent 0, child 1) and the page.
template <class Extra>
Shared<Extra>* fork_pair(int* rank, pid_t* child) {
  auto* sh = static_cast<Shared<Extra>*>(
      mmap(nullptr, sizeof(Shared<Extra>), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  new (sh) Shared<Extra>{};
  *child = fork();
  *rank = *child == 0 ? 1 : 0;
  return sh;
}

// The GPU of `rank`: its own where there are two, else both ranks share GPU 0
// (run under CUDA MPS so that their kernels overlap; NOTE [shared GPU]).
inline int device_for(int rank) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1) return 0;
  return rank % n;
}

template <class Extra>
void barrier(Shared<Extra>* sh, int rank, int& gen) {
  ++gen;
  sh->arrived[rank].store(gen);
  while (sh->arrived[1 - rank].load() < gen) {
  }
}

// Busy for `ns` nanoseconds of %globaltimer: the GPU works while the host queues.
__global__ void sleep_kernel(uint64_t ns) {
  uint64_t t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < ns);
}

// A launch of `blocks` x `threads` on `s`; `pdl` adds programmatic stream
// serialization (purlin's overlapped launch). `attr` must outlive the launch call.
inline cudaLaunchConfig_t launch_config(int blocks, int threads, cudaStream_t s, bool pdl, cudaLaunchAttribute* attr) {
  attr->id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr->val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(blocks));
  cfg.blockDim = dim3(static_cast<unsigned>(threads));
  cfg.stream = s;
  cfg.attrs = attr;
  cfg.numAttrs = pdl ? 1 : 0;
  return cfg;
}

struct Spread {
  double median, lo, hi;
};

// Times `reps` replays of `exec` (each `n_ops` launches) queued behind a 4 ms
// sleep, so they run back to back; microseconds per launch, the first replay
// (the ranks' skew) dropped.
inline Spread time_queued(cudaGraphExec_t exec, cudaStream_t s, int reps, int n_ops) {
  std::vector<cudaEvent_t> ev(2 * static_cast<size_t>(reps));
  for (auto& e : ev) PROBE_CHECK(cudaEventCreate(&e));
  sleep_kernel<<<1, 1, 0, s>>>(4000000);
  for (int r = 0; r < reps; ++r) {
    PROBE_CHECK(cudaEventRecord(ev[2 * r], s));
    PROBE_CHECK(cudaGraphLaunch(exec, s));
    PROBE_CHECK(cudaEventRecord(ev[2 * r + 1], s));
  }
  PROBE_CHECK(cudaStreamSynchronize(s));
  std::vector<double> per;
  for (int r = 1; r < reps; ++r) {
    float ms = 0;
    PROBE_CHECK(cudaEventElapsedTime(&ms, ev[2 * r], ev[2 * r + 1]));
    per.push_back(1000.0 * ms / n_ops);
  }
  for (auto& e : ev) PROBE_CHECK(cudaEventDestroy(e));
  std::sort(per.begin(), per.end());
  return Spread{per[per.size() / 2], per.front(), per.back()};
}

// Publishes this rank's spread and returns the worse of both ranks' (every rank).
template <class Extra>
Spread worst_of_ranks(Shared<Extra>* sh, int rank, int& gen, Spread mine) {
  sh->median[rank] = mine.median;
  sh->lo[rank] = mine.lo;
  sh->hi[rank] = mine.hi;
  barrier(sh, rank, gen);
  Spread w{std::max(sh->median[0], sh->median[1]), std::max(sh->lo[0], sh->lo[1]), std::max(sh->hi[0], sh->hi[1])};
  barrier(sh, rank, gen);
  return w;
}

// Both ranks: captures `n_ops` calls of launch_one() into a graph, replays
// it 5 times (warm-up), then times `reps` queued replays; the worse rank's
// spread, on every rank.
template <class Extra, class Launch>
Spread time_graph_pair(Shared<Extra>* sh, int rank, int& gen, cudaStream_t s, int n_ops, int reps, Launch launch_one) {
  cudaGraph_t g;
  cudaGraphExec_t exec;
  PROBE_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < n_ops; ++i) launch_one();
  PROBE_CHECK(cudaStreamEndCapture(s, &g));
  PROBE_CHECK(cudaGraphInstantiate(&exec, g, 0));
  PROBE_CHECK(cudaGraphDestroy(g));
  barrier(sh, rank, gen);
  for (int i = 0; i < 5; ++i) PROBE_CHECK(cudaGraphLaunch(exec, s));
  PROBE_CHECK(cudaStreamSynchronize(s));
  barrier(sh, rank, gen);
  const Spread t = worst_of_ranks(sh, rank, gen, time_queued(exec, s, reps, n_ops));
  PROBE_CHECK(cudaGraphExecDestroy(exec));
  return t;
}

}  // namespace probe
