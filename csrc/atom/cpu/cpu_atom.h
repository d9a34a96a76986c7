// cpu_atom.h — HostAtom over POSIX shared memory between the ranks of one host.
//
// Each rank owns one segment, /dev/shm/<prefix>_r<rank>, and maps every peer's.
// Lifecycle, sequenced by the caller (the c10d backend barriers on its Store):
//   1. CpuAtom(...)     create + reserve + map own segment (zero-filled, header
//                       written; a /dev/shm too small: ShmNoSpace)
//   2. barrier          all ranks have created theirs
//   3. attach_peers()   open + map every peer's segment, check its owner,
//                       mode, size and header (a segment not found: ShmMissing)
//   4. barrier          all ranks have attached
//   5. unlink_own()     remove own name; from here on nothing is left in
//                       /dev/shm even if a process is killed (the mappings
//                       keep the memory alive until the last one goes away)
// The destructor unmaps everything and unlinks the own name if step 5 never ran.
//
// NOTE [cpu segment layout] — offsets from the segment base, identical on all ranks:
//   [0, 64)           SegmentHeader: magic, layout version, world, rank, sizes
//   [64, pad_end)     signal pad: for each FlagKind k, for each sender s, one
//                     std::atomic<uint64_t> alone on a 64-byte line at
//                     64 + (k * world + s) * 64. Only rank s writes it.
//   meta_off          2 metadata blobs (parity 0, 1) of meta_bytes, each
//                     starting on a 64-byte boundary (stride = meta_stride)
//   owner_off         the owner area, 64-byte aligned, owner_bytes long (0 by
//                     default): the Atom never reads or writes it; its owner
//                     keeps there what every rank must see of every other
//                     (the backend: the group's health record, NOTE [group
//                     health] in backend/group/group_health.h)
//   ws_off            the workspace, 4096-byte aligned, workspace_bytes long
// A fresh segment is all zeros (ftruncate), so every flag starts at 0; its
// pages are reserved when it is made (NOTE [reserved segments] in
// shm_segment.h) and a peer's is checked before it is mapped (NOTE [checked
// segments]).
//
// NOTE [cpu signal pad ordering] — signal(peer, k, v) does a RELEASE store of v
// into the PEER's segment at flag[k][this rank]; wait(peer, k, v) does ACQUIRE
// loads of this rank's own flag[k][peer] until it is >= v. Plain writes made
// before the signal (into any segment) are therefore visible after the wait.
// Flags only grow, so they are never reset; there is one writer per flag.
//
// NOTE [cpu wait strategy] — ranks may outnumber cores (CI runs 4 ranks on 2):
// spin with a pause instruction for kSpinFor, then sched_yield() until
// kYieldFor, then sleep kSleep between checks. The clock is read once per
// batch of checks, and not before kChecksBeforeClock checks (most waits of a
// busy group end within them; the clock read was a measurable part of a
// small collective). Every wait is bounded by timeout() and then throws
// TimeoutError naming op, seq, rank, phase, peer, flag kind and values; with
// an abort flag set (set_abort_flag), a wait that sees it raised at a clock
// read throws AbortedError with the same names instead (within ~1 ms): "the
// group was aborted", or the reason the flag's owner gives (why the group
// broke) followed by what this rank was waiting for.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "atom/atom.h"
#include "atom/cpu/shm_segment.h"

namespace purlin::atom {

static_assert(std::atomic<uint64_t>::is_always_lock_free, "signal flags must be lock-free (address-free)");
static_assert(sizeof(std::atomic<uint64_t>) == sizeof(uint64_t), "signal flags are plain 8-byte words");

class CpuAtom : public HostAtom {
 public:
  static constexpr uint64_t kMagic = 0x4d48534e4c525550ull;  // "PURLNSHM" little-endian
  static constexpr uint32_t kLayoutVersion = 2;  // 2: the owner area
  static constexpr std::chrono::microseconds kSpinFor{20};
  static constexpr std::chrono::microseconds kYieldFor{1000};
  static constexpr std::chrono::microseconds kSleep{30};
  static constexpr int kChecksBeforeClock = 32;  // a microsecond or two of pauses

