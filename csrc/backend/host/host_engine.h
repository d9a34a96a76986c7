// host_engine.h — runs native collectives on CPU tensors: arrival handshake,
// cross-rank checks, Spec, SNAC plan (cached), and the CPU Atom.
//
// Torch-free: the backend passes a Rendezvous (backed by the c10d Store) to set
// up the shared-memory segments, and flat Requests to run.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>

#include "backend/host/group_context.h"
#include "backend/host/request.h"
#include "backend/host/shm_group.h"
#include "snac/plan.h"

namespace purlin::atom {
class CpuAtom;
}

namespace purlin::backend {

class HostEngine {
 public:
  // `aborted`: the group's abort flag (NOTE [shutdown and abort]); it outlives the engine.
  // `ctx`: the group's settings (NOTE [group settings]), read at the first collective.
  HostEngine(int rank, int world, std::chrono::milliseconds timeout, Rendezvous rdv, const std::atomic<bool>* aborted,
             std::shared_ptr<const GroupContext> ctx);
  ~HostEngine();

  // Runs one collective; throws std::runtime_error naming op, rank and reason.
  void run(Request& rq);

  uint64_t seq() const { return seq_; }
  void set_timeout(std::chrono::milliseconds t);

 private:
  void ensure_atom(const char* op);  // NOTE [setup agreement]
  const snac::Plan& plan_for(const Request& rq, const std::vector<PeerMeta>& all, bool direct_local);

  int rank_, world_;
  std::chrono::milliseconds timeout_;
  Rendezvous rdv_;
  const std::atomic<bool>* aborted_;
  std::shared_ptr<const GroupContext> ctx_;
  std::unique_ptr<atom::CpuAtom> atom_;
  uint64_t seq_ = 0;        // collectives started on this group (arrival value)
  uint64_t step_base_ = 0;  // NOTE [epochs]
  std::string broken_;      // set after a timeout: the group cannot be trusted
  std::unordered_map<std::string, std::unique_ptr<snac::Plan>> plans_;
  int64_t two_shot_bytes_ = 0;
  bool debug_ = false;
};

}  // namespace purlin::backend
