// group_health.cc — see NOTE [group health] in group_health.h.
#include "backend/group/group_health.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <new>

#include "backend/group/health_watcher.h"

namespace purlin::backend {

GroupHealth::GroupHealth(int rank, int world, int global_rank)
    : rank_(rank), world_(world), global_rank_(global_rank < 0 ? rank : global_rank), pid_(getpid()) {}

GroupHealth::~GroupHealth() { HealthWatcher::remove(this); }

std::string GroupHealth::who(int rank, int global_rank, int pid) {
  std::string s = global_rank == rank ? "rank " + std::to_string(rank) + " ("
                                      : "group rank " + std::to_string(rank) + " (global rank " +
                                            std::to_string(global_rank) + ", ";
  return s + "pid " + std::to_string(pid) + ")";
}

void GroupHealth::init_record(std::byte* record) const {
  auto* r = new (record) HealthRecord{};  // this rank's own memory, read by nobody yet
  r->group_rank = rank_;
  r->global_rank = global_rank_;
  r->pid = pid_;
  r->start_time = process_start_time(0);
  r->state.store(kHealthy, std::memory_order_release);
}

int GroupHealth::watch(const std::vector<std::byte*>& records, std::function<std::string()> probe) {
  Area a;
  a.probe = std::move(probe);
  a.peers.resize(world_);
  for (int r = 0; r < world_; ++r) {
    HealthRecord* rec = reinterpret_cast<HealthRecord*>(records[r]);
    a.records.push_back(rec);
    if (r != rank_ && rec->state.load(std::memory_order_acquire) != kHealthUnset)
      a.peers[r] = std::make_unique<PeerLiveness>(rec->pid, rec->start_time);  // NOTE [peer liveness]
  }
  bool start = false;
  int id;
  {
    std::lock_guard<std::mutex> g(mu_);
    if (verdict_ != kHealthUnset) write_verdict(own(a), verdict_, verdict_why_);  // broke before this channel
    a.id = id = next_id_++;
    areas_.push_back(std::move(a));
    start = !watched_ && world_ > 1;  // a group of one has no peer to watch
    watched_ |= start;
  }
  if (start) HealthWatcher::add(this);  // outside mu_: the watcher takes its lock, then ours
  return id;
}

void GroupHealth::unwatch(int id) {
  bool stop = false;
  {
    std::lock_guard<std::mutex> g(mu_);
    auto it = std::find_if(areas_.begin(), areas_.end(), [id](const Area& a) { return a.id == id; });
    if (it == areas_.end()) return;
    HealthRecord* mine = own(*it);
    if (getpid() == pid_ && !signal_.raised() && mine->state.load(std::memory_order_relaxed) == kHealthy) {
      mine->calls = calls_.load(std::memory_order_relaxed);
      mine->state.store(kLeft, std::memory_order_release);  // the count is visible to whoever sees the state
    }
    areas_.erase(it);
    stop = areas_.empty() && watched_;
    if (stop) watched_ = false;
  }
  if (stop) HealthWatcher::remove(this);
}

bool GroupHealth::learn_verdicts(const std::vector<std::byte*>& records) {
  for (size_t r = 0; r < records.size(); ++r) {
    if (static_cast<int>(r) == rank_) continue;
    const HealthRecord& rec = *reinterpret_cast<const HealthRecord*>(records[r]);
    const uint32_t st = rec.state.load(std::memory_order_acquire);  // pairs with write_verdict's release
    if (__builtin_expect(st < kBroken, 1) || !breaks_here(rec, st)) continue;
    std::lock_guard<std::mutex> g(mu_);
    if (!signal_.raised()) signal_.raise(verdict_of(static_cast<int>(r), rec, st));
    return true;
  }
  return false;
}

void GroupHealth::found_broken(const std::string& why) {
  std::lock_guard<std::mutex> g(mu_);
  found_locked(why);
}

void GroupHealth::found_locked(const std::string& why) {
  if (signal_.raised()) return;  // the group broke here before: that verdict stays
  publish_locked(kBroken, why);
  signal_.raise(why);
}

void GroupHealth::abort() {
  const bool first = !signal_.raised();
  signal_.raise();  // at once, before any lock: abort() never waits for the watcher
  if (!first) return;
  std::lock_guard<std::mutex> g(mu_);
  publish_locked(kAborted, "");
}

std::string GroupHealth::why() const {
  const std::string r = signal_.reason();
  return r.empty() ? "the group was aborted (abort(), e.g. torch's _abort_process_group)" : r;
}

void GroupHealth::publish_locked(uint32_t state, const std::string& why) {
  if (getpid() != pid_ || verdict_ != kHealthUnset) return;
  verdict_ = state;
  verdict_why_ = why;
  for (const Area& a : areas_) write_verdict(own(a), state, why);
}

void GroupHealth::write_verdict(HealthRecord* r, uint32_t state, const std::string& why) {
  if (r->state.load(std::memory_order_relaxed) >= kBroken) return;
  const size_t n = std::min(why.size(), HealthRecord::kReasonBytes);
  std::memcpy(r->reason, why.data(), n);
  r->reason_len = static_cast<uint32_t>(n);
  r->state.store(state, std::memory_order_release);  // the reason is visible to whoever sees the state
}

std::string GroupHealth::verdict_of(int rank, const HealthRecord& r, uint32_t state) const {
  const std::string name = who(rank, r.global_rank, r.pid);
  switch (state) {
    case kBroken: {
      const size_t n = std::min<size_t>(r.reason_len, HealthRecord::kReasonBytes);
      return name + " found the group unusable: " + std::string(r.reason, n);
    }
    case kAborted: return name + " aborted the group (abort(), e.g. torch's _abort_process_group)";
    case kLeft:
      return name + " shut the group down (dist.destroy_process_group, or the group was destroyed there) after " +
             std::to_string(r.calls) + " collectives; this rank began collective " +
             std::to_string(calls_.load(std::memory_order_relaxed)) + ", which it never calls";
    default: return name + " left the group in an unknown state " + std::to_string(state);
  }
}

void GroupHealth::check(Clock::time_point now) {
  std::lock_guard<std::mutex> g(mu_);
  ++beats_;
  for (const Area& a : areas_) own(a)->heartbeat.store(beats_, std::memory_order_relaxed);
  if (signal_.raised()) return;  // nothing more to find
  for (const Area& a : areas_) {  // what this rank found itself first
    if (!a.probe) continue;
    const std::string s = a.probe();
    if (!s.empty()) return found_locked(s);
  }
  for (const Area& a : areas_) {
    for (int r = 0; r < world_; ++r) {
      if (r == rank_) continue;
      const HealthRecord& rec = *a.records[r];
      const uint32_t st = rec.state.load(std::memory_order_acquire);
      if (st >= kBroken && breaks_here(rec, st)) return signal_.raise(verdict_of(r, rec, st));
      if (st == kLeft || !a.peers[r]) continue;  // a rank that left may end its process: NOTE [group health]
      const std::string gone = a.peers[r]->check(rec.heartbeat.load(std::memory_order_relaxed), now);
      if (!gone.empty()) return signal_.raise(who(r, rec.global_rank, rec.pid) + " is gone: " + gone);
    }
  }
}

}  // namespace purlin::backend
