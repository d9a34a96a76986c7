// cuda_group.cc — CudaGroup (cuda_group.h): setup, plan cache, launches.
#ifdef PURLIN_WITH_CUDA

#include "backend/cuda_group.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <sstream>

#include <ATen/record_function.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>

#include "atom/cpu/cpu_atom.h"
#include "atom/cuda/cuda_check.h"
#include "backend/setup_agreement.h"
#include "backend/shm_group.h"
#include "backend/store_rendezvous.h"
#include "common/env.h"
#include "snac/arrival.h"

namespace purlin::backend {

namespace {

constexpr size_t kMaxPlans = 1024;

// request.h's classification, in the device lowering's terms.
cu::IoAlias alias_of(const Request& rq, int64_t* shift = nullptr) {
  static_assert(static_cast<int>(cu::IoAlias::Same) == static_cast<int>(IoAlias::Same) &&
                static_cast<int>(cu::IoAlias::Overlap) == static_cast<int>(IoAlias::Overlap) &&
                static_cast<int>(cu::IoAlias::Shifted) == static_cast<int>(IoAlias::Shifted));
  return static_cast<cu::IoAlias>(io_alias(rq, shift));
}

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

// The RuntimeError text of a device timeout.
std::string describe(const cu::ErrorRecord& e, std::chrono::milliseconds timeout) {
  if (e.block == cu::kCopyEngineBlock) return cu::describe_copy_engine_timeout(e, timeout.count());
  std::ostringstream os;
  os << "purlin " << cu::interned_name(e.op_name) << " on rank " << e.rank << ": ";
  if (e.kind == cu::kCallTag) {
    os << "rank " << e.peer << " called this collective with other arguments than this rank (element count, "
       << "dtype, reduce op, root, split sizes, or its input is not at the same place of the symmetric pool; also "
       << "when only some ranks passed tensors from the symmetric pool or in-place tensors, which changes the plan: "
       << "NOTE [call tags], [zero-copy in place]); nothing of rank " << e.peer << "'s data was read. The group is "
       << "unusable: destroy it and create a new one.";
    return os.str();
  }
  os << "timed out after " << timeout.count() << " ms ";
  if (e.kind == cu::kLocal)
    os << "waiting for block " << e.from_block << " of this rank (block " << e.block << " at a local barrier)";
  else if (e.kind == cu::kLine)  // NOTE [flagged lines]: expected / seen are the line flags
    os << "waiting for rank " << e.peer << " (block " << e.block << " polled a flagged line of its data for flag 0x"
       << std::hex << e.expected << ", saw 0x" << e.seen << std::dec << ")";
  else
    os << "waiting for rank " << e.peer << " (block " << e.block << " waited for the " << kind_name(e.kind)
       << " flag of its block " << e.from_block << " to reach step " << e.expected << ", saw " << e.seen << ")";
  os << "; phase '" << cu::interned_name(e.phase) << "'.";
  if (e.kind != cu::kLocal)  // most mismatched calls end in the call-tag error, not all (NOTE [call tags])
    os << " If rank " << e.peer << " is running, it may have called another collective, or this one with other "
       << "sizes or options that run another protocol.";
  os << " The group is unusable: destroy it and create a new one.";
  return os.str();
}

}  // namespace

std::string CudaGroup::read_error(const cu::SymmetricWorkspace& ws, std::chrono::milliseconds timeout) {
  const cu::ErrorRecord* e = ws.error_host();
  if (e->status == 0) return "";
  std::atomic_thread_fence(std::memory_order_acquire);
  return describe(*e, timeout);
}

// Every TORCH_PURLIN_CUDA_* setting the group's setup needs; throws
// std::invalid_argument naming a malformed one (the constructor turns that
// into this rank's reply to the setup agreement).
void CudaGroup::read_settings(cu::SymmetricWorkspace::Options& opt, std::string& nccl_table) {
  constexpr const char* kTwoShot = "TORCH_PURLIN_CUDA_TWO_SHOT_BYTES";  // NOTE [protocol table]
  two_shot_bytes_ = bytes_for_world(env::get(kTwoShot), world_, kTwoShot);
  pool_bytes_ = env::get_bytes("TORCH_PURLIN_CUDA_POOL_BYTES");  // read with the rest: the pool itself comes later
  const std::string placement = env::get("TORCH_PURLIN_CUDA_POOL_PLACEMENT");  // NOTE [local placement]
  if (placement != "agreed" && placement != "local")
    throw std::invalid_argument("TORCH_PURLIN_CUDA_POOL_PLACEMENT: expected agreed or local, got '" + placement + "'");
  pool_local_ = placement == "local";
  match_waits_ = env::get_bool("TORCH_PURLIN_CUDA_MATCHED_WAITS");
  push_copies_ = push_reductions_ = push_reduced_ = false;
  const std::vector<std::string> push = env::get_list("TORCH_PURLIN_CUDA_PUSH");  // NOTE [push]
  for (const std::string& item : push) {
    if (item == "copies" || item == "all") push_copies_ = true;
    if (item == "reductions" || item == "all") push_reductions_ = true;
    if (item == "reduced" || item == "all") push_reduced_ = true;
    if (item != "copies" && item != "reductions" && item != "reduced" && item != "all" && item != "none")
      throw std::invalid_argument("TORCH_PURLIN_CUDA_PUSH: expected a comma list of copies, reductions, reduced, all "
                                  "or none, got '" + env::get("TORCH_PURLIN_CUDA_PUSH") + "'");
  }
  if (push.empty())
    throw std::invalid_argument("TORCH_PURLIN_CUDA_PUSH: empty (none turns pushing off)");
  debug_ = env::get_bool("TORCH_PURLIN_DEBUG");
  check_calls_ = env::get_bool("TORCH_PURLIN_CUDA_CHECK_CALLS");
  int major = 0;  // NOTE [overlapped launch]: programmatic dependent launch needs sm_90+
  overlap_ = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device_) == cudaSuccess && major >= 9 &&
             env::get_bool("TORCH_PURLIN_CUDA_PDL");
  cudaGetLastError();
  opt.rank = rank_;
  opt.world = world_;
  opt.device = device_;
  opt.workspace_bytes = env::get_bytes("TORCH_PURLIN_CUDA_WORKSPACE_BYTES");
  opt.line_max_bytes = env::get_bytes("TORCH_PURLIN_CUDA_LINE_BYTES");
  opt.parity_max_bytes = env::get_bytes("TORCH_PURLIN_CUDA_PARITY_BYTES");
  const std::string line_format = env::get("TORCH_PURLIN_CUDA_LINE_FORMAT");
  if (line_format != "auto" && line_format != "wide" && line_format != "narrow")
    throw std::invalid_argument("TORCH_PURLIN_CUDA_LINE_FORMAT: expected auto, wide or narrow, got '" + line_format + "'");
  opt.line_format = line_format == "auto" ? cu::LineFormat::Auto
                    : line_format == "wide" ? cu::LineFormat::Wide
                                            : cu::LineFormat::Narrow;
  opt.blocks = env::get_int("TORCH_PURLIN_CUDA_BLOCKS");
  opt.share_gpu = env::get_bool("TORCH_PURLIN_CUDA_SHARE_GPU");
  opt.share_gpu_ranks = env::get_int("TORCH_PURLIN_CUDA_SHARE_GPU_RANKS");
  ce_bytes_ = env::get_bytes("TORCH_PURLIN_CUDA_CE_BYTES");
  nccl_table = env::get("TORCH_PURLIN_CUDA_NCCL_FROM");
  NcclTable::parse(nccl_table, world_);  // a typo fails where it was made (NOTE [protocol table])
}

