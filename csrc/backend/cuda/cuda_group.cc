// cuda_group.cc — CudaGroup (cuda_group.h): settings, setup and teardown, the
// text of device errors, the symmetric pool (its agreement: pool_agreement.cc).
// The rest of the class: cuda_group_host_checks.cc (host-side agreements
// between the ranks), cuda_group_plans.cc (plan choice; the cache:
// cuda_plan_cache.cc), cuda_group_launch.cc (launches; their order across
// streams: launch_order.cc).
#ifdef PURLIN_WITH_CUDA

#include "backend/cuda/cuda_group.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <sstream>

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>

#include "atom/cuda/interned_names.h"
#include "backend/c10d/store_rendezvous.h"
#include "backend/group/setup_agreement.h"
#include "common/env.h"

namespace purlin::backend {

namespace {

const char* kind_name(int kind) {
  switch (kind) {
    case cu::kDone: return "Done";
    case cu::kStaged: return "Staged";
    case cu::kConsumed: return "Consumed";
    case cu::kCallTag: return "call tag";
    case cu::kLine: return "flagged-line";
    default: return "local-barrier";
  }
}

// The RuntimeError text of a device timeout, call-tag mismatch or abort.
// `checked_calls`: NOTE [checked calls] compared every rank's arguments before
// the launch. `broke`: why the group broke (NOTE [group health]), "" if it was
// aborted or has not broken.
std::string describe(const cu::ErrorRecord& e, std::chrono::milliseconds timeout, bool checked_calls,
                     const std::string& broke) {
  const bool aborted = e.status == cu::kRecordAborted;  // NOTE [device abort]
  if (aborted && !broke.empty()) {  // the device's view of the group's break: name the break
    std::ostringstream os;
    os << "purlin " << cu::interned_name(e.op_name) << " on rank " << e.rank << ": the group is unusable: " << broke;
    if (e.kind == cu::kLocal)
      os << " (this rank's kernel was at a barrier of its blocks in phase '" << cu::interned_name(e.phase) << "')";
    else if (e.peer >= 0)
      os << " (this rank's " << (e.block == cu::kCopyEngineBlock ? "copy-engine stream" : "kernel")
         << " was waiting for rank " << e.peer << " in phase '" << cu::interned_name(e.phase) << "')";
    os << ". Destroy the group and create a new one.";
    return os.str();
  }
  if (e.block == cu::kCopyEngineBlock) return cu::describe_copy_engine_timeout(e, timeout.count());
  std::ostringstream os;
  os << "purlin " << cu::interned_name(e.op_name) << " on rank " << e.rank << ": ";
  if (e.kind == cu::kCallTag && checked_calls) {
    // NOTE [checked calls] found the arguments equal: say what it compared, and what else the tag covers.
    os << "rank " << e.peer << " called this collective with another call tag than this rank, "
       << "although TORCH_PURLIN_CUDA_CHECK_CALLS compared every rank's arguments on the host before the launch "
       << "(collective, dtype, reduce op, root, element counts, split sizes, custom spec) and found them equal. So the "
       << "difference is in what the call tag covers beyond the arguments: whether each rank's input or output is in "
       << "the symmetric pool and at which offset, whether it is in place, or the plan each rank derived from the "
       << "same arguments (a purlin bug: please report it with TORCH_PURLIN_DEBUG=1's plan lines of every rank). "
       << "Nothing of rank " << e.peer << "'s data was read. The group is unusable: destroy it and create a new one.";
    return os.str();
  }
  if (e.kind == cu::kCallTag) {
    os << "rank " << e.peer << " called this collective with other arguments than this rank (element count, "
       << "dtype, reduce op, root, split sizes, or its input is not at the same place of the symmetric pool; also "
       << "when only some ranks passed tensors from the symmetric pool or in-place tensors, which changes the plan); "
       << "nothing of rank " << e.peer << "'s data was read. The group is "
       << "unusable: destroy it and create a new one.";
    return os.str();
  }
  if (aborted) os << "the group was aborted (abort(), e.g. torch's _abort_process_group) while ";
  else os << "timed out after " << timeout.count() << " ms ";
  if (e.kind == cu::kLocal)
    os << "waiting for block " << e.from_block << " of this rank (block " << e.block << " at a local barrier)";
  else if (e.kind == cu::kLine)  // NOTE [flagged lines]: expected / seen are the line flags
    os << "waiting for rank " << e.peer << " (block " << e.block << " polled a flagged line of its data for flag 0x"
       << std::hex << e.expected << ", saw 0x" << e.seen << std::dec << ")";
  else
    os << "waiting for rank " << e.peer << " (block " << e.block << " waited for the " << kind_name(e.kind)
       << " flag of its block " << e.from_block << " to reach step " << e.expected << ", saw " << e.seen << ")";
  os << "; phase '" << cu::interned_name(e.phase) << "'.";
  if (e.kind != cu::kLocal && !aborted)  // most mismatched calls end in the call-tag error, not all (NOTE [call tags])
    os << " If rank " << e.peer << " is running, it may have called another collective, or this one with other "
       << "sizes or options that run another protocol.";
  os << " The group is unusable: destroy it and create a new one.";
  return os.str();
}

}  // namespace

std::string CudaGroup::read_error(const cu::SymmetricWorkspace& ws, std::chrono::milliseconds timeout,
                                  bool checked_calls, const std::function<std::string()>& reason) {
  const cu::ErrorRecord* e = ws.error_host();
  const uint32_t status = e->status;
  if (status == cu::kRecordNone) return "";
  std::atomic_thread_fence(std::memory_order_acquire);
  return describe(*e, timeout, checked_calls, status == cu::kRecordAborted && reason ? reason() : std::string());
}

// Read by the health watcher's thread (NOTE [group health]): host-mapped memory, no CUDA call.
std::string CudaGroup::own_device_error(const cu::SymmetricWorkspace& ws, std::chrono::milliseconds timeout,
                                        bool checked_calls) {
  const uint32_t status = ws.error_host()->status;
  if (status == cu::kRecordNone || status == cu::kRecordAborted) return "";  // an abort is not a finding here
  return read_error(ws, timeout, checked_calls, nullptr);
}

// Every TORCH_PURLIN_CUDA_* setting the group's setup needs, from the group's
// settings (NOTE [group settings]: the equal ones were agreed when the group
// was made; the combined ones are combined in the exchanges below and in the
// workspace's probe); throws std::invalid_argument naming a malformed one (the
// constructor turns that into this rank's reply to the setup agreement).
void CudaGroup::read_settings(cu::SymmetricWorkspace::Options& opt, std::string& nccl_table) {
  const env::Settings& st = ctx_->settings;
  two_shot_bytes_ = two_shot_bytes(st, "TORCH_PURLIN_CUDA_TWO_SHOT_BYTES", world_);  // NOTE [protocol table]
  pool_bytes_ = st.get_bytes("TORCH_PURLIN_CUDA_POOL_BYTES");  // read with the rest: the pool itself comes later
  const std::string placement = st.get("TORCH_PURLIN_CUDA_POOL_PLACEMENT");  // NOTE [local placement]
  if (placement != "agreed" && placement != "local")
    throw std::invalid_argument("TORCH_PURLIN_CUDA_POOL_PLACEMENT: expected agreed or local, got '" + placement + "'");
  pool_local_ = placement == "local";
  debug_ = st.get_bool("TORCH_PURLIN_DEBUG");
  check_calls_ = st.get_bool("TORCH_PURLIN_CUDA_CHECK_CALLS");
  overlap_ = st.get_bool("TORCH_PURLIN_CUDA_PDL");  // where the Atom's table allows it (the constructor)
  opt.rank = rank_;
  opt.world = world_;
  opt.device = device_;
  opt.workspace_bytes = st.get_bytes("TORCH_PURLIN_CUDA_WORKSPACE_BYTES");
  opt.line_max_bytes = st.get_bytes("TORCH_PURLIN_CUDA_LINE_BYTES");
  opt.parity_max_bytes = st.get_bytes("TORCH_PURLIN_CUDA_PARITY_BYTES");
  const std::string line_format = st.get("TORCH_PURLIN_CUDA_LINE_FORMAT");
  if (line_format != "auto" && line_format != "wide" && line_format != "narrow")
    throw std::invalid_argument("TORCH_PURLIN_CUDA_LINE_FORMAT: expected auto, wide or narrow, got '" + line_format + "'");
  opt.line_format = line_format == "auto" ? cu::LineFormat::Auto
                    : line_format == "wide" ? cu::LineFormat::Wide
                                            : cu::LineFormat::Narrow;
  opt.blocks = st.get_int("TORCH_PURLIN_CUDA_BLOCKS");
  opt.share_gpu = st.get_bool("TORCH_PURLIN_CUDA_SHARE_GPU");
  // NOTE [shared GPU]: the job's ranks on this GPU, derived (GroupContext::job_ranks_per_gpu); the
  // workspace's probe plans every rank's SMs with the largest count any rank states.
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess) gpus = 0;
  cudaGetLastError();
  opt.share_gpu_ranks = ctx_->job_ranks_per_gpu(gpus);
  ce_bytes_ = st.get_bytes("TORCH_PURLIN_CUDA_CE_BYTES");
  nccl_table = st.get("TORCH_PURLIN_CUDA_NCCL_FROM");
  NcclTable::parse(nccl_table, world_);  // a typo fails where it was made (NOTE [protocol table])
}

