// shm_segment.cc — shm_open / ftruncate / posix_fallocate / mmap / shm_unlink with loud errors.
#include "atom/cpu/shm_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
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

// NOTE [reserved segments]: every page of [0, bytes) allocated now. posix_fallocate
// returns the error (it does not set errno); a signal may interrupt it.
int reserve(int fd, size_t bytes) {
  int err;
  do {
    err = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  } while (err == EINTR);
  return err;
}

std::string mode_text(mode_t m) {
  char s[8];
  std::snprintf(s, sizeof s, "0%03o", static_cast<unsigned>(m & 07777));
  return s;
}

}  // namespace

ShmSpace ShmSpace::now() {
  ShmSpace s;
  struct statvfs v {};
  if (statvfs("/dev/shm", &v) != 0) return s;
  s.known = true;
  s.total = static_cast<size_t>(v.f_blocks) * v.f_frsize;
  s.free = static_cast<size_t>(v.f_bavail) * v.f_frsize;
  return s;
}

std::string ShmSpace::describe() const {
  if (!known) return "the size of /dev/shm is unknown (statvfs failed)";
  return "/dev/shm has " + bytes_text(total) + ", " + bytes_text(free) + " free";
}

std::string bytes_text(size_t bytes) {
  static const char* const units[] = {"KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024) return std::to_string(bytes) + " bytes";
  double v = static_cast<double>(bytes) / 1024;
  int u = 0;
  while (v >= 1024 && u < 3) {
    v /= 1024;
    ++u;
  }
  char s[32];
  std::snprintf(s, sizeof s, "%.1f", v);
  std::string t = s;
  if (t.size() > 2 && t.compare(t.size() - 2, 2, ".0") == 0) t.resize(t.size() - 2);
  return t + " " + units[u];
}

ShmSegment ShmSegment::create(const std::string& name, size_t bytes) {
  check_name(name);
  const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) fail("shm_open(O_CREAT|O_EXCL)", name, errno, errno == EEXIST ? " (stale segment from a dead job?)" : "");
  // On failure below, remove the name we just created before throwing.
  auto undo = [&](const char* call, int err, const std::string& extra) {
    close(fd);
    shm_unlink(name.c_str());
    fail(call, name, err, extra);
  };
  // NOTE [checked segments]: exactly 0600 whatever the umask, as open() expects.
  if (fchmod(fd, 0600) != 0) undo("fchmod(0600)", errno, "");
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) undo("ftruncate", errno, " (" + std::to_string(bytes) + " bytes)");
  if (bytes > 0) {
    const int err = reserve(fd, bytes);
    if (err == ENOSPC || err == ENOMEM) {  // NOTE [reserved segments]
      close(fd);
      shm_unlink(name.c_str());  // its pages go back before /dev/shm is measured for the message
      throw ShmNoSpace("purlin shm: /dev/shm cannot hold segment '" + name + "' of " + bytes_text(bytes) + " (" +
                       std::to_string(bytes) + " bytes): " + std::strerror(err) + "; " +
                       ShmSpace::now().describe());
    }
    if (err != 0) undo("posix_fallocate", err, " (" + std::to_string(bytes) + " bytes)");
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

ShmSegment ShmSegment::open(const std::string& name, size_t bytes) {
  check_name(name);
  const int fd = shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) throw ShmMissing("purlin shm: segment '" + name + "' is not in this process's /dev/shm");
    fail("shm_open", name, err);
  }
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    close(fd);
    fail("fstat", name, err);
  }
  // NOTE [checked segments]: on the descriptor, so what is checked is what would be mapped.
  const uid_t me = geteuid();
  const size_t found = static_cast<size_t>(st.st_size);
  if (st.st_uid != me || (st.st_mode & 07777) != 0600 || found != bytes) {
    close(fd);
    throw ShmRefused("purlin shm: refusing segment '" + name + "': it is owned by uid " + std::to_string(st.st_uid) +
                     " with mode " + mode_text(st.st_mode) + " and " + std::to_string(found) +
                     " bytes; expected uid " + std::to_string(me) + " (this process), mode 0600 and " +
                     std::to_string(bytes) + " bytes (another user's object under this name, a stale segment, "
                     "or ranks that disagree on sizes)");
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
