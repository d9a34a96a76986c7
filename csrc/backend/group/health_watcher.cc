// health_watcher.cc — see NOTE [health watcher] in health_watcher.h.
#include "backend/group/health_watcher.h"

#include <pthread.h>

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "backend/group/group_health.h"

namespace purlin::backend {

namespace {

struct Watcher {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<GroupHealth*> groups;
  std::thread* thread = nullptr;  // the running pass loop, or null
  uint64_t generation = 0;        // a loop runs while it is the one it started with
};

Watcher& watcher();

void fork_prepare() { watcher().mu.lock(); }  // no pass is half done in the child
void fork_parent() { watcher().mu.unlock(); }
void fork_child() {
  Watcher& w = watcher();
  w.groups.clear();
  w.thread = nullptr;  // that thread does not exist here (its object is left alone)
  ++w.generation;
  w.mu.unlock();
}

Watcher& watcher() {
  static Watcher* w = [] {  // never destroyed: exit neither joins nor destroys the thread
    auto* made = new Watcher;
    pthread_atfork(fork_prepare, fork_parent, fork_child);
    return made;
  }();
  return *w;
}

void run(uint64_t generation) {
  pthread_setname_np(pthread_self(), "purlin-health");
  Watcher& w = watcher();
  std::unique_lock<std::mutex> lk(w.mu);
  while (w.generation == generation) {
    const auto now = std::chrono::steady_clock::now();
    for (GroupHealth* g : w.groups) g->check(now);
    w.cv.wait_for(lk, HealthWatcher::kPeriod, [&] { return w.generation != generation; });
  }
}

}  // namespace

void HealthWatcher::add(GroupHealth* g) {
  Watcher& w = watcher();
  std::lock_guard<std::mutex> lk(w.mu);
  if (std::find(w.groups.begin(), w.groups.end(), g) != w.groups.end()) return;
  w.groups.push_back(g);
  if (!w.thread) w.thread = new std::thread(run, ++w.generation);
}

void HealthWatcher::remove(GroupHealth* g) {
  Watcher& w = watcher();
  std::thread* done = nullptr;
  {
    std::lock_guard<std::mutex> lk(w.mu);
    auto it = std::find(w.groups.begin(), w.groups.end(), g);
    if (it == w.groups.end()) return;
    w.groups.erase(it);
    if (!w.groups.empty() || !w.thread) return;
    ++w.generation;  // that loop ends; a later add() starts another
    done = w.thread;
    w.thread = nullptr;
  }
  w.cv.notify_all();
  if (done->get_id() == std::this_thread::get_id()) done->detach();  // (never: passes do not remove)
  else done->join();
  delete done;
}

}  // namespace purlin::backend