CudaGroup::CudaGroup(int rank, int world, std::chrono::milliseconds timeout, c10::intrusive_ptr<c10d::Store> store,
                     int device, const std::atomic<bool>* aborted)
    : rank_(rank), world_(world), device_(device), timeout_(timeout), store_(std::move(store)), aborted_(aborted) {
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
  const Rendezvous rdv = store_rendezvous(store_, timeout_);
  const std::string why = agree_on_setup(rdv, "purlin/cuda/setup/agree/", rank_, world_, my_error);
  if (!why.empty()) throw std::runtime_error(why);
  const int me = rank_, W = world_;
  exchange_ = [rdv, me, W](const std::string& tag, const std::string& mine) {
    return all_gather(rdv, "purlin/cuda/setup/" + tag + "/", me, W, mine);
  };
  std::unique_ptr<cu::SymmetricWorkspace> ws = cu::SymmetricWorkspace::create(opt, exchange_, &unavailable_);
  if (!ws) {
    if (env::get_bool("TORCH_PURLIN_LOG"))
      std::fprintf(stderr, "[purlin] rank %d: CUDA datapath unavailable, CUDA tensors use NCCL: %s (logged once)\n",
                   rank_, unavailable_.c_str());
    return;
  }
  ws_ = std::move(ws);
  internal_.emplace(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device_));
  const c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool(false, device_);
  store_plans_ = std::make_unique<cu::PlanStore>(
      device_,
      [side](size_t n) { return c10::cuda::CUDACachingAllocator::raw_alloc_with_stream(n, side.stream()); },
      [](void* p) { c10::cuda::CUDACachingAllocator::raw_delete(p); });
  cu::check(cudaEventCreateWithFlags(&order_event_, cudaEventDisableTiming), "cudaEventCreate");
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
  // NOTE [protocol table]: every rank routes by rank 0's table (a rank's
  // own value is still checked, so a typo fails where it was made).
  const std::vector<std::string> tables = exchange_("nccl-table", table_mine);
  nccl_table_ = NcclTable::parse(tables[0], world_);
  if (tables[rank_] != tables[0])
    std::fprintf(stderr, "[purlin] rank %d: TORCH_PURLIN_CUDA_NCCL_FROM differs from rank 0's; using rank 0's '%s'\n",
                 rank_, tables[0].c_str());
  if (!ws_->shared_gpu().empty()) {  // NOTE [shared GPU]: NCCL refuses the group, so every size stays native
    nccl_table_ = NcclTable{};
    if (rank_ == 0 && env::get_bool("TORCH_PURLIN_LOG"))
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
    if (*flag && every[i] != '1' && env::get_bool("TORCH_PURLIN_LOG"))
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
  if (!ws_->wide_refusal().empty() && rank_ == 0 && env::get_bool("TORCH_PURLIN_LOG"))  // NOTE [wide lines]
    std::fprintf(stderr, "[purlin] rank 0: narrow flagged lines only (TORCH_PURLIN_CUDA_LINE_FORMAT=auto): %s\n",
                 ws_->wide_refusal().c_str());
  if (debug_)
    std::fprintf(stderr, "[purlin] rank %d: CUDA workspace %lld bytes, up to %d blocks x %d threads (%s)\n", rank_,
                 static_cast<long long>(ws_->workspace_bytes()), ws_->launch_config().max_blocks, ws_->threads(),
                 ws_->config_name());
}

// Waits (bounded by the group timeout) for this group's last kernel, so the
// plans and buffers freed next are no longer read; best effort at exit.
CudaGroup::~CudaGroup() {
  if (!ws_) return;
  c10::cuda::CUDAGuard guard(device_);
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  if (have_last_ && cudaStreamIsCapturing(last_stream_, &st) == cudaSuccess && st == cudaStreamCaptureStatusNone)
    cudaStreamSynchronize(last_stream_);
  if (order_event_) cudaEventDestroy(order_event_);
  cudaGetLastError();
}

