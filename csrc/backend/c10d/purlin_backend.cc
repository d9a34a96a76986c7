// purlin_backend.cc — construction, routing (native or fallback) and Work.
// The c10d op overrides are in backend_ops.cc.
#include "backend/c10d/purlin_backend.h"

#include <algorithm>
#include <stdexcept>
#include <ATen/core/ivalue.h>

#include "backend/c10d/coalesced_work.h"
#include "backend/c10d/completed_work.h"
#include "backend/c10d/group_hosts.h"
#include "backend/c10d/store_rendezvous.h"
#include "backend/c10d/tensor_args.h"
#include "backend/cpu/cpu_engine.h"
#include "backend/cuda/cuda_engine.h"
#include "backend/group/setup_agreement.h"

namespace purlin::backend {

namespace {
std::shared_ptr<const GroupContext> or_default(std::shared_ptr<const GroupContext> ctx) {
  return ctx ? std::move(ctx) : std::make_shared<const GroupContext>();
}
}  // namespace

PurlinBackend::PurlinBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                             std::chrono::milliseconds timeout, Fallback::GroupFactory make_fallback,
                             std::shared_ptr<const GroupContext> context)
    : c10d::Backend(rank, size),
      store_(store),
      timeout_(timeout),
      ctx_(or_default(std::move(context))),
      fallback_(store, rank, size, timeout, std::move(make_fallback), ctx_->settings),
      hosts_(std::make_unique<GroupHosts>(store, rank, size, timeout, fallback_, ctx_)),
      health_(rank, size, ctx_->global_ranks.empty() ? rank : ctx_->global_ranks[rank]) {
  // NOTE [setup agreement]: the members' settings, agreed before any rank routes a call by them.
  const std::string why =
      agree_on_settings(store_rendezvous(store_, timeout_, "made this group (init_process_group, new_group or "
                                                           "split_group)"),
                        "purlin/settings/", rank, size, *ctx_, fallback_.settings_error());
  TORCH_CHECK(why.empty(), "purlin: making the group on ", ctx_->rank_name(rank), " failed: ", why);
}

PurlinBackend::~PurlinBackend() = default;

void PurlinBackend::setTimeout(std::chrono::milliseconds timeout) {
  timeout_ = timeout;
  if (cpu_) cpu_->set_timeout(timeout);
  hosts_->set_timeout(timeout);
  if (cuda_) cuda_->set_timeout(timeout);  // PURLIN-CUDA hook
}

CpuEngine& PurlinBackend::cpu() {
  if (!cpu_) {
    cpu_ = std::make_unique<CpuEngine>(getRank(), getSize(), timeout_, store_rendezvous(store_, timeout_), &health_,
                                           ctx_);
  }
  return *cpu_;
}

// PURLIN-CUDA hook
bool PurlinBackend::supportsTensorAlloc(c10::DeviceIndex) {
#ifdef PURLIN_WITH_CUDA
  return true;
#else
  return false;
#endif
}

at::Tensor PurlinBackend::allocateTensor(long size, at::TensorOptions options) {
  check_open("allocateTensor");
  return cuda().empty({static_cast<int64_t>(size)}, options, /*or_plain=*/true);  // NOTE [pool or plain]
}

at::Tensor PurlinBackend::empty_symmetric(at::IntArrayRef sizes, const at::TensorOptions& options) {
  check_open("empty");
  return cuda().empty(sizes, options);
}

std::tuple<std::string, int, int, bool> PurlinBackend::last_launch() const {
  const LastLaunch l = cuda().last_launch();
  return {l.protocol, l.blocks, l.threads, l.overlapped};
}

std::map<std::string, std::map<std::string, int64_t>> PurlinBackend::protocol_counts() const { return cuda().protocol_counts(); }

CudaEngine& PurlinBackend::cuda() const {
  if (!cuda_) cuda_ = std::make_unique<CudaEngine>(getRank(), getSize(), timeout_, store_, &health_, ctx_);
  return *cuda_;
}

std::map<std::string, std::pair<int64_t, int64_t>> PurlinBackend::counters() const {
  auto c = fallback_.counters();
  hosts_->add_counters(&c);
  return c;
}