CudaGroup::CudaGroup(int rank, int world, std::chrono::milliseconds timeout, c10::intrusive_ptr<c10d::Store> store,
                     int device, GroupHealth* health, std::shared_ptr<const GroupContext> ctx)
    : rank_(rank),
      world_(world),
      device_(device),
      timeout_(timeout),
      health_(health),
      ctx_(std::move(ctx)),
      break_reason_(health->signal().reason_source()),
      channel_(rank, world, timeout, health),
      pool_agreement_(rank, world, timeout, store, health) {
  c10::cuda::CUDAGuard guard(device_);
  // NOTE [setup agreement]: every rank reads its settings, then all state
  // ok-or-why before the first exchange below waits on a peer.
  cu::SymmetricWorkspace::Options opt;
  std::string table_mine, my_error;
  try {
    read_settings(opt, table_mine);
  } catch (const std::exception& e) {
    my_error = e.what();
  }
  const Rendezvous rdv = store_rendezvous(store, timeout_);
  const std::string why = agree_on_setup(rdv, "purlin/cuda/setup/agree/", rank_, world_, my_error);
  if (!why.empty()) throw std::runtime_error(why);
  const int me = rank_, W = world_;
  exchange_ = [rdv, me, W](const std::string& tag, const std::string& mine) {
    return all_gather(rdv, "purlin/cuda/setup/" + tag + "/", me, W, mine);
  };
  std::unique_ptr<cu::SymmetricWorkspace> ws = cu::SymmetricWorkspace::create(opt, exchange_, &unavailable_);
  if (!ws) {
    if (ctx_->settings.get_bool("TORCH_PURLIN_LOG"))
      std::fprintf(stderr, "[purlin] rank %d: CUDA datapath unavailable, CUDA tensors use NCCL: %s (logged once)\n",
                   rank_, unavailable_.c_str());
    return;
  }
  ws_ = std::move(ws);
  settings_ = ws_->protocol_settings();  // NOTE [protocol choice]
  overlap_ = overlap_ && settings_.config.overlapped_launch;  // NOTE [overlapped launch]
  internal_.emplace(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device_));
  const c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool(false, device_);
  store_plans_ = std::make_unique<cu::PlanStore>(
      device_,
      [side](size_t n) { return c10::cuda::CUDACachingAllocator::raw_alloc_with_stream(n, side.stream()); },
      [](void* p) { c10::cuda::CUDACachingAllocator::raw_delete(p); });
  order_.open();
  // The copy-engine Atom: used only if every rank can (the choice per
  // collective must be the same on all ranks).
  // The group uses the largest threshold any rank asks for; 0 anywhere: off.
  // The Atom (and its watchdog thread) exists only where it is asked for.
  std::unique_ptr<cu::CopyEngineAtom> ce;
  if (ce_bytes_ > 0) ce = std::make_unique<cu::CopyEngineAtom>(ws_);
  const int64_t mine = ce && ce->unavailable().empty() ? ce_bytes_ : 0;
  bool all_ce = true;
  for (const std::string& a : exchange_("copy-engine", std::to_string(mine))) {
    const int64_t v = std::stoll(a);
    all_ce &= v > 0;
    ce_bytes_ = std::max(ce_bytes_, v);
  }
  // NOTE [protocol table]: the table is equal on every rank (NOTE [settings across ranks]: agreed
  // when the group was made), so every rank routes alike.
  nccl_table_ = NcclTable::parse(table_mine, world_);
  if (!ws_->shared_gpu().empty()) {  // NOTE [shared GPU]: NCCL refuses the group, so every size stays native
    nccl_table_ = NcclTable{};
    if (rank_ == 0 && ctx_->settings.get_bool("TORCH_PURLIN_LOG"))
      std::fprintf(stderr, "[purlin] rank 0: %s (TORCH_PURLIN_CUDA_SHARE_GPU): every size runs natively, up to %d "
                   "blocks per launch (logged once)\n", ws_->shared_gpu().c_str(), ws_->launch_config().max_blocks);
  }
  // Settings that hold only if every rank asks, in one exchange: NOTE [checked
  // calls] (each rank's launches must exchange alike) and NOTE [local
  // placement] (an agreeing rank would wait for the others' proposals).
  const std::string asked = std::string(check_calls_ ? "1" : "0") + (pool_local_ ? "1" : "0");
  std::string every = asked;
  for (const std::string& a : exchange_("every-rank-settings", asked))
    for (size_t i = 0; i < every.size(); ++i)
      if (i >= a.size() || a[i] != '1') every[i] = '0';
  auto settle = [&](bool* flag, size_t i, const char* setting, const char* instead) {
    if (*flag && every[i] != '1' && ctx_->settings.get_bool("TORCH_PURLIN_LOG"))
      std::fprintf(stderr, "[purlin] rank %d: %s here but not on every rank: %s (logged once)\n", rank_, setting,
                   instead);
    *flag = every[i] == '1';
  };
  settle(&check_calls_, 0, "TORCH_PURLIN_CUDA_CHECK_CALLS=1", "off");
  settle(&pool_local_, 1, "TORCH_PURLIN_CUDA_POOL_PLACEMENT=local", "agreed placement");
  if (all_ce) ce_ = std::move(ce);
  else if (debug_ && mine > 0)
    std::fprintf(stderr, "[purlin] rank %d: copy-engine Atom unavailable here or on a peer: %s\n", rank_,
                 ce->unavailable().empty() ? "(a peer)" : ce->unavailable().c_str());
  if (!ws_->wide_refusal().empty() && rank_ == 0 && ctx_->settings.get_bool("TORCH_PURLIN_LOG"))  // NOTE [wide lines]
    std::fprintf(stderr, "[purlin] rank 0: narrow flagged lines only (TORCH_PURLIN_CUDA_LINE_FORMAT=auto): %s\n",
                 ws_->wide_refusal().c_str());
  // The hosts' channel, with this rank's health record (NOTE [group health]); its watcher reads
  // this rank's device error record too, to publish what the kernels found at once.
  {
    std::shared_ptr<const cu::SymmetricWorkspace> ws = ws_;
    const std::chrono::milliseconds t = timeout_;
    const bool checked = check_calls_;
    channel_.open("cuda-a2a", 4096, meta_blob_bytes(world_), rdv,
                  [ws, t, checked]() { return own_device_error(*ws, t, checked); });
  }
  // NOTE [device abort]: last, so a constructor that throws leaves nothing attached.
  abort_word_ = &ws_->error_host()->abort_requested;
  health_->signal().attach(abort_word_);
  if (debug_)
    std::fprintf(stderr, "[purlin] rank %d: CUDA workspace %lld bytes, up to %d blocks x %d threads (%s)\n", rank_,
                 static_cast<long long>(ws_->workspace_bytes()), ws_->launch_config().max_blocks, ws_->threads(),
                 ws_->config_name());
}

