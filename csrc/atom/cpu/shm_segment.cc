// shm_segment.cc — shm_open / ftruncate / mmap / shm_unlink with loud errors.
#include "atom/cpu/shm_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <utility>

namespace purlin::atom::cpu {
namespace {

[[noreturn]] void fail(const char* call, const std::string& name, int err, const std::string& extra = "") {
  throw std::runtime_error(std::string("purlin shm: ") + call + " failed for segment '" + name +
                           "': " + std::strerror(err) + extra);
}

void check_name(const std::string& name) {
  if (name.size() < 2 || name[0] != '/' || name.find('/', 1) != std::string::npos || name.size() > 255)
    throw std::invalid_argument("purlin shm: bad segment name '" + name +
                                "' (need '/' followed by 1..254 characters without '/')");
}

std::byte* map(int fd, size_t bytes, const std::string& name) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    close(fd);
    fail("mmap", name, err, " (" + std::to_string(bytes) + " bytes)");
  }
  close(fd);  // the mapping keeps the object alive
  return static_cast<std::byte*>(p);
}

}  // namespace

ShmSegment ShmSegment::create(const std::string& name, size_t bytes) {
  check_name(name);
  const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) fail("shm_open(O_CREAT|O_EXCL)", name, errno, errno == EEXIST ? " (stale segment from a dead job?)" : "");
  // On failure below, remove the name we just created before throwing.
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    const int err = errno;
    close(fd);
    shm_unlink(name.c_str());
    fail("ftruncate", name, err, " (" + std::to_string(bytes) + " bytes; is /dev/shm large enough?)");
  }
  ShmSegment s;
  try {
    s.data_ = map(fd, bytes, name);
  } catch (...) {
    shm_unlink(name.c_str());
    throw;
  }
  s.name_ = name;
  s.size_ = bytes;
  s.linked_ = true;
  return s;
}

ShmSegment ShmSegment::open(const std::string& name, size_t min_bytes) {
  check_name(name);
  const int fd = shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) fail("shm_open", name, errno, " (has the owning rank created it yet?)");
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    close(fd);
    fail("fstat", name, err);
  }
  const size_t bytes = static_cast<size_t>(st.st_size);
  if (bytes < min_bytes) {
    close(fd);
    throw std::runtime_error("purlin shm: segment '" + name + "' is " + std::to_string(bytes) +
                             " bytes, expected at least " + std::to_string(min_bytes) +
                             " (ranks disagree on sizes, or a stale segment of that name exists)");
  }
  ShmSegment s;
  s.name_ = name;
  s.data_ = map(fd, bytes, name);
  s.size_ = bytes;
  return s;
}

ShmSegment& ShmSegment::operator=(ShmSegment&& o) noexcept {
  if (this != &o) {
    release();
    name_ = std::move(o.name_);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    linked_ = std::exchange(o.linked_, false);
  }
  return *this;
}

ShmSegment::~ShmSegment() { release(); }

void ShmSegment::unlink() {
  if (!linked_) return;
  linked_ = false;
  if (shm_unlink(name_.c_str()) != 0 && errno != ENOENT) fail("shm_unlink", name_, errno);
}

void ShmSegment::release() noexcept {
  if (linked_) shm_unlink(name_.c_str());  // best effort: a destructor never throws
  linked_ = false;
  if (data_ != nullptr) munmap(data_, size_);
  data_ = nullptr;
  size_ = 0;
}

}  // namespace purlin::atom::cpu
