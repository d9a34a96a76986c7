// symmetric_pool.h — purlin's symmetric memory pool: tensors whose bytes
// every peer of the group has mapped, so collectives read them in place
// (NOTE [zero-copy] in snac/plan.h, NOTE [zero-copy sources] in
// plan_kernel.cuh).
//
// One cudaMalloc region per group and rank, opened by every peer through
// CUDA IPC and published in the signal pad's pool_table. Blocks are carved
// at the SAME offset on every rank: allocate() is collective (every rank
// calls it in the same order with the same size) and agrees on the offset
// through the exchange function (NOTE [pool agreement]). free() is local and
// may run whenever the owning tensor dies.
// NOTE [pool agreement] Each rank proposes the lowest free offset >= a floor
//   (first fit). Ranks can disagree only while some rank still holds a block
//   that another already freed; then every rank retries from the highest
//   proposal, which converges to the first place free on every rank. The
//   exchange's tag names the call, the attempt and the size, so an exchange
//   that compares tags (PoolAgreement's: NOTE [pool agreement on the host])
//   refuses ranks that allocate different sizes or in different orders.
// NOTE [pool streams] A freed block comes back as the CUDA caching
//   allocator's blocks do: at once for allocations on the stream it was
//   allocated on (stream order puts the new owner's work after the old
//   owner's), for allocations on other streams only once the work queued on
//   its stream when it was freed has completed (an event free() records).
//   free() runs on the host when the tensor dies, typically while kernels
//   that use it are still queued: before this (2026-12-01) the block was
//   free for any stream at once, so e.g. FSDP2, which allocates
//   reduce-scatter inputs on the default stream and all-gather outputs on
//   its all-gather stream from the process group's allocator, could have an
//   all-gather write a block that a queued reduce-scatter still read. As
//   with the caching allocator (without record_stream), a use on another
//   stream than the allocating one must be ordered before the free by the
//   caller. A first fit that finds no room waits for the freed blocks'
//   events before the rank proposes "full". Blocks freed while their stream
//   is capturing a CUDA graph come back for their own stream only.
// NOTE [local placement] (TORCH_PURLIN_CUDA_POOL_PLACEMENT=local): every
//   rank places a block alone, with no exchange, by a rule that depends only
//   on the sequence of allocate and free calls (PoolBlocks::local_fit): first
//   fit over free space and the stream's own freed blocks; only when none holds
//   the block, first fit counting other streams' freed blocks too, and then the
//   allocating stream waits on the GPU (cudaStreamWaitEvent) for the blocks it
//   borrows: asking the host whether they completed would make placement
//   timing-dependent. Borrowing last keeps streams apart. Ranks that allocate
//   and free in the same order get the same offsets with no host rendezvous;
//   ranks that do not get different offsets without an error here, and a
//   collective on such tensors then fails its call tag (which hashes pool
//   offsets, NOTE [call tags]) before any peer data is read or written: an
//   error, never a wrong result. A capturing stream never borrows (no event
//   wait inside a capture; whether a stream captures is the same on every
//   rank). A full pool is this rank's PoolFull, not agreed.
//   Measurements: docs/PERFORMANCE.md, "The symmetric pool".
// Torch-free.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "atom/cuda/host/pool_blocks.h"

namespace purlin::atom::cuda {

// SymmetricPool::allocate's "no room" (on every rank alike: some rank's pool
// is full), which a caller may answer with ordinary memory.
class PoolFull : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class SymmetricPool {
 public:
  using AllGather = std::function<std::vector<std::string>(const std::string& tag, const std::string& mine)>;
  static constexpr int64_t kAlign = 4096;

  // Collective. Writes the table of every rank's pool base (as mapped here)
  // into `pad_table` (device memory, world words). nullptr + *why on failure
  // (the same on every rank).
  static std::shared_ptr<SymmetricPool> create(int rank, int world, int device, int64_t bytes,
                                               uint64_t* pad_table, const AllGather& exchange, std::string* why);
  ~SymmetricPool();
  SymmetricPool(const SymmetricPool&) = delete;
  SymmetricPool& operator=(const SymmetricPool&) = delete;

  // Collective: a block of `nbytes` at an offset agreed by every rank, for
  // use in order on `stream` (NOTE [pool streams]). Returns the offset;
  // throws PoolFull when some rank's pool has no room (every rank throws it),
  // std::runtime_error naming the cause when the ranks cannot agree.
  int64_t allocate(int64_t nbytes, const AllGather& exchange, cudaStream_t stream);
  // Local: the same block on every rank that allocates and frees in the same
  // order, with no exchange (NOTE [local placement]); `stream` waits for the
  // freed blocks of other streams it reuses. Throws PoolFull when this rank's
  // pool has no room.
  int64_t allocate_local(int64_t nbytes, cudaStream_t stream);
  // Local, thread-safe: the block comes back in stream order (NOTE [pool streams]).
  void free(int64_t offset);

  char* base() const { return static_cast<char*>(self_); }
  // Rank r's pool as mapped in this process (this rank's own for r == rank).
  char* base_of(int r) const { return static_cast<char*>(r == rank_ ? self_ : peers_[static_cast<size_t>(r)]); }
  int64_t bytes() const { return bytes_; }
  int device() const { return device_; }
  // Byte offset of [p, p + n) in the pool, or -1 if it is not inside one block.
  int64_t offset_of(const void* p, int64_t n) const;

 private:
  SymmetricPool() = default;
  void release();

  int rank_ = 0, device_ = 0;
  int64_t bytes_ = 0;
  void* self_ = nullptr;
  std::vector<void*> peers_;
  uint64_t seq_ = 0;                   // allocate() calls so far (exchange tags)
  mutable std::mutex mu_;
  PoolBlocks blocks_{0, kAlign};       // guarded by mu_
};

}  // namespace purlin::atom::cuda
