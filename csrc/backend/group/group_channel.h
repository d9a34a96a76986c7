// group_channel.h — GroupChannel: a group's arrival channel between its
// ranks' hosts, as both engines use it (the CPU engine for every collective,
// cpu_engine.h; the CUDA group for the exchanges it makes on the host,
// backend/cuda/cuda_group_host_checks.cc). Torch-free.
//
// One channel is a shared-memory CPU Atom (shm_group.h) with its sequence
// number, the rank's health record in it (NOTE [group health]), and the
// engine's broken state:
//   arrive_and_check()  NOTE [arrival] then check_agreement() (request.h):
//                       every rank's arguments, or std::invalid_argument
//                       naming the difference on every rank (the group stays
//                       usable);
//   a wait that ended   a timeout is this rank's finding: mark_broken()
//                       publishes it to every peer, and it raises
//                       std::runtime_error with the wait's text; a wait that
//                       the group's break or abort ended raises its text
//                       (naming the reason) and publishes nothing;
//   begin_call()        at the start of every collective, which it counts:
//                       once the group broke (here, or a peer's verdict in
//                       its record), "purlin <op> on rank R: the group is
//                       unusable after an earlier failure: <why>", where why
//                       is what this engine found itself, else the group's
//                       reason.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "atom/atom.h"
#include "backend/group/group_health.h"
#include "backend/group/request.h"
#include "backend/group/shm_group.h"

namespace purlin::atom {
class CpuAtom;
}

namespace purlin::backend {

class GroupChannel {
 public:
  // `health`: the group's (outlives the channel).
  GroupChannel(int rank, int world, std::chrono::milliseconds timeout, GroupHealth* health);
  ~GroupChannel();  // stops the health watch of its records (kLeft: NOTE [group health]), then unmaps
  GroupChannel(const GroupChannel&) = delete;
  GroupChannel& operator=(const GroupChannel&) = delete;

  // Collective, once: sets up the channel's Atom (workspace and metadata
  // slots of the given sizes; the Store keys are named by `purpose`) with
  // this rank's health record, and watches the group's records from then on.
  // `probe`: GroupHealth::watch's. Throws as make_shm_group does.
  void open(const std::string& purpose, size_t workspace_bytes, size_t meta_bytes, const Rendezvous& rdv,
            std::function<std::string()> probe = {});
  bool is_open() const { return atom_ != nullptr; }
  atom::CpuAtom& atom() { return *atom_; }
  void set_timeout(std::chrono::milliseconds t);

  uint64_t seq() const { return seq_; }
  uint64_t next_seq() { return ++seq_; }  // the arrival value of the next exchange

  // The start of a collective: counts it (NOTE [group health]: a peer that
  // left breaks the group only for calls beyond its own), then, while the
  // group is usable, one relaxed load, a size test and one acquire load of
  // each peer's verdict word. The peers' words are read here, not only by the
  // watcher's next pass (up to 50 ms later): a call made right after a peer
  // published its verdict must not run (a CUDA kernel would complete on the
  // data that peer staged before it gave up).
  void begin_call(const char* op) {
    health_->begin_call();
    if (__builtin_expect(!found_.empty() || health_->broken() || health_->learn_verdicts(records_), 0))
      throw_unusable(op);
  }
  bool broken() const { return !found_.empty() || health_->broken(); }
  [[noreturn]] void throw_unusable(const char* op) const;
  // What this engine found itself ("" if nothing).
  const std::string& found() const { return found_; }
  // This engine could not be set up (every rank failed alike, NOTE [setup
  // agreement]): later calls raise `why`; nothing is published.
  void fail_setup(const std::string& why) { found_ = why; }
  // This rank found the group unusable: later calls raise `why` and the
  // group's peers learn it (unless the group broke here before).
  void mark_broken(const std::string& why);

  // Every rank's arguments for the exchange at site.seq (next_seq()), agreed;
  // throws std::invalid_argument (a difference) or std::runtime_error (a
  // wait that ended).
  std::vector<PeerMeta> arrive_and_check(const Request& rq, const atom::WaitSite& site);
  // snac::arrive_tagged at site.seq: a wait that ended as above; a rank at
  // another tag: snac's std::runtime_error, to the caller.
  std::vector<std::string> arrive_tagged(const atom::WaitSite& site, const std::string& tag,
                                         const std::string& value, const std::string& hint);
  // A wait of the channel's Atom that ended (see the header comment): marks
  // the group broken if it timed out, and throws std::runtime_error.
  [[noreturn]] void wait_ended(const atom::TimeoutError& e);

 private:
  int rank_, world_;
  std::chrono::milliseconds timeout_;
  GroupHealth* health_;
  std::unique_ptr<atom::CpuAtom> atom_;
  std::vector<std::byte*> records_;  // every rank's health record in atom_ (empty until open())
  int watch_id_ = -1;
  uint64_t seq_ = 0;
  std::string found_;  // what this engine found (its setup failure, its own timeout or device error)
};

}  // namespace purlin::backend
