// shm_segment.h — one mapped POSIX shared-memory segment (/dev/shm/<name>).
//
// create() makes a fresh, zero-filled segment (O_CREAT | O_EXCL, mode 0600,
// ftruncate, posix_fallocate, mmap) and owns its name until unlink() or
// destruction; open() maps a segment another process created (and never
// unlinks it). The mapping lives until the object is destroyed, so the memory
// stays valid after the name is unlinked. Failures throw std::runtime_error
// (or one of the kinds below) naming the call, the segment and errno's text
// (std::invalid_argument for a malformed name).
//
// NOTE [reserved segments] create() reserves every page of the segment in
// /dev/shm (posix_fallocate) before anyone maps it. tmpfs allocates a page
// only when it is first touched, and a touch that finds /dev/shm full kills
// the process with SIGBUS -- in the middle of a collective, with no message
// (a container's /dev/shm is 64 MB by default). Reserved up front, a
// /dev/shm too small is an error of create(), ShmNoSpace, naming the bytes
// asked for and /dev/shm's size and free bytes, and a mapped segment is
// never short of pages later.
//
// NOTE [checked segments] open() maps only a segment this user made for
// purlin: its owner is this process's effective uid, its mode exactly 0600
// (what create() sets) and its size exactly the size expected; anything else
// is refused (ShmRefused) naming what was found and what was expected,
// before a byte of it is mapped. Segment names travel through the job's
// Store, which anyone who can reach it may write; a name raced or planted by
// another local user (a 0666 object, a wrong size) is never used.
//
// Not fork-aware: a child that inherits a creating ShmSegment and destroys
// it would unlink the parent's name. Create segments after forking.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>

namespace purlin::atom::cpu {

// create(): /dev/shm could not hold the segment (NOTE [reserved segments]).
struct ShmNoSpace : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// open(): no segment of that name in this process's /dev/shm.
struct ShmMissing : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// open(): a segment of that name exists but fails NOTE [checked segments].
struct ShmRefused : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The size and free bytes of the file system behind /dev/shm (statvfs).
struct ShmSpace {
  bool known = false;  // false: statvfs failed (no /dev/shm); the sizes are 0
  size_t total = 0, free = 0;
  static ShmSpace now();
  std::string describe() const;  // "/dev/shm has 64 MiB, 12.5 MiB free" (or that it is unknown)
};

// "12.5 MiB", "4 KiB", "100 bytes": a byte count for messages.
std::string bytes_text(size_t bytes);

class ShmSegment {
 public:
  // Creates `name` (must start with '/', no other '/') of `bytes` bytes, reserved and mapped read-write.
  static ShmSegment create(const std::string& name, size_t bytes);
  // Opens and maps an existing segment of exactly `bytes` bytes (NOTE [checked segments]).
  static ShmSegment open(const std::string& name, size_t bytes);

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
