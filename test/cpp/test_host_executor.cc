// test_host_executor.cc — snac::execute (executor.h) on plans that name
// other ranks' buffers: zero-copy plans (read_peer_inputs, NOTE [zero-copy])
// and peer-output plans (write_peer_outputs, NOTE [peer outputs]), as the
// copy-engine Atom runs them (NOTE [copy-engine zero-copy], ce_atom.h).
// W ranks are threads of one process sharing their buffers; a ThreadAtom
// copies with memcpy and carries flags in atomics (release / acquire), so
// an address resolved to the wrong rank's buffer shows up as a wrong output.
// Also: such a plan without the peer tables is refused, never run on this
// rank's own buffers.
// Build: g++ -std=c++17 -pthread -Icsrc csrc/snac/{planner,matched_waits,spec,
//        collectives,executor}.cc csrc/atom/atom.cc csrc/common/types.cc this.cc
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "atom/atom.h"
#include "snac/collectives.h"
#include "snac/executor.h"
#include "snac/plan.h"
#include "expect.h"

using namespace purlin;

namespace {

void expect(bool ok, const std::string& what) { test::expect(ok, what, /*verbose=*/true); }

// Flags and workspaces of W ranks in one process.
struct Shared {
  int world;
  std::vector<std::vector<std::byte>> workspaces;
  std::unique_ptr<std::atomic<uint64_t>[]> flags;  // [to][kind][from]
  Shared(int w, size_t ws_bytes) : world(w), workspaces(w, std::vector<std::byte>(ws_bytes)) {
    flags.reset(new std::atomic<uint64_t>[static_cast<size_t>(w) * 3 * w]);
    for (size_t i = 0; i < static_cast<size_t>(w) * 3 * w; ++i) flags[i].store(0);
  }
  std::atomic<uint64_t>& flag(int to, atom::FlagKind k, int from) {
    return flags[(static_cast<size_t>(to) * 3 + static_cast<size_t>(k)) * world + from];
  }
};

class ThreadAtom final : public atom::HostAtom {
 public:
  ThreadAtom(Shared* s, int rank) : s_(s), rank_(rank) {}
  int rank() const override { return rank_; }
  int world() const override { return s_->world; }
  std::byte* workspace(int r) override { return s_->workspaces[r].data(); }
  size_t workspace_bytes() const override { return s_->workspaces[0].size(); }
  std::byte* meta(int, int) override { return nullptr; }
  size_t meta_bytes() const override { return 0; }
  void copy(void* dst, const void* src, size_t bytes) override { std::memmove(dst, src, bytes); }
  void reduce(void*, const void* const*, const double*, int, int64_t, DType, RedOp) override {
    throw std::logic_error("copy plans only");
  }
  void signal(int peer, atom::FlagKind k, uint64_t v) override {
    s_->flag(peer, k, rank_).store(v, std::memory_order_release);  // RELEASE: the copies before it
  }
  void wait(int peer, atom::FlagKind k, uint64_t v, const atom::WaitSite& site) override {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (s_->flag(rank_, k, peer).load(std::memory_order_acquire) < v) {  // ACQUIRE: the peer's copies
      if (std::chrono::steady_clock::now() > until)
        throw atom::TimeoutError(std::string("timed out in ") + site.phase);
      std::this_thread::yield();
    }
  }

