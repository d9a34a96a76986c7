// health_watcher.h — the one thread per process that watches the health of
// every group it belongs to (NOTE [group health] in group_health.h).
// Torch-free.
//
// NOTE [health watcher] The thread starts with the first watched group and is
// joined when the last one stops being watched (a group's shutdown or
// destruction: GroupHealth::unwatch, ~GroupHealth), so a process with no
// purlin group has none. Every kPeriod it calls GroupHealth::check() on each
// group (heartbeats, probes, peers' verdicts and processes): a few loads and
// one poll() per peer, off every collective's path. It never takes the GIL
// and holds nothing a collective waits for; a process that exits without
// destroying its groups does not wait for it (its state is never destroyed,
// the thread ends with the process). remove() returns once no pass reads the
// group. In a child forked while it runs, the watcher starts empty (a fork
// handler resets its state; the child's groups are not watched).
#pragma once

#include <chrono>

namespace purlin::backend {

class GroupHealth;

class HealthWatcher {
 public:
  static constexpr std::chrono::milliseconds kPeriod{50};
  static void add(GroupHealth* g);
  // After it returns, no pass calls g; joins the thread with the last group. Idempotent.
  static void remove(GroupHealth* g);
};

}  // namespace purlin::backend
