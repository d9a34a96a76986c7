// symmetric_workspace.h — host half of the CUDA Atom's memory: one buffer per
// rank (signal pad + workspace + line and parity regions, signal_pad.h), opened by every peer of the
// group through CUDA IPC. (Device half: signal.cuh.)
//
// create() is collective: every rank calls it at the same point with the same
// exchange function, which publishes one string per rank under a tag and
// returns all of them (backed by the c10d Store). It checks that all ranks
// are on one host, on distinct GPUs that can reach each other (peer access)
// or, where every rank allows it, on one GPU (NOTE [shared GPU]),
// and that every IPC handle opens; otherwise it returns nullptr with a reason
// that is the same on every rank (so they all fall back together).
// Torch-free.
//
// NOTE [shared GPU] Several ranks of a group may run on one GPU when every
// rank sets TORCH_PURLIN_CUDA_SHARE_GPU=1 (N ranks on fewer GPUs, e.g. to run
// the GPU suite at world 4 or 8 on one H200; NCCL refuses such groups). Each
// rank still allocates its own buffer, and a rank on the same GPU opens it
// through CUDA IPC exactly as a peer's, so plans, kernels and protocol are
// unchanged: flags and lines cross the GPU's L2 instead of NVLink. Three
// things differ. (1) The ranks' kernels wait for each other, so they must run
// at the same time and all be resident: the launch configuration gives each
// rank half its share of the SMs (SMs / (2 x ranks per GPU) blocks at most:
// at world 4 on one H200 a full share, 33 blocks, starved a rank's last block
// behind its peers' spinning blocks, their overlapped next kernels and a
// matmul, until the timeout), and the processes need CUDA MPS to run
// concurrently (nvidia-cuda-mps-control -d);
// without MPS the driver time-slices them and every wait lasts up to a time
// slice (slow; still bounded by the group timeout). (2) Wide lines are not
// used (their 128-byte unit is known of NVLink only). (3) NCCL cannot serve
// the group: CudaGroup ignores the protocol table's NCCL rows, and an op that
// falls back to NCCL (e.g. a bool reduction) fails there ("Duplicate GPU").
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "atom/cuda/protocol/launch_config.h"
#include "atom/cuda/protocol/protocol_settings.h"
#include "atom/cuda/signal_pad.h"

namespace purlin::atom::cuda {

class SymmetricWorkspace {
 public:
  using AllGather = std::function<std::vector<std::string>(const std::string& tag, const std::string& mine)>;

  struct Options {
    int rank = 0;
    int world = 1;
    int device = 0;               // this rank's CUDA device ordinal
    int64_t workspace_bytes = 0;  // requested; the group uses the smallest request
    int blocks = 0;               // fixed blocks per launch; 0: by size (launch_config.h); the group uses the smallest
    int64_t line_max_bytes = 0;   // largest line collective (NOTE [line plans]); 0: no line region; the smallest
    int64_t parity_max_bytes = 0; // largest parity plan (NOTE [parity plans]); 0: no parity region; the smallest
    LineFormat line_format = LineFormat::Auto;  // NOTE [wide lines]; the group's: every rank's if equal, else narrow
    bool share_gpu = false;       // NOTE [shared GPU]: ranks may share a GPU if every rank says so
    int share_gpu_ranks = 0;      // with share_gpu: the job's ranks on each GPU (0: the group's own), for the SM budget
  };

  static std::unique_ptr<SymmetricWorkspace> create(const Options& opt, const AllGather& exchange, std::string* why);
  ~SymmetricWorkspace();
  SymmetricWorkspace(const SymmetricWorkspace&) = delete;
  SymmetricWorkspace& operator=(const SymmetricWorkspace&) = delete;

  int rank() const { return rank_; }
  int world() const { return layout_.world; }
  int device() const { return device_; }
  const PadLayout& layout() const { return layout_; }  // blocks = slot capacity (kMaxBlocks)
  const LaunchConfig& launch_config() const { return config_; }  // the group's, agreed at setup
  int threads() const { return config_.threads; }
  const char* config_name() const { return config_.name; }
  void* self() const { return self_; }                 // this rank's buffer (pad at 0)
  // `rank`'s buffer as mapped in this process (pad at 0): self() for this
  // rank, the opened IPC mapping for a peer. rank in [0, world()).
  void* buffer(int rank) const { return rank == rank_ ? self_ : peers_[rank]; }
  int64_t workspace_bytes() const { return workspace_bytes_; }
  // Per-rank bytes up to which collectives may run on flagged lines (the
  // group's agreed TORCH_PURLIN_CUDA_LINE_BYTES); 0: never.
  int64_t line_max_bytes() const { return line_max_bytes_; }
  // The group's line format (NOTE [wide lines]).
  LineFormat line_format() const { return line_format_; }
  // Why auto became narrow ("" if it did not): no NVLink known, other GPUs.
  const std::string& wide_refusal() const { return wide_refusal_; }
  // "" if every rank has its own GPU, else the first pair that shares one
  // ("rank 0 and rank 1 share GPU ..."; NOTE [shared GPU]).
  const std::string& shared_gpu() const { return shared_gpu_; }
  // Payload elements of `esize` bytes one parity of the (wide-)line region holds.
  int64_t line_slot_elems(int64_t esize, bool wide) const;
  // Per-rank bytes up to which collectives may run as parity plans (the
  // group's agreed TORCH_PURLIN_CUDA_PARITY_BYTES); 0: never.
  int64_t parity_max_bytes() const { return parity_max_bytes_; }
  // Elements of `esize` bytes one half of the parity region holds.
  int64_t parity_slot_elems(int64_t esize) const { return layout_.parity_half / esize; }
  // What the group's protocol choice depends on (NOTE [protocol choice]), as agreed at setup.
  ProtocolSettings protocol_settings() const;
  ErrorRecord* error_host() const { return err_host_; }
  ErrorRecord* error_device() const { return err_dev_; }

 private:
  SymmetricWorkspace() = default;
  void release();

  int rank_ = 0;
  int device_ = 0;
  PadLayout layout_;
  LaunchConfig config_;
  int64_t workspace_bytes_ = 0;
  int64_t line_max_bytes_ = 0;
  LineFormat line_format_ = LineFormat::Narrow;
  std::string wide_refusal_;
  std::string shared_gpu_;
  int64_t parity_max_bytes_ = 0;
  void* self_ = nullptr;
  std::vector<void*> peers_;  // opened IPC mappings (nullptr for self)
  ErrorRecord* err_host_ = nullptr;
  ErrorRecord* err_dev_ = nullptr;
};

}  // namespace purlin::atom::cuda
