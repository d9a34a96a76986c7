// group_channel.cc — see group_channel.h.
#include "backend/group/group_channel.h"

#include <stdexcept>

#include "atom/cpu/cpu_atom.h"
#include "snac/arrival.h"

namespace purlin::backend {

GroupChannel::GroupChannel(int rank, int world, std::chrono::milliseconds timeout, GroupHealth* health)
    : rank_(rank), world_(world), timeout_(timeout), health_(health) {}

GroupChannel::~GroupChannel() {
  if (watch_id_ >= 0) health_->unwatch(watch_id_);  // before the records are unmapped
  atom_.reset();
}

void GroupChannel::open(const std::string& purpose, size_t workspace_bytes, size_t meta_bytes, const Rendezvous& rdv,
                        std::function<std::string()> probe) {
  GroupHealth* h = health_;
  const int rank = rank_;
  atom_ = make_shm_group(purpose, rank_, world_, workspace_bytes, meta_bytes, timeout_, rdv, &health_->signal(),
                         GroupHealth::kRecordBytes,
                         [h, rank](atom::CpuAtom& a) { h->init_record(a.owner_area(rank)); });
  records_.resize(world_);
  for (int r = 0; r < world_; ++r) records_[r] = atom_->owner_area(r);
  watch_id_ = health_->watch(records_, std::move(probe));
}

void GroupChannel::set_timeout(std::chrono::milliseconds t) {
  timeout_ = t;
  if (atom_) atom_->set_timeout(t);
}

void GroupChannel::throw_unusable(const char* op) const {
  throw std::runtime_error(error_prefix(op, rank_) + "the group is unusable after an earlier failure: " +
                           (found_.empty() ? health_->why() : found_));
}

void GroupChannel::mark_broken(const std::string& why) {
  if (found_.empty()) found_ = why;
  health_->found_broken(why);
}

void GroupChannel::wait_ended(const atom::TimeoutError& e) {
  if (dynamic_cast<const atom::AbortedError*>(&e) == nullptr) mark_broken(e.what());  // this rank's own finding
  throw std::runtime_error(e.what());
}

std::vector<PeerMeta> GroupChannel::arrive_and_check(const Request& rq, const atom::WaitSite& site) {
  const std::vector<std::byte> blob = encode_meta(rq, world_);
  std::vector<PeerMeta> all;
  all.reserve(world_);
  try {
    for (const std::byte* b : snac::arrive(*atom_, site.seq, blob.data(), blob.size(), site))
      all.push_back(decode_meta(b, world_));
  } catch (const atom::TimeoutError& e) {
    wait_ended(e);
  }
  const std::string why = check_agreement(all, rank_);
  if (!why.empty()) throw std::invalid_argument(error_prefix(rq.name, rank_) + why);
  return all;
}

std::vector<std::string> GroupChannel::arrive_tagged(const atom::WaitSite& site, const std::string& tag,
                                                     const std::string& value, const std::string& hint) {
  try {
    return snac::arrive_tagged(*atom_, site.seq, tag, value, site, hint);
  } catch (const atom::TimeoutError& e) {
    wait_ended(e);
  }
}

}  // namespace purlin::backend
