// plan_kernel.cuh — the plan kernel: the device interpreter of SNAC plans.
//
// Same semantics as snac::execute (executor.cc) with an Atom made of the
// pieces next to this file: signal.cuh (Wait/Signal), copy.cuh (Copy),
// reduce.cuh (Reduce). Shape: KernelParams (plan_kernel.h: the memory it
// touches), the kernel; launch_typed.cuh launches it (instantiated per
// element type in plan_kernel_<family>.cu; the checked entry points are
// launch_prepared and launch_plan).
//
// NOTE [device reuse] A GPU collective has no host arrival handshake, so
//   what NOTE [epochs] gets from it is rebuilt on the device: the last block
//   of a launch to finish raises this rank's Done word at every peer to the
//   next base epoch, and every block begins a collective by waiting until
//   every peer's Done word reached its own base, i.e. every peer finished
//   reading this rank's workspace (and scale and tag words) in the previous
//   collective. Only then does it write either. One flag round trip per
//   collective, and a device-side barrier for free; the Staged/Consumed
//   protocol inside the plan is unchanged. Launches of one group are
//   serialised on each rank (the engine orders its streams), so kernels of
//   one rank never overlap, whatever their block counts.
// NOTE [call tags] A GPU collective has no host handshake either to check
//   that the ranks called the same collective. Each launch carries a
//   signature (a hash of the Spec, the dtype and, for zero-copy plans, the
//   input's place in the symmetric pool); block 0 writes tag = call_tag(
//   signature, base) (call_tag.h) into every peer's call_tag word before it
//   signals anything, and the first Staged wait on each peer compares that
//   peer's tag with its own. While that wait lasts, it also watches the
//   peer's call stamp (NOTE [tagged waits]): mismatched calls may launch
//   other block counts, whose flag slots never come.
//   A mismatch is recorded like a timeout (kind kCallTag) before any of the
//   peer's data is read: the rank stops, the group is broken, and the host
//   raises "rank P called <op> with other arguments". The Staged release of
//   block 0 publishes the tag (same thread, earlier store).
// NOTE [parity plans] A one-round push plan (too large for flagged lines,
//   small enough for the parity region) need not wait for the previous
//   collective to end: its Workspace is the half of the parity region of
//   parity lseq % 2 (lseq counts line and parity collectives alike), which no
//   peer still reads once it raised Done for the collective before last
//   (pbase): the line plans' reuse wait replaces the Done wait (NOTE [line
//   plans]). Inside, the plan runs as usual (plain stores, Staged released
//   after them), skipping what the previous collective may still read: the
//   scale word (no PREMUL_SUM) and the call_tag word (its tags go to
//   ptag[lseq % 2]). Its Done is a plan kernel's (fenced, released), since the
//   next writer of the half orders its plain stores after this rank's reads by
//   it. It advances lseq; chosen on the host per Spec, identically on every
//   rank (CudaGroup::plan_for); separate from the line region, where plain
//   data could pass for a line. Details: docs/CUDA_DATAPATH.md, "Parity plans".
// NOTE [zero-copy sources] Plans made with PlanOptions::read_peer_inputs
//   name peers' inputs (Input refs of another rank): the input lies in the
//   symmetric pool at the same offset on every rank (the call tag checks
//   it), so a peer's input is pool_table[peer] + input_pool_offset.
#pragma once

#include <cstdint>
#include <type_traits>

#include "atom/cuda/call_tag.h"
#include "atom/cuda/device/copy.cuh"
#include "atom/cuda/device/plan_kernel.h"
#include "atom/cuda/device/reduce.cuh"
#include "atom/cuda/device/signal.cuh"

