// symmetric_workspace.cc — setup and teardown of the symmetric buffers.
//
// Four exchanges, each answered identically on every rank, so all ranks take
// the same branch even when one of them fails locally:
//   probe   host name, GPU PCI id, compute capability, requested sizes
//   handle  this rank's IPC handle (or why it could not make one)
//   opened  whether this rank opened every peer's handle
// A failure after an allocation frees what was made before returning.
#include "atom/cuda/host/symmetric_workspace.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <unistd.h>

#include <cuda_runtime.h>

#include "atom/cuda/host/cuda_check.h"
#include "atom/cuda/device/plan_format.h"
#include "atom/cuda/host/ipc_peers.h"
#include "atom/cuda/host/nvlink_probe.h"
#include "atom/cuda/host/workspace_probe.h"

namespace purlin::atom::cuda {

namespace {

using Probe = WorkspaceProbe;

std::string rank_str(int r) { return "rank " + std::to_string(r); }

}  // namespace

std::unique_ptr<SymmetricWorkspace> SymmetricWorkspace::create(const Options& opt, const AllGather& exchange,
                                                               std::string* why) {
  std::unique_ptr<SymmetricWorkspace> ws(new SymmetricWorkspace());
  ws->rank_ = opt.rank;
  ws->device_ = opt.device;
  DeviceScope scope(opt.device);

  // ---- probe -------------------------------------------------------------
  Probe mine;
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  mine.host = host;
  char bus[64] = {0};
  cudaError_t e = cudaDeviceGetPCIBusId(bus, sizeof bus, opt.device);
  DeviceInfo info;
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&info.major, cudaDevAttrComputeCapabilityMajor, opt.device);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&info.minor, cudaDevAttrComputeCapabilityMinor, opt.device);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&info.sm_count, cudaDevAttrMultiProcessorCount, opt.device);
  if (e != cudaSuccess) mine.error = cuda_error_text(e, "querying the GPU");
  mine.bus = bus[0] ? bus : "?";
  for (char& c : mine.bus) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  mine.major = info.major;
  mine.minor = info.minor;
  mine.sms = info.sm_count;
  mine.blocks = opt.blocks > 0 ? std::min(opt.blocks, kMaxBlocks) : 0;
  mine.ws = opt.workspace_bytes;
  mine.lines = std::max<int64_t>(0, opt.line_max_bytes);
  mine.parity = std::max<int64_t>(0, opt.parity_max_bytes);
  mine.format = static_cast<int>(opt.line_format);
  mine.share = opt.share_gpu ? std::max(1, opt.share_gpu_ranks) : 0;
  if (opt.world > kMaxWorld) mine.error = "the CUDA datapath supports at most " + std::to_string(kMaxWorld) + " ranks";
  if (opt.workspace_bytes < 64 * 1024) mine.error = "TORCH_PURLIN_CUDA_WORKSPACE_BYTES must be at least 64K";

  std::vector<Probe> probes;
  for (const std::string& s : exchange("probe", mine.encode())) probes.push_back(Probe::decode(s));
  *why = check_probes(probes, &ws->shared_gpu_);
  if (!why->empty()) return nullptr;
  // One launch configuration for the group (every rank derives the same):
  // the architecture's when all GPUs share it, else the portable one for the
  // smallest GPU; a fixed block count if any rank asked for one (the smallest).
  DeviceInfo group_info = info;
  int fixed = 0;
  int64_t bytes = INT64_MAX, line_max = INT64_MAX, parity_max = INT64_MAX;
  bool same_arch = true, same_format = true;
  for (const Probe& p : probes) {
    same_format &= p.format == probes[0].format;
    same_arch &= p.major == probes[0].major && p.minor == probes[0].minor;
    group_info.sm_count = std::min(group_info.sm_count, p.sms);
    if (p.blocks > 0) fixed = fixed > 0 ? std::min(fixed, p.blocks) : p.blocks;
    bytes = std::min(bytes, p.ws);
    line_max = std::min(line_max, p.lines);
    parity_max = std::min(parity_max, p.parity);
  }
  group_info.major = probes[0].major;
  group_info.minor = probes[0].minor;
  // NOTE [shared GPU]: the kernels of ranks on one GPU wait for each other,
  // so all of them must be resident at once: each rank gets half its share
  // of the SMs (the other half for an overlapped launch's next kernel, whose
  // blocks wait resident, and for other work), one block per SM at worst. Ranks of the job
  // outside this group count too (each rank states the job's ranks per GPU, derived from the job's
  // ranks on the host and its GPUs: GroupContext::job_ranks_per_gpu):
  // a DeviceMesh's 2-rank groups at world 4 on one H200 run at once, and counting only their
  // own 2 ranks would give each process a quarter of the SMs, the full share that starved a
  // rank's last block at world 4 in 2026-11-30.
  group_info.sm_count = sm_budget(group_info.sm_count, budget_ranks_per_gpu(probes));
  ws->config_ = same_arch ? choose_launch_config(group_info) : launch_config_portable(group_info);
  if (fixed > 0) fixed = std::min(fixed, ws->config_.max_blocks);
  ws->config_.fixed_blocks = fixed;
  if (fixed > 0) ws->config_.max_blocks = fixed;
  // The pad has flag slots for kMaxBlocks blocks; a launch uses a prefix.
  ws->layout_ = PadLayout{opt.world, kMaxBlocks};
  ws->config_.threads = std::max(ws->config_.threads, std::max(opt.world, ws->config_.max_blocks));
  ws->workspace_bytes_ = bytes / 4096 * 4096;
  // NOTE [line plans]: two parities of narrow lines (twice the payload),
  // room for every rank's contribution of the largest line collective plus
  // the planner's alignment of each piece; unless the format is narrow, a
  // wide-line region as well (128 bytes per 120 of payload, NOTE [wide
  // lines]). Narrow lines serve any line plan (strided destinations too).
  ws->line_max_bytes_ = line_max;
  ws->line_format_ = same_format ? static_cast<LineFormat>(probes[0].format) : LineFormat::Narrow;
  if (ws->line_format_ == LineFormat::Auto && line_max > 0) {
    // NOTE [wide lines]: auto takes them only where their assumption is known
    // to hold, as NCCL does for LL128: one architecture among sm_80, sm_90,
    // sm_100, and NVLink between every pair (wide forces them anyway).
    const int major = probes[0].major;
    std::vector<std::string> buses;
    for (const Probe& p : probes) buses.push_back(p.bus);
    if (!same_arch || !(major == 8 || major == 9 || major == 10))
      ws->wide_refusal_ = "the GPUs are not all of one architecture among sm_80, sm_90 and sm_100";
    else if (!ws->shared_gpu_.empty())  // NOTE [shared GPU]: the 128-byte unit is known of NVLink only
      ws->wide_refusal_ = ws->shared_gpu_;
    else if (!nvlink_between_all(buses, &ws->wide_refusal_))
      ws->wide_refusal_ = "NVLink between the GPUs is not known: " + ws->wide_refusal_;
    if (!ws->wide_refusal_.empty()) ws->line_format_ = LineFormat::Narrow;
  }
  ws->parity_max_bytes_ = parity_max;
  lay_out_regions(&ws->layout_, ws->workspace_bytes_, line_max, ws->line_format_ != LineFormat::Narrow, parity_max);

  // ---- handle ------------------------------------------------------------
  std::string local;
  for (int r = 0; r < opt.world && local.empty(); ++r) {
    if (r == opt.rank) continue;
    int dev = -1, can = 0;
    if (cudaDeviceGetByPCIBusId(&dev, probes[r].bus.c_str()) != cudaSuccess) {
      cudaGetLastError();
      local = "GPU " + probes[r].bus + " of " + rank_str(r) + " is not visible here (CUDA_VISIBLE_DEVICES?)";
    } else if (dev == opt.device) {
      // NOTE [shared GPU]: a rank on this very GPU (allowed by check_probes);
      // its buffer opens through IPC like a peer's, no peer access needed.
    } else if (cudaDeviceCanAccessPeer(&can, opt.device, dev) != cudaSuccess || !can) {
      cudaGetLastError();
      local = "GPU " + mine.bus + " has no peer access to GPU " + probes[r].bus + " of " + rank_str(r);
    }
  }
  const size_t total = static_cast<size_t>(ws->layout_.pad_bytes() + ws->workspace_bytes_ + 2 * ws->layout_.line_half +
                                           2 * ws->layout_.wide_half + 2 * ws->layout_.parity_half);
  cudaIpcMemHandle_t handle;
  if (local.empty()) {
    try {
      check(cudaMalloc(&ws->self_, total), "cudaMalloc of the symmetric workspace");
      cudaStream_t s;
      check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
      cudaError_t me = cudaMemsetAsync(ws->self_, 0, static_cast<size_t>(ws->layout_.pad_bytes()), s);
      if (me == cudaSuccess && ws->layout_.line_half > 0)  // NOTE [flagged lines]: no stale flag may match
        me = cudaMemsetAsync(static_cast<char*>(ws->self_) + ws->layout_.line_offset, 0,
                             static_cast<size_t>(2 * (ws->layout_.line_half + ws->layout_.wide_half)), s);
      if (me == cudaSuccess) me = cudaStreamSynchronize(s);
      cudaStreamDestroy(s);
      check(me, "clearing the signal pad");
      check(cudaHostAlloc(reinterpret_cast<void**>(&ws->err_host_), sizeof(ErrorRecord),
                          cudaHostAllocMapped | cudaHostAllocPortable),
            "cudaHostAlloc of the error record");
      std::memset(static_cast<void*>(ws->err_host_), 0, sizeof(ErrorRecord));
      check(cudaHostGetDevicePointer(reinterpret_cast<void**>(&ws->err_dev_), ws->err_host_, 0),
            "cudaHostGetDevicePointer");
      check(cudaIpcGetMemHandle(&handle, ws->self_), "cudaIpcGetMemHandle");
    } catch (const std::exception& ex) {
      cudaGetLastError();
      local = ex.what();
    }
  }
  const std::vector<std::string> handles = exchange("handle", local.empty() ? handle_answer(handle) : failure_answer(local));
  *why = first_failure(handles, 'H');
  if (!why->empty()) {
    ws->release();
    return nullptr;
  }

  // ---- open peers ------------------------------------------------------------
  std::vector<uint64_t> table;
  if (local.empty()) local = open_ipc_peers(handles, opt.rank, ws->self_, "workspace", &ws->peers_, &table);
  if (local.empty())
    local = write_device_table(static_cast<uint64_t*>(ws->self_) + ws->layout_.peer_table(0), table, "peer table");
  *why = first_failure(exchange("opened", local.empty() ? "O" : failure_answer(local)), 'O');
  if (!why->empty()) {
    ws->release();
    return nullptr;
  }
  return ws;
}

ProtocolSettings SymmetricWorkspace::protocol_settings() const {
  ProtocolSettings p;
  p.world = layout_.world;
  p.workspace_bytes = workspace_bytes_;
  p.line_max_bytes = line_max_bytes_;
  p.parity_max_bytes = parity_max_bytes_;
  p.line_format = line_format_;
  p.layout = layout_;
  p.config = config_;
  return p;
}

int64_t SymmetricWorkspace::line_slot_elems(int64_t esize, bool wide) const {
  return protocol_settings().line_slot_elems(esize, wide);
}

void SymmetricWorkspace::release() {
  DeviceScope scope(device_);
  close_ipc_peers(&peers_);
  if (self_) cudaFree(self_);
  if (err_host_) cudaFreeHost(err_host_);
  self_ = nullptr;
  err_host_ = nullptr;
  err_dev_ = nullptr;
  cudaGetLastError();  // teardown at exit may find the runtime gone; nothing to report
}

// NOTE: peers must be done with this rank's buffer (their kernels finished)
// before it is freed; destroy_process_group() after the last collective's
// results were waited for gives that.
SymmetricWorkspace::~SymmetricWorkspace() { release(); }

}  // namespace purlin::atom::cuda
