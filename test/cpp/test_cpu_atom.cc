// test_cpu_atom.cc — multi-process test of CpuAtom (fork N ranks, N = 2, 3, 4).
//
// Covers: the create / attach / unlink lifecycle and a clean /dev/shm,
// segments planted under a peer's name (mode 0666, a wrong size, another
// owner) refused (NOTE [checked segments]), a full /dev/shm an error of
// create(), never a SIGBUS (NOTE [reserved segments]; in a private tmpfs,
// as root),
// snac::arrive_tagged (the host's tagged string all-gather),
// signal/wait chains in a ring (pull: read the peer's workspace) and all-to-all
// (push: write into peers' workspaces, plus meta blobs and a reduce) with
// monotonic flag values, the timeout error text and timing, and setup errors.
// Ranks synchronise outside the Atom with a tiny shared-memory barrier.
#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "atom/cpu/cpu_atom.h"
#include "private_tmpfs.h"
#include "snac/arrival.h"

using purlin::atom::CpuAtom;
using purlin::atom::FlagKind;
using purlin::atom::WaitSite;
using purlin::atom::cpu::ShmNoSpace;
using purlin::atom::cpu::ShmRefused;
using purlin::atom::cpu::ShmSegment;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

int g_pass = 0, g_fail = 0;
std::string g_prefix;  // unique per case

void require(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what);
}

// Bounded barrier in MAP_SHARED anonymous memory, created before fork().
struct Barrier {
  std::atomic<int> arrived{0}, generation{0}, broken{0};
  int n = 0;
  void wait() {
    const int g = generation.load(std::memory_order_acquire);
    if (arrived.fetch_add(1, std::memory_order_acq_rel) == n - 1) {
      arrived.store(0, std::memory_order_relaxed);
      generation.store(g + 1, std::memory_order_release);
      return;
    }
    const auto deadline = Clock::now() + 30s;
    while (generation.load(std::memory_order_acquire) == g) {
      require(!broken.load(), "barrier broken by a failed rank");
      require(Clock::now() < deadline, "test barrier timed out after 30 s");
      std::this_thread::sleep_for(20us);
    }
  }
};

std::vector<std::string> shm_entries(const std::string& prefix) {
  std::vector<std::string> out;
  if (DIR* d = opendir("/dev/shm")) {
    while (dirent* e = readdir(d))
      if (std::strncmp(e->d_name, prefix.c_str() + 1, prefix.size() - 1) == 0) out.push_back(e->d_name);
    closedir(d);
  }
  return out;
}

// Deterministic bytes for (a, b, it): splitmix64 stream.
void pattern(std::byte* p, size_t n, uint64_t a, uint64_t b, uint64_t it, bool check_only, bool* ok) {
  uint64_t x = (a * 0x9E3779B97F4A7C15ull) ^ (b << 32) ^ it;
  for (size_t i = 0; i < n; i += 8) {
    x += 0x9E3779B97F4A7C15ull;
    uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    if (check_only) *ok = *ok && std::memcmp(p + i, &z, std::min<size_t>(8, n - i)) == 0;
    else std::memcpy(p + i, &z, std::min<size_t>(8, n - i));
  }
}
void fill(std::byte* p, size_t n, uint64_t a, uint64_t b, uint64_t it) { pattern(p, n, a, b, it, false, nullptr); }
bool same(std::byte* p, size_t n, uint64_t a, uint64_t b, uint64_t it) {
  bool ok = true;
  pattern(p, n, a, b, it, true, &ok);
  return ok;
}

// Runs fn(rank) in `world` forked processes; true when every rank exits 0 in time.
bool run_world(int world, const std::function<void(int, Barrier&)>& fn) {
  void* mem = mmap(nullptr, sizeof(Barrier), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  require(mem != MAP_FAILED, "mmap for the barrier failed");
  Barrier* bar = new (mem) Barrier();
  bar->n = world;
  std::fflush(nullptr);
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      int rc = 0;
      try {
        fn(r, *bar);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "  rank %d of %d: %s\n", r, world, e.what());
        bar->broken.store(1);
        rc = 1;
      }
      std::fflush(nullptr);
      _exit(rc);
    }
    pids.push_back(pid);
  }
  bool ok = true;
  const auto deadline = Clock::now() + 120s;
  for (pid_t pid : pids) {
    int status = 0;
    while (waitpid(pid, &status, WNOHANG) == 0) {
      if (Clock::now() > deadline) {
        std::fprintf(stderr, "  rank pid %d hung; killing it\n", pid);
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        break;
      }
      std::this_thread::sleep_for(1ms);
    }
    ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  munmap(mem, sizeof(Barrier));
  return ok;
}

