// pool_agreement.h — PoolAgreement: how the ranks of a CUDA group agree on
// the place of each symmetric-pool block, through a shared-memory arrival
// (NOTE [pool agreement on the host]). A CudaGroup owns one; its exchange()
// is what SymmetricPool::allocate agrees through.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "atom/cuda/host/symmetric_pool.h"
#include "backend/group/group_health.h"

namespace purlin::atom {
class CpuAtom;
}

namespace purlin::backend {

class PoolAgreement {
 public:
  // `health`: the group's; its abort request bounds the waits.
  PoolAgreement(int rank, int world, std::chrono::milliseconds timeout, c10::intrusive_ptr<c10d::Store> store,
                GroupHealth* health);
  ~PoolAgreement();
  PoolAgreement(const PoolAgreement&) = delete;
  PoolAgreement& operator=(const PoolAgreement&) = delete;

  // Every rank's `mine`, in rank order, for the pool's step `tag`; throws
  // std::runtime_error (and every later call does) when the ranks disagree
  // or one does not come within the timeout.
  std::vector<std::string> agree(const std::string& tag, const std::string& mine);
  // agree(), as SymmetricPool::allocate's exchange (valid while this object lives).
  atom::cuda::SymmetricPool::AllGather exchange();
  void set_timeout(std::chrono::milliseconds t);

 private:
  int rank_, world_;
  std::chrono::milliseconds timeout_;
  c10::intrusive_ptr<c10d::Store> store_;
  GroupHealth* health_;
  std::unique_ptr<atom::CpuAtom> atom_;  // the shared-memory group (shm_group.h), made on first allocation
  uint64_t seq_ = 0;
  std::string broken_;  // a failed agreement: later allocations raise it
};

}  // namespace purlin::backend
