// test_pool_blocks.cc — the symmetric pool's bookkeeping (pool_blocks.h):
// first fit over live blocks, and freed blocks coming back in stream order
// (NOTE [pool streams]): at once for their own stream, for other streams
// only when their event is done; pieces cut by an allocation keep the rest
// of a freed block waiting; with local placement (NOTE [local placement]),
// freed blocks of other streams count as free and name the tokens to wait
// for. Also a random run of both placements against a byte-map model.
// No GPU needed: tokens stand for events, a set of done tokens for the GPU.
#include <cstdio>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "atom/cuda/host/pool_blocks.h"
#include "expect.h"

namespace cu = purlin::atom::cuda;
using Stream = cu::PoolBlocks::Stream;

using purlin::test::expect;

static const int kA = 1, kB = 2;
static const Stream A = &kA, B = &kB;  // two stream keys
constexpr int64_t K = 4096;

struct Gpu {
  std::set<const void*> done;
  int waits = 0;
  cu::PoolBlocks::Done fn() {
    return [this](const cu::PoolBlocks::Token& t, bool wait) {
      if (wait) {
        ++waits;
        done.insert(t.get());
      }
      return done.count(t.get()) > 0;
    };
  }
};

static cu::PoolBlocks::Token token() { return std::make_shared<int>(0); }