void CudaGroup::set_timeout(std::chrono::milliseconds t) {
  timeout_ = t;
  if (a2a_atom_) a2a_atom_->set_timeout(t);
  if (pool_atom_) pool_atom_->set_timeout(t);
}

atom::CpuAtom& CudaGroup::host_atom() {
  if (!a2a_atom_)
    a2a_atom_ = make_shm_group("cuda-a2a", rank_, world_, 4096, meta_blob_bytes(world_), timeout_,
                               store_rendezvous(store_, timeout_), aborted_);
  return *a2a_atom_;
}

// NOTE [copy-engine call check] The plan kernel checks on the GPU that the
// ranks made the same call (NOTE [call tags]); the copy engines cannot:
// stream memory operations only wait for a value >= v (an equality check
// built from two such waits left both ranks' streams blocked past the
// watchdog on one shared H200, session 17). So every copy-engine collective
// first exchanges its signature (what the call tag hashes: the Spec, dtype
// and options, and the pool offsets of zero-copy inputs) through the host's
// shared-memory arrival, microseconds beside the large collectives this path
// serves. A difference raises on every rank before anything is enqueued (the
// group stays usable); a rank that never comes is a timeout naming it.
void CudaGroup::ce_check(const Request& rq, uint64_t sig) {
  const uint64_t n = ++a2a_seq_;
  const atom::WaitSite site{rq.name, "copy engine: check the call's arguments with every rank", n};
  std::vector<std::string> all;
  try {
    all = snac::arrive_tagged(host_atom(), n, std::string("ce:") + rq.name, std::to_string(sig), site,
                              " (collectives called in different orders, or on different paths)");
  } catch (const atom::TimeoutError& e) {
    broken_ = e.what();
    throw std::runtime_error(e.what());
  } catch (const std::runtime_error& e) {
    throw std::invalid_argument(error_prefix(rq.name, rank_) + e.what());
  }
  for (int r = 0; r < world_; ++r)
    if (all[r] != all[rank_])
      throw std::invalid_argument(error_prefix(rq.name, rank_) + "rank " + std::to_string(r) +
                                  " called this collective with other arguments (copy engine: another Spec, dtype "
                                  "or pool offsets; NOTE [copy-engine call check]); nothing was enqueued");
}

// NOTE [one-sided local errors] A CUDA collective's local argument checks
// (sizes, dtypes, roots) raise on this rank at once, without asking the peers:
// asking would cost every call a host exchange (NOTE [checked calls]). When
// every rank made the same mistake, every rank raised and the group goes on in
// step. When only this rank did, the others entered the collective and wait
// for it on the GPU, and this rank's next collective would meet their data
// from that call (an H200 run returned a wrong sum so, session 18). So the
// next collective after a local error first asks every rank on the host
// whether it raised at that same call: if all did, nothing else happens; a
// rank that does not come within the group's timeout entered the collective,
// and the group is unusable here as it is there (the others' device waits
// time out naming this rank).
void CudaGroup::settle_local_error(const Request& rq) {
  const std::string what = std::move(local_error_);
  local_error_.clear();
  const uint64_t n = ++a2a_seq_;
  const atom::WaitSite site{rq.name, "after a local argument error: check that every rank raised it too", n};
  try {
    // host_atom() is made with every rank on first use: a rank that entered the erroneous call is not there
    // either (the set-up's wait names it, store_rendezvous.h)
    snac::arrive_tagged(host_atom(), n, "local argument error", "raised", site,
                        " (the ranks raised at different calls)");
  } catch (const std::runtime_error& e) {  // atom::TimeoutError too: a rank entered the erroneous call
    broken_ = "an earlier call raised an argument error on this rank only (" + what +
              "), while other ranks entered that collective: " + e.what();
    throw std::runtime_error(error_prefix(rq.name, rank_) + broken_);
  }
}

std::vector<PeerMeta> CudaGroup::peer_meta(const Request& rq) {
  const std::vector<std::byte> blob = encode_meta(rq, world_);
  const PeerMeta mine = decode_meta(blob.data(), world_);
  if (rq.op != CollOp::AllToAll && !check_calls_) return std::vector<PeerMeta>(world_, mine);
  // all_to_all: the plan needs every rank's splits. They are exchanged on the
  // host through a shared-memory arrival handshake (NOTE [arrival]; the ranks
  // of a CUDA group share one host), microseconds instead of a Store round trip.
  // NOTE [checked calls] With TORCH_PURLIN_CUDA_CHECK_CALLS every collective
  // exchanges its arguments so, and check_agreement() names any difference
  // before anything is launched: also the mismatched calls that the call tags
  // cannot name because the ranks' sizes chose different protocols (lines,
  // parity or workspace plans, different block counts), which otherwise wait
  // for flags that never come until the group's timeout.
  host_atom();
  const uint64_t n = ++a2a_seq_;
  const atom::WaitSite site{rq.name, rq.op == CollOp::AllToAll ? "all_to_all: exchange split sizes with every rank"
                                                               : "check the call's arguments with every rank", n};
  std::vector<PeerMeta> all;
  try {
    for (const std::byte* b : snac::arrive(*a2a_atom_, n, blob.data(), blob.size(), site))
      all.push_back(decode_meta(b, world_));
  } catch (const atom::TimeoutError& e) {
    broken_ = e.what();
    throw std::runtime_error(e.what());
  }
  const std::string why = check_agreement(all, rank_);
  if (!why.empty()) throw std::invalid_argument(error_prefix(rq.name, rank_) + why);
  return all;
}

