// purlin_backend.h — the c10d::Backend that torch.distributed calls.
//
// Contract (as c10d's): collectives are called in the same order on every rank
// of the group. Each native op turns its tensors into one flat input and one
// flat output (staging through temporaries when tensors are lists or
// non-contiguous), hands a Request to the engine of the tensors' device, and
// returns a Work. Everything Purlin does not serve goes through Fallback.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "backend/fallback/fallback.h"
#include "backend/group/group_context.h"
#include "backend/group/group_health.h"
#include "backend/group/request.h"

namespace purlin::backend {

class CpuEngine;
class CudaEngine;  // PURLIN-CUDA hook (cuda_engine.h)
class GroupHosts;  // NOTE [host map] (group_hosts.h)

class PurlinBackend : public c10d::Backend {
 public:
  // A purlin group's options (its timeout and its own settings, NOTE [group settings]): what
  // torch_purlin.Options makes for pg_options, and what dist.split_group copies from a parent
  // group (bindings.cc gives it the __deepcopy__ that torch's Backend.Options lacks).
  struct PurlinOptions : c10d::Backend::Options {
    explicit PurlinOptions(std::chrono::milliseconds timeout, std::map<std::string, std::string> settings = {})
        : Options("purlin", timeout), settings(std::move(settings)) {}
    std::map<std::string, std::string> settings;  // TORCH_PURLIN_* name -> value
  };

  // `context`: the group's settings and global ranks (nullptr: the environment's settings, global
  // ranks = group ranks). Collective: the members agree on their settings here (NOTE [setup
  // agreement]) and every one raises if they cannot.
  PurlinBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                std::chrono::milliseconds timeout, Fallback::GroupFactory make_fallback,
                std::shared_ptr<const GroupContext> context = nullptr);
  ~PurlinBackend() override;

  const std::string getBackendName() const override { return "purlin"; }
  void setTimeout(std::chrono::milliseconds timeout) override;
  // NOTE [coalescing] (coalesced_work.h): the Work of endCoalescing() covers every op since startCoalescing().
  bool supportsCoalescing() const override { return true; }
  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;
  // NOTE [split groups] (split_group.cc): dist.split_group and DeviceMesh on a group bound to
  // a device (init_process_group(device_id=...)) make subgroups through split().
  // NOTE [shutdown and abort] (group_lifecycle.cc): dist.destroy_process_group calls shutdown(),
  // torch's _abort_process_group abort(); afterwards every op of the group raises.
  void shutdown() override;
  void abort() override;

