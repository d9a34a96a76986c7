// cuda_group_host_checks.cc — CudaGroup's agreements between the ranks on
// the host, through the group's channel (backend/group/group_channel.h: a
// shared-memory arrival, the one the CPU engine uses) rather than the Store:
// all_to_all's split sizes and NOTE [checked calls] (peer_meta), the
// copy-engine call check, and the settling of a one-sided local error.
#ifdef PURLIN_WITH_CUDA

#include "atom/cpu/cpu_atom.h"
#include "backend/cuda/cuda_group.h"
#include "snac/arrival.h"

namespace purlin::backend {

// NOTE [copy-engine call check] The plan kernel checks on the GPU that the
// ranks made the same call (NOTE [call tags]); the copy engines cannot:
// stream memory operations only wait for a value >= v (an equality check
// built from two such waits left both ranks' streams blocked past the
// watchdog on one shared H200, 2026-12-02). So every copy-engine collective
// first exchanges its signature (what the call tag hashes: the Spec, dtype
// and options, and the pool offsets of zero-copy inputs) through the host's
// shared-memory arrival, microseconds beside the large collectives this path
// serves. A difference raises on every rank before anything is enqueued (the
// group stays usable); a rank that never comes is a timeout naming it.
void CudaGroup::ce_check(const Request& rq, uint64_t sig) {
  const atom::WaitSite site{rq.name, "copy engine: check the call's arguments with every rank", channel_.next_seq()};
  std::vector<std::string> all;
  try {
    all = channel_.arrive_tagged(site, std::string("ce:") + rq.name, std::to_string(sig),
                                 " (collectives called in different orders, or on different paths)");
  } catch (const std::runtime_error& e) {
    if (channel_.broken()) throw;  // a wait that ended: the group is unusable (group_channel.h)
    throw std::invalid_argument(error_prefix(rq.name, rank_) + e.what());  // a rank at another call
  }
  for (int r = 0; r < world_; ++r)
    if (all[r] != all[rank_])
      throw std::invalid_argument(error_prefix(rq.name, rank_) + "rank " + std::to_string(r) +
                                  " called this collective with other arguments (copy engine: another Spec, dtype "
                                  "or pool offsets); nothing was enqueued");
}

// NOTE [one-sided local errors] A CUDA collective's local argument checks
// (sizes, dtypes, roots) raise on this rank at once, without asking the peers:
// asking would cost every call a host exchange (NOTE [checked calls]). When
// every rank made the same mistake, every rank raised and the group goes on in
// step. When only this rank did, the others entered the collective and wait
// for it on the GPU, and this rank's next collective would meet their data
// from that call (an H200 run returned a wrong sum so, 2026-12-02). So the
// next collective after a local error first asks every rank on the host
// whether it raised at that same call: if all did, nothing else happens; a
// rank that does not come entered the collective, and the group is unusable
// here as it is there: whichever side's wait ends first (this host wait, or
// the others' device waits naming this rank) publishes it, and the other side
// raises within about a second (NOTE [group health]).
void CudaGroup::settle_local_error(const Request& rq) {
  const std::string what = std::move(local_error_);
  local_error_.clear();
  const uint64_t n = channel_.next_seq();
  const atom::WaitSite site{rq.name, "after a local argument error: check that every rank raised it too", n};
  try {
    snac::arrive_tagged(channel_.atom(), n, "local argument error", "raised", site,
                        " (the ranks raised at different calls)");
  } catch (const std::runtime_error& e) {  // atom::TimeoutError too: a rank entered the erroneous call
    // This rank's finding, published (NOTE [group health]): the ranks that entered the call learn at once
    // why their device waits cannot end, instead of at their timeout.
    channel_.mark_broken("an earlier call raised an argument error on this rank only (" + what +
                         "), while other ranks entered that collective: " + e.what());
    throw std::runtime_error(error_prefix(rq.name, rank_) + channel_.found());
  }
}

std::vector<PeerMeta> CudaGroup::peer_meta(const Request& rq) {
  const std::vector<std::byte> blob = encode_meta(rq, world_);
  const PeerMeta mine = decode_meta(blob.data(), world_);
  if (!sizes_per_rank(rq) && !check_calls_) return std::vector<PeerMeta>(world_, mine);
  // all_to_all: the plan needs every rank's splits. They are exchanged on the
  // host through a shared-memory arrival handshake (NOTE [arrival]; the ranks
  // of a CUDA group share one host), microseconds instead of a Store round trip.
  // NOTE [checked calls] With TORCH_PURLIN_CUDA_CHECK_CALLS every collective
  // exchanges its arguments so, and check_agreement() names any difference
  // before anything is launched: also the mismatched calls that the call tags
  // cannot name because the ranks' sizes chose different protocols (lines,
  // parity or workspace plans, different block counts), which otherwise wait
  // for flags that never come until the group's timeout.
  const atom::WaitSite site{rq.name, sizes_per_rank(rq) ? "all_to_all: exchange split sizes with every rank"
                                                               : "check the call's arguments with every rank",
                            channel_.next_seq()};
  return channel_.arrive_and_check(rq, site);  // group_channel.h: the CPU engine's arrival and agreement
}

}  // namespace purlin::backend

#endif  // PURLIN_WITH_CUDA