// NOTE [zero-copy in place] Reading peers' inputs in place is safe when no
// rank overwrites an input a peer may still read: always when Input and
// Output are disjoint; for in-place broadcast (only the root's buffer is
// read, and nobody writes it); and for in-place two-shot all_reduce: rank d
// writes slice o of its output only after owner o's phase-1 Staged, i.e.
// after o finished reading slice o of every input, and o is the only reader
// of that slice. One-shot in place would overwrite an input every peer reads,
// so it stages. (test/cpp/test_cuda_plan_emulation.cc fails if this rule
// admits one-shot in place.) Gather and scatter never read in place: only
// their root may alias Input and Output, so its peers could not judge alike
// and the call tags would refuse a valid call.
bool CudaGroup::zero_copy_allowed(const Request& rq) const {
  if (rq.op == CollOp::Gather || rq.op == CollOp::Scatter) return false;
  const cu::IoAlias alias = alias_of(rq);
  if (alias == cu::IoAlias::Disjoint) return true;
  if (alias != cu::IoAlias::Same) return false;
  if (rq.op == CollOp::Broadcast) return true;
  return two_shot(rq);
}

// NOTE [peer outputs] (snac/plan.h): every rank's output in the symmetric
// pool at the same offset (the call tag checks it) lets copy collectives
// write straight into the peers' outputs. Only ops whose every rank has an
// output of the same size and may alias it any way it likes: all_gather (in
// place, the input is the rank's own slot, which nobody else writes) and
// broadcast (nobody reads a non-root's buffer). all_to_all in place would
// let a peer overwrite a slot this rank has yet to send, and a rank's alias
// is its own choice, so it is left out; gather and scatter have outputs on
// some ranks only.
bool CudaGroup::peer_outputs_allowed(const Request& rq) const {
  return (rq.op == CollOp::AllGather || rq.op == CollOp::Broadcast) && !rq.custom && rq.out_numel > 0;
}

// In-place all_gather by its layout, alike on every rank (rank 0's input
// starts where its output does: alias Same there, Shifted elsewhere).
static bool in_place_all_gather(const Request& rq, int rank, int world) {
  const size_t bytes = static_cast<size_t>(rq.in_numel) * dtype_size(rq.dtype);
  return rq.op == CollOp::AllGather && !rq.custom && rq.out_numel == rq.in_numel * world &&
         static_cast<const char*>(rq.in) == static_cast<const char*>(rq.out) + static_cast<size_t>(rank) * bytes;
}

// NOTE [copy-engine zero-copy]: the copy engines only pull, so a copy
// collective whose output is in the pool (where the kernel would write into
// the peers' outputs, NOTE [peer outputs]) reads the peers' inputs instead
// when those are in the pool too: in-place all_gather (rank q's input is
// slot q of its output: nobody else writes it) and in-place broadcast (only
// the root's buffer is read), or any input in a pool block of its own. Every
// rank judges alike by the contract of torch_purlin.empty (pool tensors on
// every rank, at the same offsets), which the call check enforces.
bool CudaGroup::ce_sources_in_pool(const Request& rq, int64_t out_offset, int64_t* in_offset) const {
  if (in_place_all_gather(rq, rank_, world_)) {
    *in_offset = out_offset;  // rank q's input: out_offset + q * its bytes
    return true;
  }
  if (!zero_copy_allowed(rq)) return false;  // NOTE [zero-copy in place]
  if (alias_of(rq) == cu::IoAlias::Same) {   // in-place broadcast: the input is the pool output
    *in_offset = out_offset;
    return true;
  }
  const int64_t esize = static_cast<int64_t>(dtype_size(rq.dtype));
  *in_offset = pool_->offset_of(rq.in, std::max<int64_t>(1, rq.in_numel * esize));
  return *in_offset >= 0;
}

void CudaGroup::launch_copy_engine(const Request& rq, const CachedPlan& c, int64_t in_offset, cudaStream_t stream) {
  cu::CeCall call;
  call.plan = &c.snac_plan;
  call.input = rq.in;
  call.output = rq.out;
  call.dtype = rq.dtype;
  call.op_name = rq.name;
  call.timeout_ns = static_cast<uint64_t>(timeout_.count()) * 1000000ull;
  call.stream = stream;
  // NOTE [copy-engine call check]: what the kernel's call tag covers, and the place of the inputs.
  uint64_t sig = c.sig;
  if (in_offset >= 0) {
    const bool slots = in_place_all_gather(rq, rank_, world_);  // rank q's input is its output's slot q
    const int64_t stride = slots ? rq.in_numel * static_cast<int64_t>(dtype_size(rq.dtype)) : 0;
    ce_peer_inputs_.resize(static_cast<size_t>(world_));
    for (int q = 0; q < world_; ++q) ce_peer_inputs_[q] = pool_->base_of(q) + in_offset + q * stride;
    call.peer_inputs = ce_peer_inputs_.data();
    sig ^= static_cast<uint64_t>(in_offset + 1) * 0x100000001b3ull ^ (slots ? 0x5100000000000000ull : 0);
  }
  ce_check(rq, sig);
  const char* protocol = in_offset >= 0 ? "copy-engine+zero-copy" : "copy-engine";
  last_ = LastLaunch{protocol, 0, 0, false};
  count_launch(rq.name, &*protocol_names_.insert(protocol).first);
  const std::string err = ce_->enqueue(call);
  if (!err.empty()) {
    broken_ = err;
    throw std::runtime_error(error_prefix(rq.name, rank_) + err);
  }
}

