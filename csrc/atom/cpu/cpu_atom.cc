// cpu_atom.cc — CpuAtom: segment lifecycle, signal pad, bounded waits.
#include "atom/cpu/cpu_atom.h"

#include <sched.h>
#include <time.h>

#include <cstring>
#include <new>
#include <sstream>
#include <stdexcept>

#include "atom/cpu/reduce_cpu.h"

namespace purlin::atom {
namespace {

struct SegmentHeader {  // NOTE [cpu segment layout], bytes [0, 64)
  uint64_t magic;
  uint32_t version;
  int32_t world;
  int32_t rank;
  uint32_t owner_bytes;
  uint64_t meta_bytes;
  uint64_t workspace_bytes;
};
static_assert(sizeof(SegmentHeader) <= 64, "header must fit its cache line");

constexpr size_t kLine = 64, kPage = 4096;
size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

}  // namespace

CpuAtom::Layout CpuAtom::Layout::compute(int world, size_t meta_bytes, size_t workspace_bytes, size_t owner_bytes) {
  Layout l;
  l.world = world;
  l.meta_bytes = meta_bytes;
  l.workspace_bytes = workspace_bytes;
  l.owner_bytes = owner_bytes;
  l.pad_off = kLine;
  const size_t pad_end = l.pad_off + static_cast<size_t>(FlagKind::kCount) * world * kLine;
  l.meta_off = round_up(pad_end, kLine);
  l.meta_stride = round_up(meta_bytes, kLine);
  l.owner_off = l.meta_off + 2 * l.meta_stride;
  l.ws_off = round_up(l.owner_off + owner_bytes, kPage);
  l.total = l.ws_off + workspace_bytes;
  return l;
}

size_t CpuAtom::Layout::flag_off(FlagKind kind, int sender) const {
  return pad_off + (static_cast<size_t>(kind) * world + sender) * kLine;
}

std::string CpuAtom::segment_name(const std::string& name_prefix, int rank) {
  return name_prefix + "_r" + std::to_string(rank);
}

CpuAtom::CpuAtom(std::string name_prefix, int rank, int world, size_t workspace_bytes, size_t meta_bytes,
                 std::chrono::milliseconds timeout, size_t owner_bytes)
    : prefix_(std::move(name_prefix)), rank_(rank), world_(world), timeout_(timeout) {
  if (owner_bytes > UINT32_MAX) throw std::invalid_argument("purlin CpuAtom: owner area too large");
  if (world < 1 || rank < 0 || rank >= world)
    throw std::invalid_argument("purlin CpuAtom: bad rank " + std::to_string(rank) + " for world " +
                                std::to_string(world));
  set_timeout(timeout);
  layout_ = Layout::compute(world, meta_bytes, workspace_bytes, owner_bytes);
  own_ = cpu::ShmSegment::create(segment_name(prefix_, rank_), layout_.total);
  std::byte* b = own_.data();
  for (int k = 0; k < static_cast<int>(FlagKind::kCount); ++k)  // the pad's atomics live in our segment
    for (int s = 0; s < world_; ++s) new (flag(b, FlagKind(k), s)) std::atomic<uint64_t>(0);
  SegmentHeader h{kMagic, kLayoutVersion, world, rank, static_cast<uint32_t>(owner_bytes), meta_bytes, workspace_bytes};
  std::memcpy(b, &h, sizeof h);
  peers_.resize(world_);
  bases_.assign(world_, nullptr);
  bases_[rank_] = b;
}

void CpuAtom::attach_peers() {
  if (attached_) return;
  for (int r = 0; r < world_; ++r) {
    if (r == rank_) continue;
    const std::string name = segment_name(prefix_, r);
    cpu::ShmSegment seg;
    try {
      seg = cpu::ShmSegment::open(name, layout_.total);  // NOTE [checked segments]
    } catch (const cpu::ShmMissing&) {
      throw cpu::ShmMissing("purlin CpuAtom: rank " + std::to_string(rank_) + " cannot find rank " + std::to_string(r) +
                            "'s segment '" + name + "' in its /dev/shm");
    }
    SegmentHeader h;
    std::memcpy(&h, seg.data(), sizeof h);
    if (h.magic != kMagic || h.version != kLayoutVersion || h.world != world_ || h.rank != r ||
        h.meta_bytes != layout_.meta_bytes || h.workspace_bytes != layout_.workspace_bytes ||
        h.owner_bytes != layout_.owner_bytes) {
      std::ostringstream m;
      m << "purlin CpuAtom: rank " << rank_ << " found a mismatched segment '" << seg.name() << "': magic 0x"
        << std::hex << h.magic << std::dec << " version " << h.version << " world " << h.world << " rank "
        << h.rank << " meta_bytes " << h.meta_bytes << " workspace_bytes " << h.workspace_bytes << " owner_bytes "
        << h.owner_bytes << " (expected world " << world_ << " rank " << r << " meta_bytes " << layout_.meta_bytes
        << " workspace_bytes " << layout_.workspace_bytes << " owner_bytes " << layout_.owner_bytes << ")";
      throw std::runtime_error(m.str());
    }
    bases_[r] = seg.data();
    peers_[r] = std::move(seg);
  }
  attached_ = true;
}

void CpuAtom::unlink_own() { own_.unlink(); }

void CpuAtom::set_timeout(std::chrono::milliseconds timeout) {
  if (timeout.count() <= 0) throw std::invalid_argument("purlin CpuAtom: timeout must be > 0 ms");
  timeout_ = timeout;
}

std::byte* CpuAtom::base(int rank) const {
  if (rank < 0 || rank >= world_)
    throw std::out_of_range("purlin CpuAtom: rank " + std::to_string(rank) + " out of range for world " +
                            std::to_string(world_));
  std::byte* b = bases_[rank];
  if (b == nullptr)
    throw std::logic_error("purlin CpuAtom: rank " + std::to_string(rank_) + " used peer " + std::to_string(rank) +
                           " before attach_peers()");
  return b;
}

std::atomic<uint64_t>* CpuAtom::flag(std::byte* seg, FlagKind kind, int sender) const {
  return reinterpret_cast<std::atomic<uint64_t>*>(seg + layout_.flag_off(kind, sender));
}

std::byte* CpuAtom::meta(int rank, int parity) {
  return base(rank) + layout_.meta_off + static_cast<size_t>(parity & 1) * layout_.meta_stride;
}

void CpuAtom::copy(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }

void CpuAtom::reduce(void* dst, const void* const* srcs, const double* scales, int nsrc, int64_t n, DType dtype,
                     RedOp op) {
  cpu::reduce_cpu(dst, srcs, scales, nsrc, n, dtype, op);
}

// NOTE [cpu signal pad ordering]: release store into the peer's pad, slot = this rank.
void CpuAtom::signal(int peer, FlagKind kind, uint64_t value) {
  flag(base(peer), kind, rank_)->store(value, std::memory_order_release);
}

// NOTE [cpu signal pad ordering] + [cpu wait strategy]: acquire loads of our own pad, slot = peer.
void CpuAtom::wait(int peer, FlagKind kind, uint64_t value, const WaitSite& site) {
  base(peer);  // range / attachment check, for a clear error rather than a hang
  const std::atomic<uint64_t>* f = flag(bases_[rank_], kind, peer);
  uint64_t have = f->load(std::memory_order_acquire);
  for (int i = 0; have < value && i < kChecksBeforeClock; ++i) {  // most waits end here, without a clock read
    cpu_relax();
    have = f->load(std::memory_order_acquire);
  }
  if (have >= value) return;
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now(), deadline = start + timeout_;
  const timespec nap{0, static_cast<long>(std::chrono::nanoseconds(kSleep).count())};
  Clock::duration waited{0};
  for (;;) {
    // One batch of checks per clock read: many pauses, a few yields, or one sleep.
    const int batch = waited < kSpinFor ? 256 : waited < kYieldFor ? 16 : 1;
    for (int i = 0; i < batch; ++i) {
      have = f->load(std::memory_order_acquire);
      if (have >= value) return;
      if (waited < kSpinFor) cpu_relax();
      else if (waited < kYieldFor) sched_yield();
      else nanosleep(&nap, nullptr);
    }
    const Clock::time_point now = Clock::now();
    waited = now - start;
    const bool aborted = aborted_ && aborted_->load(std::memory_order_relaxed);
    if (now >= deadline || aborted) {
      have = f->load(std::memory_order_acquire);
      if (have >= value) return;
      throw_timeout(peer, kind, have, value, site, aborted);
    }
  }
}

void CpuAtom::throw_timeout(int peer, FlagKind kind, uint64_t have, uint64_t want, const WaitSite& site,
                            bool aborted) const {
  std::ostringstream m;
  m << "purlin " << site.op << " (seq " << site.seq << ") on rank " << rank_ << ": ";
  const std::string why = aborted && abort_reason_ ? abort_reason_() : std::string();
  if (!why.empty()) {  // the group broke (NOTE [group health] in backend/group/group_health.h)
    m << "the group is unusable: " << why << " (this rank was in phase '" << site.phase << "' waiting for rank "
      << peer << ": its " << flag_kind_name(kind) << " flag is " << have << ", needed >= " << want << ")";
    throw AbortedError(m.str());
  }
  if (aborted) m << "the group was aborted";
  else m << "timed out after " << static_cast<double>(timeout_.count()) / 1000.0 << " s";
  m << " in phase '" << site.phase << "' waiting for rank " << peer << " (" << flag_kind_name(kind) << " flag is " << have
    << ", needed >= " << want << ")";
  if (aborted) throw AbortedError(m.str());
  throw TimeoutError(m.str());
}

}  // namespace purlin::atom
