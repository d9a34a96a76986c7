// test_group_health.cc — the host pieces of NOTE [group health] without a
// process group: PeerLiveness (a killed peer that is still an unreaped zombie
// counts as gone; a heartbeat that stops does too, one that moves does not),
// GroupHealth pairs standing for two ranks of one group in one process (a
// verdict found on one rank reaches the other through the watcher thread,
// naming the rank, its global rank and pid; abort() and a shutdown do too;
// nothing learned is relayed; a verdict is learned at a call without the
// watcher; a probe's finding is published; a dead peer's
// process ends the group), the watcher thread's end with the last group, and
// the plan cache's bound and eviction rule (NOTE [plan caches]).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "backend/group/group_health.h"
#include "backend/group/peer_liveness.h"
#include "backend/group/plan_cache.h"
#include "expect.h"

using namespace purlin::backend;
using purlin::test::expect;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

int threads() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
    closedir(d);
  }
  return n;
}

bool eventually(const std::function<bool()>& ok, std::chrono::milliseconds within) {
  const auto end = Clock::now() + within;
  while (Clock::now() < end) {
    if (ok()) return true;
    std::this_thread::sleep_for(5ms);
  }
  return ok();
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

int sleeper() {
  const int pid = fork();
  if (pid == 0) {
    for (;;) pause();
  }
  return pid;
}

char state_of(int pid) {
  FILE* f = std::fopen(("/proc/" + std::to_string(pid) + "/stat").c_str(), "r");
  if (!f) return '?';
  char buf[512] = {0};
  const size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  const char* close = std::strrchr(buf, ')');
  return n && close ? close[2] : '?';
}

void liveness_by_pid() {
  const int child = sleeper();
  PeerLiveness p(child, process_start_time(child));
  expect(p.by_pid(), "a child of this process is watched by its pid");
  expect(p.check(0, Clock::now()).empty(), "a running peer is there");
  kill(child, SIGKILL);
  const bool gone = eventually([&] { return !p.check(0, Clock::now()).empty(); }, 1000ms);
  expect(gone, "a killed peer is gone within a second");
  expect(state_of(child) == 'Z', std::string("the killed peer is still an unreaped zombie (state ") + state_of(child) + ")");
  expect(p.check(0, Clock::now()) == "its process ended", "the reason: " + p.check(0, Clock::now()));
  waitpid(child, nullptr, 0);
  PeerLiveness wrong(getpid(), process_start_time(0) + 1);
  expect(!wrong.by_pid(), "a pid whose start time differs (another process, another namespace) is not trusted");
  PeerLiveness none(0, 0);
  expect(!none.by_pid(), "no pid: heartbeat");
}

void liveness_by_heartbeat() {
  PeerLiveness p(getpid(), process_start_time(0), /*use_pid=*/false);
  expect(!p.by_pid(), "heartbeat mode when asked");
  const auto t0 = Clock::now();
  expect(p.check(7, t0).empty(), "first look");
  expect(p.check(7, t0 + 1900ms).empty(), "a heartbeat still for less than kHeartbeatStale is there");
  expect(p.check(8, t0 + 1950ms).empty(), "a heartbeat that moved is there");
  expect(p.check(8, t0 + 3000ms).empty(), "1.05 s after it moved");
  const std::string gone = p.check(8, t0 + 4000ms);
  expect(has(gone, "heartbeat stopped 2.0"), "a heartbeat still for 2 s is gone: " + gone);
}

// Two ranks of one group, in this process: records in a buffer as the channel's owner areas.
struct Pair {
  std::vector<std::byte> buf = std::vector<std::byte>(2 * GroupHealth::kRecordBytes);
  std::unique_ptr<GroupHealth> g0 = std::make_unique<GroupHealth>(0, 2, 0);
  std::unique_ptr<GroupHealth> g1 = std::make_unique<GroupHealth>(1, 2, 5);  // a subgroup: global rank 5
  int id0 = -1, id1 = -1;
  std::vector<std::byte*> recs() { return {buf.data(), buf.data() + GroupHealth::kRecordBytes}; }
  HealthRecord* rec(int r) { return reinterpret_cast<HealthRecord*>(recs()[r]); }
  void init() {
    g0->init_record(recs()[0]);
    g1->init_record(recs()[1]);
  }
  void watch(std::function<std::string()> probe0 = {}) {
    id0 = g0->watch(recs(), std::move(probe0));
    id1 = g1->watch(recs());
  }
  void unwatch() {
    if (id0 >= 0) g0->unwatch(id0);
    if (id1 >= 0) g1->unwatch(id1);
    id0 = id1 = -1;
  }
};

void verdict_reaches_the_peer() {
  const int before = threads();
  Pair p;
  p.init();
  expect(p.rec(1)->pid == getpid() && p.rec(1)->global_rank == 5 && p.rec(1)->state.load() == kHealthy,
         "a record holds the identity and is healthy");
  p.watch();
  expect(threads() == before + 1, "one watcher thread while groups are watched");
  std::this_thread::sleep_for(200ms);
  expect(!p.g0->broken() && !p.g1->broken(), "healthy peers stay healthy");
  const uint64_t beat = p.rec(0)->heartbeat.load();
  std::this_thread::sleep_for(150ms);
  expect(p.rec(0)->heartbeat.load() > beat, "the watcher bumps the heartbeats");
  p.g0->found_broken("purlin all_reduce (seq 3) on rank 0: timed out");
  expect(p.g0->broken() && p.g0->why() == "purlin all_reduce (seq 3) on rank 0: timed out", "the finder's reason");
  expect(p.rec(0)->state.load() == kBroken, "the finding is published");
  const auto t0 = Clock::now();
  expect(eventually([&] { return p.g1->broken(); }, 1000ms), "the peer breaks within a second");
  std::printf("peer broke %.0f ms after the finding\n", std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  const std::string name = "rank 0 (pid " + std::to_string(getpid()) + ") found the group unusable: purlin all_reduce (seq 3)";
  expect(has(p.g1->why(), name), "the peer names the finder and its reason: " + p.g1->why());
  expect(p.g1->signal().reason() == p.g1->why(), "the waits read the same reason");
  p.g0->found_broken("a later finding");
  expect(has(p.g0->why(), "timed out"), "the first verdict stays");
  std::this_thread::sleep_for(100ms);
  expect(p.rec(1)->state.load() == kHealthy, "what a rank learned is not relayed");
  p.unwatch();
  expect(p.rec(1)->state.load() == kHealthy, "a broken group's shutdown publishes nothing more");
  expect(eventually([&] { return threads() == before; }, 500ms), "the watcher thread ends with the last group");
}

// A collective's start reads the peers' verdict words itself (GroupChannel::begin_call): a call made
// right after a peer's verdict raises, whether or not a watcher pass came between.
void verdict_learned_at_the_call() {
  Pair p;
  p.init();
  p.watch();
  expect(!p.g1->learn_verdicts(p.recs()) && !p.g1->broken(), "healthy peers: nothing learned");
  p.g0->found_broken("purlin all_reduce on rank 0: timed out");
  expect(p.g1->learn_verdicts(p.recs()) && p.g1->broken(), "the peer's verdict is learned at the call");
  expect(has(p.g1->why(), "rank 0 (pid " + std::to_string(getpid()) + ") found the group unusable: purlin all_reduce"),
         "naming the finder: " + p.g1->why());
  expect(p.rec(1)->state.load() == kHealthy, "what a rank learned at its call is not relayed");
  expect(!p.g0->learn_verdicts(p.recs()), "a rank's own verdict is not learned from its record");
  p.unwatch();
}

void abort_and_shutdown_reach_the_peer() {
  {
    Pair p;
    p.init();
    p.watch();
    p.g0->abort();
    expect(p.g0->broken() && p.g0->signal().reason().empty(), "abort(): raised, no reason (the waits say aborted)");
    expect(has(p.g0->why(), "the group was aborted"), "abort()'s text: " + p.g0->why());
    expect(p.rec(0)->state.load() == kAborted, "abort() is published");
    expect(eventually([&] { return p.g1->broken(); }, 1000ms), "the peer learns the abort");
    expect(has(p.g1->why(), "rank 0 (pid " + std::to_string(getpid()) + ") aborted the group"), p.g1->why());
    p.unwatch();
  }
  {
    Pair p;
    p.init();
    p.watch();
    // Rank 1 began 2 collectives and left; rank 0 is still in its first (a rooted collective's root
    // may still consume what rank 1 staged): only its third can never complete.
    p.g1->begin_call();
    p.g1->begin_call();
    p.g0->begin_call();
    p.g1->unwatch(p.id1);
    p.id1 = -1;
    expect(p.rec(1)->state.load() == kLeft && p.rec(1)->calls == 2, "a shutdown is published with its calls");
    std::this_thread::sleep_for(200ms);
    expect(!p.g0->broken() && !p.g0->learn_verdicts(p.recs()), "a peer within the leaver's calls goes on");
    p.g0->begin_call();
    std::this_thread::sleep_for(200ms);
    expect(!p.g0->broken() && !p.g0->learn_verdicts(p.recs()), "the leaver's last call is the peer's too");
    p.g0->begin_call();
    expect(p.g0->learn_verdicts(p.recs()) && p.g0->broken(), "a call beyond the leaver's breaks at once");
    expect(has(p.g0->why(), "group rank 1 (global rank 5, pid " + std::to_string(getpid()) +
                                ") shut the group down (dist.destroy_process_group, or the group was destroyed "
                                "there) after 2 collectives; this rank began collective 3"),
           p.g0->why());
    p.unwatch();
  }
  {
    Pair p;  // the watcher finds it too, without a call
    p.init();
    p.watch();
    p.g1->unwatch(p.id1);
    p.id1 = -1;
    p.g0->begin_call();
    expect(eventually([&] { return p.g0->broken(); }, 1000ms), "the peer learns the shutdown from the watcher");
    p.unwatch();
  }
}

void probe_and_late_channel() {
  Pair p;
  p.init();
  std::atomic<bool> fire{false};
  p.watch([&]() { return fire.load() ? std::string("purlin all_reduce on rank 0: timed out on the device") : ""; });
  std::this_thread::sleep_for(120ms);
  expect(!p.g0->broken(), "a quiet probe breaks nothing");
  fire = true;
  expect(eventually([&] { return p.g1->broken(); }, 1000ms), "a probe's finding is published and reaches the peer");
  expect(p.rec(0)->state.load() == kBroken && has(p.g0->why(), "on the device"), p.g0->why());
  // A channel watched after the break carries the verdict at once.
  std::vector<std::byte> more(2 * GroupHealth::kRecordBytes);
  p.g0->init_record(more.data());
  const int late = p.g0->watch({more.data(), more.data() + GroupHealth::kRecordBytes});
  expect(reinterpret_cast<HealthRecord*>(more.data())->state.load() == kBroken, "a later channel gets the verdict");
  p.g0->unwatch(late);
  p.unwatch();
}

void dead_peer_breaks_the_group() {
  Pair p;
  p.init();
  const int child = sleeper();
  p.rec(1)->pid = child;  // rank 1 stands for the child's process
  p.rec(1)->start_time = process_start_time(child);
  p.id0 = p.g0->watch(p.recs());
  std::this_thread::sleep_for(120ms);
  expect(!p.g0->broken(), "a live peer process breaks nothing");
  const auto t0 = Clock::now();
  kill(child, SIGKILL);
  expect(eventually([&] { return p.g0->broken(); }, 1000ms), "a killed peer breaks the group within a second");
  std::printf("dead peer noticed %.0f ms after the kill\n",
              std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  expect(has(p.g0->why(), "group rank 1 (global rank 5, pid " + std::to_string(child) + ") is gone: its process ended"),
         p.g0->why());
  expect(p.rec(0)->state.load() == kHealthy, "a death seen is not relayed");
  waitpid(child, nullptr, 0);
  p.g0->unwatch(p.id0);
  p.id0 = -1;
}

void plan_cache() {
  PlanCache<int> all(3);
  for (int i = 0; i < 3; ++i) all.insert(std::to_string(i), std::make_unique<int>(i));
  bool dropped = false;
  all.insert("x", std::make_unique<int>(9), &dropped);
  expect(dropped && all.size() == 1 && all.find("x") && !all.find("0"), "a full cache drops every plan");
  PlanCache<int> odd(3, [](const int& v) { return v % 2 == 0; });
  for (int i = 0; i < 3; ++i) odd.insert(std::to_string(i), std::make_unique<int>(i), &dropped);
  expect(!dropped && odd.size() == 3, "no drop below the bound");
  const int& v = odd.insert("3", std::make_unique<int>(3), &dropped);
  expect(dropped && v == 3 && odd.size() == 2 && odd.find("1") && odd.find("3") && !odd.find("0") && !odd.find("2"),
         "a full cache drops the droppable plans only");
}

}  // namespace

int main() {
  liveness_by_pid();
  liveness_by_heartbeat();
  verdict_reaches_the_peer();
  verdict_learned_at_the_call();
  abort_and_shutdown_reach_the_peer();
  probe_and_late_channel();
  dead_peer_breaks_the_group();
  plan_cache();
  return purlin::test::test_summary("test_group_health");
}