// Whether a collective may run in a region (flagged lines, NOTE [line plans],
// or a parity plan, NOTE [parity plans]): no PREMUL_SUM (peers would read
// the scale word without a barrier). The size, the element size and the
// plan are judged by plan_for() on the Spec (snac::max_rank_elems), never by
// this rank's own tensor sizes, which differ between ranks (a scatter's root
// holds W blocks).
bool CudaGroup::region_wanted(const Request& rq) const {
  return world_ > 1 && (ws_->line_max_bytes() > 0 || ws_->parity_max_bytes() > 0) && rq.redop != RedOp::PremulSum;
}


// Whether an all_reduce runs two-shot (TORCH_PURLIN_CUDA_TWO_SHOT_BYTES). Every
// rank passes the same sizes to an all_reduce (the call tags check it).
bool CudaGroup::two_shot(const Request& rq) const {
  const int64_t bytes = std::max(rq.in_numel, rq.out_numel) * static_cast<int64_t>(dtype_size(rq.dtype));
  return rq.op == CollOp::AllReduce && world_ > 1 && bytes >= two_shot_bytes_;
}

namespace {

// NOTE [wide lines]: whether a line plan of `spec` (`bytes` per rank, dense
// destinations) runs on wide lines. Auto picks them where they measured
// faster on 2x H200: single-chunk specs (all_reduce, broadcast, reduce)
// above 128K per rank (session 11, with NOTE [wide line shape]:
// benchmarks/results/cuda_h200x2_20261130m_probes.md, table C: all_reduce
// 256K 5.20 us wide vs 5.64 narrow; 128K even, 64K narrow ahead);
// reductions of several chunks (reduce_scatter) above 256K and copies of
// several chunks (all_gather, all_to_all) above 512K, as measured before
// (cuda_h200x2_20261130f / g_probes.md; with wide lines from 128K the bench
// `cuda_h200x2_20261130m` had all_gather / reduce_scatter in place 0.2-0.4 us
// slower at 256K). Rank-invariant: the Spec only.
bool wide_line_plan(cu::LineFormat format, const snac::Spec& spec, int64_t bytes) {
  constexpr int64_t kAutoWideOneChunkAbove = 128 << 10;  // all_reduce, broadcast, reduce
  constexpr int64_t kAutoWideReduceAbove = 256 << 10;    // reduce_scatter
  constexpr int64_t kAutoWideCopiesAbove = 512 << 10;    // all_gather, all_to_all
  switch (format) {
    case cu::LineFormat::Narrow: return false;
    case cu::LineFormat::Wide: return true;
    case cu::LineFormat::Auto: break;
  }
  if (spec.chunks.size() == 1) return bytes > kAutoWideOneChunkAbove;
  return bytes > (spec.kind == snac::OpKind::Reduce ? kAutoWideReduceAbove : kAutoWideCopiesAbove);
}

// A region plan (NOTE [line plans], [parity plans]): the one-shot push plan of
// `spec` laid out in `region_elems` elements, if it needs one round only; then
// *opt takes its options. False when it needs more rounds or the region
// cannot hold even one aligned piece (the caller falls back to the workspace).
bool one_round_push_plan(const snac::Spec& spec, int rank, int64_t region_elems, snac::PlanOptions* opt,
                         snac::Plan* plan) {
  snac::PlanOptions o = *opt;
  o.reduce_algo = snac::ReduceAlgo::OneShot;
  o.push = true;
  o.slot_elems = region_elems / o.align_elems * o.align_elems;
  try {
    *plan = snac::make_plan(spec, rank, o);
  } catch (const std::invalid_argument&) {
    return false;
  }
  if (plan->rounds != 1) return false;
  *opt = o;
  return true;
}

}  // namespace

const CudaGroup::CachedPlan& CudaGroup::plan_for(const Request& rq, std::vector<PeerMeta>& all, bool zero_copy,
                                                   bool region, bool peer_outputs) {
  int64_t shift = 0;
  const cu::IoAlias alias = alias_of(rq, &shift);
  // NOTE [eager host path]: the same call as the last one of this kind.
  PlanMemo& memo = memo_[peer_outputs ? 4 : (zero_copy ? 2 : 0) + (region ? 1 : 0)];
  const bool memoizable = rq.op != CollOp::AllToAll && !rq.custom && rq.in_splits.empty() && rq.out_splits.empty();
  if (memoizable && memo.plan && memo.op == rq.op && memo.dtype == rq.dtype && memo.root == rq.root &&
      memo.in_numel == rq.in_numel && memo.out_numel == rq.out_numel && memo.alias == alias && memo.shift == shift)
    return *memo.plan;
  const CachedPlan& c = plan_for_key(rq, all, zero_copy, region, peer_outputs, alias, shift);
  if (memoizable) memo = PlanMemo{&c, rq.op, rq.dtype, rq.root, rq.in_numel, rq.out_numel, shift, alias};
  return c;
}

