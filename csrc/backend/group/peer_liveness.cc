// peer_liveness.cc — see NOTE [peer liveness] in peer_liveness.h.
#include "backend/group/peer_liveness.h"

#include <poll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

namespace purlin::backend {

namespace {

#if defined(__linux__) && !defined(SYS_pidfd_open)
#define SYS_pidfd_open 434  // the same number on every Linux architecture
#endif

int open_pidfd(int pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
#else
  (void)pid;
  errno = ENOSYS;
  return -1;
#endif
}

}  // namespace

uint64_t process_start_time(int pid) {
  std::ifstream f(pid == 0 ? std::string("/proc/self/stat") : "/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!f || !std::getline(f, line)) return 0;
  const size_t close = line.rfind(')');  // the command name may hold spaces and parentheses
  if (close == std::string::npos) return 0;
  std::istringstream rest(line.substr(close + 1));
  std::string field;
  for (int i = 3; i <= 22; ++i)  // fields 3 (state) .. 22 (starttime)
    if (!(rest >> field)) return 0;
  try {
    return std::stoull(field);
  } catch (const std::exception&) {
    return 0;
  }
}

PeerLiveness::PeerLiveness(int pid, uint64_t start_time, bool use_pid) {
  if (!use_pid || pid <= 0 || start_time == 0) return;
  const int fd = open_pidfd(pid);
  if (fd < 0) return;  // ENOSYS, or no such pid here (another namespace, or already reaped): heartbeat
  // The pidfd names whoever holds the pid now: trust it only if that is the peer (its start time).
  if (process_start_time(pid) == start_time) pidfd_ = fd;
  else close(fd);
}

PeerLiveness::~PeerLiveness() {
  if (pidfd_ >= 0) close(pidfd_);
}

std::string PeerLiveness::check(uint64_t heartbeat, Clock::time_point now) {
  if (pidfd_ >= 0) {
    pollfd p{pidfd_, POLLIN, 0};
    const int n = poll(&p, 1, 0);
    if (n > 0 && (p.revents & (POLLIN | POLLHUP | POLLERR))) return "its process ended";
    return "";
  }
  if (!seen_ || heartbeat != last_heartbeat_) {
    seen_ = true;
    last_heartbeat_ = heartbeat;
    last_change_ = now;
    return "";
  }
  const auto still = now - last_change_;
  if (still < kHeartbeatStale) return "";
  char buf[96];
  std::snprintf(buf, sizeof buf, "its heartbeat stopped %.1f s ago (its pid cannot be watched from here)",
                std::chrono::duration<double>(still).count());
  return buf;
}

}  // namespace purlin::backend