void run_case(const char* name, int world, const std::function<void(int, Barrier&)>& fn) {
  static int counter = 0;
  g_prefix = "/purlin_test_" + std::to_string(getpid()) + "_" + std::to_string(counter++);
  const bool ok = run_world(world, fn) && shm_entries(g_prefix).empty();
  std::printf("%s %s (world %d)\n", ok ? "PASS" : "FAIL", name, world);
  (ok ? g_pass : g_fail)++;
}

constexpr size_t kWs = 1 << 20, kMeta = 200;

// create / barrier / attach / barrier / unlink: nothing left in /dev/shm.
void lifecycle(int r, Barrier& bar) {
  CpuAtom a(g_prefix, r, bar.n, kWs, kMeta, 5000ms);
  bar.wait();
  require(shm_entries(g_prefix).size() == size_t(bar.n), "every rank's segment exists before unlink");
  a.attach_peers();
  bar.wait();
  a.unlink_own();
  bar.wait();
  require(shm_entries(g_prefix).empty(), "no segments left in /dev/shm after unlink_own");
  for (int p = 0; p < bar.n; ++p) {
    require(reinterpret_cast<uintptr_t>(a.workspace(p)) % 4096 == 0, "workspace 4096-aligned");
    require(reinterpret_cast<uintptr_t>(a.meta(p, 1)) % 64 == 0, "meta blob 64-aligned");
    require(a.meta(p, 1) >= a.meta(p, 0) + kMeta && a.workspace(p) >= a.meta(p, 1) + kMeta, "regions disjoint");
  }
  bar.wait();
}

// Ring, pull: write own workspace, Staged -> next; read prev's, Consumed -> prev.
void ring(int r, Barrier& bar) {
  const int n = bar.n, next = (r + 1) % n, prev = (r + n - 1) % n;
  CpuAtom a(g_prefix, r, n, kWs, kMeta, 10000ms);
  bar.wait();
  a.attach_peers();
  bar.wait();
  a.unlink_own();
  const int iters = 3000;
  const size_t bytes = 8192;
  const auto t0 = Clock::now();
  for (uint64_t it = 1; it <= uint64_t(iters); ++it) {
    a.wait(next, FlagKind::Consumed, it - 1, WaitSite{"ring", "wait: next consumed", it});
    const size_t off = (it * 4096) % (kWs - bytes);
    fill(a.workspace(r) + off, bytes, r, 0, it);
    a.signal(next, FlagKind::Staged, it);
    a.wait(prev, FlagKind::Staged, it, WaitSite{"ring", "wait: prev staged", it});
    require(same(a.workspace(prev) + off, bytes, prev, 0, it), "ring: stale data from rank " + std::to_string(prev));
    a.signal(prev, FlagKind::Consumed, it);
  }
  const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / iters;
  if (r == 0) std::printf("  ring step (world %d): %.1f us per iteration\n", n, us);
  a.wait(next, FlagKind::Consumed, iters, WaitSite{"ring", "drain", 0});
}

