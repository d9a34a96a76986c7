// flagged_line.cuh — the flagged line: data that carries its own notification.
//
// NOTE [flagged lines] A 16-byte line holds 8 payload bytes and two 32-bit
//   flags: {lo, f0, hi, f1}, written with one 16-byte volatile store and polled
//   with one 16-byte volatile load. Each 8-byte half {data, flag} is a unit, so
//   matching flags prove the data beside them is this collective's: no fence,
//   no separate Staged flag; a pushed contribution is Stage and Notify in one
//   NVLink trip. f0 = seq % (2^32 - 1) + 1 and f1 = (seq % 65535 + 1) |
//   hash16(call signature) << 16, seq counting the group's line collectives:
//   a line keeps whatever wrote it last, however long ago, and f0 repeats at
//   one parity only every 2^33 line collectives (f1 alone would every 131070:
//   the emulator's short-flag-period mutation shows a stale line passing).
//   Neither is ever 0, so cleared memory never matches. f0 fresh and f1 with
//   this seq but another hash, for kLineMismatchNs, is a peer that called other
//   arguments (NOTE [call tags]); a line is used only when both flags match.
#pragma once

#include <cstdint>
#include <cstring>

#include "atom/cuda/device/signal.cuh"

namespace purlin::atom::cuda {

constexpr int64_t kLineBytes = 16;   // one line in memory
constexpr int64_t kLinePayload = 8;  // payload bytes per line
constexpr uint64_t kLineMismatchNs = 1000000;  // a fresh f0 with a foreign f1 this long: a mismatch

struct LineFlags {
  uint32_t f0, f1;
};

// An element of a payload word, and an element's bits placed in one, at
// byte b (a multiple of sizeof(T), b + sizeof(T) <= 8): shifts, so words and
// elements stay in registers (NOTE [register units] in line_kernel.cuh).
template <class T>
__device__ __forceinline__ T elem_of(uint64_t v, int b) {
  const uint64_t w = v >> (8 * b);
  T x;
  memcpy(&x, &w, sizeof(T));
  return x;
}

template <class T>
__device__ __forceinline__ uint64_t elem_bits(T x, int b) {
  uint64_t w = 0;
  memcpy(&w, &x, sizeof(T));
  return w << (8 * b);
}

__host__ __device__ constexpr LineFlags line_flags(uint64_t seq, uint64_t sig) {
  const uint32_t h = static_cast<uint32_t>((sig ^ (sig >> 16) ^ (sig >> 32) ^ (sig >> 48)) & 0xFFFFu);
  return LineFlags{static_cast<uint32_t>(seq % 0xFFFFFFFFull + 1u), static_cast<uint32_t>(seq % 65535u + 1u) | (h << 16)};
}

// Relaxed, system-scope visibility: the flag validates the data, so nothing
// needs ordering around the store.
__device__ __forceinline__ void line_store(void* line, uint64_t payload, LineFlags f) {
  const uint32_t lo = static_cast<uint32_t>(payload), hi = static_cast<uint32_t>(payload >> 32);
  asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(line), "r"(lo), "r"(f.f0), "r"(hi),
               "r"(f.f1)
               : "memory");
}

struct LineSeen {
  uint64_t payload;
  uint32_t f0, f1;
};

__device__ __forceinline__ LineSeen line_load(const void* line) {
  uint32_t a, b, c, d;
  asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(a), "=r"(b), "=r"(c), "=r"(d)
               : "l"(line)
               : "memory");
  return LineSeen{static_cast<uint64_t>(a) | (static_cast<uint64_t>(c) << 32), b, d};
}

// The poll after a first miss; the payload comes back in registers. Inlined
// like everything the line kernel calls: a call's ABI made the kernel keep a
// stack and spill values live across the call (NOTE [register units]).
struct LineWaited {
  uint64_t payload;
  bool ok;
};

static __device__ __forceinline__ LineWaited line_wait_slow(const void* line, LineFlags f, const WaitSite& site,
                                                         int origin, uint32_t phase) {
  LineSeen r;
  const uint64_t t0 = ptx::globaltimer_ns();
  uint64_t foreign_since = 0;  // when a fresh f0 with another call's f1 was first seen
  for (uint32_t spins = 1;; ++spins) {
    r = line_load(line);
    if (r.f0 == f.f0 && r.f1 == f.f1) return LineWaited{r.payload, true};
    const bool foreign = r.f0 == f.f0 && (r.f1 & 0xFFFFu) == (f.f1 & 0xFFFFu);  // this seq, another hash
    if ((spins & 63u) == 0u || foreign) {
      if (*reinterpret_cast<volatile uint64_t*>(site.broken) != 0) return LineWaited{0, false};
      const uint64_t now = ptx::globaltimer_ns();
      if (!foreign) foreign_since = 0;
      else if (!foreign_since) foreign_since = now;
      WaitSite raw = site;
      raw.base = 0;
      if (foreign && now - foreign_since > kLineMismatchNs) {
        record_timeout(raw, origin, 0, kCallTag, f.f1, r.f1, phase, 0);
        return LineWaited{0, false};
      }
      const bool aborted = (spins & kAbortLookSpins) == 0 && abort_requested(site);  // NOTE [device abort]
      if (now - t0 > site.timeout_ns || aborted) {
        record_timeout(raw, origin, 0, kLine, f.f0, r.f0, phase, now - t0, aborted ? kRecordAborted : kRecordTimedOut);
        return LineWaited{0, false};
      }
    }
  }
}

// Polls `line` until it carries flags `f`; returns its payload in *out.
// Returns false (after recording why, unless another thread already broke
// the group) on a call-tag mismatch, a timeout, or a group broken elsewhere.
// `origin` is the rank whose data the line holds, for the record. A line
// that has arrived costs one load.
__device__ __forceinline__ bool line_wait(const void* line, LineFlags f, uint64_t* out, const WaitSite& site,
                                          int origin, uint32_t phase) {
  const LineSeen r = line_load(line);
  if (r.f0 == f.f0 && r.f1 == f.f1) {
    *out = r.payload;
    return true;
  }
  const LineWaited w = line_wait_slow(line, f, site, origin, phase);
  *out = w.payload;
  return w.ok;
}

}  // namespace purlin::atom::cuda
