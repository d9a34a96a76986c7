// cuda_engine.h — the CUDA datapath as PurlinBackend sees it: native
// collectives on CUDA tensors, by SNAC plans run in one kernel launch on
// CUDA-IPC symmetric buffers (csrc/atom/cuda). PURLIN-CUDA hooks in
// purlin_backend.cc and backend_ops.cc call only what is declared here.
//
// Contract (c10d's, as ProcessGroupNCCL keeps it):
//   asyncOp=false  the kernel is queued on the current stream; nothing else
//                  (no events, no host wait); the returned Work is complete.
//   asyncOp=true   an internal stream waits for the current stream, the
//                  flatten copies, the kernel and the copies back run there,
//                  an event is recorded; Work.wait() makes the then-current
//                  stream wait for it. The Work holds the outputs, and every
//                  tensor of the op is recordStream'd on the internal stream.
// Host argument checks are local: a GPU collective has no host arrival
// handshake (NOTE [device reuse], atom/cuda/device/plan_kernel.cuh). Cross-rank
// mismatches are caught on the GPU before any peer data is read (NOTE [call
// tags]) and raised at the rank's next call. Some calls do meet on the host,
// through a shared-memory handshake (shm_group.h), and check every rank's
// arguments as the CPU engine does: all_to_all (its plan needs every rank's
// split sizes), every call under TORCH_PURLIN_CUDA_CHECK_CALLS (NOTE [checked
// calls]), the copy-engine Atom's calls (NOTE [copy-engine call check]), the
// call after a one-sided argument error (NOTE [one-sided local errors]) and
// the symmetric pool's allocations (NOTE [pool agreement on the host]).
// Every native op is CUDA-graph capturable once the group ran one CUDA
// collective outside capture (that first one sets up the workspace).
//
// Built with PURLIN_WITH_CUDA (setup.py defines it when torch has CUDA);
// otherwise the inline stubs at the end report the datapath as unavailable.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include "backend/group/group_context.h"
#include "backend/group/group_health.h"
#include "backend/group/request.h"

namespace purlin::backend {

class CudaOpScope;

// What the group's last CUDA launch ran (benchmarks report it).
struct LastLaunch {
  std::string protocol;  // "one-shot", "two-shot", "copy", "+zero-copy", "copy-engine", "nccl"
  int blocks = 0;        // SMs the kernel occupied (0: copy engine; -1: not known, NCCL)
  int threads = 0;
  bool overlapped = false;  // launched with programmatic dependent launch (NOTE [overlapped launch])
};

// How many launches of each collective ran each protocol since the group's
// CUDA engine began: {op: {protocol: launches}} (LastLaunch::protocol's names;
// NCCL's share is PurlinBackend::counters()'s fallback column).
using ProtocolCounts = std::map<std::string, std::map<std::string, int64_t>>;

// One per PurlinBackend; creates the group's CudaGroup (cuda_group.h) on first use.
class CudaEngine {
 public:
  // `health`: the group's (NOTE [group health]) with its abort request (NOTE [shutdown and abort]),
  // which ends the host-side waits of the group's shared-memory exchanges and the device waits; it
  // outlives the engine. `ctx`: the group's settings (NOTE [group settings]), read when the CUDA
  // group is set up.
  CudaEngine(int rank, int world, std::chrono::milliseconds timeout, c10::intrusive_ptr<c10d::Store> store,
             GroupHealth* health, std::shared_ptr<const GroupContext> ctx);
  ~CudaEngine();

