// split_group.cc — groups split from a purlin group (PurlinBackend::split).
//
// NOTE [split groups]
// torch splits a device-bound default group to make subgroups
// (dist.split_group, init_device_mesh: how torchtitan starts), so purlin
// supports Backend::split(). A purlin subgroup needs nothing from its parent's
// connections: split() builds a new PurlinBackend (rank = the member's index in
// the sorted ranks, opts' timeout and settings, its own fallbacks), which agrees
// on its settings and connects like any group. Its store is the parent's,
// prefixed "purlin_split_<n>_<ranks>/" with n counting the splits asked of the
// parent, which every rank takes part in, so n agrees across ranks; never the
// store torch passes, whose prefix can differ between two members that joined
// different groups before (docs/DESIGN.md, traps). The non-members' "no color"
// split has nothing to do. One PurlinBackend serves both device types, so torch
// asks it twice with the same store: the second time counts no split and
// returns the first child (last_split_store_ keeps that store alive, so a later
// split's store cannot reuse its address).
#include <algorithm>
#include <string>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include "backend/c10d/purlin_backend.h"

namespace purlin::backend {

c10::intrusive_ptr<c10d::Backend::Options> PurlinBackend::getBackendOptions() {
  auto opts = c10::make_intrusive<PurlinOptions>(timeout_, ctx_->settings.overrides());  // NOTE [group settings]
  opts->group_name = getGroupUid();
  opts->group_desc = getGroupDesc();
  return opts;
}

c10::intrusive_ptr<c10d::Backend> PurlinBackend::split(const c10::intrusive_ptr<c10d::Store>& store,
                                                       const std::vector<int>& ranks,
                                                       const c10::intrusive_ptr<Options>& opts) {
  check_open("split_group");
  for (int r : ranks)
    TORCH_CHECK(r >= 0 && r < getSize(), "purlin: split_group on rank ", getRank(), ": rank ", r,
                " is outside the parent group of ", getSize(), " ranks");
  TORCH_CHECK(std::is_sorted(ranks.begin(), ranks.end()) &&
                  std::adjacent_find(ranks.begin(), ranks.end()) == ranks.end(),
              "purlin: split_group on rank ", getRank(), ": the ranks of a split must be sorted and distinct");
  const bool same_split = store.get() == last_split_store_.get();
  if (same_split) {
    if (auto last = last_split_.lock()) return last;
  } else {
    ++splits_;
    last_split_store_ = store;
    last_split_.reset();
  }
  auto me = std::find(ranks.begin(), ranks.end(), getRank());
  if (me == ranks.end()) return nullptr;
  std::string prefix = "purlin_split_" + std::to_string(splits_);
  for (int r : ranks) prefix += "_" + std::to_string(r);
  auto child_store = c10::make_intrusive<c10d::PrefixStore>(prefix + "/", store_);
  const auto timeout = opts ? opts->timeout : timeout_;
  // NOTE [group settings]: the settings given for the split (torch passes a copy of this group's
  // options when none are), else this group's; read now. Global ranks through this group's.
  const auto* purlin_opts = dynamic_cast<const PurlinOptions*>(opts.get());
  auto ctx = std::make_shared<GroupContext>(
      GroupContext{env::Settings(purlin_opts ? purlin_opts->settings : ctx_->settings.overrides()), {},
                   ctx_->host_ranks});
  for (int r : ranks) ctx->global_ranks.push_back(r < static_cast<int>(ctx_->global_ranks.size()) ? ctx_->global_ranks[r] : r);
  auto child = c10::make_intrusive<PurlinBackend>(child_store, static_cast<int>(me - ranks.begin()),
                                                  static_cast<int>(ranks.size()), timeout, fallback_.group_factory(),
                                                  std::move(ctx));
  last_split_ = c10::weak_intrusive_ptr<c10d::Backend>(c10::intrusive_ptr<c10d::Backend>(child));
  return child;
}

}  // namespace purlin::backend
