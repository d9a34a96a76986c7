// test_abort_signal.cc — the abort request's host half and its timing rule
// (NOTE [device abort] in atom/cuda/signal_pad.h): AbortSignal raises every
// attached word, a word attached after the raise at once, never a detached
// one, also with raise() racing attach/detach on other threads; and the
// clock rule by which wait_flag and the tagged waits look at the word
// (abort_look_due): never in a wait's first period, and at least once in
// every later period for polls up to kAbortWindowNs apart.
#include <atomic>
#include <cstdint>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "atom/cuda/signal_pad.h"
#include "backend/group/abort_signal.h"
#include "expect.h"

namespace cu = purlin::atom::cuda;
using purlin::backend::AbortSignal;
using purlin::test::expect;

static void signal_words() {
  AbortSignal sig;
  volatile uint32_t a = 0, b = 0, c = 0;
  sig.attach(&a);
  sig.attach(&b);
  sig.detach(&b);
  expect(!sig.raised() && !sig.flag()->load(), "a new signal is not raised");
  expect(a == 0 && b == 0, "attaching raises nothing before the raise");
  sig.raise();
  expect(sig.raised() && sig.flag()->load(), "raise() sets the flag host waits poll");
  expect(a == 1, "raise() sets an attached word");
  expect(b == 0, "raise() leaves a detached word alone");
  sig.attach(&c);
  expect(c == 1, "a word attached after the raise is raised at once");
  sig.raise();
  expect(a == 1 && c == 1, "a second raise() changes nothing");
}

// raise() on one thread while others attach and detach words: every word
// attached at or after the raise ends raised, and no detached word is written
// after its detach (each thread checks its own words).
static void signal_race() {
  for (int round = 0; round < 200; ++round) {
    AbortSignal sig;
    constexpr int kThreads = 4, kWords = 64;
    std::vector<std::vector<uint32_t>> words(kThreads, std::vector<uint32_t>(kWords, 0));
    std::atomic<int> bad{0};
    std::atomic<bool> go{false};
    std::vector<std::thread> ts;
    for (int t = 0; t < kThreads; ++t)
      ts.emplace_back([&, t] {
        while (!go.load()) {
        }
        for (int i = 0; i < kWords; ++i) {
          volatile uint32_t* w = &words[t][i];
          sig.attach(w);
          if (i % 2) {
            sig.detach(w);
            const uint32_t at_detach = *w;
            *w = 7;  // a write after the detach that the signal must not overwrite
            for (int k = 0; k < 50; ++k) std::this_thread::yield();
            if (*w != 7 || (at_detach != 0 && at_detach != 1)) bad.fetch_add(1);
          }
        }
      });
    go.store(true);
    sig.raise();
    for (auto& t : ts) t.join();
    for (int t = 0; t < kThreads; ++t)
      for (int i = 0; i < kWords; i += 2)
        if (words[t][i] != 1) bad.fetch_add(1);
    if (bad.load()) {
      expect(false, "raise() racing attach/detach, round " + std::to_string(round));
      return;
    }
  }
  expect(true, "raise() racing attach/detach: 200 rounds");
}

// Polls every `step` ns (with up to `jitter` ns more) for `periods` periods:
// no look in the first period, and at least one in each later period.
static void look_rule(uint64_t step, uint64_t jitter) {
  std::mt19937_64 rng(step * 31 + jitter);
  const uint64_t period = uint64_t{cu::kAbortPeriodMask} + 1;
  constexpr int kPeriods = 40;
  std::vector<int> looks(kPeriods, 0);
  for (uint64_t t = 0; t < kPeriods * period; t += step + (jitter ? rng() % (jitter + 1) : 0))
    if (cu::abort_look_due(t)) ++looks[t / period];
  bool late_ok = true;
  for (int k = 0; k < kPeriods; ++k) late_ok &= looks[k] >= 1;
  expect(looks[0] >= 1 && cu::abort_look_due(period - 1) && !cu::abort_look_due(period - cu::kAbortWindowNs - 1),
         "the look falls in the last kAbortWindowNs of each period");
  bool early = false;
  for (uint64_t t = 0; t < period - cu::kAbortWindowNs; t += step) early |= cu::abort_look_due(t);
  expect(!early, "no look before the end of a wait's first period, step " + std::to_string(step));
  expect(late_ok, "a look in every period, step " + std::to_string(step) + " jitter " + std::to_string(jitter));
}

int main() {
  signal_words();
  signal_race();
  for (uint64_t step : {32, 500, 1000, 2000, 4000}) look_rule(step, 0);
  look_rule(300, 700);   // slow, uneven polls (a loaded GPU)
  look_rule(1000, 3000);
  return purlin::test::test_summary("test_abort_signal");
}
