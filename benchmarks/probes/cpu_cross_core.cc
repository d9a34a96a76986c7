// cpu_cross_core.cc — the floor under a CPU all_reduce between two processes
// of one host, without torch or purlin: what the bytes cost when they cross
// cores. Two processes (fork) share one anonymous mapping of two workspaces
// and a signal pad; each times, for every size N:
//   copies      2.5 copies of N bytes within its own memory: the traffic of
//               a staged all_reduce at one core's copy speed (the bench's
//               NOTE [machine limit], without torch's per-call cost)
//   one-shot    the staged one-shot all_reduce written by hand: copy the
//               input into its own workspace, raise a flag, wait for the
//               peer's, add its input and the peer's staged copy into the
//               output (the ack that lets the peer stage again is outside
//               the timed part, as purlin's arrival of the next call is)
//   cross read  only the copy of the peer's freshly staged N bytes into
//               local memory (the part a core cannot do from its own cache)
// Median of `iters` rounds per cell, rank 0's clock, both ranks spinning on
// their flags (no yields). Given torch's per-call cost F in us (the bench's
// `limit` at 4K, or the op on torch's `fake` backend), the last column is
// (F + one-shot) / (F + copies): the bench's /limit that this protocol
// would read, a floor for any staged one-shot (docs/PERFORMANCE.md, "CPU").
//
//   g++ -std=c++17 -O3 -march=native -o /tmp/cpu_cross_core benchmarks/probes/cpu_cross_core.cc
//   /tmp/cpu_cross_core [iters, default 2000] [F us, default 7]
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

struct Pad {  // flag[r][k]: raised by the peer of r; one 64-byte line each
  struct alignas(64) Line {
    std::atomic<uint64_t> v{0};
  };
  Line flag[2][4];
};

void add(float* __restrict out, const float* __restrict a, const float* __restrict b, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

struct Rank {
  int r;
  Pad* pad;
  // NOTE: release store into the peer's line, acquire loads of our own (the
  // same ordering as purlin's NOTE [cpu signal pad ordering]).
  void signal(int k, uint64_t v) { pad->flag[1 - r][k].v.store(v, std::memory_order_release); }
  void wait(int k, uint64_t v) {
    while (pad->flag[r][k].v.load(std::memory_order_acquire) < v) __builtin_ia32_pause();
  }
};

double median(std::vector<double> t) {
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int iters = argc > 1 ? std::atoi(argv[1]) : 2000;
  const double torch_us = argc > 2 ? std::atof(argv[2]) : 7.0;
  const size_t sizes[] = {4096, 16384, 65536, 262144, 1 << 20, 4 << 20, 16 << 20};
  const size_t max_bytes = 16 << 20;
  void* shared = mmap(nullptr, sizeof(Pad) + 2 * max_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (shared == MAP_FAILED) return 1;
  Pad* pad = new (shared) Pad();
  float* ws = reinterpret_cast<float*>(static_cast<char*>(shared) + sizeof(Pad));
  std::memset(ws, 0, 2 * max_bytes);
  const pid_t child = fork();
  Rank me{child == 0 ? 1 : 0, pad};
  uint64_t step = 0;
  if (me.r == 0)
    std::printf("%10s %12s %12s %12s %10s %14s\n", "size(B)", "copies(us)", "one-shot(us)", "cross(us)", "ratio",
                "limit ratio");
  for (size_t bytes : sizes) {
    const size_t n = bytes / sizeof(float), max_n = max_bytes / sizeof(float);
    std::vector<float> in(n, 1.0f + me.r), out(n), scratch(n);
    float* mine = ws + me.r * max_n;
    float* peer = ws + (1 - me.r) * max_n;
    const int rounds = bytes >= (4u << 20) ? std::max(20, iters / 10) : iters;
    std::vector<double> copies, one_shot, cross;
    for (int it = 0; it < rounds; ++it) {
      const uint64_t v = ++step;
      me.signal(0, v);  // both start together; the peer is done with the last round
      me.wait(0, v);
      Clock::time_point t0 = Clock::now();
      std::memcpy(scratch.data(), in.data(), bytes);
      std::memcpy(out.data(), scratch.data(), bytes);
      std::memcpy(scratch.data(), out.data(), bytes / 2);
      copies.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
      me.signal(1, v);
      me.wait(1, v);
      t0 = Clock::now();
      std::memcpy(mine, in.data(), bytes);
      me.signal(2, v);
      me.wait(2, v);
      add(out.data(), in.data(), peer, n);
      one_shot.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
      me.signal(3, v);  // ack: the peer may stage again
      me.wait(3, v);
      if (out[0] != 3.0f || out[n - 1] != 3.0f) {
        std::fprintf(stderr, "rank %d: wrong sum %f\n", me.r, out[0]);
        return 1;
      }
      me.signal(0, ++step);  // cross read: stage, then time only the copy of the peer's bytes
      me.wait(0, step);
      std::memcpy(mine, in.data(), bytes);
      me.signal(2, step);
      me.wait(2, step);
      t0 = Clock::now();
      std::memcpy(scratch.data(), peer, bytes);
      cross.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
      me.signal(3, step);
      me.wait(3, step);
    }
    if (me.r == 0)
      std::printf("%10zu %12.2f %12.2f %12.2f %10.2f %14.2f\n", bytes, median(copies), median(one_shot), median(cross),
                  median(one_shot) / median(copies), (torch_us + median(one_shot)) / (torch_us + median(copies)));
  }
  if (me.r == 0) waitpid(child, nullptr, 0);
  return 0;
}
