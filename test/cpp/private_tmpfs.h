// private_tmpfs.h — runs a test body in a forked child whose /dev/shm is a
// fresh, small tmpfs of its own (a private mount namespace: needs root), so a
// full /dev/shm can be tested without touching the machine's.
#pragma once

#include <sched.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>

namespace purlin::test {

// Forks; the child mounts a tmpfs of `size` (mount's "size=" text, e.g. "1m") on
// /dev/shm and exits with body()'s return (0 passed, 1 failed), or 77 where it
// cannot have a mount namespace (skipped). Returns the child's exit status; a
// child killed by a signal (a SIGBUS, say) counts as failed and is named.
template <class Body>
int in_private_tmpfs(const char* size, const char* what, Body&& body) {
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    const std::string opts = std::string("size=") + size;
    if (unshare(CLONE_NEWNS) != 0 || mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        mount("tmpfs", "/dev/shm", "tmpfs", 0, opts.c_str()) != 0)
      _exit(77);
    const int rc = body();
    std::fflush(nullptr);
    _exit(rc);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFSIGNALED(status)) std::printf("FAIL %s: killed by signal %d\n", what, WTERMSIG(status));
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

}  // namespace purlin::test