  // "" if `op` on `tensors` (some on CUDA) runs natively, else why not.
  // The first call sets up the workspace and is collective: PurlinBackend
  // calls it where every rank decides native-or-fallback for the same op.
  std::string unavailable(const std::string& op, const std::vector<at::Tensor>& tensors);
  // Whether a CudaOpScope is open: the running op is a native CUDA op.
  bool active() const;
  // Runs rq (flat in/out already on the op's device) and returns its Work.
  c10::intrusive_ptr<c10d::Work> run(Request& rq, const std::vector<at::Tensor>& outputs);
  void set_timeout(std::chrono::milliseconds timeout);
  // A tensor from the group's symmetric pool (NOTE [zero-copy]); collective:
  // every rank calls it in the same order with the same sizes. or_plain
  // (Backend::allocateTensor, NOTE [pool or plain]): ordinary CUDA memory,
  // logged once, where the group has no pool or the pool is full.
  at::Tensor empty(at::IntArrayRef sizes, const at::TensorOptions& options, bool or_plain = false);
  LastLaunch last_launch() const;
  ProtocolCounts protocol_counts() const;
  // The CUDA engine's routing: "" if `op` on `tensors` (some on CUDA) runs
  // natively, else why it runs on NCCL: the engine cannot serve it
  // (unavailable()), or the protocol table (NOTE [protocol table] in
  // protocol_table.h) sends an op of `table_bytes` there (-1: the op does not
  // consult the table), and then *by_table is set. Collective like unavailable().
  std::string route(const std::string& op, const std::vector<at::Tensor>& tensors, int64_t table_bytes,
                    bool* by_table);
  // Called before NCCL runs `op` on `dev` (route()'s verdict, or a fallback
  // forced for another reason; `by_table`: the table sent it). NCCL sets up a
  // communicator on its first collective, which cannot happen inside graph
  // capture: raises, naming `op` and the rank, for a table-routed op captured
  // before any NCCL collective of the group ran eagerly. Records NCCL as the
  // latest launch (last_launch).
  void before_nccl(const std::string& op, const c10::Device& dev, const std::string& why, bool by_table);

  struct Impl;

 private:
  friend class CudaOpScope;
  // "" once the group's CUDA state on `dev` exists (created here, collective)
  // and can serve `op`, else why not.
  std::string group_on(const c10::Device& dev, const std::string& op);
  // Whether the current stream of `dev` is capturing a CUDA graph.
  static bool capturing(const c10::Device& dev);
  std::unique_ptr<Impl> impl_;
};

// Opened by every native op right after its fallback decision, closed when
// the op returns: holds the op's stream and Work (see the contract above).
// Inactive when engine is null or no tensor is on CUDA.
class CudaOpScope {
 public:
  CudaOpScope(CudaEngine* engine, const std::vector<at::Tensor>& tensors, bool async_op);
  ~CudaOpScope();
  CudaOpScope(const CudaOpScope&) = delete;
  CudaOpScope& operator=(const CudaOpScope&) = delete;

  struct State;

 private:
  std::unique_ptr<State> s_;
};

#ifndef PURLIN_WITH_CUDA
struct CudaEngine::Impl {};
struct CudaOpScope::State {};
inline CudaEngine::CudaEngine(int, int, std::chrono::milliseconds, c10::intrusive_ptr<c10d::Store>, GroupHealth*,
                              std::shared_ptr<const GroupContext>) {}
inline CudaEngine::~CudaEngine() = default;
inline std::string CudaEngine::unavailable(const std::string&, const std::vector<at::Tensor>&) {
  return "the CUDA datapath is not available in this build";
}
inline bool CudaEngine::active() const { return false; }
inline c10::intrusive_ptr<c10d::Work> CudaEngine::run(Request& rq, const std::vector<at::Tensor>&) {
  TORCH_CHECK(false, "purlin ", rq.name, ": the CUDA datapath is not available in this build");
}
inline void CudaEngine::set_timeout(std::chrono::milliseconds) {}
inline at::Tensor CudaEngine::empty(at::IntArrayRef, const at::TensorOptions&, bool) {
  TORCH_CHECK(false, "purlin: symmetric memory needs the CUDA datapath, which is not in this build");
}
inline LastLaunch CudaEngine::last_launch() const { return {}; }
inline ProtocolCounts CudaEngine::protocol_counts() const { return {}; }
inline std::string CudaEngine::route(const std::string& op, const std::vector<at::Tensor>& tensors, int64_t, bool*) {
  return unavailable(op, tensors);
}
inline void CudaEngine::before_nccl(const std::string&, const c10::Device&, const std::string&, bool) {}
inline bool CudaEngine::capturing(const c10::Device&) { return false; }
inline CudaOpScope::CudaOpScope(CudaEngine*, const std::vector<at::Tensor>&, bool) {}
inline CudaOpScope::~CudaOpScope() = default;
#endif

}  // namespace purlin::backend
