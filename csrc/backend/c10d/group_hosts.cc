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
                       Fallback& fallback)
    : store_(std::move(store)), rank_(rank), world_(world), timeout_(timeout), fallback_(fallback) {}

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
      TORCH_CHECK(false, error_prefix(op, rank_), "mapping the group's hosts (NOTE [host map]): ", failed_);
    }
  }
  spans_ = map_.count() > 1;
  host_ = map_.host_of[rank_];
  local_ = map_.local_of[rank_];
  per_host_ = static_cast<int>(map_.hosts[host_].size());
  if (spans_) {
    reason_ = "the group spans " + map_.describe() + (map_.hints.empty() ? "" : "; " + map_.hints) +
              (map_.even() ? "" : "; its hosts hold unequal numbers of ranks, so no op runs hierarchically") +
              " (NOTE [host map])";
    across_reason_ = reason_ + "; within each host the op runs natively (NOTE [hierarchical collectives])";
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
}

std::string GroupHosts::route(const std::string& op, const std::vector<at::Tensor>& tensors, int64_t table_bytes,
                              const c10d::ReduceOp* redop, bool* hier) const {
  if (!hier || !map_.even() || table_bytes <= 0) return reason_;
  DType dtype = DType::Float32;
  bool engine_lacks = false;
  for (const auto& t : tensors) {
    if (!t.defined()) continue;
    to_dtype(t.scalar_type(), &dtype);
    engine_lacks |= !t.is_contiguous();  // gloo reads a strided view's storage, not its elements
  }
  engine_lacks |= dtype == DType::Int16;  // gloo has no int16; the parts across hosts widen it
  if (redop) {
    Request rq;
    rq.dtype = dtype;
    set_reduction(rq, *redop);
    if (!rq.error.empty()) return reason_;  // not a reduction purlin serves: the engine says what it makes of it
    // Complex PRODUCT has no elementwise form the parts across hosts could run.
    if (dtype_is_complex(dtype) && rq.redop == RedOp::Product) return reason_;
    engine_lacks |= rq.redop == RedOp::PremulSum;  // gloo has no PREMUL_SUM; the part within a host scales
    engine_lacks |= dtype == DType::Bool;  // gloo's bool SUM leaves bytes of 2; the parts across take MAX / MIN
  }
  // What the engine cannot run at all takes the hierarchical form at any size (the part within a
  // host is the only one that needs what it lacks); the rest where the rows say it is faster, and
  // never with one rank per host (nothing within a host to gain).
  if (!engine_lacks) {
    const int64_t from = rows_.from(op);
    if (per_host_ < 2 || from <= 0 || table_bytes < from) return reason_;
  }
  *hier = true;
  return "";
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