// Waits (bounded by the group timeout) for this group's last kernel, so the
// plans and buffers freed next are no longer read; best effort at exit.
CudaGroup::~CudaGroup() {
  if (abort_word_) health_->signal().detach(abort_word_);  // the workspace (and the word) may outlive the group in a CudaWork
  if (!ws_) return;
  c10::cuda::CUDAGuard guard(device_);
  order_.close();
  cudaGetLastError();
}

void CudaGroup::set_timeout(std::chrono::milliseconds t) {
  timeout_ = t;
  channel_.set_timeout(t);
  pool_agreement_.set_timeout(t);
}

std::shared_ptr<cu::SymmetricPool> CudaGroup::pool() {
  if (pool_) return pool_;
  if (!pool_error_.empty()) throw std::runtime_error(pool_error_);
  c10::cuda::CUDAGuard guard(device_);
  std::string why;
  uint64_t* table = static_cast<uint64_t*>(ws_->self()) + ws_->layout().pool_table(0);
  pool_ = cu::SymmetricPool::create(rank_, world_, device_, pool_bytes_, table,
                                    exchange_, &why);
  if (!pool_) {
    pool_error_ = "purlin: the symmetric pool is unavailable: " + why;
    throw std::runtime_error(pool_error_);
  }
  return pool_;
}

}  // namespace purlin::backend

#endif  // PURLIN_WITH_CUDA
