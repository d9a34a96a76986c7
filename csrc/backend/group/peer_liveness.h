// peer_liveness.h — whether a peer process of a group is still there, as the
// group's health watcher asks it (NOTE [group health] in group_health.h).
// Torch-free.
//
// NOTE [peer liveness] On one host a rank can watch its peers' processes:
//   by pid     A pidfd (pidfd_open, Linux 5.3+) of the peer polls readable
//              as soon as the process has ended, whether or not its parent
//              has reaped it yet (a killed process that is still a zombie
//              counts as gone), and cannot refer to another process later
//              (no pid reuse). The pid is the one the peer wrote into its
//              health record; the pidfd is trusted only if /proc/<pid>/stat
//              shows the start time the peer wrote too, so a pid from another
//              pid namespace (ranks in different containers sharing /dev/shm)
//              or a pid reused since is never watched by mistake.
//   by heartbeat  Otherwise (no pidfd_open, no /proc, another namespace): the
//              peer's watcher bumps a word in its health record at every pass
//              (~20 times a second); a word that has not moved for
//              kHeartbeatStale means the peer is gone. Slower and coarser: a
//              process stopped (SIGSTOP, a debugger) that long counts as gone.
// Nothing here runs on a collective's path: the watcher thread asks.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace purlin::backend {

// The start time of process `pid` (field 22 of /proc/<pid>/stat, clock ticks
// since boot), 0 if it cannot be read. pid 0: this process.
uint64_t process_start_time(int pid);

class PeerLiveness {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::milliseconds kHeartbeatStale{2000};

  // `pid`, `start_time`: as the peer wrote them (process_start_time(0) there).
  // `use_pid` false: heartbeat only (the tests' second mode).
  PeerLiveness(int pid, uint64_t start_time, bool use_pid = true);
  ~PeerLiveness();
  PeerLiveness(const PeerLiveness&) = delete;
  PeerLiveness& operator=(const PeerLiveness&) = delete;

  bool by_pid() const { return pidfd_ >= 0; }

  // "" while the peer is there, else why it is taken for gone ("its process
  // ended", "its heartbeat stopped 2.0 s ago"). `heartbeat`: the word in the
  // peer's record now (unused when watched by pid).
  std::string check(uint64_t heartbeat, Clock::time_point now);

 private:
  int pidfd_ = -1;
  uint64_t last_heartbeat_ = 0;
  Clock::time_point last_change_{};
  bool seen_ = false;
};

}  // namespace purlin::backend