  // Creates and maps /dev/shm/<name_prefix>_r<rank>. name_prefix starts with '/'.
  CpuAtom(std::string name_prefix, int rank, int world, size_t workspace_bytes, size_t meta_bytes,
          std::chrono::milliseconds timeout, size_t owner_bytes = 0);
  ~CpuAtom() override = default;  // members unmap, and unlink the own name if still linked
  CpuAtom(const CpuAtom&) = delete;
  CpuAtom& operator=(const CpuAtom&) = delete;

  void attach_peers();  // after every rank constructed; idempotent
  void unlink_own();    // after every rank attached; idempotent

  void set_timeout(std::chrono::milliseconds timeout);  // > 0
  // A flag that, once true, ends every wait with AbortedError (NOTE [cpu wait
  // strategy]); read relaxed, from any thread; must outlive the atom. nullptr:
  // none. `reason` (may be empty), asked when a wait ends so: "" for "the
  // group was aborted", else why the group broke, which the error then names.
  void set_abort_flag(const std::atomic<bool>* aborted, std::function<std::string()> reason = {}) {
    aborted_ = aborted;
    abort_reason_ = std::move(reason);
  }
  std::chrono::milliseconds timeout() const { return timeout_; }

  static std::string segment_name(const std::string& name_prefix, int rank);

  // HostAtom
  int rank() const override { return rank_; }
  int world() const override { return world_; }
  std::byte* workspace(int rank) override { return base(rank) + layout_.ws_off; }
  size_t workspace_bytes() const override { return layout_.workspace_bytes; }
  std::byte* meta(int rank, int parity) override;
  size_t meta_bytes() const override { return layout_.meta_bytes; }
  // Rank `rank`'s owner area (NOTE [cpu segment layout]), owner_bytes() long.
  std::byte* owner_area(int rank) { return base(rank) + layout_.owner_off; }
  size_t owner_bytes() const { return layout_.owner_bytes; }
  void copy(void* dst, const void* src, size_t bytes) override;
  void reduce(void* dst, const void* const* srcs, const double* scales, int nsrc, int64_t n, DType dtype,
              RedOp op) override;
  void signal(int peer, FlagKind kind, uint64_t value) override;
  void wait(int peer, FlagKind kind, uint64_t value, const WaitSite& site) override;

  // NOTE [cpu segment layout], computed once from (world, meta_bytes, workspace_bytes).
  struct Layout {
    int world = 0;
    size_t meta_bytes = 0, workspace_bytes = 0, owner_bytes = 0;
    size_t pad_off = 0, meta_off = 0, meta_stride = 0, owner_off = 0, ws_off = 0, total = 0;
    static Layout compute(int world, size_t meta_bytes, size_t workspace_bytes, size_t owner_bytes = 0);
    size_t flag_off(FlagKind kind, int sender) const;
  };
  const Layout& layout() const { return layout_; }

 private:
  std::byte* base(int rank) const;  // segment base of `rank` as mapped here; checks rank and attachment
  std::atomic<uint64_t>* flag(std::byte* seg, FlagKind kind, int sender) const;
  [[noreturn]] void throw_timeout(int peer, FlagKind kind, uint64_t have, uint64_t want, const WaitSite& site,
                                  bool aborted) const;

  std::string prefix_;
  int rank_, world_;
  std::chrono::milliseconds timeout_;
  Layout layout_;
  cpu::ShmSegment own_;
  std::vector<cpu::ShmSegment> peers_;  // indexed by rank; own slot stays empty
  std::vector<std::byte*> bases_;       // segment base per rank; nullptr until attached
  bool attached_ = false;
  const std::atomic<bool>* aborted_ = nullptr;
  std::function<std::string()> abort_reason_;
};

}  // namespace purlin::atom
