// group_health.h — GroupHealth: whether a group can still run collectives,
// known to every rank at once (NOTE [group health]). Torch-free.
//
// NOTE [group health]
// A group that one rank finds unusable is unusable on every rank, and a peer
// process that is gone leaves the group unusable too: without that, the other
// ranks would learn it only at the group's timeout (10 min by default). So each
// shared-memory channel of a group carries a HealthRecord per rank, written by
// that rank only: kHealthy, then at most one verdict (kBroken with a reason,
// kAborted, kLeft), plus its identity and a heartbeat. A rank publishes only
// what it found itself; every rank watches every peer itself (one thread per
// process, health_watcher.h, every 50 ms). The first verdict a rank meets raises
// the group's AbortSignal with its reason, naming the rank: the group's host and
// device waits end at once, and every later collective raises "the group is
// unusable after an earlier failure: <reason>". A collective pays one relaxed
// increment, one relaxed load and one acquire load per peer. A rank that left
// (kLeft) breaks the group for a peer only once that peer begins a collective
// beyond those the rank began (`calls`): one that can never complete.
// Not fork-aware. Details: docs/DESIGN.md, "Group health".
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend/group/abort_signal.h"
#include "backend/group/peer_liveness.h"

namespace purlin::backend {

enum HealthState : uint32_t { kHealthUnset = 0, kHealthy = 1, kBroken = 2, kAborted = 3, kLeft = 4 };

// One rank's record in a channel's shared memory (NOTE [group health]).
struct HealthRecord {
  static constexpr size_t kReasonBytes = 1984;
  std::atomic<uint32_t> state;  // HealthState; release store, acquire load
  int32_t group_rank;
  int32_t global_rank;
  int32_t pid;
  uint64_t start_time;             // process_start_time(0) of the writer
  std::atomic<uint64_t> heartbeat;  // relaxed
  uint64_t calls;                   // kLeft: the group's collectives the rank began (written before the state)
  uint32_t reason_len;
  char reason[kReasonBytes];        // kBroken: what the rank found (truncated)
};
static_assert(std::atomic<uint32_t>::is_always_lock_free && std::atomic<uint64_t>::is_always_lock_free,
              "health records are shared between processes: their atomics must be lock-free");

class GroupHealth {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr size_t kRecordBytes = 2048;  // a channel's owner area per rank
  static_assert(sizeof(HealthRecord) <= kRecordBytes);

  // `global_rank`: this process's rank in the default group (messages name it where it differs).
  GroupHealth(int rank, int world, int global_rank);
  ~GroupHealth();  // no longer watched
  GroupHealth(const GroupHealth&) = delete;
  GroupHealth& operator=(const GroupHealth&) = delete;

  // The group's abort request and broken latch (abort_signal.h), which the engines' waits read.
  AbortSignal& signal() { return signal_; }
  const AbortSignal& signal() const { return signal_; }
  int rank() const { return rank_; }
  int world() const { return world_; }
  int global_rank() const { return global_rank_; }

  // Writes this rank's identity into `record` (kRecordBytes of this rank's
  // zero-filled shared memory, before any peer maps it).
  void init_record(std::byte* record) const;
  // Watches one channel from now on: records[r] is rank r's record (this
  // rank's included). `probe` (may be empty) returns "" or what this rank
  // found without a call (the CUDA group's error record); the watcher thread
  // calls it. Returns the id unwatch() takes.
  int watch(const std::vector<std::byte*>& records, std::function<std::string()> probe = {});
  // No pass reads the channel's records after this returns. Publishes kLeft
  // unless the group already broke here.
  void unwatch(int id);

  // This rank found the group unusable: raises the signal with `why` and
  // publishes it, unless the group broke here before (the first verdict stays).
  void found_broken(const std::string& why);
  // abort(): raises the signal (reason "") at once, then publishes kAborted.
  void abort();
  // One relaxed load.
  bool broken() const { return signal_.raised(); }
  // A native collective of the group begins (either engine): its count.
  uint64_t begin_call() { return calls_.fetch_add(1, std::memory_order_relaxed) + 1; }
  // A peer's verdict (kBroken, kAborted, kLeft) in one channel's `records`
  // (by rank, as watch() took them), read on the caller's thread: raises the
  // signal with it as the watcher's next pass would, and returns true. One
  // acquire load per peer while every peer is healthy.
  bool learn_verdicts(const std::vector<std::byte*>& records);
  // Why the group broke: the reason, or the abort's text.
  std::string why() const;

  // One pass of the watcher (health_watcher.h).
  void check(Clock::time_point now);

  // "rank 1 (pid 42)" or, where the ranks differ, "group rank 1 (global rank 3, pid 42)".
  static std::string who(int rank, int global_rank, int pid);

 private:
  struct Area {
    int id;
    std::vector<HealthRecord*> records;
    std::function<std::string()> probe;
    std::vector<std::unique_ptr<PeerLiveness>> peers;  // by rank; null for this rank
  };
  HealthRecord* own(const Area& a) const { return a.records[rank_]; }
  void found_locked(const std::string& why);
  void publish_locked(uint32_t state, const std::string& why);
  static void write_verdict(HealthRecord* r, uint32_t state, const std::string& why);
  std::string verdict_of(int rank, const HealthRecord& r, uint32_t state) const;

  // Whether a peer's verdict `state` in `rec` breaks this rank now (kLeft: only
  // beyond the peer's calls).
  bool breaks_here(const HealthRecord& rec, uint32_t state) const {
    return state != kLeft || calls_.load(std::memory_order_relaxed) > rec.calls;
  }

  const int rank_, world_, global_rank_, pid_;
  std::atomic<uint64_t> calls_{0};  // begin_call(); relaxed: read by this process's watcher only
  AbortSignal signal_;
  mutable std::mutex mu_;  // areas_, the verdict; the watcher's pass holds it
  std::vector<Area> areas_;
  int next_id_ = 0;
  uint32_t verdict_ = kHealthUnset;  // what this rank published (for channels watched later)
  std::string verdict_why_;
  uint64_t beats_ = 0;
  bool watched_ = false;  // registered with the watcher thread
};

}  // namespace purlin::backend