int main() {
  Gpu gpu;
  {  // first fit over live blocks, alignment, floor, full
    cu::PoolBlocks p(16 * K, K);
    expect(p.first_fit(0, K, A) == 0, "empty pool: offset 0");
    p.take(0, 2 * K, A);
    p.take(2 * K, K, A);
    expect(p.first_fit(0, K, A) == 3 * K, "after two live blocks");
    expect(p.first_fit(5 * K + 1, K, A) == 6 * K, "a floor rounds up to the alignment");
    expect(p.first_fit(0, 14 * K, A) == -1, "too large: full");
    expect(p.live_offset(K, 10) == K && p.live_offset(K, K + 1) == -1, "live_offset: inside one block only");
    p.drop(0);
    expect(p.first_fit(0, 2 * K, B) == 0, "dropped: free for every stream");
    expect(p.live_offset(0, 1) == -1, "a dropped block is not live");
  }
  {  // a freed block: its own stream at once, another stream after its event
    cu::PoolBlocks p(16 * K, K);
    p.take(0, 4 * K, A);
    Stream s = nullptr;
    expect(p.stream_of(0, &s) && s == A, "stream_of names the allocating stream");
    auto t = token();
    p.retire(0, t);
    expect(!p.stream_of(0, &s), "a retired block is not live");
    expect(p.live_offset(0, 1) == -1, "a retired block is not an input in the pool");
    expect(p.first_fit(0, 4 * K, A) == 0, "own stream reuses at once");
    expect(p.first_fit(0, 4 * K, B) == 4 * K, "another stream skips a block whose event is pending");
    p.reap(false, gpu.fn());
    expect(p.first_fit(0, 4 * K, B) == 4 * K, "still pending after a reap");
    gpu.done.insert(t.get());
    p.reap(false, gpu.fn());
    expect(p.first_fit(0, 4 * K, B) == 0, "free for every stream once its event is done");
    expect(!p.any_freed(), "reaped");
  }
  {  // an allocation on the own stream cuts a freed block: the uncovered ends keep waiting
    cu::PoolBlocks p(16 * K, K);
    p.take(0, 8 * K, A);
    p.retire(0, token());
    p.take(2 * K, 3 * K, A);  // [2K, 5K) live again; [0, 2K) and [5K, 8K) still freed for A only
    expect(p.first_fit(0, K, B) == 8 * K, "other stream: neither end nor the live middle");
    expect(p.first_fit(0, 2 * K, A) == 0, "own stream: the left end");
    expect(p.first_fit(2 * K, 3 * K, A) == 5 * K, "own stream: the right end");
    expect(p.first_fit(0, 3 * K, A) == 5 * K, "own stream: the left end is too small");
    p.reap(true, gpu.fn());
    expect(p.first_fit(0, 2 * K, B) == 0, "after waiting, free for every stream");
    expect(gpu.waits == 2, "a wait per freed piece (" + std::to_string(gpu.waits) + ")");
    gpu.waits = 0;
  }
  {  // a block freed during graph capture (null token) never returns to other streams
    cu::PoolBlocks p(4 * K, K);
    p.take(0, 2 * K, A);
    p.retire(0, nullptr);
    p.reap(true, gpu.fn());
    expect(p.first_fit(0, 2 * K, A) == 0, "captured: own stream");
    expect(p.first_fit(0, 2 * K, B) == 2 * K, "captured: never for another stream");
    expect(gpu.waits == 0, "a null token is not waited for");
  }
  {  // local placement: other streams' freed blocks are free at once, with their tokens to wait for
    cu::PoolBlocks p(16 * K, K);
    p.take(0, 4 * K, A);
    p.take(4 * K, 2 * K, A);
    auto t = token();
    p.retire(0, t);
    expect(p.first_fit(0, 4 * K, B) == 6 * K, "agreed placement: another stream skips the pending block");
    expect(p.first_fit(0, 4 * K, B, true) == 0, "local placement: the pending block, independent of its event");
    auto w = p.waits_for(0, 2 * K, B);
    expect(w.size() == 1 && w[0] == t, "waits_for names the freed block's token");
    expect(p.waits_for(0, 2 * K, A).empty(), "nothing to wait for on the freeing stream itself");
    expect(p.waits_for(4 * K, 2 * K, B).empty(), "nothing to wait for over a live block");
    p.take(K, 2 * K, B);  // [K, 3K) live on B; [0, K) and [3K, 4K) stay freed on A with t
    expect(p.waits_for(0, K, B).size() == 1 && p.waits_for(3 * K, K, B).size() == 1, "the cut ends keep the token");
    expect(p.first_fit(0, 2 * K, B, true) == 6 * K, "neither end holds 2K");
    p.take(8 * K, K, A);
    p.retire(8 * K, nullptr);  // freed during capture: own stream only, also for local placement
    expect(p.first_fit(6 * K, 3 * K, B, true) == 9 * K, "a null token is never free for another stream");
    expect(p.first_fit(6 * K, 3 * K, A, true) == 6 * K, "a null token is free for its own stream");
    gpu.done.insert(t.get());
    expect(gpu.waits == 0, "placement never waited");
  }
  {  // local_fit (NOTE [local placement]): waits for nothing when it can, borrows only when it must
    cu::PoolBlocks p(8 * K, K);
    p.take(0, 4 * K, A);
    p.take(4 * K, 2 * K, A);
    p.retire(0, token());
    expect(p.local_fit(2 * K, B, true) == 6 * K, "local_fit: free space above another stream's pending block");
    expect(p.local_fit(2 * K, A, true) == 0, "local_fit: the stream's own pending block, lowest first");
    expect(p.local_fit(3 * K, B, true) == 0, "local_fit: borrows another stream's block when nothing else holds it");
    expect(p.local_fit(3 * K, B, false) == -1, "local_fit: no borrowing when not allowed (capture)");
    expect(gpu.waits == 0, "local_fit never asks the GPU");
  }
  {  // random allocations and frees on two streams, both placements, against a byte-map model
    std::mt19937 rng(7);
    constexpr int64_t kUnits = 64;
    cu::PoolBlocks p(kUnits * K, K);
    // per unit: 0 free, 1 live, 2 freed on A (pending), 3 freed on B (pending)
    std::vector<int> model(kUnits, 0);
    std::vector<std::shared_ptr<void>> tok(kUnits);
    std::vector<std::pair<int64_t, int64_t>> live;  // (offset unit, units)
    std::vector<Stream> live_stream;
    int checked = 0;
    for (int step = 0; step < 20000; ++step) {
      const int what = static_cast<int>(rng() % 4);
      if (what <= 1) {  // allocate
        const Stream s = rng() % 2 ? A : B;
        const bool local = rng() % 2;  // NOTE [local placement]: borrows the other stream's pending blocks last
        const int64_t units = 1 + rng() % 6;
        // model: lowest start where every unit is free or pending on s (borrow: or pending on the other stream)
        auto model_fit = [&](bool borrow) {
          for (int64_t u = 0; u + units <= kUnits; ++u) {
            bool ok = true;
            for (int64_t v = u; v < u + units; ++v)
              ok &= model[v] == 0 || model[v] == (s == A ? 2 : 3) || (borrow && model[v] >= 2);
            if (ok) return u * K;
          }
          return int64_t{-1};
        };
        expect(p.first_fit(0, units * K, s) == model_fit(false), "random first fit step " + std::to_string(step));
        expect(p.first_fit(0, units * K, s, true) == model_fit(true),
               "random first fit, others too, step " + std::to_string(step));
        // agreed placement takes first_fit's block; local placement local_fit's (borrowing last)
        const int64_t got = local ? p.local_fit(units * K, s, true) : p.first_fit(0, units * K, s);
        const int64_t want = !local || model_fit(false) >= 0 ? model_fit(false) : model_fit(true);
        expect(got == want, "random placement step " + std::to_string(step) + (local ? " (local)" : ""));
        ++checked;
        if (got < 0) continue;
        std::set<const void*> waits, want_waits;  // the other stream's pending units under the block
        for (const auto& w : p.waits_for(got, units * K, s)) waits.insert(w.get());
        for (int64_t v = got / K; v < got / K + units; ++v)
          if (model[v] == (s == A ? 3 : 2)) want_waits.insert(tok[v].get());
        expect(waits == want_waits, "random waits_for step " + std::to_string(step));
        expect(local || waits.empty(), "agreed placement never covers another stream's pending block");
        p.take(got, units * K, s);
        for (int64_t v = got / K; v < got / K + units; ++v) model[v] = 1, tok[v].reset();
        live.push_back({got / K, units});
        live_stream.push_back(s);
      } else if (what == 2 && !live.empty()) {  // free
        const size_t i = rng() % live.size();
        const auto [u, n] = live[i];
        auto t = token();
        p.retire(u * K, t);
        for (int64_t v = u; v < u + n; ++v) model[v] = live_stream[i] == A ? 2 : 3, tok[v] = t;
        live.erase(live.begin() + static_cast<long>(i));
        live_stream.erase(live_stream.begin() + static_cast<long>(i));
      } else {  // the GPU finishes some events; a reap frees them
        for (int64_t v = 0; v < kUnits; ++v)
          if (tok[v] && rng() % 3 == 0) gpu.done.insert(tok[v].get());
        p.reap(false, gpu.fn());
        for (int64_t v = 0; v < kUnits; ++v)
          if (model[v] >= 2 && gpu.done.count(tok[v].get())) model[v] = 0, tok[v].reset();
      }
    }
    expect(checked > 5000, "random run checked " + std::to_string(checked) + " fits");
  }
  return purlin::test::test_summary("pool blocks");
}