// All-to-all, push: write into every peer's workspace slot and own meta blob,
// Arrive (64-bit values) -> all; verify, reduce the peers' slots; Consumed -> all.
void all_to_all(int r, Barrier& bar) {
  const int n = bar.n;
  const size_t slot = kWs / n / 4096 * 4096;
  const uint64_t base = 1ull << 40;
  CpuAtom a(g_prefix, r, n, kWs, kMeta, 10000ms);
  bar.wait();
  a.attach_peers();
  bar.wait();
  a.unlink_own();
  std::vector<int32_t> sum(slot / 4);
  for (uint64_t it = 1; it <= 400; ++it) {
    const WaitSite site{"all_to_all", "handshake", it};
    for (int p = 0; p < n; ++p) a.wait(p, FlagKind::Consumed, it - 1, site);
    for (int p = 0; p < n; ++p) fill(a.workspace(p) + r * slot, slot, r, p, it);
    fill(a.meta(r, it & 1), kMeta, r, 1000, it);
    for (int p = 0; p < n; ++p) a.signal(p, FlagKind::Arrive, base + it);
    std::vector<const void*> srcs;
    for (int p = 0; p < n; ++p) {
      a.wait(p, FlagKind::Arrive, base + it, site);
      require(same(a.workspace(r) + p * slot, slot, p, r, it), "all_to_all: bad slot from rank " + std::to_string(p));
      require(same(a.meta(p, it & 1), kMeta, p, 1000, it), "all_to_all: bad meta from rank " + std::to_string(p));
      srcs.push_back(a.workspace(r) + p * slot);
    }
    a.reduce(sum.data(), srcs.data(), nullptr, n, slot / 4, purlin::DType::Int32, purlin::RedOp::Sum);
    for (size_t i = 0; i < sum.size(); i += 97) {
      uint32_t want = 0;
      for (int p = 0; p < n; ++p) want += reinterpret_cast<const uint32_t*>(srcs[p])[i];
      require(uint32_t(sum[i]) == want, "all_to_all: reduce mismatch");
    }
    for (int p = 0; p < n; ++p) a.signal(p, FlagKind::Consumed, it);
  }
  for (int p = 0; p < n; ++p) a.wait(p, FlagKind::Consumed, 400, WaitSite{"all_to_all", "drain", 0});
}

// Rank 1 signals Staged = 3 but never 5; rank 0 must time out with the exact text.
void timeout(int r, Barrier& bar) {
  CpuAtom a(g_prefix, r, bar.n, 4096, 64, 300ms);
  bar.wait();
  a.attach_peers();
  bar.wait();
  a.unlink_own();
  if (r == 1) a.signal(0, FlagKind::Staged, 3);
  bar.wait();
  if (r == 0) {
    for (auto [ms, secs] : {std::pair{300, "0.3"}, std::pair{100, "0.1"}}) {
      a.set_timeout(std::chrono::milliseconds(ms));
      const auto t0 = Clock::now();
      std::string msg;
      try {
        a.wait(1, FlagKind::Staged, 5, WaitSite{"all_reduce", "consume: wait for staged chunk", 42});
      } catch (const purlin::atom::TimeoutError& e) {
        msg = e.what();
      }
      const double s = std::chrono::duration<double>(Clock::now() - t0).count();
      const std::string want = std::string("purlin all_reduce (seq 42) on rank 0: timed out after ") + secs +
                               " s in phase 'consume: wait for staged chunk' waiting for rank 1 "
                               "(staged flag is 3, needed >= 5)";
      require(msg == want, "timeout message was '" + msg + "', wanted '" + want + "'");
      require(s >= ms / 1000.0 && s < ms / 1000.0 + 2.0, "timeout took " + std::to_string(s) + " s");
    }
    a.wait(1, FlagKind::Staged, 3, WaitSite{});  // satisfied: returns at once
  }
  bar.wait();
}

