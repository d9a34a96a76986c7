// stream_memops.cc — finding the driver's stream memory operations at run
// time, and the two calls (NOTE [stream memop ordering] in the header).
#include "atom/cuda/host/stream_memops.h"

#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>

#include <cuda.h>
#include <cudaTypedefs.h>

namespace purlin::atom::cuda {

namespace {

// The driver ABI asked for: CUDA 12.0 returns the v2 stream memory
// operations (introduced in 11.7, PFN_..._v11070), which every 12.x and 13.x
// driver provides.
constexpr unsigned int kDriverApi = 12000;

template <class Fn>
bool lookup(const char* symbol, Fn* fn, std::string* why) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSymbolNotFound;
  const cudaError_t e = cudaGetDriverEntryPointByVersion(symbol, &p, kDriverApi, cudaEnableDefault, &status);
  if (e != cudaSuccess || status != cudaDriverEntryPointSuccess || p == nullptr) {
    cudaGetLastError();
    *why = std::string("the CUDA driver has no ") + symbol + " for API " + std::to_string(kDriverApi) + " (" +
           (e != cudaSuccess ? cudaGetErrorName(e)
                             : status == cudaDriverEntryPointVersionNotSufficent ? "driver too old" : "symbol not found") +
           ")";
    return false;
  }
  *fn = reinterpret_cast<Fn>(p);
  return true;
}

std::mutex g_mu;
std::unique_ptr<StreamMemOps> g_ops;     // process-wide entry points, once found
std::string g_ops_why;                   // why they were not found
std::map<int, std::string> g_device_why; // per device: "" usable, else why not

}  // namespace

const StreamMemOps* StreamMemOps::get(int device, std::string* why) {
  std::lock_guard<std::mutex> g(g_mu);
  if (!g_ops && g_ops_why.empty()) {
    std::unique_ptr<StreamMemOps> ops(new StreamMemOps());
    PFN_cuStreamWriteValue64_v11070 w = nullptr;
    PFN_cuStreamWaitValue64_v11070 v = nullptr;
    PFN_cuGetErrorName_v6000 n = nullptr;
    if (lookup("cuStreamWriteValue64", &w, &g_ops_why) && lookup("cuStreamWaitValue64", &v, &g_ops_why) &&
        lookup("cuGetErrorName", &n, &g_ops_why)) {
      ops->write_ = reinterpret_cast<void*>(w);
      ops->wait_ = reinterpret_cast<void*>(v);
      ops->error_name_ = reinterpret_cast<void*>(n);
      g_ops = std::move(ops);
    }
  }
  if (!g_ops) {
    *why = g_ops_why;
    return nullptr;
  }
  auto it = g_device_why.find(device);
  if (it == g_device_why.end()) {
    std::string reason;
    PFN_cuDeviceGet_v2000 get_dev = nullptr;
    PFN_cuDeviceGetAttribute_v2000 get_attr = nullptr;
    if (lookup("cuDeviceGet", &get_dev, &reason) && lookup("cuDeviceGetAttribute", &get_attr, &reason)) {
      CUdevice dev = 0;
      int can = 0;
      if (get_dev(&dev, device) != CUDA_SUCCESS ||
          get_attr(&can, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, dev) != CUDA_SUCCESS)
        reason = "cuDeviceGetAttribute(CAN_USE_64_BIT_STREAM_MEM_OPS) failed for cuda:" + std::to_string(device);
      else if (!can)
        reason = "cuda:" + std::to_string(device) + " has no 64-bit stream memory operations";
    }
    it = g_device_why.emplace(device, reason).first;
  }
  *why = it->second;
  return it->second.empty() ? g_ops.get() : nullptr;
}

void StreamMemOps::fail(int code, const char* api, const char* what) const {
  const char* name = nullptr;
  std::string text = "CUresult " + std::to_string(code);
  if (reinterpret_cast<PFN_cuGetErrorName_v6000>(error_name_)(static_cast<CUresult>(code), &name) == CUDA_SUCCESS &&
      name != nullptr)
    text = name;
  throw std::runtime_error(std::string("purlin: ") + api + " (" + what + ") failed: " + text);
}

void StreamMemOps::write_release(cudaStream_t stream, uint64_t* addr, uint64_t value, const char* what) const {
  const CUresult r = reinterpret_cast<PFN_cuStreamWriteValue64_v11070>(write_)(
      stream, reinterpret_cast<CUdeviceptr>(addr), value, CU_STREAM_WRITE_VALUE_DEFAULT);
  if (r != CUDA_SUCCESS) fail(r, "cuStreamWriteValue64", what);
}

void StreamMemOps::wait_acquire(cudaStream_t stream, const uint64_t* addr, uint64_t value, const char* what) const {
  const CUresult r = reinterpret_cast<PFN_cuStreamWaitValue64_v11070>(wait_)(
      stream, reinterpret_cast<CUdeviceptr>(addr), value, CU_STREAM_WAIT_VALUE_GEQ);
  if (r != CUDA_SUCCESS) fail(r, "cuStreamWaitValue64", what);
}

}  // namespace purlin::atom::cuda
