// pool_blocks.cc — the symmetric pool's block bookkeeping (pool_blocks.h); host code only,
// built by nvcc with the CUDA datapath and by g++ -x c++ in test/cpp/test_pool_blocks.cc.
#include "atom/cuda/host/pool_blocks.h"

#include <iterator>
#include <utility>
#include <vector>

namespace purlin::atom::cuda {

int64_t PoolBlocks::first_fit(int64_t floor, int64_t nbytes, Stream stream, bool others_too) const {
  int64_t at = round_up(floor);
  auto l = live_.begin();
  auto f = freed_.begin();
  while (l != live_.end() || f != freed_.end()) {
    const bool live = f == freed_.end() || (l != live_.end() && l->first < f->first);
    const auto& [off, block] = live ? *l++ : *f++;
    if (!live && block.stream == stream) continue;  // NOTE [pool streams]: free for its own stream
    if (!live && others_too && block.token) continue;  // NOTE [local placement]: the caller waits for its token
    if (off + block.bytes <= at) continue;
    if (off >= at + nbytes) break;
    at = round_up(off + block.bytes);
  }
  return at + nbytes <= bytes_ ? at : -1;
}

std::vector<PoolBlocks::Token> PoolBlocks::waits_for(int64_t at, int64_t nbytes, Stream stream) const {
  std::vector<Token> out;
  auto it = freed_.lower_bound(at);
  if (it != freed_.begin() && std::prev(it)->first + std::prev(it)->second.bytes > at) --it;
  for (; it != freed_.end() && it->first < at + nbytes; ++it)
    if (it->second.stream != stream && it->second.token) out.push_back(it->second.token);
  return out;
}

int64_t PoolBlocks::local_fit(int64_t nbytes, Stream stream, bool borrow) const {
  const int64_t at = first_fit(0, nbytes, stream);
  return at >= 0 || !borrow ? at : first_fit(0, nbytes, stream, true);
}

void PoolBlocks::reap(bool wait, const Done& done) {
  for (auto it = freed_.begin(); it != freed_.end();)
    it = it->second.token && done(it->second.token, wait) ? freed_.erase(it) : std::next(it);
}

void PoolBlocks::take(int64_t at, int64_t nbytes, Stream stream) {
  const int64_t end = at + nbytes;
  auto it = freed_.lower_bound(at);
  if (it != freed_.begin()) {
    auto before = std::prev(it);
    if (before->first + before->second.bytes > at) it = before;
  }
  std::vector<std::pair<int64_t, Block>> ends;
  while (it != freed_.end() && it->first < end) {
    const int64_t off = it->first, stop = off + it->second.bytes;
    const Block& b = it->second;
    if (off < at) ends.push_back({off, Block{at - off, b.stream, b.token}});
    if (stop > end) ends.push_back({end, Block{stop - end, b.stream, b.token}});
    it = freed_.erase(it);
  }
  for (auto& [off, b] : ends) freed_.emplace(off, std::move(b));
  live_[at] = Block{nbytes, stream, nullptr};
}

bool PoolBlocks::stream_of(int64_t offset, Stream* stream) const {
  auto it = live_.find(offset);
  if (it == live_.end()) return false;
  *stream = it->second.stream;
  return true;
}

void PoolBlocks::retire(int64_t offset, Token token) {
  auto it = live_.find(offset);
  if (it == live_.end()) return;
  Block b = std::move(it->second);
  live_.erase(it);
  b.token = std::move(token);
  freed_.emplace(offset, std::move(b));
}

void PoolBlocks::drop(int64_t offset) { live_.erase(offset); }

int64_t PoolBlocks::live_offset(int64_t off, int64_t n) const {
  auto it = live_.upper_bound(off);
  if (it == live_.begin()) return -1;
  --it;
  return off + n <= it->first + it->second.bytes ? off : -1;
}

void PoolBlocks::clear() {
  live_.clear();
  freed_.clear();
}

}  // namespace purlin::atom::cuda