const CudaGroup::CachedPlan& CudaGroup::plan_for_key(const Request& rq, std::vector<PeerMeta>& all, bool zero_copy,
                                                       bool region, bool peer_outputs, cu::IoAlias alias,
                                                       int64_t shift) {
  if (all.empty()) all = peer_meta(rq);
  const int64_t esize = static_cast<int64_t>(dtype_size(rq.dtype));
  snac::PlanOptions opt;
  opt.align_elems = cu::kPartBytes / esize;
  opt.slot_elems = ws_->workspace_bytes() / 2 / esize / opt.align_elems * opt.align_elems;
  opt.direct_local = direct_local_reads(rq, rank_);  // NOTE [direct local reads]
  opt.read_peer_inputs = zero_copy;
  opt.write_peer_outputs = peer_outputs;  // NOTE [peer outputs]
  const bool two_wanted = two_shot(rq);
  std::string key = plan_key(rq, all);  // built on a memo miss: appended in place
  key += 'a';
  key += static_cast<char>('0' + static_cast<int>(alias));
  key += two_wanted ? "/2" : "/1";
  if (zero_copy) key += "/z";
  if (peer_outputs) key += "/o";
  if (region) key += "/R";
  key += "/s";
  key += std::to_string(shift);
  auto it = plans_.find(key);
  if (it != plans_.end()) return *it->second;
  if (plans_.size() >= kMaxPlans) {  // inline plans are host-only: safe to drop any time
    for (auto i = plans_.begin(); i != plans_.end();) i = i->second->inl ? plans_.erase(i) : std::next(i);
    for (PlanMemo& m : memo_) m = PlanMemo{};  // they may point at a dropped plan
  }
  const snac::Spec spec = build_spec(rq, all);
  int64_t spec_bytes = 0;  // rank-invariant: every rank picks the same blocks and staging
  for (const auto& ch : spec.chunks) spec_bytes += ch.numel() * esize;
  // NOTE [push]: measured on 2x H200, pushing is 3-9% faster for copies at
  // every size (cuda_h200x2_20261130b_push.md); for reductions it was mixed
  // before matched waits, and with them 1.14-1.34x faster at 1G
  // (cuda_h200x2_20261201q_large.md; small reductions run on lines and
  // parity plans, which push anyway). TORCH_PURLIN_CUDA_PUSH=all by default.
  opt.push = !zero_copy && !peer_outputs && (spec.kind == snac::OpKind::Copy ? push_copies_ : push_reductions_);
  auto c = std::make_unique<CachedPlan>();
  // NOTE [line plans]: a one-round push plan of a spec with contiguous
  // sources, laid out in one parity of the line region. Every condition is
  // rank-invariant (the Spec, the agreed region), so all ranks choose alike.
  // NOTE [wide lines]: the group's wide format also needs contiguous
  // destinations (every op then covers whole pieces, so whole lines).
  auto dense = [](const snac::Region& r) { return r.rows <= 1 || r.stride == r.row_len; };
  bool contiguous = true, dense_dests = true;
  for (const auto& ch : spec.chunks) {
    for (const auto& src : ch.sources) contiguous &= dense(src.region);
    for (const auto& d : ch.dests) dense_dests &= dense(d.region);
  }
  snac::Plan plan;
  const int64_t lbytes = snac::max_rank_elems(spec) * esize;  // rank-invariant
  if (region && contiguous && esize <= 8 && lbytes <= ws_->line_max_bytes()) {
    // Wide lines where wanted and the plan fits their region, else narrow
    // lines: both steps depend on the Spec and the agreed regions only.
    if (dense_dests && wide_line_plan(ws_->line_format(), spec, lbytes)) {
      snac::PlanOptions wide_opt = opt;
      wide_opt.align_elems = cu::kWideAlignBytes / esize;
      c->wide = one_round_push_plan(spec, rank_, ws_->line_slot_elems(esize, true), &wide_opt, &plan);
      if (c->wide) opt = wide_opt;
    }
    c->lines = c->wide || one_round_push_plan(spec, rank_, ws_->line_slot_elems(esize, false), &opt, &plan);
  }
  // NOTE [parity plans]: else a one-round push plan in one half of the parity
  // region, also rank-invariant (the Spec, the agreed region).
  // NOTE [matched waits] (snac/plan.h): plan-kernel plans (parity and
  // workspace plans) let a block wait for its own slot where SNAC shows that
  // suffices; line plans have no waits, the copy-engine plan no blocks.
  opt.match_waits = match_waits_ && !c->lines;
  if (region && !c->lines && lbytes <= ws_->parity_max_bytes())
    c->parity = one_round_push_plan(spec, rank_, ws_->parity_slot_elems(esize), &opt, &plan);
  // Otherwise (also when a region was asked for but the plan does not
  // qualify) the workspace plan: a region request's cache entry serves the
  // call as it is.
  const bool two = !c->lines && !c->parity && two_wanted;
  if (!c->lines && !c->parity) {
    opt.reduce_algo = two ? snac::ReduceAlgo::TwoShot : snac::ReduceAlgo::OneShot;
    opt.push_reduced = two && push_reduced_;  // zero-copy plans too: the scratch is workspace either way
    plan = snac::make_plan(spec, rank_, opt);
  }
  c->spec_bytes = spec_bytes;
  const cu::LaunchConfig& config = ws_->launch_config();
  c->threads = ws_->threads();
  if (c->lines) {  // NOTE [narrow line shape], [wide line shape]
    // Wide lines by the largest op (one chunk): with the rank's total, the
    // ops of several-chunk specs got 1 line a warp (all_gather / all_to_all /
    // reduce_scatter 1M 0.3-0.6 us slower in cuda_h200x2_20261130m).
    const cu::LaunchShape shape = c->wide ? config.wide_line_shape(snac::max_chunk_elems(spec) * esize)
                                          : config.narrow_line_shape(lbytes);
    c->blocks = shape.blocks;
    c->threads = shape.threads;
  } else {
    c->blocks = config.blocks_for(spec_bytes);
  }
  if (spec.kind == snac::OpKind::Copy && !peer_outputs && !c->lines && !c->parity) {
    // The copy-engine Atom runs pull plans only (NOTE [stream memop ordering]:
    // its waits do not flush remote data writes, and pull plans make none);
    // zero-copy plans pull from the peers' inputs (NOTE [copy-engine zero-copy]).
    snac::PlanOptions pull = opt;
    pull.push = false;
    pull.match_waits = false;
    c->snac_plan = opt.push ? snac::make_plan(spec, rank_, pull) : plan;
  }
  c->plan = cu::lower_plan(plan, c->blocks, esize, alias, shift,
                           c->wide ? cu::Partition::WideLines : cu::Partition::Parts);
  if (c->lines) cu::drop_line_carried_ops(&c->plan);  // NOTE [line-carried ops]
  c->reduces = spec.kind == snac::OpKind::Reduce;
  // The options every rank must share are part of the signature (NOTE [call tags]).
  c->sig = spec_hash(spec) ^ (static_cast<uint64_t>(rq.dtype) << 56) ^ (zero_copy ? 0x5a5a5a5a00000000ull : 0) ^
           (two ? 0x2000000000ull : 0) ^ (opt.push ? 0x4000000000ull : 0) ^ (c->lines ? 0x8000000000ull : 0) ^
           (c->parity ? 0x10000000000ull : 0) ^ (c->wide ? 0x20000000000ull : 0) ^
           (opt.match_waits ? 0x40000000000ull : 0) ^  // matched plans may cut other rounds
           (opt.push_reduced ? 0x80000000000ull : 0) ^ (peer_outputs ? 0x100000000000ull : 0);
  c->protocol = std::string(c->reduces ? (two ? "two-shot" : "one-shot") : "copy") + (zero_copy ? "+zero-copy" : "") +
                (peer_outputs ? "+peer-outputs" : "") +
                (c->wide ? "+wide-lines" : c->lines ? "+lines" : c->parity ? "+parity" : opt.push ? "+push" : "") +
                (opt.push_reduced ? "+push-reduced" : "");
  c->protocol_name = &*protocol_names_.insert(c->protocol).first;
  if (cu::fits_inline(c->plan)) {
    c->inl = std::make_unique<cu::InlinePlan>();
    cu::to_inline(c->plan, c->inl.get());
  } else {
    c->dev = store_plans_->upload(c->plan);
  }
  if (debug_)
    std::fprintf(stderr,
                 "[purlin] rank %d: new CUDA plan for %s (%s, %d blocks, %zu device ops, %u local barriers, %d own-slot "
                 "waits, %s): %s",
                 rank_, spec.name.c_str(), c->protocol.c_str(), c->blocks, c->plan.ops.size(), c->plan.local_syncs,
                 static_cast<int>(std::count_if(c->plan.ops.begin(), c->plan.ops.end(),
                                                [](const cu::DevOp& o) { return o.code == cu::kWait && o.own_slot; })),
                 c->inl ? "inline" : "device", plan.describe().c_str());
  return *plans_.emplace(key, std::move(c)).first->second;
}

