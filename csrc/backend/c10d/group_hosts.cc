// group_hosts.cc — the host map of a group, the routing of a group that spans
// hosts, and its subgroups' lifecycle (group_hosts.h). The hierarchical
// collectives themselves are in hierarchical.cc.
#include "backend/c10d/group_hosts.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include "backend/c10d/purlin_backend.h"
#include "backend/c10d/store_rendezvous.h"
#include "backend/c10d/tensor_args.h"

namespace purlin::backend {

GroupHosts::GroupHosts(c10::intrusive_ptr<c10d::Store> store, int rank, int world, std::chrono::milliseconds timeout,
                       Fallback& fallback, std::shared_ptr<const GroupContext> ctx)
    : store_(std::move(store)), rank_(rank), world_(world), timeout_(timeout), fallback_(fallback),
      ctx_(std::move(ctx)) {}

GroupHosts::~GroupHosts() = default;

void GroupHosts::map(const char* op) {
  TORCH_CHECK(failed_.empty(), error_prefix(op, rank_), "the group could not map its hosts earlier: ", failed_);
  if (world_ == 1) {
    map_ = partition_hosts({HostProbe{local_hostname(), local_boot_id(), "", 0, 0}}, {{true}});
  } else {
    try {
      map_ = map_hosts(store_rendezvous(store_, timeout_), "purlin/hosts/", rank_, world_);
    } catch (const std::exception& e) {
      failed_ = e.what();
      TORCH_CHECK(false, error_prefix(op, rank_), "mapping the group's hosts: ", failed_);
    }
  }
  spans_ = map_.count() > 1;
  host_ = map_.host_of[rank_];
  local_ = map_.local_of[rank_];
  per_host_ = static_cast<int>(map_.hosts[host_].size());
  if (spans_) {
    reason_ = "the group spans " + map_.describe() + (map_.hints.empty() ? "" : "; " + map_.hints);
    across_reason_ = reason_ + "; within each host the op runs natively";
    flat_reason_ = reason_ + "; the engine moves the op's data as bytes and purlin reduces it";
    rows_ = hierarchical_rows(world_);
    if (map_.even()) {
      const int hosts = map_.count();
      std::vector<int64_t> order(static_cast<size_t>(per_host_ * hosts));
      for (int l = 0; l < per_host_; ++l)
        for (int h = 0; h < hosts; ++h) order[l * hosts + h] = map_.hosts[h][l];
      by_local_ = at::tensor(order, at::kLong);
    }
  }
  mapped_ = true;
  if (spans_) {
    // NOTE [host map at the first collective]: the engine groups connect now, on every rank alike.
    try {
      flat();
      if (map_.even() && per_host_ > 1) {
        within();
        across();
      }
    } catch (const c10::Error& e) {
      failed_ = e.what_without_backtrace();
      mapped_ = false;
      TORCH_CHECK(false, error_prefix(op, rank_), "connecting the group's engine groups across hosts: ", failed_);
    }
  }
}

std::string GroupHosts::route(bool* span) const {
  if (!span) return reason_;
  *span = true;
  return "";
}

bool GroupHosts::hierarchical(const char* op, int64_t bytes) const {
  if (!map_.even() || per_host_ < 2 || bytes <= 0) return false;
  const int64_t from = rows_.from(op);
  return from > 0 && bytes >= from;
}

// The subgroups are made without holding mu_ (the engine's factory takes the GIL, which a thread
// calling abort() may hold) and installed under it; only the ops' thread makes them.
c10d::Backend& GroupHosts::install(c10::intrusive_ptr<c10d::Backend>* slot,
                                   const std::function<c10::intrusive_ptr<c10d::Backend>()>& make) {
  {
    std::lock_guard<std::mutex> g(mu_);
    TORCH_CHECK(!aborted_, error_prefix("a group spanning hosts", rank_), "the group was aborted");
    if (*slot) return **slot;
  }
  c10::intrusive_ptr<c10d::Backend> made = make();
  std::lock_guard<std::mutex> g(mu_);
  if (aborted_) made->abort();  // aborted while it was made: it ends like the others
  TORCH_CHECK(!aborted_, error_prefix("a group spanning hosts", rank_), "the group was aborted");
  *slot = std::move(made);
  return **slot;
}

c10d::Backend& GroupHosts::within() {
  return install(&within_, [&] {
    auto store = c10::make_intrusive<c10d::PrefixStore>("purlin_hosts/within_" + std::to_string(host_) + "/", store_);
    return c10::intrusive_ptr<c10d::Backend>(
        c10::make_intrusive<PurlinBackend>(store, local_, per_host_, timeout_, fallback_.group_factory()));
  });
}

c10d::Backend& GroupHosts::across() {
  return install(&across_, [&] {
    const auto& factory = fallback_.group_factory();
    TORCH_CHECK(factory, error_prefix("a group spanning hosts", rank_), "no fallback backend factory");
    auto store = c10::make_intrusive<c10d::PrefixStore>("purlin_hosts/across_" + std::to_string(local_) + "/", store_);
    return factory(store, host_, map_.count(), timeout_, "cpu");
  });
}

void GroupHosts::count_across(const char* op) { fallback_.count_fallback(std::string(op) + " across hosts", across_reason_); }

void GroupHosts::count_flat(const char* op) { fallback_.count_fallback(op, flat_reason_); }

c10d::Backend& GroupHosts::flat() { return fallback_.get(c10::Device(c10::kCPU)); }

std::string GroupHosts::who(const char* op) const {
  return std::string("purlin ") + op + " on " + ctx_->rank_name(rank_) + " (a group spanning hosts): ";
}

void GroupHosts::set_timeout(std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> g(mu_);
  timeout_ = timeout;
  if (within_) within_->setTimeout(timeout);  // the engine's groups keep the timeout they were made with
}

void GroupHosts::shutdown() {
  c10::intrusive_ptr<c10d::Backend> within, across;
  {
    std::lock_guard<std::mutex> g(mu_);
    within = within_;
    across = across_;
  }
  std::exception_ptr err;
  for (auto* b : {&within, &across}) {
    try {
      if (*b) (*b)->shutdown();
    } catch (...) {
      if (!err) err = std::current_exception();
    }
  }
  if (err) std::rethrow_exception(err);
}

void GroupHosts::abort() {
  std::lock_guard<std::mutex> g(mu_);  // held only to read or install the subgroups: never during an op
  aborted_ = true;
  std::exception_ptr err;
  for (auto* b : {&within_, &across_}) {
    try {
      if (*b) (*b)->abort();
    } catch (...) {
      if (!err) err = std::current_exception();
    }
  }
  if (err) std::rethrow_exception(err);
}

void GroupHosts::add_counters(std::map<std::string, std::pair<int64_t, int64_t>>* counters) const {
  c10::intrusive_ptr<c10d::Backend> within;
  {
    std::lock_guard<std::mutex> g(mu_);
    within = within_;
  }
  if (!within) return;
  for (const auto& [op, n] : static_cast<PurlinBackend&>(*within).counters()) (*counters)[op + " within hosts"] = n;
}

}  // namespace purlin::backend
