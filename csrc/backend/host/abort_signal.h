// abort_signal.h — a group's abort request, as the host waits and the device
// waits read it (NOTE [shutdown and abort] in group_lifecycle.cc).
//
// The host waits of the shared-memory Atoms poll flag() (CpuAtom's abort
// flag). Device waits cannot read a std::atomic in pageable memory, so a
// CUDA group attaches a word of host-mapped memory its kernels and its
// copy-engine watchdog poll (ErrorRecord::abort_requested, NOTE [device
// abort] in atom/cuda/signal_pad.h); raise() sets the flag, then every
// attached word. The mutex only guards the list of words: raise() never waits
// for anything else, and a word is detached before its memory is freed.
// Header-only, no torch headers.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

namespace purlin::backend {

class AbortSignal {
 public:
  // The flag host waits poll; it lives as long as the signal.
  const std::atomic<bool>* flag() const { return &raised_; }
  bool raised() const { return raised_.load(std::memory_order_relaxed); }

  // abort(): from any thread, at any time, more than once.
  void raise() {
    raised_.store(true, std::memory_order_relaxed);  // the waits re-check it at each clock read
    std::lock_guard<std::mutex> g(mu_);
    for (volatile uint32_t* w : words_) store_release(w);
  }

  // `word`: host memory a device polls (host-mapped); raised at once if the signal already was.
  void attach(volatile uint32_t* word) {
    std::lock_guard<std::mutex> g(mu_);
    words_.push_back(word);
    if (raised()) store_release(word);
  }

  // Before `word`'s memory is freed.
  void detach(volatile uint32_t* word) {
    std::lock_guard<std::mutex> g(mu_);
    words_.erase(std::remove(words_.begin(), words_.end(), word), words_.end());
  }

 private:
  // Release: a device that sees the word also sees what this thread wrote before raising it.
  static void store_release(volatile uint32_t* w) {
    std::atomic_thread_fence(std::memory_order_release);
    *w = 1;
  }

  std::atomic<bool> raised_{false};
  std::mutex mu_;
  std::vector<volatile uint32_t*> words_;
};

}  // namespace purlin::backend
