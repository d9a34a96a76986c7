// abort_signal.h — a group's abort request, or the break of a group that one
// of its ranks found unusable, as the host waits and the device waits read it
// (NOTE [shutdown and abort] in group_lifecycle.cc, NOTE [group health] in
// group_health.h).
//
// The host waits of the shared-memory Atoms poll flag() (CpuAtom's abort
// flag). Device waits cannot read a std::atomic in pageable memory, so a
// CUDA group attaches a word of host-mapped memory its kernels and its
// copy-engine watchdog poll (ErrorRecord::abort_requested, NOTE [device
// abort] in atom/cuda/signal_pad.h); raise() sets the flag, then every
// attached word. The mutex only guards the list of words: raise() never waits
// for anything else, and a word is detached before its memory is freed.
// raise(why) also records why the group broke ("" for abort()): the first
// raise's reason stays, and the waits that end name it.
// Header-only, no torch headers.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace purlin::backend {

class AbortSignal {
 public:
  // The flag host waits poll; it lives as long as the signal.
  const std::atomic<bool>* flag() const { return &raised_; }
  // One relaxed load: what every collective of the group pays (NOTE [group health]).
  bool raised() const { return raised_.load(std::memory_order_relaxed); }

  // abort() (why = ""), or the break of the group (why: what broke it). From
  // any thread, at any time, more than once; the first raise's reason stays.
  void raise(const std::string& why = "") {
    reason_->set_once(why);  // before the flag: a wait that sees the flag finds the reason
    raised_.store(true, std::memory_order_relaxed);  // the waits re-check it at each clock read
    std::lock_guard<std::mutex> g(mu_);
    for (volatile uint32_t* w : words_) store_release(w);
  }

  // "" (not raised, or raised by abort()) or why the group broke.
  std::string reason() const { return reason_->get(); }
  // The same, readable after the signal is gone (a CUDA Work may outlive its group).
  std::function<std::string()> reason_source() const {
    std::shared_ptr<const Reason> r = reason_;
    return [r]() { return r->get(); };
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
  class Reason {
   public:
    void set_once(const std::string& why) {
      std::lock_guard<std::mutex> g(mu_);
      if (set_) return;
      set_ = true;
      text_ = why;
    }
    std::string get() const {
      std::lock_guard<std::mutex> g(mu_);
      return text_;
    }

   private:
    mutable std::mutex mu_;
    bool set_ = false;
    std::string text_;
  };

  // Release: a device that sees the word also sees what this thread wrote before raising it.
  static void store_release(volatile uint32_t* w) {
    std::atomic_thread_fence(std::memory_order_release);
    *w = 1;
  }

  std::atomic<bool> raised_{false};
  std::shared_ptr<Reason> reason_ = std::make_shared<Reason>();
  std::mutex mu_;
  std::vector<volatile uint32_t*> words_;
};

}  // namespace purlin::backend
