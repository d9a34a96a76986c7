// shm_segment.h — one mapped POSIX shared-memory segment (/dev/shm/<name>).
//
// create() makes a fresh, zero-filled segment (O_CREAT | O_EXCL, ftruncate,
// mmap) and owns its name until unlink() or destruction; open() maps a
// segment another process created (and never unlinks it). The mapping lives
// until the object is destroyed, so the memory stays valid after the name is
// unlinked. Failures throw std::runtime_error naming the call, the segment
// and errno's text (std::invalid_argument for a malformed name).
//
// Not fork-aware: a child that inherits a creating ShmSegment and destroys
// it would unlink the parent's name. Create segments after forking.
#pragma once

#include <cstddef>
#include <string>

namespace purlin::atom::cpu {

class ShmSegment {
 public:
  // Creates `name` (must start with '/', no other '/') of `bytes` bytes, mapped read-write.
  static ShmSegment create(const std::string& name, size_t bytes);
  // Opens and maps an existing segment; throws unless it is at least `min_bytes` long.
  static ShmSegment open(const std::string& name, size_t min_bytes);

  ShmSegment() = default;
  ShmSegment(ShmSegment&& o) noexcept { *this = std::move(o); }
  ShmSegment& operator=(ShmSegment&& o) noexcept;
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;
  ~ShmSegment();  // munmap, and unlink the name if this object still owns it

  // Removes the name from /dev/shm (idempotent; no-op for opened segments). Mappings stay valid.
  void unlink();

  std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& name() const { return name_; }
  bool linked() const { return linked_; }  // this object created the name and has not unlinked it

 private:
  void release() noexcept;  // unlink if owned, then munmap

  std::string name_;
  std::byte* data_ = nullptr;
  size_t size_ = 0;
  bool linked_ = false;
};

}  // namespace purlin::atom::cpu