std::string PurlinBackend::fallback_reason(const std::string& op, const std::vector<at::Tensor>& tensors,
                                           int64_t table_bytes, bool* by_table, const c10d::ReduceOp* redop,
                                           bool* span) const {
  hosts_->ensure(op.c_str());  // NOTE [host map at the first collective] (group_hosts.h)
  bool cuda_op = false;
  for (const auto& t : tensors) cuda_op |= t.defined() && t.is_cuda();
  // NOTE [fallback arguments]: CPU tensors gloo cannot take stay native, where the op's Request
  // refuses them on every rank with the reason (or, when only forced, runs them).
  const at::Tensor* first = nullptr;
  for (const auto& t : tensors)
    if (!first && t.defined()) first = &t;
  const bool gloo_refuses = !cuda_op && first && first->layout() == c10::kStrided && first->device().is_cpu() &&
                            !gloo_takes(first->scalar_type(), redop);
  if (fallback_.forced(op, cuda_op) && !gloo_refuses) return "forced by TORCH_PURLIN_FORCE_FALLBACK";
  if (redop && bitwise_reduction(*redop))
    return gloo_refuses ? "" : "bitwise reduce ops (BAND, BOR, BXOR) are not supported natively";
  for (const auto& t : tensors) {
    if (!t.defined()) continue;
    if (t.layout() != c10::kStrided) return "sparse tensors are not supported natively";
    if (t.is_cuda()) {  // PURLIN-CUDA hook: checks every tensor
      if (hosts_->spans()) return hosts_->reason();  // NOTE [host map]: NCCL across hosts, CUDA IPC never tried
      return cuda().route(op, tensors, table_bytes, by_table);  // the CUDA engine's routing
    }
    if (!t.device().is_cpu()) return std::string("tensors on ") + t.device().str() + " are not supported natively";
    DType d;
    if (!to_dtype(t.scalar_type(), &d) && !gloo_refuses)
      return std::string("dtype ") + c10::toString(t.scalar_type()) + " is not supported natively";
  }
  if (C10_UNLIKELY(hosts_->spans())) return hosts_->route(span);  // NOTE [groups spanning hosts]
  return "";
}

c10d::Backend& PurlinBackend::fallback_for(const std::string& op, const std::vector<at::Tensor>& tensors,
                                           const std::string& why, bool by_table) {
  ++seq_;
  const at::Tensor* cuda_t = nullptr;
  for (const auto& t : tensors)
    if (t.defined() && t.is_cuda()) cuda_t = &t;
  if (cuda_t) cuda().before_nccl(op, cuda_t->device(), why, by_table);
  fallback_.count_fallback(op, why);
  return fallback_backend(tensors.empty() ? c10::Device(c10::kCPU) : tensors[0].device());
}

c10d::Backend& PurlinBackend::fallback_backend(const c10::Device& device) {
  c10d::Backend& b = fallback_.get(device);
  if (coalescing_ && b.supportsCoalescing() &&
      std::find(coalescing_fallbacks_.begin(), coalescing_fallbacks_.end(), &b) == coalescing_fallbacks_.end()) {
    b.startCoalescing();
    coalescing_fallbacks_.push_back(&b);
  }
  return b;
}

c10::intrusive_ptr<c10d::Work> PurlinBackend::coalesced(c10::intrusive_ptr<c10d::Work> work) {
  if (coalescing_ && work) coalesced_works_.push_back(work);
  return work;
}

// NOTE [coalescing] (coalesced_work.h). A block left open (an exception from
// outside purlin inside torch's _coalescing_manager skips endCoalescing) is
// closed first; its errors were raised then.
void PurlinBackend::startCoalescing() {
  if (coalescing_) {
    try {
      endCoalescing();
    } catch (const std::exception&) {
    }
  }
  coalescing_ = true;
  block_error_ = nullptr;
}

c10::intrusive_ptr<c10d::Work> PurlinBackend::endCoalescing() {
  std::vector<c10::intrusive_ptr<c10d::Work>> works = std::move(coalesced_works_);
  std::vector<c10d::Backend*> fallbacks = std::move(coalescing_fallbacks_);
  std::exception_ptr error = std::move(block_error_);
  coalesced_works_.clear();
  coalescing_fallbacks_.clear();
  block_error_ = nullptr;
  coalescing_ = false;
  for (c10d::Backend* b : fallbacks) {  // every fallback's block ends, whatever another's raised
    try {
      if (auto w = b->endCoalescing()) works.push_back(w);
    } catch (...) {
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
  if (works.empty()) return completed_work({});
  if (works.size() == 1) return works[0];
  return c10::make_intrusive<CoalescedWork>(std::move(works));
}

// A call counts as native once it passed the argument checks: one refused there
// (std::invalid_argument: this rank's or a peer's argument error, raised on
// every rank before anything ran) is not counted; one that ran and failed is.
c10::intrusive_ptr<c10d::Work> PurlinBackend::run_native(Request& rq, const std::vector<at::Tensor>& outputs) {
  ++seq_;
  try {
    try {
      if (cuda_ && cuda_->active()) {  // PURLIN-CUDA hook
        auto work = cuda_->run(rq, outputs);
        fallback_.count_native(rq.name);
        return coalesced(work);
      }
      cpu().run(rq);
      fallback_.count_native(rq.name);
    } catch (const c10::Error&) {
      fallback_.count_native(rq.name);
      throw;
    } catch (const std::invalid_argument& e) {
      TORCH_CHECK(false, e.what(), ctx_->legend());  // refused: not counted
    } catch (const std::exception& e) {
      fallback_.count_native(rq.name);
      TORCH_CHECK(false, e.what(), ctx_->legend());  // messages name group ranks: say which global ones
    }
  } catch (...) {
    if (!coalescing_) throw;
    // NOTE [coalescing]: raised by endCoalescing, after torch cleared its block.
    if (!block_error_) block_error_ = std::current_exception();
    return completed_work({});
  }
  return coalesced(completed_work(outputs));
}

}  // namespace purlin::backend
