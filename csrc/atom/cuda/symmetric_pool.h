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
//   that compares tags (CudaGroup's: NOTE [pool agreement on the host])
//   refuses ranks that allocate different sizes or in different orders.
// Torch-free.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace purlin::atom::cuda {

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

  // Collective: a block of `nbytes` at an offset agreed by every rank.
  // Returns the offset; throws std::runtime_error naming the cause when the
  // pool is full or the ranks cannot agree.
  int64_t allocate(int64_t nbytes, const AllGather& exchange);
  void free(int64_t offset);  // local, thread-safe

  char* base() const { return static_cast<char*>(self_); }
  int64_t bytes() const { return bytes_; }
  int device() const { return device_; }
  // Byte offset of [p, p + n) in the pool, or -1 if it is not inside one block.
  int64_t offset_of(const void* p, int64_t n) const;

 private:
  SymmetricPool() = default;
  int64_t first_fit(int64_t floor, int64_t nbytes) const;  // caller holds mu_
  void release();

  int rank_ = 0, device_ = 0;
  int64_t bytes_ = 0;
  void* self_ = nullptr;
  std::vector<void*> peers_;
  uint64_t seq_ = 0;                   // allocate() calls so far (exchange tags)
  mutable std::mutex mu_;
  std::map<int64_t, int64_t> used_;    // offset -> bytes
};

}  // namespace purlin::atom::cuda
