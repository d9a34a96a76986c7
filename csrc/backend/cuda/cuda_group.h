// cuda_group.h — CudaGroup: one process group's CUDA state on one rank: the
// symmetric workspace, the symmetric pool, the plan cache, the copy-engine
// Atom, and the launches (internal to the CUDA glue; the backend sees only
// cuda_engine.h's CudaEngine). Defined in cuda_group.cc (setup, device errors,
// pool), cuda_group_host_checks.cc, cuda_group_plans.cc, cuda_group_launch.cc.
// Three parts are classes of their own that it owns: the pool's agreement
// (pool_agreement.h), the plan cache and its memo (cuda_plan_cache.h) and the
// order of its launches across streams (launch_order.h). Its host channel
// (arrival, agreement, broken state, health record) and its plan cache are
// the pieces the CPU engine uses too (backend/group/group_channel.h,
// plan_cache.h).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "atom/cuda/device/plan_format.h"
#include "atom/cuda/device/plan_kernel.h"
#include "atom/cuda/host/ce_atom.h"
#include "atom/cuda/host/plan_store.h"
#include "atom/cuda/host/symmetric_pool.h"
#include "atom/cuda/host/symmetric_workspace.h"
#include "backend/cuda/cuda_engine.h"
#include "backend/cuda/cuda_plan_cache.h"
#include "backend/cuda/launch_order.h"
#include "backend/cuda/pool_agreement.h"
#include "backend/group/group_channel.h"
#include "backend/group/group_health.h"
#include "backend/group/protocol_table.h"
#include "backend/group/request.h"
#include "backend/group/symmetric_use.h"
#include "lowering/protocol_choice.h"
#include "snac/plan.h"

namespace purlin::backend {

namespace cu = purlin::atom::cuda;

class CudaGroup {
 public:
  // Throws std::runtime_error naming every rank that could not set the group
  // up (NOTE [setup agreement]); the store keys it used are then spent.
  // `health`: the group's (NOTE [group health]): its abort request, for the host-side exchanges'
  // waits and (its word attached while the group lives) the device waits (NOTE [shutdown and
  // abort], [device abort]); the group's channel watches with it.
  // `ctx`: the group's settings, agreed when the group was made (NOTE [group settings]).
  CudaGroup(int rank, int world, std::chrono::milliseconds timeout, c10::intrusive_ptr<c10d::Store> store,
            int device, GroupHealth* health, std::shared_ptr<const GroupContext> ctx);
  ~CudaGroup();

  const std::string& unavailable() const { return unavailable_; }
  int device() const { return device_; }
  c10::cuda::CUDAStream internal_stream() const { return *internal_; }
  void set_timeout(std::chrono::milliseconds t);

  // Queues rq on `stream`; throws std::runtime_error / std::invalid_argument.
  void launch(Request& rq, cudaStream_t stream);

  // The group's symmetric pool, created by the first call (collective).
  std::shared_ptr<cu::SymmetricPool> pool();
  // What SymmetricPool::allocate agrees through (NOTE [pool agreement on the host]).
  cu::SymmetricPool::AllGather pool_exchange() { return pool_agreement_.exchange(); }
  // Whether blocks are placed locally, with no exchange (NOTE [local placement] in symmetric_pool.h).
  bool pool_local() const { return pool_local_; }
  const cu::SymmetricWorkspace::AllGather& exchange() const { return exchange_; }
  const LastLaunch& last_launch() const { return last_; }
  ProtocolCounts protocol_counts() const;
  // NOTE [protocol table] (backend/group/protocol_table.h): bytes from which `op` runs
  // on NCCL (0: never), as agreed by the group at setup.
  int64_t nccl_from(const std::string& op) const { return nccl_table_.from(op); }
  // Records that the group's latest collective was served by NCCL.
  void note_nccl() { last_ = LastLaunch{"nccl", -1, 0}; }

  // "" or the recorded device timeout, for CudaWork.
  std::function<std::string()> error_source() const {
    auto ws = ws_;
    auto timeout = timeout_;
    const bool checked = check_calls_;
    auto reason = break_reason_;
    return [ws, timeout, checked, reason]() { return ws ? read_error(*ws, timeout, checked, reason) : std::string(); };
  }

 private:
  // request.h's IoAlias of rq (and its shift), in the device lowering's terms.
  static cu::IoAlias alias_of(const Request& rq, int64_t* shift = nullptr);
  // "" or the RuntimeError text of the device error recorded in ws. `checked_calls`: NOTE [checked
  // calls] ran (the call-tag text says what it compared); `reason`: why the group broke, named when
  // the record is the device's view of that break (AbortSignal::reason_source()).
  static std::string read_error(const cu::SymmetricWorkspace& ws, std::chrono::milliseconds timeout,
                                bool checked_calls, const std::function<std::string()>& reason);
  // What the watcher publishes (NOTE [group health]): "" or the text of a device timeout or
  // call-tag mismatch this rank's kernels recorded (not the device's view of an abort or break).
  static std::string own_device_error(const cu::SymmetricWorkspace& ws, std::chrono::milliseconds timeout,
                                      bool checked_calls);
  void read_settings(cu::SymmetricWorkspace::Options& opt, std::string& nccl_table);