// Single-process errors: bad names, duplicates, missing and mismatched peers.
void errors(int r, Barrier&) {
  if (r != 0) return;
  auto throws = [](const std::function<void()>& f, const std::string& needle) {
    try {
      f();
    } catch (const std::exception& e) {
      return std::string(e.what()).find(needle) != std::string::npos;
    }
    return false;
  };
  const std::string name1 = CpuAtom::segment_name(g_prefix, 1);
  require(throws([] { CpuAtom("no_slash", 0, 2, 4096, 64, 100ms); }, "bad segment name"), "bad prefix");
  require(throws([] { CpuAtom(g_prefix, 2, 2, 4096, 64, 100ms); }, "bad rank"), "bad rank");
  CpuAtom a(g_prefix, 0, 2, 4096, 64, 100ms);
  require(throws([] { CpuAtom(g_prefix, 0, 2, 4096, 64, 100ms); }, "File exists"), "duplicate create");
  require(throws([&] { a.attach_peers(); }, name1), "missing peer names its segment");
  require(throws([&] { a.workspace(1); }, "before attach_peers"), "peer use before attach");
  {
    CpuAtom b(g_prefix, 1, 2, 8192, 64, 100ms);  // disagrees on workspace size: refused by its size
    require(throws([&] { a.attach_peers(); }, "refusing segment"), "size mismatch detected");
  }
  {
    CpuAtom b(g_prefix, 1, 2, 4096, 128, 100ms);  // disagrees on meta size within the same page count
    require(throws([&] { a.attach_peers(); }, "mismatched segment"), "layout mismatch detected");
  }
  require(shm_entries(name1).empty(), "destructor unlinks a segment that was never unlinked");
}

// NOTE [checked segments]: what another user could plant under a peer's name
// is refused before it is mapped, naming what was found and what was expected;
// the genuine segment is then accepted.
void refused(int r, Barrier&) {
  if (r != 0) return;
  const std::string name1 = CpuAtom::segment_name(g_prefix, 1);
  CpuAtom a(g_prefix, 0, 2, 4096, 64, 100ms);
  const size_t total = a.layout().total;
  auto peer_mapped = [&] {  // rank 1's segment is mapped here (an unattached peer's area throws)
    try {
      a.owner_area(1);
      return true;
    } catch (const std::logic_error&) {
      return false;
    }
  };
  auto plant = [&](mode_t mode, size_t bytes, uid_t owner) {
    const int fd = shm_open(name1.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    require(fd >= 0, "plant: shm_open");
    require(fchmod(fd, mode) == 0 && ftruncate(fd, static_cast<off_t>(bytes)) == 0, "plant: fchmod / ftruncate");
    if (owner != geteuid()) require(fchown(fd, owner, static_cast<gid_t>(-1)) == 0, "plant: fchown");
    close(fd);
  };
  auto refusal = [&](const std::vector<std::string>& needles, const char* what) {
    std::string m;
    try {
      a.attach_peers();
    } catch (const ShmRefused& e) {
      m = e.what();
    }
    for (const std::string& n : needles)
      require(m.find(n) != std::string::npos, std::string(what) + ": refusal '" + m + "' lacks '" + n + "'");
    require(!peer_mapped(), std::string(what) + ": nothing attached");
    shm_unlink(name1.c_str());
  };
  const std::string me = std::to_string(geteuid()), want = std::to_string(total) + " bytes";
  plant(0666, total, geteuid());
  refusal({"refusing segment '" + name1 + "'", "mode 0666", "expected uid " + me + " (this process), mode 0600 and " + want},
          "mode 0666");
  plant(0600, total + 4096, geteuid());
  refusal({"mode 0600 and " + std::to_string(total + 4096) + " bytes", "mode 0600 and " + want}, "wrong size");
  plant(0640, total, geteuid());
  refusal({"mode 0640"}, "mode 0640");
  if (geteuid() == 0) {  // only root can give a file away
    plant(0600, total, 65534);
    refusal({"owned by uid 65534", "expected uid 0"}, "another owner");
  }
  CpuAtom b(g_prefix, 1, 2, 4096, 64, 100ms);
  a.attach_peers();
  require(peer_mapped(), "the genuine segment is accepted");
}

// NOTE [reserved segments]: in a private mount namespace with a 1 MiB tmpfs on
// /dev/shm, create() of a segment that does not fit throws ShmNoSpace naming
// the sizes and leaves nothing behind, and a segment that fits is reserved:
// touching every page of it with /dev/shm otherwise full raises no SIGBUS.
// Returns 0 (passed), 1 (failed) or 77 (skipped: no namespaces here).
int full_tmpfs() {
  return purlin::test::in_private_tmpfs("1m", "full tmpfs", [] {
    try {
      auto no_space = [](const std::string& name, size_t bytes) {
        try {
          ShmSegment::create(name, bytes);
        } catch (const ShmNoSpace& e) {
          return std::string(e.what());
        }
        return std::string();
      };
      std::string m = no_space("/purlin_full_a", 2 << 20);
      for (const char* n : {"cannot hold segment '/purlin_full_a' of 2 MiB", "No space left on device",
                            "/dev/shm has 1 MiB, 1 MiB free"})
        require(m.find(n) != std::string::npos, "2 MiB on 1 MiB: '" + m + "' lacks '" + n + "'");
      ShmSegment fits = ShmSegment::create("/purlin_full_b", 640 << 10);
      m = no_space("/purlin_full_c", 512 << 10);
      require(m.find("/dev/shm has 1 MiB, 384 KiB free") != std::string::npos, "512 KiB on 384 KiB free: '" + m + "'");
      std::memset(fits.data(), 0x5a, fits.size());  // every page reserved: no SIGBUS
      require(shm_entries("/purlin_full").size() == 1, "only the segment that fit is in /dev/shm");
      fits.unlink();
      require(shm_entries("/purlin_full").empty(), "nothing left in /dev/shm");
    } catch (const std::exception& e) {
      std::fprintf(stderr, "  full tmpfs: %s\n", e.what());
      return 1;
    }
    return 0;
  });
}

}  // namespace

