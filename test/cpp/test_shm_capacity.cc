// test_shm_capacity.cc — /dev/shm as a fact of a group's setup: the CPU
// workspace the group picks for the /dev/shm it finds (NOTE [shm capacity] in
// backend/group/shm_capacity.h) and the remedy it names; make_shm_group
// (backend/group/shm_group.h) between threads of one process: rank 0's
// workspace size reaches every rank; a rank that cannot create its segment,
// or find a peer's, is known to all at once (not at the store's timeout),
// naming why (a peer's segment not found: the ranks do not share /dev/shm);
// a /dev/shm too small fails every rank with the sizes and the remedy (in a
// private 1 MiB tmpfs, as root; skipped otherwise); nothing is left behind.
// Built and run by test/cpp/test_atom_cpu_native.py.
#include <dirent.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "atom/cpu/cpu_atom.h"
#include "backend/group/shm_capacity.h"
#include "backend/group/shm_group.h"
#include "expect.h"
#include "mem_store.h"
#include "private_tmpfs.h"

using namespace purlin::backend;
using namespace std::chrono_literals;
using purlin::atom::CpuAtom;
using purlin::atom::cpu::ShmSpace;
using purlin::test::expect;
using purlin::test::MemStore;
using purlin::test::expect_eq;

namespace {

constexpr size_t KiB = 1 << 10, MiB = 1 << 20;

bool has(const std::string& s, const std::string& needle) { return s.find(needle) != std::string::npos; }

ShmSpace space(size_t total, size_t free) {
  ShmSpace s;
  s.known = true;
  s.total = total;
  s.free = free;
  return s;
}

WorkspaceRequest request(int world, size_t ws, bool is_explicit = false) {
  return WorkspaceRequest{world, ws, is_explicit, 200, 2048};
}

void choose_cases() {
  const WorkspaceRequest four = request(4, 32 * MiB);
  WorkspaceChoice c = ShmCapacity::choose(four, space(1024 * MiB, 1024 * MiB));
  expect(c.bytes == 32 * MiB && c.note.empty() && c.error.empty(), "the default where it fits");
  c = ShmCapacity::choose(four, ShmSpace{});
  expect(c.bytes == 32 * MiB && c.error.empty(), "an unknown /dev/shm: the request (creation says what fails)");

  // Docker's default 64 MB, 4 ranks: the largest halving whose needs fill at most half the free bytes.
  c = ShmCapacity::choose(four, space(64 * MiB, 64 * MiB));
  expect_eq(static_cast<int64_t>(c.bytes), 4 * MiB, "4 ranks on 64 MiB");
  expect(ShmCapacity::needs(four, c.bytes) <= 32 * MiB && ShmCapacity::needs(four, 2 * c.bytes) > 32 * MiB,
         "the largest halving within half the free bytes");
  expect(has(c.note, "the CPU workspace is 4 MiB per rank, not the default 32 MiB") &&
             has(c.note, "4 ranks x 32 MiB workspace need 128.") && has(c.note, "/dev/shm has 64 MiB, 64 MiB free") &&
             has(c.note, "docker run --shm-size=256m") && c.error.empty(),
         "the note names the choice, the sizes and the remedy: '" + c.note + "'");
  expect_eq(static_cast<int64_t>(ShmCapacity::choose(request(2, 32 * MiB), space(40 * MiB, 40 * MiB)).bytes), 8 * MiB,
            "2 ranks on 40 MiB");
  expect_eq(static_cast<int64_t>(ShmCapacity::choose(request(8, 32 * MiB), space(8 * MiB, 8 * MiB)).bytes),
            ShmCapacity::kFloor, "8 ranks on 8 MiB: the floor");
  // The floor fits the free bytes but not half of them: the floor.
  const WorkspaceRequest two = request(2, 32 * MiB);
  const size_t tight = ShmCapacity::needs(two, ShmCapacity::kFloor);
  expect_eq(static_cast<int64_t>(ShmCapacity::choose(two, space(64 * MiB, tight)).bytes), ShmCapacity::kFloor,
            "the floor where only it fits");
  c = ShmCapacity::choose(two, space(64 * MiB, tight - 1));
  expect(c.bytes == 0 && has(c.error, "/dev/shm is too small for this group's shared memory") &&
             has(c.error, "even the smallest workspace, 256 KiB, needs") && has(c.error, "Remedy: give /dev/shm") &&
             has(c.error, "fewer ranks per host, or set TORCH_PURLIN_CPU_WORKSPACE_BYTES below 256K"),
         "too small even for the floor: '" + c.error + "'");

  // Set explicitly: used as given where it fits (even past half the free bytes), else refused.
  c = ShmCapacity::choose(request(4, 32 * MiB, true), space(160 * MiB, 160 * MiB));
  expect(c.bytes == 32 * MiB && c.note.empty(), "an explicit value that fits");
  c = ShmCapacity::choose(request(4, 32 * MiB, true), space(64 * MiB, 64 * MiB));
  expect(c.bytes == 0 && has(c.error, "TORCH_PURLIN_CPU_WORKSPACE_BYTES=32M (set explicitly, so not reduced)") &&
             has(c.error, "/dev/shm has 64 MiB, 64 MiB free") && has(c.error, "--shm-size=256m") &&
             has(c.error, "(8M fits now)"),
         "an explicit value that does not fit: '" + c.error + "'");
  // A request below the floor is its own floor.
  c = ShmCapacity::choose(request(2, 64 * KiB), space(1 * MiB, ShmCapacity::needs(request(2, 64 * KiB), 64 * KiB)));
  expect(c.bytes == 64 * KiB, "a request below the floor");

  // What --shm-size to ask for: what is used now plus what is needed, rounded up to a power of two.
  expect(has(shm_remedy(100 * MiB, space(64 * MiB, 64 * MiB)), "--shm-size=128m"), "remedy: 128m");
  expect(has(shm_remedy(100 * MiB, space(64 * MiB, 20 * MiB)), "--shm-size=256m"), "remedy counts what is used");
  expect(has(shm_remedy(1536 * MiB, space(64 * MiB, 64 * MiB)), "--shm-size=2g"), "remedy: 2g");
}

// Segments this process made and left in /dev/shm.
int left_behind() {
  const std::string mine = "purlin_" + std::to_string(getpid()) + "_";
  int n = 0;
  if (DIR* d = opendir("/dev/shm")) {
    while (dirent* e = readdir(d)) n += std::string(e->d_name).rfind(mine, 0) == 0;
    closedir(d);
  }
  return n;
}

// make_shm_group on `world` threads; returns each rank's error ("" = made) and workspace size.
struct Outcome {
  std::vector<std::string> error;
  std::vector<size_t> workspace;
  double seconds = 0;
};
Outcome group(int world, const std::function<size_t(int)>& ws,
              const std::function<void(int, CpuAtom&)>& on_created = {}) {
  MemStore store;
  const Rendezvous rdv = store.rdv(20s);
  Outcome out;
  out.error.resize(world);
  out.workspace.resize(world);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> ts;
  for (int r = 0; r < world; ++r)
    ts.emplace_back([&, r] {
      try {
        auto a = make_shm_group("test", r, world, ws(r), 64, 5000ms, rdv, nullptr, 0, [&, r](CpuAtom& a) {
          if (on_created) on_created(r, a);
        });
        out.workspace[r] = a->workspace_bytes();
      } catch (const std::exception& e) {
        out.error[r] = e.what();
      }
    });
  for (auto& t : ts) t.join();
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

void group_cases() {
  // Rank 0's workspace size is every rank's.
  Outcome o = group(3, [](int r) { return r == 0 ? 64 * KiB : 4 * KiB; });
  for (int r = 0; r < 3; ++r)
    expect(o.error[r].empty() && o.workspace[r] == 64 * KiB,
           "rank " + std::to_string(r) + " has rank 0's workspace size (" + o.error[r] + ")");
  expect_eq(left_behind(), 0, "nothing left in /dev/shm after a group is made");

  // A rank that cannot create its segment is known to every rank at once.
  o = group(3, [](int) { return 4 * KiB; }, [](int r, CpuAtom&) {
    if (r == 1) throw std::runtime_error("boom");
  });
  for (int r = 0; r < 3; ++r)
    expect(has(o.error[r], "rank 1 could not create its shared-memory segment: boom"),
           "rank " + std::to_string(r) + " names rank 1's failure: '" + o.error[r] + "'");
  expect(o.seconds < 5, "a failed creation is known at once, not at the store's timeout (" +
                            std::to_string(o.seconds) + " s)");
  expect_eq(left_behind(), 0, "nothing left in /dev/shm after a failed creation");

  // A segment its rank reported created but a peer cannot find: the peers name the likely cause.
  o = group(3, [](int) { return 4 * KiB; }, [](int r, CpuAtom& a) {
    if (r == 1) a.unlink_own();  // as if rank 1's /dev/shm were another one
  });
  for (int r : {0, 2})
    expect(has(o.error[r], "rank " + std::to_string(r) + " could not map its peers' segments: purlin CpuAtom: rank " +
                               std::to_string(r) + " cannot find rank 1's segment") &&
               has(o.error[r], "though that rank reported it created: the ranks do not share one /dev/shm"),
           "rank " + std::to_string(r) + " names a peer's missing segment: '" + o.error[r] + "'");
  expect(!o.error[1].empty() && o.seconds < 5, "every rank fails at once (" + std::to_string(o.seconds) + " s)");
  expect_eq(left_behind(), 0, "nothing left in /dev/shm after a failed attach");
}

// In a forked child with a private 1 MiB tmpfs on /dev/shm: a group whose segments
// do not fit fails on every rank with the sizes and the remedy, nothing left.
// Returns 0 (passed), 1 (failed) or 77 (skipped: no namespaces here).
int full_tmpfs_case() {
  return purlin::test::in_private_tmpfs("1m", "full /dev/shm", [] {
    Outcome o = group(2, [](int) { return 768 * KiB; });
    for (int r = 0; r < 2; ++r)
      expect(has(o.error[r], "could not create its shared-memory segment: purlin shm: /dev/shm cannot hold segment") &&
                 has(o.error[r], "/dev/shm has 1 MiB") && has(o.error[r], "the group's 2 segments need") &&
                 has(o.error[r], "Remedy: give /dev/shm more room") && has(o.error[r], "--shm-size=64m"),
             "rank " + std::to_string(r) + " on a full /dev/shm: '" + o.error[r] + "'");
    int left = 0;
    if (DIR* d = opendir("/dev/shm")) {
      while (dirent* e = readdir(d)) left += e->d_name[0] != '.';
      closedir(d);
    }
    expect_eq(left, 0, "nothing left in the full /dev/shm");
    return purlin::test::failures() ? 1 : 0;
  });
}

}  // namespace

int main() {
  const int full = full_tmpfs_case();  // first: the fork needs a single-threaded process
  if (full == 77) std::printf("SKIP full /dev/shm (needs root for a private tmpfs)\n");
  expect(full == 0 || full == 77, "full /dev/shm");
  choose_cases();
  group_cases();
  return purlin::test::test_summary("test_shm_capacity");
}