// NOTE [stream order] Kernels of one group must not overlap on a rank (they
// share the workspace and epochs). Launches on one stream are ordered by it;
// when a launch goes to another stream than the previous one (current vs
// internal stream, or the user switched streams), the new stream first waits
// for everything queued so far on the old one. Not across graph capture
// boundaries: inside a captured graph the capture's own order applies.
void CudaGroup::order_after_last(cudaStream_t s) {
  if (have_last_ && last_stream_ != s) {
    cudaStreamCaptureStatus a = cudaStreamCaptureStatusNone, b = cudaStreamCaptureStatusNone;
    cudaStreamIsCapturing(last_stream_, &a);
    cudaStreamIsCapturing(s, &b);
    if (a == cudaStreamCaptureStatusNone && b == cudaStreamCaptureStatusNone) {
      cu::check(cudaEventRecord(order_event_, last_stream_), "cudaEventRecord");
      cu::check(cudaStreamWaitEvent(s, order_event_, 0), "cudaStreamWaitEvent");
    }
    cudaGetLastError();
  }
  last_stream_ = s;
  have_last_ = true;
}

void CudaGroup::launch(Request& rq, cudaStream_t stream) {
  if (!broken_.empty())
    throw std::runtime_error(error_prefix(rq.name, rank_) + "the group is unusable after an earlier failure: " + broken_);
  const std::string err = read_error(*ws_, timeout_);
  if (!err.empty()) {
    broken_ = err;
    throw std::runtime_error(err);
  }
  if (!local_error_.empty()) settle_local_error(rq);
  // Every rank's arguments: exchanged on every all_to_all (its splits) and,
  // with NOTE [checked calls], on every collective; else this rank's own,
  // made by plan_for() only when its plan is not memoized. An exchange
  // carries this rank's argument error too, so every rank raises it.
  std::vector<PeerMeta> all;
  const bool exchanged = rq.op == CollOp::AllToAll || check_calls_;
  if (exchanged) all = peer_meta(rq);
  if (!rq.error.empty()) {
    const std::string what = error_prefix(rq.name, rank_) + rq.error;
    if (!exchanged) local_error_ = what;  // the peers did not see it: NOTE [one-sided local errors]
    throw std::invalid_argument(what);
  }
  // NOTE [zero-copy]: an input in the symmetric pool is read in place by the
  // peers (who must pass theirs at the same offset: NOTE [call tags]).
  // Small collectives run on flagged lines, mid-sized ones as parity plans,
  // when their plan qualifies (NOTE [line plans], [parity plans]; plan_for
  // decides on the Spec); zero-copy is not tried for them. A region request
  // that does not qualify returns the workspace plan, used as it is unless
  // the input is in the pool.
  const CachedPlan* cp = region_wanted(rq) ? &plan_for(rq, all, false, true) : nullptr;
  int64_t pool_offset = -1, out_offset = -1;
  const int64_t esize = static_cast<int64_t>(dtype_size(rq.dtype));
  if (pool_ && !(cp && (cp->lines || cp->parity))) {
    if (peer_outputs_allowed(rq))  // NOTE [peer outputs] first: pure writers
      out_offset = pool_->offset_of(rq.out, std::max<int64_t>(1, rq.out_numel * esize));
    if (out_offset < 0 && zero_copy_allowed(rq))
      pool_offset = pool_->offset_of(rq.in, std::max<int64_t>(1, rq.in_numel * esize));
  }
  if (out_offset >= 0) cp = &plan_for(rq, all, false, false, true);
  else if (!cp || pool_offset >= 0) cp = &plan_for(rq, all, pool_offset >= 0, false);
  const CachedPlan& c = *cp;
  if (c.plan.rounds == 0) return;  // nothing moves on any rank
  // The caller (CudaPath::run) holds a CUDAGuard on this group's device.
  order_after_last(stream);
  // Pure copies of at least TORCH_PURLIN_CUDA_CE_BYTES go to the copy
  // engines (no SMs), except during graph capture (NOTE [copy-engine graphs]).
  if (ce_ && !c.lines && !c.parity && !c.reduces && c.spec_bytes >= ce_bytes_ && ce_->refusal(stream).empty()) {
    const CachedPlan* ce_plan = &c;
    int64_t in_offset = pool_offset;  // rank 0's input offset; every rank's, but in place all_gather's
    if (out_offset >= 0 && ce_sources_in_pool(rq, out_offset, &in_offset))
      ce_plan = &plan_for(rq, all, true, false);  // NOTE [copy-engine zero-copy]: pull, not write
    if (out_offset < 0 || ce_plan != &c) {
      launch_copy_engine(rq, *ce_plan, in_offset, stream);
      return;
    }
  }
  cu::PlanLaunch l;
  l.ops = c.dev.ops;
  l.srcs = c.dev.srcs;
  l.inline_plan = c.inl.get();
  l.n_ops = static_cast<int>(c.plan.ops.size());
  l.n_srcs = static_cast<int>(c.plan.srcs.size());
  l.steps = c.plan.steps;
  l.local_syncs = c.plan.local_syncs;
  l.reduces = c.reduces;
  l.input = rq.in;
  l.output = rq.out;
  l.self = ws_->self();
  l.layout = ws_->layout();
  l.err = ws_->error_device();
  l.rank = rank_;
  l.dtype = rq.dtype;
  l.redop = rq.redop;
  l.scale = rq.scale;
  l.timeout_ns = static_cast<uint64_t>(timeout_.count()) * 1000000ull;
  if (rq.name != last_name_) {  // NOTE [eager host path]: names are literals; intern each run of one once
    last_name_ = rq.name;
    last_name_id_ = cu::intern_name(rq.name);
  }
  l.op_name = last_name_id_;
  l.threads = c.threads;
  l.blocks = c.blocks;
  l.lines = c.lines;
  l.wide_lines = c.wide;
  l.parity = c.parity;
  l.call_sig = c.sig ^ (pool_offset >= 0 ? static_cast<uint64_t>(pool_offset) * 0x100000001b3ull : 0) ^
               (out_offset >= 0 ? static_cast<uint64_t>(out_offset) * 0x9E3779B97F4A7C15ull : 0);
  l.input_pool_offset = pool_offset;
  l.output_pool_offset = out_offset;
  l.overlap = overlap_;
  last_.protocol = c.protocol;  // assigned in place: no allocation once the string has room
  last_.blocks = c.blocks;
  last_.threads = l.threads;
  last_.overlapped = overlap_;
  count_launch(rq.name, c.protocol_name);
  const cudaError_t e = cu::launch_plan(l, stream);
  if (e != cudaSuccess) throw std::runtime_error(error_prefix(rq.name, rank_) + cu::cuda_error_text(e, "launching the plan kernel"));
}

