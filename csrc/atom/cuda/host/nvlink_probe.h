// nvlink_probe.h — whether GPUs are joined by NVLink, asked of NVML.
//
// NOTE [wide lines] rely on a warp's 128-byte store reaching a peer as a
// unit, which is only known of NVLink between GPUs of one architecture:
// TORCH_PURLIN_CUDA_LINE_FORMAT=auto takes wide lines only where this probe
// says every pair of the group's GPUs has NVLink P2P. NVML (the driver's
// libnvidia-ml.so.1) is opened with dlopen: no build or link dependency, and
// where it is missing the answer is "unknown" (no wide lines).
#pragma once

#include <string>
#include <vector>

namespace purlin::atom::cuda {

// True if NVML reports NVLink P2P as OK for every pair of `pci_bus_ids`
// (cudaDeviceGetPCIBusId form, any case). Otherwise false, with *why.
// Deterministic for a given machine, so every rank that asks about the same
// list gets the same answer.
bool nvlink_between_all(const std::vector<std::string>& pci_bus_ids, std::string* why);

}  // namespace purlin::atom::cuda
