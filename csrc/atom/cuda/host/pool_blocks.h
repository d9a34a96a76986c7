// pool_blocks.h — the symmetric pool's block bookkeeping: which byte ranges
// are live, which freed ones wait for their stream's work, and the first fit
// that proposes a place (NOTE [pool agreement], [pool streams], [local
// placement] in symmetric_pool.h). No CUDA and no torch: streams are opaque keys and a
// freed block's event is an opaque token that the caller's `Done` judges,
// so the rules are tested on the CPU (test/cpp/test_pool_blocks.cc).
// Not thread-safe: SymmetricPool holds its lock around every call.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

namespace purlin::atom::cuda {

class PoolBlocks {
 public:
  using Stream = const void*;          // a cudaStream_t
  using Token = std::shared_ptr<void>;  // what a freed block waits for (an event); null: never done
  // Whether the work behind `token` completed; with wait, after waiting for it.
  using Done = std::function<bool(const Token& token, bool wait)>;

  PoolBlocks(int64_t bytes, int64_t align) : bytes_(bytes), align_(align) {}

  // The lowest offset >= floor (aligned) where `nbytes` fit for use on
  // `stream`: not over a live block, nor over a freed block of another
  // stream; -1 if none. With `others_too` (NOTE [local placement]), a freed
  // block of another stream that has a token counts as free as well: the
  // caller makes `stream` wait for the tokens that waits_for() names.
  int64_t first_fit(int64_t floor, int64_t nbytes, Stream stream, bool others_too = false) const;
  // The tokens of the freed blocks of other streams that [at, at + nbytes)
  // covers, in offset order: what a block placed by first_fit(..., true)
  // waits for before its first use on `stream`.
  std::vector<Token> waits_for(int64_t at, int64_t nbytes, Stream stream) const;
  // NOTE [local placement]'s rule: the first fit that waits for nothing
  // (free space, `stream`'s own freed blocks); if there is none and `borrow`,
  // the first fit over other streams' freed blocks too. Depends only on the
  // sequence of take / retire calls, never on whether an event completed.
  int64_t local_fit(int64_t nbytes, Stream stream, bool borrow) const;
  // Freed blocks whose token is done (with wait: every freed block with a
  // token) are free for every stream from now on.
  void reap(bool wait, const Done& done);
  // Makes [at, at + nbytes) live on `stream` (first_fit proposed it); the
  // freed pieces of `stream` it covers are used up, their uncovered ends stay freed.
  void take(int64_t at, int64_t nbytes, Stream stream);
  // The stream a live block was allocated on; false if `offset` is not live.
  bool stream_of(int64_t offset, Stream* stream) const;
  // A live block is freed: free at once for its own stream, for the others
  // when `token` is done (null token: never). drop(): free for every stream now.
  void retire(int64_t offset, Token token);
  void drop(int64_t offset);
  // Byte offset `off` if [off, off + n) lies inside one live block, else -1.
  int64_t live_offset(int64_t off, int64_t n) const;
  bool any_freed() const { return !freed_.empty(); }
  void clear();

 private:
  struct Block {
    int64_t bytes = 0;
    Stream stream = nullptr;
    Token token;  // freed_ only
  };
  int64_t round_up(int64_t v) const { return (v + align_ - 1) / align_ * align_; }

  int64_t bytes_, align_;
  std::map<int64_t, Block> live_;   // offset -> live block
  std::map<int64_t, Block> freed_;  // offset -> freed block not yet free for every stream
};

}  // namespace purlin::atom::cuda