// snac::arrive_tagged over this Atom: every rank's value in rank order, many
// steps in a row (the two parity slots reused); then one rank at another tag
// makes every rank throw, naming a rank and carrying the hint.
void tagged(int r, Barrier& bar) {
  const int n = bar.n;
  CpuAtom a(g_prefix, r, n, 4096, 128, 5000ms);
  bar.wait();
  a.attach_peers();
  bar.wait();
  a.unlink_own();
  for (uint64_t seq = 1; seq <= 200; ++seq) {
    const std::vector<std::string> v = purlin::snac::arrive_tagged(
        a, seq, "step " + std::to_string(seq), std::to_string(r * 1000 + seq), WaitSite{"tagged", "agree", seq}, "");
    require(static_cast<int>(v.size()) == n, "tagged: one value per rank");
    for (int p = 0; p < n; ++p)
      require(v[p] == std::to_string(p * 1000 + seq), "tagged: rank " + std::to_string(p) + "'s value at step " +
                                                          std::to_string(seq) + " is '" + v[p] + "'");
  }
  const std::string tag = r == n - 1 ? "step ahead" : "step 201";
  std::string what;
  try {
    purlin::snac::arrive_tagged(a, 201, tag, "0", WaitSite{"tagged", "agree", 201}, " (the hint)");
  } catch (const std::runtime_error& e) {
    what = e.what();
  }
  const std::string other = r == n - 1 ? "rank 0 is at step 201" : "rank " + std::to_string(n - 1) + " is at step ahead";
  require(what.find(other) != std::string::npos && what.find("(the hint)") != std::string::npos,
          "tagged: rank " + std::to_string(r) + " got '" + what + "'");
  bool too_long = false;
  try {
    purlin::snac::arrive_tagged(a, 202, std::string(100, 'x'), std::string(100, 'y'), WaitSite{"tagged", "agree", 202}, "");
  } catch (const std::invalid_argument&) {
    too_long = true;
  }
  require(too_long, "tagged: a message longer than the meta slot is refused before anything is published");
  bar.wait();
}

int main() {
  for (int n : {2, 3, 4}) {
    run_case("lifecycle", n, lifecycle);
    run_case("ring", n, ring);
    run_case("all_to_all", n, all_to_all);
    run_case("arrive_tagged", n, tagged);
  }
  run_case("timeout", 2, timeout);
  run_case("errors", 1, errors);
  run_case("refused", 1, refused);
  const int full = full_tmpfs();
  std::printf("%s full /dev/shm\n", full == 0 ? "PASS" : full == 77 ? "SKIP (needs root for a private tmpfs)" : "FAIL");
  if (full == 0) g_pass++;
  if (full == 1) g_fail++;
  std::printf("test_cpu_atom: %d passed, %d failed\n", g_pass, g_fail);
  return g_fail == 0 ? 0 : 1;
}
