// stream_memops.h — raw wrappers of the driver's stream memory operations:
// a 64-bit write and a 64-bit wait that a CUDA stream executes in order with
// its copies, without a kernel. The copy-engine Atom (ce_atom.h) is built on
// them.
//
// The driver functions are looked up at run time through the runtime
// (cudaGetDriverEntryPointByVersion), so nothing links libcuda directly.
//
// NOTE [stream memop ordering] (cuda.h, CU_STREAM_WRITE_VALUE_* and
//   CU_STREAM_WAIT_VALUE_*, CUDA 13 headers)
//   write_release  cuStreamWriteValue64, DEFAULT flags: runs after the stream's
//                  earlier work, behind a stream-scoped system fence, so every
//                  write of the earlier copies is visible before the value: a
//                  RELEASE store, stream-wide.
//   wait_acquire   cuStreamWaitValue64, GEQ: the stream's later work starts only
//                  once *addr >= value (int64 difference: no wrap below 2^62),
//                  so later copies see what the writer released. WAIT_VALUE_FLUSH
//                  is not needed: it orders remote writes landing in this GPU,
//                  and the copy-engine Atom runs pull plans only (ce_atom.cc's
//                  check_call rejects push plans), whose only remote writes are
//                  the flags. Details: docs/CUDA_DATAPATH.md, "Stream memop
//                  ordering".
#pragma once

#include <cstdint>
#include <string>

#include <cuda_runtime.h>

namespace purlin::atom::cuda {

class StreamMemOps {
 public:
  // The wrappers usable on `device`, or nullptr with *why set (driver too
  // old, symbol missing, or the device lacks 64-bit stream memory operations:
  // CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS). Thread-safe; the
  // answer is cached per device.
  static const StreamMemOps* get(int device, std::string* why);

  // RELEASE write of `value` to the device address `addr` (may be a peer
  // GPU's memory opened through CUDA IPC, or host-mapped memory). Throws
  // std::runtime_error naming `what` on failure.
  void write_release(cudaStream_t stream, uint64_t* addr, uint64_t value, const char* what) const;
  // ACQUIRE wait of `stream` until *addr >= value (device or host-mapped address).
  void wait_acquire(cudaStream_t stream, const uint64_t* addr, uint64_t value, const char* what) const;


 private:
  StreamMemOps() = default;
  [[noreturn]] void fail(int code, const char* api, const char* what) const;

  // Driver entry points, typed in stream_memops.cc (this header stays free of cuda.h).
  void* write_ = nullptr;       // cuStreamWriteValue64 (v2 API)
  void* wait_ = nullptr;        // cuStreamWaitValue64 (v2 API)
  void* error_name_ = nullptr;  // cuGetErrorName, for messages
};

}  // namespace purlin::atom::cuda