  bool supportsSplitting() const override { return true; }
  c10::intrusive_ptr<c10d::Backend> split(const c10::intrusive_ptr<c10d::Store>& store, const std::vector<int>& ranks,
                                          const c10::intrusive_ptr<Options>& opts) override;
  c10::intrusive_ptr<Options> getBackendOptions() override;
  void setSequenceNumberForGroup() override {}
  uint64_t getSequenceNumberForGroup() override { return seq_; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs, const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_split_sizes,
                                               std::vector<int64_t>& input_split_sizes,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;

  // Runs a user-defined collective (a Spec) on flat tensors.
  c10::intrusive_ptr<c10d::Work> run_spec(const snac::Spec& spec, at::Tensor& input, at::Tensor& output);

  // {op: (native, fallback)}; a group spanning hosts adds its parts within and across hosts
  // (NOTE [hierarchical collectives]).
  std::map<std::string, std::pair<int64_t, int64_t>> counters() const;

  // Symmetric memory (NOTE [zero-copy] in snac/plan.h): CUDA tensors from the
  // group's pool, read in place by collectives. Collective calls. (No
  // `override`: the Backend virtuals exist from torch 2.8 on; where they
  // do, these override them.)
  bool supportsTensorAlloc(c10::DeviceIndex device);
  at::Tensor allocateTensor(long size, at::TensorOptions options = {});
  at::Tensor empty_symmetric(at::IntArrayRef sizes, const at::TensorOptions& options);
  // (protocol, blocks, threads) of the group's last CUDA launch.
  std::tuple<std::string, int, int, bool> last_launch() const;
  // {op: {protocol: launches}} of the group's native CUDA collectives (cuda_engine.h).
  std::map<std::string, std::map<std::string, int64_t>> protocol_counts() const;

 private:
  // Throws, naming `op` and the rank, once the group was shut down or aborted (one relaxed load
  // when it is open: NOTE [eager host path]).
  void check_open(const char* op) const {
    if (C10_UNLIKELY(closed_.load(std::memory_order_relaxed) != kOpen)) throw_closed(op);
  }
  [[noreturn]] void throw_closed(const char* op) const;

  // Why `op` on `tensors` cannot run natively ("" if it can). `table_bytes`:
  // the op's larger side in bytes for the protocol table (NOTE [protocol
  // table] in protocol_table.h), -1 for ops that do not consult it; *by_table is
  // set when the table (not a limit) sends the op to NCCL.
  // `redop`: the op's reduction, for reducing ops (bitwise ones fall back).
  // NOTE [host map]: every collective calls it first, so it maps the group's hosts at the
  // first one; `span`: set, with "" returned, when the op runs through the group's GroupHosts
  // because the group spans hosts (NOTE [groups spanning hosts]); null: such an op falls back.
  std::string fallback_reason(const std::string& op, const std::vector<at::Tensor>& tensors, int64_t table_bytes = -1,
                              bool* by_table = nullptr, const c10d::ReduceOp* redop = nullptr,
                              bool* span = nullptr) const;
  // Runs `call` (a GroupHosts collective) and returns its Work, kept for endCoalescing() inside a
  // coalescing block, where an error is kept for it too (NOTE [coalescing]).
  template <class Call>
  c10::intrusive_ptr<c10d::Work> spanning(Call&& call);
  // Counts the fallback of `op` and returns the backend that serves it.
  c10d::Backend& fallback_for(const std::string& op, const std::vector<at::Tensor>& tensors, const std::string& why,
                              bool by_table);
  // The fallback backend for `device`; inside a coalescing block, one that
  // coalesces (NCCL) joins the block (NOTE [coalescing]).
  c10d::Backend& fallback_backend(const c10::Device& device);
  // Returns `work`, kept for endCoalescing() inside a coalescing block.
  c10::intrusive_ptr<c10d::Work> coalesced(c10::intrusive_ptr<c10d::Work> work);
  // The one funnel of every collective, in the manner of ProcessGroupNCCL's
  // collective(): refuses an op of a closed group (NOTE [shutdown and
  // abort]); in a group spanning hosts runs span(the group's GroupHosts)
  // through spanning() (NOTE [groups spanning hosts]); returns fallback(the
  // fallback backend) if `op` cannot (or, by the protocol table, should not)
  // run natively (`table_bytes` as in fallback_reason, -1: no table); else
  // native() under the op's CUDA scope (its stream and Work when it runs on
  // CUDA). Defined in backend_ops.cc, its only user.
  template <typename Fallback, typename Spanning, typename Native>
  c10::intrusive_ptr<c10d::Work> collective(const char* op, const std::vector<at::Tensor>& tensors,
                                            int64_t table_bytes, const c10d::ReduceOp* redop, bool async_op,
                                            Fallback&& fallback, Spanning&& span, Native&& native);
  // Runs a native request whose flat in/out tensors are given; returns the Work.
  c10::intrusive_ptr<c10d::Work> run_native(Request& rq, const std::vector<at::Tensor>& keep_alive);
  // set_io + run_native + copy the flat output back into `outs`.
  c10::intrusive_ptr<c10d::Work> run_flat(Request& rq, const at::Tensor& in, const at::Tensor& out,
                                          std::vector<at::Tensor>& outs);
  CpuEngine& cpu();
  CudaEngine& cuda() const;  // PURLIN-CUDA hook: created on the first CUDA tensor

  c10::intrusive_ptr<c10d::Store> store_;
  std::chrono::milliseconds timeout_;
  std::shared_ptr<const GroupContext> ctx_;  // NOTE [group settings] (before fallback_, which reads it)
  Fallback fallback_;
  std::unique_ptr<GroupHosts> hosts_;  // NOTE [host map]: made with the group, mapped at its first collective
  // NOTE [shutdown and abort]: the group's state, and its health (NOTE [group health]) with the
  // abort request that ends the host waits of its shared-memory Atoms and the device waits of its
  // CUDA group (declared before the engines, which hold its address).
  static constexpr int kOpen = 0, kShutDown = 1, kAborted = 2;
  std::atomic<int> closed_{kOpen};
  mutable GroupHealth health_;  // mutable: cuda() const creates the CUDA group that watches with it
  // NOTE [split groups]: splits asked of this group so far (every rank counts alike), the store
  // torch passed with the last one, and the group made then, returned again when torch asks the
  // same backend (serving CPU and CUDA) for the same split a second time.
  uint64_t splits_ = 0;
  c10::intrusive_ptr<c10d::Store> last_split_store_;
  c10::weak_intrusive_ptr<c10d::Backend> last_split_{c10::intrusive_ptr<c10d::Backend>()};
  std::unique_ptr<CpuEngine> cpu_;
  mutable std::unique_ptr<CudaEngine> cuda_;  // PURLIN-CUDA hook
  uint64_t seq_ = 0;
  // NOTE [coalescing]: between startCoalescing() and endCoalescing(), the ops' Works and the
  // fallback backends coalescing with this block.
  bool coalescing_ = false;
  std::exception_ptr block_error_;  // the first error of a native op inside the block
  std::vector<c10::intrusive_ptr<c10d::Work>> coalesced_works_;
  std::vector<c10d::Backend*> coalescing_fallbacks_;
};

}  // namespace purlin::backend
