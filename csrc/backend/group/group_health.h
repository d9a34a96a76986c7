// group_health.h — GroupHealth: whether a group can still run collectives,
// known to every rank at once (NOTE [group health]). Torch-free.
//
// NOTE [group health]
// A group that one rank finds unusable is unusable on every rank, and a peer
// process that is gone leaves the group unusable too; without telling each
// other, the other ranks would learn it only at the group's timeout (10 min
// by default). So each shared-memory channel of a group (group_channel.h: the
// CPU engine's, the CUDA group's) carries a HealthRecord per rank, in that
// rank's own segment (CpuAtom's owner area), written by that rank only:
//   state      kHealthy once the identity below is written (before any peer
//              maps the segment), then at most one verdict: kBroken (this
//              rank found the group unusable: `reason` says how), kAborted
//              (its abort()), kLeft (it shut the group down). Release store,
//              acquire load; the first verdict stays.
//   identity   group rank, global rank, pid, and the process's start time
//              (NOTE [peer liveness] in peer_liveness.h).
//   heartbeat  bumped at every watcher pass (liveness where a pid cannot be
//              watched).
// A rank publishes only what it found itself: a host wait that timed out, a
// device timeout or call-tag mismatch in its CUDA error record, a one-sided
// argument error that could not be settled, abort(), its shutdown. What it
// learns from a peer it does not repeat: every rank watches every peer itself.
// One thread per process (health_watcher.h) visits every watched group every
// 50 ms: it bumps the heartbeats, reads the CUDA error record of each CUDA
// group (a probe: what this rank's kernels found, published without waiting
// for the rank's next call), then each peer's verdict and each peer's process.
// The first verdict a rank meets raises the group's AbortSignal with its
// reason, naming the rank (group rank, global rank where it differs, pid):
// the host waits of the group's shared-memory Atoms end within about a
// millisecond and the device waits through their abort words (NOTE [device
// abort]), each error naming that reason and what this rank was waiting for;
// every later collective of the group raises "the group is unusable after an
// earlier failure: <reason>" (group_channel.h). A collective pays for this a
// relaxed increment of its count, one relaxed load (AbortSignal::raised) and
// one acquire load of each peer's state word; nothing else runs on its path.
// A rank that shut the group down (kLeft) had finished every collective it
// took part in (the CUDA group waits for its last kernel first) and records
// how many it began (`calls`). A peer still in one of those calls can finish
// it without the rank (a rooted collective's non-root leaves once its data is
// staged: a reduce's root may still be consuming it), so a peer breaks only
// once it begins a collective beyond them: one that can never complete. Until
// then the departed rank's process may also end without breaking the group.
// Each rank counts its group's collectives (begin_call(), at the start of
// every native collective of either engine); ranks that make the same calls
// count alike.
// Not fork-aware (as shm_segment.h): only the process that made a group
// writes its records.
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
