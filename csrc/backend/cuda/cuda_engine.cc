// cuda_engine.cc — the CudaEngine / CudaOpScope glue declared in
// cuda_engine.h, over the group's CudaGroup (cuda_group.h).
#ifdef PURLIN_WITH_CUDA

#include "backend/cuda/cuda_engine.h"

#include <cstdio>
#include <optional>

#include <ATen/ops/empty.h>
#include <ATen/record_function.h>
#include <ATen/ops/from_blob.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "atom/cuda/host/cuda_check.h"
#include "backend/c10d/completed_work.h"
#include "backend/cuda/cuda_group.h"
#include "backend/cuda/cuda_work.h"
#include "backend/c10d/tensor_args.h"
#include "common/env.h"

namespace purlin::backend {

namespace {

bool is_reduction(const std::string& op) { return op.rfind("all_reduce", 0) == 0 || op.rfind("reduce", 0) == 0; }

}  // namespace

// ---- CudaEngine / CudaOpScope ------------------------------------------------------------

struct CudaEngine::Impl {
  int rank, world;
  std::chrono::milliseconds timeout;
  c10::intrusive_ptr<c10d::Store> store;
  GroupHealth* health;  // NOTE [group health], [shutdown and abort]
  std::shared_ptr<const GroupContext> ctx;  // NOTE [group settings]
  std::unique_ptr<CudaGroup> group;
  std::string setup_failed;  // NOTE [setup agreement]: why this group's CUDA setup failed, for every later call
  CudaOpScope::State* scope = nullptr;
  bool plain_logged = false;  // NOTE [pool or plain]
  bool nccl_ran_eagerly = false;  // a CUDA op of the group ran on NCCL outside graph capture
};

struct CudaOpScope::State {
  CudaEngine::Impl* engine = nullptr;
  c10::Device device{c10::kCUDA, 0};
  bool async = false;
  cudaEvent_t ready = nullptr;  // the caller's stream at the op's start
  std::optional<c10::cuda::CUDAStreamGuard> on_internal;
  c10::intrusive_ptr<CudaWork> work;
};

CudaEngine::CudaEngine(int rank, int world, std::chrono::milliseconds timeout, c10::intrusive_ptr<c10d::Store> store,
                       GroupHealth* health, std::shared_ptr<const GroupContext> ctx)
    : impl_(new Impl{rank, world, timeout, std::move(store), health, std::move(ctx), nullptr, "", nullptr}) {}

CudaEngine::~CudaEngine() = default;

void CudaEngine::set_timeout(std::chrono::milliseconds timeout) {
  impl_->timeout = timeout;
  if (impl_->group) impl_->group->set_timeout(timeout);
}

bool CudaEngine::active() const { return impl_->scope != nullptr; }

LastLaunch CudaEngine::last_launch() const { return impl_->group ? impl_->group->last_launch() : LastLaunch{}; }

ProtocolCounts CudaEngine::protocol_counts() const {
  return impl_->group ? impl_->group->protocol_counts() : ProtocolCounts{};
}

std::string CudaEngine::route(const std::string& op, const std::vector<at::Tensor>& tensors, int64_t table_bytes,
                              bool* by_table) {
  const std::string why = unavailable(op, tensors);
  if (!why.empty() || table_bytes < 0 || impl_->world < 2) return why;
  const int64_t from = impl_->group ? impl_->group->nccl_from(op) : 0;  // NOTE [protocol table]
  if (from <= 0 || table_bytes < from) return "";
  if (by_table) *by_table = true;
  return "NCCL measured faster from " + std::to_string(from) +
         " bytes (the protocol table, TORCH_PURLIN_CUDA_NCCL_FROM in docs/TUNING.md)";
}

void CudaEngine::before_nccl(const std::string& op, const c10::Device& dev, const std::string& why, bool by_table) {
  const bool capturing_now = capturing(dev);
  TORCH_CHECK(!(by_table && capturing_now && !impl_->nccl_ran_eagerly), "purlin ", op, " on rank ", impl_->rank,
              ": this size runs on NCCL (", why, "), and NCCL's first collective of a group cannot be captured "
              "in a CUDA graph; run one such collective before capturing, or set TORCH_PURLIN_CUDA_NCCL_FROM=none");
  impl_->nccl_ran_eagerly |= !capturing_now;
  if (impl_->group) impl_->group->note_nccl();  // last_launch: whatever sent it there, NCCL runs it
}

bool CudaEngine::capturing(const c10::Device& dev) {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  cudaStreamIsCapturing(c10::cuda::getCurrentCUDAStream(dev.index()).stream(), &st);
  return st != cudaStreamCaptureStatusNone;
}

// NOTE [pool or plain] torch's Backend::allocateTensor is a request to try
// (FSDP2: "whether to (try to) use the ProcessGroup's allocate_tensor"), so
// where the group has no CUDA datapath (e.g. it spans hosts), no pool, or a
// pool with no room on some rank, it returns ordinary CUDA memory, logged
// once: collectives on it stage instead of reading it in place. Every rank
// decides alike (the datapath's and the pool's setup are agreed, and so is
// "full"), so the ranks' tensors stay all in the pool or all outside it.
// torch_purlin.empty asks for symmetric memory by name and raises instead.
at::Tensor CudaEngine::empty(at::IntArrayRef sizes, const at::TensorOptions& options, bool or_plain) {
  RECORD_FUNCTION(or_plain ? "purlin::allocate_tensor" : "purlin::empty", std::vector<c10::IValue>());
  TORCH_CHECK(options.device().is_cuda(), "purlin empty on rank ", impl_->rank, ": symmetric memory is for CUDA tensors, got ",
              options.device().str());
  const c10::Device dev(c10::kCUDA, options.device().has_index() ? options.device().index()
                                                                  : c10::cuda::current_device());
  auto plain = [&](const std::string& why) {
    if (!impl_->plain_logged && impl_->ctx->settings.get_bool("TORCH_PURLIN_LOG"))
      std::fprintf(stderr, "[purlin] rank %d: allocateTensor returns ordinary CUDA memory (collectives on it stage "
                   "instead of reading it in place): %s (logged once)\n", impl_->rank, why.c_str());
    impl_->plain_logged = true;
    return at::empty(sizes, options.device(dev));
  };
  const std::string why = group_on(dev, "empty");
  if (!why.empty() && or_plain) return plain(why);
  TORCH_CHECK(why.empty(), "purlin empty on rank ", impl_->rank, ": symmetric memory needs the CUDA datapath: ", why);
  c10::cuda::CUDAGuard device_guard(dev);
  int64_t numel = 1;
  for (int64_t d : sizes) {
    TORCH_CHECK(d >= 0, "purlin empty on rank ", impl_->rank, ": negative size ", d);
    numel *= d;
  }
  const int64_t nbytes = numel * static_cast<int64_t>(c10::elementSize(c10::typeMetaToScalarType(options.dtype())));
  std::shared_ptr<atom::cuda::SymmetricPool> pool;
  try {
    pool = impl_->group->pool();
  } catch (const std::exception& e) {
    if (or_plain) return plain(e.what());
    TORCH_CHECK(false, "purlin empty on rank ", impl_->rank, ": ", e.what());
  }
  int64_t off = -1;
  try {
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(dev.index()).stream();
    off = impl_->group->pool_local() ? pool->allocate_local(nbytes, stream)  // NOTE [local placement]
                                     : pool->allocate(nbytes, impl_->group->pool_exchange(), stream);
  } catch (const atom::cuda::PoolFull& e) {
    if (or_plain) return plain(e.what());
    TORCH_CHECK(false, "purlin empty on rank ", impl_->rank, ": ", e.what());
  } catch (const std::exception& e) {
    TORCH_CHECK(false, "purlin empty on rank ", impl_->rank, ": ", e.what());
  }
  return at::from_blob(pool->base() + off, sizes, [pool, off](void*) { pool->free(off); }, options.device(dev));
}

std::string CudaEngine::unavailable(const std::string& op, const std::vector<at::Tensor>& tensors) {
  std::optional<c10::Device> dev;
  for (const auto& t : tensors) {
    if (!t.defined()) continue;
    if (!t.is_cuda()) return "the op mixes CUDA and " + t.device().str() + " tensors";
    if (t.is_sparse()) return "sparse tensors are not supported natively";
    if (dev && *dev != t.device()) return "the op's tensors are on several GPUs";
    dev = t.device();
    DType d;
    if (!to_dtype(t.scalar_type(), &d))
      return std::string("dtype ") + c10::toString(t.scalar_type()) + " is not supported natively";
    if (is_reduction(op) && !atom::cuda::can_reduce(d))
      return std::string(dtype_name(d)) + " reductions on CUDA are served by NCCL";
  }
  return dev ? group_on(*dev, op) : "";
}

std::string CudaEngine::group_on(const c10::Device& dev, const std::string& op) {
  if (!impl_->group) {
    c10::cuda::CUDAGuard guard(dev);
    cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    cudaStreamIsCapturing(c10::cuda::getCurrentCUDAStream(dev.index()).stream(), &st);
    TORCH_CHECK(st == cudaStreamCaptureStatusNone, "purlin ", op, " on rank ", impl_->rank,
                ": the first CUDA collective of a group sets up its workspace and cannot run inside CUDA graph "
                "capture; run one collective on the group before capturing");
    TORCH_CHECK(impl_->setup_failed.empty(), "purlin ", op, " on rank ", impl_->rank,
                ": this group's CUDA setup failed and the group is unusable for CUDA tensors (destroy it and create "
                "a new one): ", impl_->setup_failed);
    try {
      impl_->group = std::make_unique<CudaGroup>(impl_->rank, impl_->world, impl_->timeout, impl_->store, dev.index(),
                                                 impl_->health, impl_->ctx);
    } catch (const std::exception& e) {
      impl_->setup_failed = e.what();  // the agreement's keys are spent: a second attempt could not agree again
      TORCH_CHECK(false, "purlin ", op, " on rank ", impl_->rank, ": ", impl_->setup_failed);
    }
  }
  if (!impl_->group->unavailable().empty())
    return "the CUDA datapath is unavailable for this group: " + impl_->group->unavailable();
  TORCH_CHECK(impl_->group->device() == dev.index(), "purlin ", op, " on rank ", impl_->rank, ": tensors on ",
              dev.str(), " but this group's CUDA workspace is on cuda:", impl_->group->device(),
              " (use one GPU per rank and group)");
  return "";
}

c10::intrusive_ptr<c10d::Work> CudaEngine::run(Request& rq, const std::vector<at::Tensor>& outputs) {
  TORCH_CHECK(impl_->scope && impl_->group, "purlin ", rq.name, ": no native CUDA op in progress");
  CudaOpScope::State& st = *impl_->scope;
  c10::cuda::CUDAGuard guard(st.device);
  impl_->group->launch(rq, c10::cuda::getCurrentCUDAStream(st.device.index()).stream());
  if (!st.async) return completed_work(outputs);
  st.work = c10::make_intrusive<CudaWork>(impl_->rank, outputs, st.device, impl_->group->error_source());
  return st.work;
}

CudaOpScope::CudaOpScope(CudaEngine* engine, const std::vector<at::Tensor>& tensors, bool async_op) {
  if (!engine || !engine->impl_->group || !engine->impl_->group->unavailable().empty()) return;
  const at::Tensor* first = nullptr;
  for (const auto& t : tensors)
    if (t.defined() && t.is_cuda()) {
      first = &t;
      break;
    }
  if (!first) return;
  s_ = std::make_unique<State>();
  s_->engine = engine->impl_.get();
  s_->device = first->device();
  s_->async = async_op;
  if (async_op) {
    const c10::cuda::CUDAStream caller = c10::cuda::getCurrentCUDAStream(s_->device.index());
    const c10::cuda::CUDAStream internal = s_->engine->group->internal_stream();
    s_->on_internal.emplace(internal);  // also makes the op's device current until the op returns
    atom::cuda::check(cudaEventCreateWithFlags(&s_->ready, cudaEventDisableTiming), "cudaEventCreate");
    atom::cuda::check(cudaEventRecord(s_->ready, caller.stream()), "cudaEventRecord");
    atom::cuda::check(cudaStreamWaitEvent(internal.stream(), s_->ready, 0), "cudaStreamWaitEvent");
    for (const auto& t : tensors)
      if (t.defined() && t.is_cuda() && t.has_storage())
        c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), internal);
  }
  s_->engine->scope = s_.get();
}

CudaOpScope::~CudaOpScope() {
  if (!s_) return;
  if (s_->work) {
    try {
      s_->work->complete_on(c10::cuda::getCurrentCUDAStream(s_->device.index()));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "[purlin] could not complete a CUDA Work: %s\n", e.what());
    }
  }
  s_->on_internal.reset();
  if (s_->ready) cudaEventDestroy(s_->ready);
  s_->engine->scope = nullptr;
}

}  // namespace purlin::backend

#endif  // PURLIN_WITH_CUDA
