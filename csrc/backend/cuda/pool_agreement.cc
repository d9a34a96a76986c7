// pool_agreement.cc — see pool_agreement.h.
#ifdef PURLIN_WITH_CUDA

#include "backend/cuda/pool_agreement.h"

#include <ATen/record_function.h>

#include "atom/cpu/cpu_atom.h"
#include "backend/c10d/store_rendezvous.h"
#include "backend/group/shm_group.h"
#include "snac/arrival.h"

namespace purlin::backend {

PoolAgreement::PoolAgreement(int rank, int world, std::chrono::milliseconds timeout,
                             c10::intrusive_ptr<c10d::Store> store, GroupHealth* health)
    : rank_(rank), world_(world), timeout_(timeout), store_(std::move(store)), health_(health) {}

PoolAgreement::~PoolAgreement() = default;

void PoolAgreement::set_timeout(std::chrono::milliseconds t) {
  timeout_ = t;
  if (atom_) atom_->set_timeout(t);
}

// NOTE [pool agreement on the host] Every block of the symmetric pool is
// placed collectively (NOTE [pool agreement] in symmetric_pool.h): one or
// more all-gathers of each rank's proposed offset. Through the Store each
// costs a TCP round trip or more per rank, and FSDP2 with the process
// group's allocator allocates several blocks per layer and step; the ranks of
// a CUDA group share one host, so the proposals go through a shared-memory
// arrival handshake instead (as all_to_all's split sizes: CudaGroup::peer_meta()),
// bounded by the group's timeout and naming the ranks that did not arrive.
// Each message carries the pool's tag (call and attempt), so ranks that
// allocate in different orders or sizes get an error, not a wrong block.
std::vector<std::string> PoolAgreement::agree(const std::string& tag, const std::string& mine) {
  constexpr size_t kBlob = 128;  // tag '\0' value '\0'
  RECORD_FUNCTION("purlin::pool_agree", std::vector<c10::IValue>());  // the host wait for every rank, in profiles
  if (!broken_.empty()) throw std::runtime_error(broken_);
  if (!atom_)
    atom_ = make_shm_group("cuda-pool", rank_, world_, 4096, kBlob, timeout_, store_rendezvous(store_, timeout_),
                           &health_->signal());
  const uint64_t n = ++seq_;
  const atom::WaitSite site{"empty", "symmetric pool: agree on a block's offset with every rank", n};
  try {
    return snac::arrive_tagged(*atom_, n, "symmetric pool step " + tag, mine, site,
                               " (every rank must allocate the same sizes in the same order)");
  } catch (const std::exception& e) {
    broken_ = e.what();
    throw;
  }
}

atom::cuda::SymmetricPool::AllGather PoolAgreement::exchange() {
  return [this](const std::string& tag, const std::string& mine) { return agree(tag, mine); };
}

}  // namespace purlin::backend

#endif  // PURLIN_WITH_CUDA