  std::vector<PeerMeta> peer_meta(const Request& rq);
  void ce_check(const Request& rq, uint64_t sig);  // NOTE [copy-engine call check] (cuda_group_host_checks.cc)
  void settle_local_error(const Request& rq);     // NOTE [one-sided local errors] (cuda_group_host_checks.cc)
  // `all`: every rank's arguments (peer_meta()), or empty: filled here when needed.
  const CachedPlan& plan_for(const Request& rq, std::vector<PeerMeta>& all, SymmetricUse use, bool region);
  const CachedPlan& plan_for_key(const Request& rq, std::vector<PeerMeta>& all, SymmetricUse use, bool region,
                                 cu::IoAlias alias, int64_t shift);
  // The call's use of the symmetric pool (NOTE [symmetric use is rank-invariant]).
  struct PoolUse {
    SymmetricUse use;
    int64_t in_offset = -1, out_offset = -1;  // pool offsets of the tensors it uses (-1: none)
    bool reads_allowed = false;  // peers could read the Inputs in place (were they in the pool)
  };
  PoolUse pool_use(const Request& rq, std::vector<PeerMeta>& all);
  // The launch of `ch`'s lowered plan (`dev` in device memory, or else `inl`) with its
  // kernel parameters prebuilt (NOTE [prebuilt kernel parameters]); made when the plan is cached.
  cu::PreparedPlan prepare_kernel(const lowering::ProtocolChoice& ch, const cu::DevicePlanRef& dev,
                                  const cu::InlinePlan* inl) const;
  // Counts a launch of `name` (a Request::name literal) running `protocol` (in protocol_names_).
  void count_launch(const char* name, const std::string* protocol);
  // NOTE [copy-engine zero-copy] (ce_atom.h): whether a collective whose
  // output is in the pool at out_offset can pull from its peers' inputs, and
  // rank 0's input offset (rank q's: + q * the input's bytes in place).
  bool ce_sources_in_pool(const Request& rq, const CachedPlan& c, const PoolUse& pu, int64_t* in_offset) const;
  // Enqueues `c` (a pull plan) on the copy-engine Atom; in_offset >= 0: a
  // zero-copy plan reading the peers' inputs from the pool.
  void launch_copy_engine(const Request& rq, const CachedPlan& c, int64_t in_offset, cudaStream_t stream);

  int rank_, world_, device_;
  std::chrono::milliseconds timeout_;
  GroupHealth* health_;
  std::shared_ptr<const GroupContext> ctx_;  // NOTE [group settings]
  std::function<std::string()> break_reason_;  // health_->signal().reason_source(), made once
  volatile uint32_t* abort_word_ = nullptr;  // attached to health_'s signal at the end of the constructor
  std::string unavailable_;
  std::shared_ptr<cu::SymmetricWorkspace> ws_;
  std::optional<c10::cuda::CUDAStream> internal_;
  std::unique_ptr<cu::PlanStore> store_plans_;
  CudaPlanCache plans_;  // NOTE [plan caches], [eager host path]
  // pool_use()'s last Spec-dependent answer, and the call it was for (NOTE [eager host path]).
  struct UseMemo {
    bool valid = false;
    const char* name = nullptr;
    DType dtype = DType::Float32;
    int root = 0;
    int64_t in_numel = 0, out_numel = 0;
    cu::IoAlias alias = cu::IoAlias::Disjoint;
    bool two_shot = false;
    bool zero_copy = false, peer_outputs = false;  // allowed, were the tensors in the pool
  } use_memo_;
  cu::ProtocolSettings settings_;  // NOTE [protocol choice]: the group's, from its workspace
  const char* last_name_ = nullptr;  // the last launch's Request::name and its interned id
  uint16_t last_name_id_ = 0;
  std::string local_error_;  // NOTE [one-sided local errors]: the last call's local argument error, not yet settled
  int64_t two_shot_bytes_ = 0;
  bool debug_ = false;
  bool check_calls_ = false;  // NOTE [checked calls]: TORCH_PURLIN_CUDA_CHECK_CALLS on every rank
  bool pool_local_ = false;   // TORCH_PURLIN_CUDA_POOL_PLACEMENT=local on every rank (NOTE [local placement])
  bool overlap_ = false;  // NOTE [overlapped launch]: TORCH_PURLIN_CUDA_PDL on an sm_90+ GPU
  // The hosts' channel (group_channel.h), made at setup: all_to_all's split sizes, NOTE [checked
  // calls], the copy-engine call check, settled local errors; the broken state; the health record.
  GroupChannel channel_;
  PoolAgreement pool_agreement_;  // NOTE [pool agreement on the host]
  LaunchOrder order_;             // NOTE [stream order]
  cu::SymmetricWorkspace::AllGather exchange_;
  std::shared_ptr<cu::SymmetricPool> pool_;
  std::string pool_error_;
  int64_t pool_bytes_ = 0;  // TORCH_PURLIN_CUDA_POOL_BYTES when the group was created (the pool is made on first use)
  std::unique_ptr<cu::CopyEngineAtom> ce_;  // null unless every rank can use it
  int64_t ce_bytes_ = 0;
  std::vector<void*> ce_peer_inputs_;  // launch_copy_engine's table, reused
  LastLaunch last_;
  // protocol_counts(): launches by (Request::name, the protocol's name in
  // protocol_names_, whose nodes outlive any evicted plan); names are
  // literals, so a launch costs a pointer-pair hash, not string work
  // (NOTE [eager host path]).
  struct PtrPairHash {
    size_t operator()(const std::pair<const void*, const void*>& k) const {
      return std::hash<const void*>()(k.first) * 31 + std::hash<const void*>()(k.second);
    }
  };
  std::unordered_map<std::pair<const void*, const void*>, int64_t, PtrPairHash> launches_;
  std::set<std::string> protocol_names_;
  NcclTable nccl_table_;
};

}  // namespace purlin::backend