 private:
  Shared* s_;
  int rank_;
};

snac::PlanOptions options(bool peer_inputs, bool peer_outputs) {
  snac::PlanOptions o;
  o.slot_elems = 1 << 16;
  o.read_peer_inputs = peer_inputs;
  o.write_peer_outputs = peer_outputs;
  return o;
}

// Runs every rank's plan in its own thread; rank r's buffers and the tables
// come from the callbacks. Returns "" or the first error.
std::string run(const snac::Spec& spec, const snac::PlanOptions& opt, int W, const std::vector<void*>& in,
                const std::vector<void*>& out, bool tables) {
  Shared sh(W, size_t{1} << 20);
  std::vector<std::string> errors(W);
  std::vector<std::thread> threads;
  for (int r = 0; r < W; ++r) {
    threads.emplace_back([&, r] {
      try {
        ThreadAtom a(&sh, r);
        const snac::Plan plan = snac::make_plan(spec, r, opt);
        snac::ExecArgs args;
        args.input = in[r];
        args.output = out[r];
        args.dtype = DType::Int32;
        args.site.op = spec.name.c_str();
        if (tables) {
          args.peer_inputs = in.data();
          args.peer_outputs = out.data();
        }
        snac::execute(plan, a, args);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& e : errors)
    if (!e.empty()) return e;
  return "";
}

std::vector<int32_t> fresh(std::mt19937& rng, size_t n) {
  std::vector<int32_t> v(n);
  for (auto& x : v) x = static_cast<int32_t>(rng());
  return v;
}

}  // namespace

int main() {
  std::mt19937 rng(11);
  for (int W : {2, 3, 4}) {
    const std::string w = " W=" + std::to_string(W);
    const int64_t n = 1000 + W;
    // all_gather, inputs and outputs apart: pulls (zero-copy) and writes (peer outputs).
    for (int mode = 0; mode < 2; ++mode) {
      std::vector<std::vector<int32_t>> ins, outs;
      std::vector<void*> in, out;
      for (int r = 0; r < W; ++r) ins.push_back(fresh(rng, n)), outs.push_back(fresh(rng, W * n));
      for (int r = 0; r < W; ++r) in.push_back(ins[r].data()), out.push_back(outs[r].data());
      const std::string err = run(snac::all_gather(W, n), options(mode == 0, mode == 1), W, in, out, true);
      bool ok = err.empty();
      for (int r = 0; r < W && ok; ++r)
        for (int q = 0; q < W && ok; ++q) ok = std::memcmp(&outs[r][q * n], ins[q].data(), n * 4) == 0;
      expect(ok, std::string("all_gather ") + (mode == 0 ? "reading peer inputs" : "writing peer outputs") + w +
                     (err.empty() ? "" : ": " + err));
    }
    {  // all_gather in place: rank q's input is slot q of its output (what the copy engine pulls from)
      std::vector<std::vector<int32_t>> outs;
      std::vector<void*> in, out;
      for (int r = 0; r < W; ++r) outs.push_back(fresh(rng, W * n));
      std::vector<std::vector<int32_t>> want(W, std::vector<int32_t>(W * n));
      for (int r = 0; r < W; ++r)
        for (int q = 0; q < W; ++q) std::memcpy(&want[r][q * n], &outs[q][q * n], n * 4);
      for (int r = 0; r < W; ++r) in.push_back(&outs[r][r * n]), out.push_back(outs[r].data());
      const std::string err = run(snac::all_gather(W, n), options(true, false), W, in, out, true);
      bool ok = err.empty();
      for (int r = 0; r < W && ok; ++r) ok = outs[r] == want[r];
      expect(ok, "all_gather in place reading peer inputs" + w + (err.empty() ? "" : ": " + err));
    }
    {  // broadcast in place from the last rank
      std::vector<std::vector<int32_t>> bufs;
      std::vector<void*> io;
      for (int r = 0; r < W; ++r) bufs.push_back(fresh(rng, n));
      const std::vector<int32_t> want = bufs[W - 1];
      for (int r = 0; r < W; ++r) io.push_back(bufs[r].data());
      const std::string err = run(snac::broadcast(W, n, W - 1), options(true, false), W, io, io, true);
      bool ok = err.empty();
      for (int r = 0; r < W && ok; ++r) ok = bufs[r] == want;
      expect(ok, "broadcast in place reading the root's input" + w + (err.empty() ? "" : ": " + err));
    }
    {  // all_to_all, uneven splits
      std::vector<std::vector<int64_t>> splits(W, std::vector<int64_t>(W));
      for (int s = 0; s < W; ++s)
        for (int d = 0; d < W; ++d) splits[s][d] = 1 + 7 * s + 3 * d;
      std::vector<std::vector<int32_t>> ins, outs;
      std::vector<void*> in, out;
      for (int r = 0; r < W; ++r) {
        int64_t send = 0, recv = 0;
        for (int q = 0; q < W; ++q) send += splits[r][q], recv += splits[q][r];
        ins.push_back(fresh(rng, send));
        outs.push_back(fresh(rng, recv));
      }
      for (int r = 0; r < W; ++r) in.push_back(ins[r].data()), out.push_back(outs[r].data());
      const std::string err = run(snac::all_to_all(W, splits), options(true, false), W, in, out, true);
      bool ok = err.empty();
      for (int d = 0; d < W && ok; ++d) {
        int64_t at = 0;
        for (int s = 0; s < W && ok; ++s) {
          int64_t from = 0;
          for (int q = 0; q < d; ++q) from += splits[s][q];
          ok = std::memcmp(&outs[d][at], &ins[s][from], splits[s][d] * 4) == 0;
          at += splits[s][d];
        }
      }
      expect(ok, "all_to_all reading peer inputs" + w + (err.empty() ? "" : ": " + err));
    }
  }
  {  // a plan that names a peer's buffer, run without the tables: refused on every rank, outputs untouched
    const int W = 2;
    const int64_t n = 64;
    std::vector<std::vector<int32_t>> ins, outs;
    std::vector<void*> in, out;
    for (int r = 0; r < W; ++r) ins.push_back(fresh(rng, n)), outs.push_back(fresh(rng, W * n));
    const auto before = outs;
    for (int r = 0; r < W; ++r) in.push_back(ins[r].data()), out.push_back(outs[r].data());
    const std::string err = run(snac::all_gather(W, n), options(true, false), W, in, out, false);
    expect(err.find("no peer table") != std::string::npos, "zero-copy plan without peer tables refused: " + err);
    bool untouched = true;
    for (int r = 0; r < W; ++r)
      for (int q = 0; q < W; ++q)
        if (q != r) untouched &= std::memcmp(&outs[r][q * n], &before[r][q * n], n * 4) == 0;
    expect(untouched, "nothing copied from the wrong buffer");
  }
  return purlin::test::test_summary("host executor");
}