namespace purlin::atom::cuda {

// KernelParams::lines: the line format of a line plan (NOTE [wide lines]).
constexpr int kNarrowLines = 1;
constexpr int kWideLines = 2;

// 16-byte elements (complex128) are only ever copied.
struct alignas(16) Pod16 {
  uint64_t lo, hi;
};

namespace detail {

// ws_bytes: where this launch's Workspace starts in every rank's buffer (the
// workspace, or a half of the parity region: NOTE [parity plans]).
__device__ __forceinline__ char* buffer_of(const KernelParams& p, const DevRef& r, int64_t esize, int64_t ws_bytes) {
  switch (r.buf) {
    case kInput:
      if (r.rank == p.rank) return p.input + r.offset * esize;
      return reinterpret_cast<char*>(p.pad[p.layout.pool_table(r.rank)]) + p.input_pool_offset + r.offset * esize;
    case kOutput:  // a peer's output: NOTE [peer outputs], at the same pool offset as this rank's
      if (r.rank == p.rank) return p.output + r.offset * esize;
      return reinterpret_cast<char*>(p.pad[p.layout.pool_table(r.rank)]) + p.output_pool_offset + r.offset * esize;
    default:
      return reinterpret_cast<char*>(p.pad[p.layout.peer_table(r.rank)]) + ws_bytes + r.offset * esize;
  }
}

__device__ __forceinline__ uint64_t* peer_pad(const KernelParams& p, int rank) {
  return reinterpret_cast<uint64_t*>(p.pad[p.layout.peer_table(rank)]);
}

template <class T, class Acc>
__device__ void reduce_by_op(int redop, T* dst, const T* const* srcs, const Acc* scales, int nsrc, int64_t n) {
  switch (static_cast<RedOp>(redop)) {
    case RedOp::Sum: return block_reduce<T, OpSum, false, false>(dst, srcs, scales, nsrc, n);
    case RedOp::Product: return block_reduce<T, OpProd, false, false>(dst, srcs, scales, nsrc, n);
    case RedOp::Min: return block_reduce<T, OpMin, false, false>(dst, srcs, scales, nsrc, n);
    case RedOp::Max: return block_reduce<T, OpMax, false, false>(dst, srcs, scales, nsrc, n);
    case RedOp::Avg:
    case RedOp::PremulSum:
      if constexpr (std::is_floating_point_v<Acc>) {
        if (static_cast<RedOp>(redop) == RedOp::Avg) return block_reduce<T, OpSum, false, true>(dst, srcs, scales, nsrc, n);
        return block_reduce<T, OpSum, true, false>(dst, srcs, scales, nsrc, n);
      }
      return;  // excluded by reduction_supported()
  }
}

// NOTE [device reuse] / [device epochs]: the last block to finish advances
// the epochs and raises Done at every peer. Each block's fence orders its
// accesses before its count; the last block's fence orders the others'
// (observed through the count) before its Done release. pbase and lseq serve
// region collectives (NOTE [flagged lines], [parity plans]).
// NOTE [line Done] A line launch's Done only has to say that its reads are
// over (its writes are lines, validated by their flags, or local): every
// block counts itself after a barrier that its threads reach only with the
// values of their loads in hand, so the fences and the release are dropped
// (2 us of a 6 us broadcast on 2x H200). Plan launches keep them, parity
// plans included (NOTE [parity plans]): their region holds plain data, so a
// peer's next write there must be ordered after these reads by the memory
// model itself (a release Done), not by the line flags. Their remote stores
// were already released by Staged, so the fences wait for local ones only.
// region_run: a line or parity launch, which advances lseq (read at the
// launch's start: no launch changes it before its last block ends, and a
// read-modify-write here would cost the last block a memory round trip).
// pads: the peers' pads as the launch already read them (shared memory), or
// null to read them from the peer table here (another round trip).
__device__ __forceinline__ void end_launch(const KernelParams& p, uint64_t base, uint64_t lbase, uint64_t lseq, int G,
                                           bool line_run, bool region_run, uint64_t* const* pads) {
  const PadLayout& L = p.layout;
  __syncthreads();
  if (threadIdx.x == 0) {
    if (!line_run) __threadfence();
    // A one-block launch is its own last block: no counter round trip.
    const unsigned long long ended =
        G == 1 ? 0ull : atomicAdd(reinterpret_cast<unsigned long long*>(p.pad + L.finished()), 1ull);
    if (ended == static_cast<unsigned long long>(G - 1)) {
      if (!line_run) __threadfence();
      const uint64_t next = base + p.steps + 1;
      if (G > 1) p.pad[L.finished()] = 0;
      p.pad[L.pbase()] = base;
      p.pad[L.base()] = next;
      p.pad[L.lbase()] = lbase + p.local_syncs;
      if (region_run) p.pad[L.lseq()] = lseq + 1;
      for (int q = 0; q < L.world; ++q) {
        if (q == p.rank) continue;
        uint64_t* done = (pads ? pads[q] : peer_pad(p, q)) + L.flag(kDone, p.rank, 0);
        if (line_run) ptx::st_relaxed_sys(done, next);
        else ptx::st_release_sys(done, next);
      }
    }
  }
}

// NOTE [staged plan] A small collective is latency-bound: every dependent
//   read of its kernel costs a full memory round trip, and the op loop read
//   each op and its sources where the plan lies (the kernel parameters, read
//   through a generic pointer, or the plan store's device memory): one or
//   more round trips per op, in a chain. The plan is the host's (uploaded
//   before the launch, never written by a kernel), so every thread copies
//   16 bytes of it into shared memory before griddepcontrol.wait, all loads
//   in flight at once and, in an overlapped launch, while the previous
//   kernel ends; the op loop then reads shared memory. Measured with
//   benchmarks/probes/purlin_floor.cu (two ranks on one H200 under MPS):
//   all_reduce 1K 6.6 -> 6.0 us, 64K 7.5 -> 6.8, 1M 18.3 -> 16.5 per launch
//   when staged after the wait (docs/PERFORMANCE.md). Both the
//   line kernel and the plan kernel stage; plans longer than the stage keep
//   reading in place.
constexpr int kStagedOps = kInlineOps;
constexpr int kStagedSrcs = kInlineSrcs;
static_assert(sizeof(DevOp) % 16 == 0 && sizeof(DevRef) % 16 == 0, "the plan is staged in 16-byte words");

// Copies the plan's ops and sources into s_ops / s_srcs (the caller
// synchronizes the block before reading them).
__device__ __forceinline__ void stage_plan(const KernelParams& p, DevOp* s_ops, DevRef* s_srcs) {
  constexpr int kOpWords = static_cast<int>(sizeof(DevOp) / 16), kSrcWords = static_cast<int>(sizeof(DevRef) / 16);
  const uint4* ops = reinterpret_cast<const uint4*>(p.ops ? p.ops : p.inl.ops);
  const uint4* srcs = reinterpret_cast<const uint4*>(p.ops ? p.srcs : p.inl.srcs);
  const int op_words = p.n_ops * kOpWords, words = op_words + p.n_srcs * kSrcWords;
  for (int w = threadIdx.x; w < words; w += blockDim.x) {
    if (w < op_words) reinterpret_cast<uint4*>(s_ops)[w] = ops[w];
    else reinterpret_cast<uint4*>(s_srcs)[w - op_words] = srcs[w - op_words];
  }
}

// NOTE [tagged waits] A check-tag Wait (the first Staged wait on a peer,
//   NOTE [call tags]) also fails at once, with the call-tag record, when the
//   peer made another call of this collective while it waits: ranks whose
//   calls differ may run other block counts or round shapes, so the awaited
//   flag slot may never be raised, and the call tag cannot tell (an older
//   collective's tag differs as much). So block 0 also writes a call stamp
//   (call_stamp, call_tag.h) beside the tag in every peer's pad; a waiter looks
//   at it after kStampLookNs and every kStampLookNs after, and
//   stamp_of_other_call fails the wait only for a stamp of this base that is
//   not its own: never for an older collective's, a never-written slot (0), or
//   a peer's next collective. A valid call's poll keeps the plain wait's one
//   compare; the timeout is checked with the look (at most kStampLookNs late).
//   Registers: the kernel sits at the 64-register edge, so the look is out of
//   line (other_call_stamped, __noinline__) and takes only values and global
//   pointers; re-read ptxas -v after any change here (.ci/check_kernel_stack.py).
//   Details and the forms that failed: docs/CUDA_DATAPATH.md, "Tagged waits".
constexpr uint64_t kStampLookNs = 20000;

// Where peer `from`'s call stamp lies in this rank's pad (NOTE [tagged waits]).
__device__ __forceinline__ int64_t stamp_word(const PadLayout& L, bool parity, int half, int from) {
  return L.stamp(parity ? 1 + half : 0, from);
}

// The slow path of a check-tag Wait (NOTE [tagged waits]), out of line:
// whether the peer's stamp at `stamp` (a relaxed load) stamps another call of
// this collective. It records nothing: the wait then ends and the tag check
// after it (NOTE [call tags]) finds the peer's tag of that other call (or an
// older one, if the stamp's store became visible before the tag's) and fills
// the call-tag record. Its arguments are values: the kernel's
// __grid_constant__ parameters are not passed by address (2026-12-01: a form
// that took `const KernelParams&` failed its first plan-kernel collective on
// an H200 with "misaligned address"), and three of them keep the call cheap
// enough that no plan kernel spills.
static __device__ __noinline__ bool other_call_stamped(const uint64_t* stamp, uint64_t call_sig, uint64_t base) {
  return stamp_of_other_call(ptx::ld_relaxed_sys(stamp), call_stamp(call_sig, base));
}

// wait_all<true> (signal.cuh) for a check-tag Wait: a wait that has lasted
// kStampLookNs runs other_call(), then again every kStampLookNs; the
// timeout is checked on the same slow path (at most kStampLookNs late), the
// abort request as wait_flag does (NOTE [device abort]).
// Returns kWaited (every flag came), kTimedOut (the record is filled: a
// timeout or an abort) or
// kOtherCall (a peer's stamp names another call: nothing recorded, the tag
// check after the wait does it). One barrier when every flag came.
enum StampedWait { kTimedOut = 0, kWaited = 1, kOtherCall = 2 };
template <class OtherCall>
__device__ __forceinline__ int wait_all_stamped(const uint64_t* flags, int count, uint64_t target, const WaitSite& s,
                                                int peer, int kind, uint32_t phase, int first, OtherCall other_call) {
  bool ok = true, other = false;
  for (int i = threadIdx.x; i < count && ok; i += blockDim.x) {
    const uint64_t* f = flags + i;
    uint64_t seen = ptx::ld_acquire_sys(f);
    if (seen >= target) continue;
    const uint64_t t0 = ptx::globaltimer_ns();
    uint64_t look_at = kStampLookNs;  // ns since t0 of the next look at the stamp
    while (seen < target) {
      const uint64_t waited = ptx::globaltimer_ns() - t0;
      const bool aborted = abort_look_due(waited) && abort_requested(s);  // NOTE [device abort]
      if (waited > look_at || aborted) {
        if (waited > s.timeout_ns || aborted) {
          record_timeout(s, peer, first + i, kind, target, seen, phase, waited,
                         aborted ? kRecordAborted : kRecordTimedOut);
          ok = false;
          break;
        }
        if (other_call()) {
          ok = false;
          other = true;
          break;
        }
        look_at = waited + kStampLookNs;
      }
      seen = ptx::ld_acquire_sys(f);
    }
  }
  if (__syncthreads_and(ok)) return kWaited;
  return __syncthreads_or(other) ? kOtherCall : kTimedOut;  // a timeout's record wins (its CAS came first)
}

// A rank's block-to-block barrier (NOTE [local barriers] in lowering/device_plan.h).
__device__ __forceinline__ bool local_sync(const KernelParams& p, const DevOp& op, uint64_t lbase, const WaitSite& site,
                                           int G) {
  __syncthreads();
  if (threadIdx.x == 0) ptx::st_release_gpu(p.pad + p.layout.local(blockIdx.x), lbase + op.value);
  WaitSite local = site;
  local.base = lbase;
  return wait_all<false>(p.pad + p.layout.local(0), G, lbase + op.value, local, p.rank, kLocal, op.phase);
}

}  // namespace detail

template <class T>
__global__ void __launch_bounds__(1024) plan_kernel(const __grid_constant__ KernelParams p) {
  constexpr int64_t kE = sizeof(T);
  using Acc = std::conditional_t<kReducible<T>, typename Elem<T>::Acc, double>;
  __shared__ uint64_t s_state[5];
  __shared__ const T* s_src[kMaxWorld];
  __shared__ Acc s_scale[kMaxWorld];
  __shared__ DevOp s_ops[detail::kStagedOps];
  __shared__ DevRef s_srcs[detail::kStagedSrcs];
  const int b = blockIdx.x, tid = threadIdx.x;
  const PadLayout& L = p.layout;
  const int G = static_cast<int>(gridDim.x);  // this launch's blocks (<= L.blocks slots)
  // NOTE [staged plan]: the host's plan, so before the wait; published by the __syncthreads below.
  const bool staged = p.n_ops <= detail::kStagedOps && p.n_srcs >= 0 && p.n_srcs <= detail::kStagedSrcs;
  if (staged) detail::stage_plan(p, s_ops, s_srcs);
  ptx::griddep_wait();  // NOTE [overlapped launch]: before any global memory access the previous kernel may write
  ptx::griddep_launch_dependents();

  if (tid == 0) {
    s_state[0] = p.pad[L.base()];
    s_state[1] = p.pad[L.lbase()];
    s_state[2] = *reinterpret_cast<volatile uint64_t*>(p.pad + L.broken());
    s_state[3] = p.pad[L.pbase()];
    s_state[4] = p.pad[L.lseq()];
  }
  __syncthreads();
  if (s_state[2] != 0) return;  // an earlier collective failed: the group is broken
  const uint64_t base = s_state[0], lbase = s_state[1];
  const bool parity = p.parity != 0;
  const int half = static_cast<int>(s_state[4] & 1);  // NOTE [parity plans]
  const int64_t ws_bytes = parity ? L.parity_offset + half * L.parity_half : L.pad_bytes();
  WaitSite site{p.err, p.pad + L.broken(), p.timeout_ns, base, p.rank, p.op_name};

  // NOTE [device reuse]: every peer finished the previous collective (thread
  // q polls peer q's Done word; the words are L.blocks apart). A parity plan
  // waits for the collective before last only (NOTE [parity plans]).
  WaitSite reuse_site = site;
  if (parity) reuse_site.base = 0;  // as the line kernel records its pbase wait
  if (!wait_all<true>(p.pad + L.flag(kDone, 0, 0), L.world, parity ? s_state[3] : base, reuse_site, -1, kDone,
                      p.reuse_phase, L.blocks, p.rank))
    return;
  const uint64_t my_tag = call_tag(p.call_sig, base);
  const int64_t tag_slot = parity ? L.ptag(half, 0) : L.call_tag(0);
  if (tid == 0) {
    if (!parity) p.pad[L.scale()] = static_cast<uint64_t>(__double_as_longlong(p.scale));
    if (b == 0) {  // NOTE [call tags]: published by block 0's first Staged release
      const uint64_t my_stamp = stamp_of_tag(my_tag, base);  // NOTE [tagged waits]: read racily, so relaxed
      const int64_t stamp_slot = detail::stamp_word(L, parity, half, p.rank);
      for (int q = 0; q < L.world; ++q)
        if (q != p.rank) {
          uint64_t* pad = detail::peer_pad(p, q);
          pad[tag_slot + p.rank] = my_tag;
          ptx::st_relaxed_sys(pad + stamp_slot, my_stamp);
        }
    }
  }

  const DevOp* ops = staged ? s_ops : p.ops ? p.ops : p.inl.ops;
  const DevRef* srcs = staged ? s_srcs : p.ops ? p.srcs : p.inl.srcs;
  for (int i = 0; i < p.n_ops; ++i) {
    const DevOp& op = ops[i];
    bool other_call_seen = false;  // NOTE [tagged waits]: this op's check-tag Wait ended on a peer's stamp
    switch (op.code) {
      case kWait:
        if (parity && op.flag == kConsumed) break;  // one round (NOTE [parity plans])
        {
          // NOTE [matched waits] (snac/plan.h): an own-slot wait polls only the peer's block b, which alone
          // wrote (or read) what block b touches next; any other wait polls all G blocks' slots.
          const int first = op.own_slot ? b : 0;
          const uint64_t* flags = p.pad + L.flag(op.flag, op.peer, first);
          const int count = op.own_slot ? 1 : G;
          if (op.check_tag) {  // NOTE [tagged waits]
            const int peer = op.peer;
            auto other_call = [&] {
              const int half = static_cast<int>(s_state[4] & 1);  // s_state: shared, after the block's barrier
              return detail::other_call_stamped(p.pad + detail::stamp_word(L, parity, half, peer), p.call_sig,
                                                s_state[0]);
            };
            const int w = detail::wait_all_stamped(flags, count, base + op.value, site, op.peer, op.flag, op.phase,
                                                   first, other_call);
            if (w == detail::kTimedOut) return;
            other_call_seen = w == detail::kOtherCall;
          } else if (!wait_all<true>(flags, count, base + op.value, site, op.peer, op.flag, op.phase, 1, -1, first)) {
            return;
          }
        }
        if (op.check_tag) {
          bool bad = false;
          if (tid == 0) {
            const uint64_t seen = *reinterpret_cast<volatile uint64_t*>(p.pad + tag_slot + op.peer);
            bad = seen != my_tag || other_call_seen;  // NOTE [tagged waits]: a stamp named another call
            if (bad) {
              WaitSite raw = site;
              raw.base = 0;
              record_timeout(raw, op.peer, 0, kCallTag, my_tag, seen, op.phase, 0);
            }
          }
          if (__syncthreads_or(bad)) return;
        }
        break;
      case kSignal:
        if (parity && op.flag == kConsumed) break;
        __syncthreads();
        if (tid == 0) ptx::st_release_sys(detail::peer_pad(p, op.peer) + L.flag(op.flag, p.rank, b), base + op.value);
        break;
      case kLocalSync:
        if (!detail::local_sync(p, op, lbase, site, G)) return;
        break;
      case kCopy: {
        const int64_t per = part_size(op.n, G, kE), lo = b * per;
        const int64_t hi = op.n < lo + per ? op.n : lo + per;
        if (lo < hi)
          block_copy(detail::buffer_of(p, op.dst, kE, ws_bytes) + lo * kE,
                     detail::buffer_of(p, srcs[op.src_begin], kE, ws_bytes) + lo * kE,
                     (hi - lo) * kE);
        __syncthreads();
        break;
      }
      case kReduce: {
        if constexpr (kReducible<T>) {
          const int64_t per = part_size(op.n, G, kE), lo = b * per;
          const int64_t hi = op.n < lo + per ? op.n : lo + per;
          if (lo < hi) {  // uniform in the block
            if (tid < op.src_count) {
              const DevRef& s = srcs[op.src_begin + tid];
              s_src[tid] = reinterpret_cast<const T*>(detail::buffer_of(p, s, kE, ws_bytes)) + lo;
              double f = p.scale;
              if (static_cast<RedOp>(p.redop) == RedOp::PremulSum && s.rank != p.rank)
                f = __longlong_as_double(static_cast<long long>(ptx::ld_acquire_sys(detail::peer_pad(p, s.rank) + L.scale())));
              s_scale[tid] = static_cast<Acc>(f);
            }
            __syncthreads();
            detail::reduce_by_op<T, Acc>(p.redop, reinterpret_cast<T*>(detail::buffer_of(p, op.dst, kE, ws_bytes)) + lo, s_src,
                                         s_scale, op.src_count, hi - lo);
          }
        }
        __syncthreads();
        break;
      }
      default: break;
    }
  }

  detail::end_launch(p, base, lbase, s_state[4], G, false, parity, nullptr);
}

}  // namespace purlin::atom::cuda
