// nvlink_probe.cc — NVLink between GPUs, from NVML through dlopen (host code).
#include "atom/cuda/host/nvlink_probe.h"

#include <dlfcn.h>

#include <cctype>

namespace purlin::atom::cuda {

namespace {

// The few NVML entry points used, by their C signatures (nvml.h is not needed).
using NvmlDevice = void*;
using InitFn = int (*)(unsigned int);
using ShutdownFn = int (*)();
using ByBusFn = int (*)(const char*, NvmlDevice*);
using P2PFn = int (*)(NvmlDevice, NvmlDevice, int, int*);
constexpr int kNvmlSuccess = 0;
constexpr int kP2PCapsNvlink = 2;  // NVML_P2P_CAPS_INDEX_NVLINK
constexpr int kP2PStatusOk = 0;    // NVML_P2P_STATUS_OK

}  // namespace

bool nvlink_between_all(const std::vector<std::string>& pci_bus_ids, std::string* why) {
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    *why = "NVML (libnvidia-ml.so.1) is not available";
    return false;
  }
  auto init = reinterpret_cast<InitFn>(dlsym(lib, "nvmlInitWithFlags"));
  auto shutdown = reinterpret_cast<ShutdownFn>(dlsym(lib, "nvmlShutdown"));
  auto by_bus = reinterpret_cast<ByBusFn>(dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2"));
  auto p2p = reinterpret_cast<P2PFn>(dlsym(lib, "nvmlDeviceGetP2PStatus"));
  const bool inited = init && shutdown && by_bus && p2p && init(0) == kNvmlSuccess;
  bool ok = inited;
  if (!ok) *why = "NVML could not be initialised";
  std::vector<NvmlDevice> devs;
  for (size_t i = 0; ok && i < pci_bus_ids.size(); ++i) {
    std::string bus = pci_bus_ids[i];
    for (char& c : bus) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    NvmlDevice d = nullptr;
    ok = by_bus(bus.c_str(), &d) == kNvmlSuccess;
    if (!ok) *why = "NVML does not know GPU " + pci_bus_ids[i];
    devs.push_back(d);
  }
  for (size_t i = 0; ok && i < devs.size(); ++i)
    for (size_t j = i + 1; ok && j < devs.size(); ++j) {
      int status = -1;
      ok = p2p(devs[i], devs[j], kP2PCapsNvlink, &status) == kNvmlSuccess && status == kP2PStatusOk;
      if (!ok) *why = "no NVLink between GPUs " + pci_bus_ids[i] + " and " + pci_bus_ids[j];
    }
  if (inited) shutdown();
  dlclose(lib);
  return ok;
}

}  // namespace purlin::atom::cuda