void CudaGroup::count_launch(const char* name, const std::string* protocol) {
  ++launches_[{name, protocol}];
}

ProtocolCounts CudaGroup::protocol_counts() const {
  ProtocolCounts out;
  for (const auto& [key, n] : launches_)
    out[static_cast<const char*>(key.first)][*static_cast<const std::string*>(key.second)] += n;
  return out;
}

// NOTE [pool agreement on the host] Every block of the symmetric pool is
// placed collectively (NOTE [pool agreement] in symmetric_pool.h): one or
// more all-gathers of each rank's proposed offset. Through the Store each
// costs a TCP round trip or more per rank, and FSDP2 with the process
// group's allocator allocates several blocks per layer and step; the ranks of
// a CUDA group share one host, so the proposals go through a shared-memory
// arrival handshake instead (as all_to_all's split sizes: peer_meta()),
// bounded by the group's timeout and naming the ranks that did not arrive.
// Each message carries the pool's tag (call and attempt), so ranks that
// allocate in different orders or sizes get an error, not a wrong block.
std::vector<std::string> CudaGroup::pool_agree(const std::string& tag, const std::string& mine) {
  constexpr size_t kBlob = 128;  // tag '\0' value '\0'
  RECORD_FUNCTION("purlin::pool_agree", std::vector<c10::IValue>());  // the host wait for every rank, in profiles
  if (!pool_broken_.empty()) throw std::runtime_error(pool_broken_);
  if (!pool_atom_)
    pool_atom_ =
        make_shm_group("cuda-pool", rank_, world_, 4096, kBlob, timeout_, store_rendezvous(store_, timeout_), aborted_);
  const uint64_t n = ++pool_seq_;
  const atom::WaitSite site{"empty", "symmetric pool: agree on a block's offset with every rank", n};
  try {
    return snac::arrive_tagged(*pool_atom_, n, "symmetric pool step " + tag, mine, site,
                               " (every rank must allocate the same sizes in the same order)");
  } catch (const std::exception& e) {
    pool_broken_ = e.what();
    throw;
  }
}

cu::SymmetricPool::AllGather CudaGroup::pool_exchange() {
  return [this](const std::string& tag, const std::string& mine) { return pool_agree(tag, mine); };
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
