// ce_watchdog.h — bounds the waits of the copy-engine Atom (ce_atom.h).
//
// NOTE [copy-engine watchdog] cuStreamWaitValue64 has no timeout: a stream
//   whose peer never signals would wait forever, and so would every host call
//   that synchronises with it. So a host thread watches each copy-engine
//   collective in flight: before every wait the stream writes the wait's id
//   into a host-mapped progress word; a collective whose completion event is
//   not reached and whose progress word has not moved for the group timeout
//   (counted from its first wait) times out: the watchdog fills the ErrorRecord,
//   marks the pad broken, then releases the stream by writing kReleased into
//   every ce_flag word of this rank's pad, so every pending and later wait
//   passes and the process never hangs; the group is unusable from then on
//   (the engine raises at its next collective). An abort request fires the
//   same way. The destructor drains every collective in flight (complete or
//   timed out); a stream stuck even after its release is abandoned, its few
//   bytes of pinned memory leaked, never freed under it.
//   Details: docs/CUDA_DATAPATH.md, "Copy-engine watchdog".
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <cuda_runtime.h>

#include "atom/cuda/signal_pad.h"

namespace purlin::atom::cuda {

// ErrorRecord::block of a copy-engine timeout (kernel records name a block >= 0).
constexpr int32_t kCopyEngineBlock = -1;

const char* ce_flag_name(int kind);  // "Arrive", "Staged", "Consumed", "Leave"

// The RuntimeError text of a copy-engine record (e.block == kCopyEngineBlock): a timeout, or an abort.
std::string describe_copy_engine_timeout(const ErrorRecord& e, int64_t timeout_ms);

// One wait the stream was given, for the error record.
struct CeWait {
  int32_t peer = -1;
  int32_t kind = 0;          // CeFlag
  uint64_t value = 0;        // absolute flag value awaited
  uint64_t base = 0;         // epoch the value is relative to (0 for Arrive/Leave)
  const char* phase = "?";   // static string
};

// One copy-engine collective in flight.
struct CeWatch {
  const char* op_name = "?";  // static string
  uint64_t timeout_ns = 0;
  uint64_t first_wait = 0;    // progress id of waits[0]
  std::vector<CeWait> waits;
};

class CeWatchdog {
 public:
  static constexpr uint64_t kReleased = 1ull << 62;  // > any epoch; GEQ compares int64(*addr - value)

  // `self` is this rank's symmetric buffer (pad at 0), `err_host` its
  // host-mapped error record. Starts the thread; throws std::runtime_error.
  CeWatchdog(int device, int rank, void* self, const PadLayout& layout, ErrorRecord* err_host);
  ~CeWatchdog();
  CeWatchdog(const CeWatchdog&) = delete;
  CeWatchdog& operator=(const CeWatchdog&) = delete;

  // Device address of the progress word (host-mapped) the stream writes wait ids to.
  uint64_t* progress_device() const { return progress_dev_; }
  // Watches `w`, whose end is the current tail of `stream` (an event is
  // recorded there). Throws std::runtime_error if the event cannot be recorded.
  void watch(cudaStream_t stream, CeWatch w);
  // True once a timeout was handled (the group is broken).
  bool fired() const;

 private:
  using Clock = std::chrono::steady_clock;
  struct Entry {
    CeWatch w;
    cudaEvent_t done = nullptr;
    uint64_t seen = ~0ull;      // last progress value observed
    Clock::time_point since{};  // when `seen` last changed
    bool started = false;       // the stream reached w.first_wait
  };

  void run();
  void fire(const Entry& e, uint64_t progress, Clock::time_point now, uint32_t status);  // with mu_ held
  void release();  // enqueue the writes of broken and kReleased

  int device_, rank_;
  uint64_t* pad_ = nullptr;             // this rank's pad (device)
  PadLayout layout_;
  ErrorRecord* err_;
  uint64_t* host_ = nullptr;            // pinned: [0] progress, [1] 1, [2..] kReleased x kCeFlags*W
  uint64_t* progress_dev_ = nullptr;
  cudaStream_t release_ = nullptr;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Entry> queue_;
  std::vector<cudaEvent_t> free_events_;
  bool stop_ = false;
  bool fired_ = false;                  // a timeout was handled (first one only is recorded)
  Clock::time_point fired_at_{}, released_at_{};
  bool abandoned_ = false;
  Clock::time_point stop_at_{};
  std::thread thread_;
};

}  // namespace purlin::atom::cuda
