// test_host_map.cc — the host map (NOTE [host map] in backend/machines/host_map.h):
// the partition every rank derives from the probes and the opens, its hints and
// description, the probe's encoding, and the whole exchange between threads of
// one process (one host; nothing left in /dev/shm, also when a rank never
// comes). Built and run by test/cpu/test_hosts_cpu.py, linked with the CPU
// Atom and shm_group.cc for all_gather, over the test's in-memory Rendezvous.
#include <dirent.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "backend/machines/host_map.h"
#include "expect.h"
#include "mem_store.h"

using namespace purlin::backend;
using purlin::test::expect;
using purlin::test::MemStore;
using purlin::test::expect_eq;

namespace {

std::vector<HostProbe> probes(const std::vector<std::string>& hostnames) {
  std::vector<HostProbe> out;
  for (const auto& h : hostnames) out.push_back(HostProbe{h, "boot-" + h, "/seg", 1, 2});
  return out;
}

// opened[i][j] = true for i, j in the same group of `groups` (a group index per rank).
std::vector<std::vector<bool>> same(const std::vector<int>& groups) {
  const size_t w = groups.size();
  std::vector<std::vector<bool>> o(w, std::vector<bool>(w));
  for (size_t i = 0; i < w; ++i)
    for (size_t j = 0; j < w; ++j) o[i][j] = groups[i] == groups[j];
  return o;
}

// Names in /dev/shm that are probes of this process.
int probes_left() {
  const std::string mine = "purlin_probe_" + std::to_string(getpid()) + "_";
  int n = 0;
  if (DIR* d = opendir("/dev/shm")) {
    while (dirent* e = readdir(d)) n += std::string(e->d_name).rfind(mine, 0) == 0;
    closedir(d);
  }
  return n;
}

void test_encoding() {
  HostProbe p{"node 7\n(a b)", "1b2c-\x01", "/purlin_probe_1_ab", 4242, 0xfeedfacecafebeefull};
  HostProbe q = HostProbe::decode(p.encode());
  expect(q.hostname == p.hostname && q.boot_id == p.boot_id && q.segment == p.segment && q.pid == p.pid &&
             q.nonce == p.nonce,
         "probe encode/decode round trip (spaces, newlines, control bytes)");
  HostProbe none{"h", "", "", 1, 0};
  expect(HostProbe::decode(none.encode()).segment.empty(), "a probe without a segment keeps it empty");
}

void test_partitions() {
  HostMap one = partition_hosts(probes({"a", "a", "a"}), same({0, 0, 0}));
  expect(one.count() == 1 && one.even() && one.hints.empty(), "every rank opens every probe: one host");
  expect(one.describe() == "1 host: ranks 0-2 on 'a'", "one host described: " + one.describe());

  HostMap two = partition_hosts(probes({"a", "a", "b", "b"}), same({0, 0, 1, 1}));
  expect(two.count() == 2 && two.even(), "two contiguous hosts");
  expect(two.host_of == std::vector<int>({0, 0, 1, 1}) && two.local_of == std::vector<int>({0, 1, 0, 1}),
         "contiguous hosts: host and local index of each rank");
  expect(two.describe() == "2 hosts: ranks 0-1 on 'a', ranks 2-3 on 'b'", "two hosts described: " + two.describe());

  HostMap inter = partition_hosts(probes({"a", "b", "a", "b"}), same({0, 1, 0, 1}));
  expect(inter.hosts == std::vector<std::vector<int>>({{0, 2}, {1, 3}}) && inter.local_of == std::vector<int>({0, 0, 1, 1}),
         "interleaved ranks: hosts {0,2} and {1,3}, local indices by place");
  expect(inter.describe() == "2 hosts: ranks 0,2 on 'a', ranks 1,3 on 'b'", "interleaved described: " + inter.describe());

  HostMap uneven = partition_hosts(probes({"a", "a", "b"}), same({0, 0, 1}));
  expect(uneven.count() == 2 && !uneven.even(), "2 + 1 ranks: uneven");

  // One direction only (rank 1 opens rank 0's probe, not the reverse): two hosts, and a hint.
  auto o = same({0, 1});
  o[1][0] = true;
  HostMap one_way = partition_hosts(probes({"a", "a"}), o);
  expect(one_way.count() == 2, "an open in one direction only does not make one host");
  expect(one_way.hints.find("one opened the other's shared memory but not the reverse") != std::string::npos,
         "one-way open hinted: " + one_way.hints);
  expect(one_way.hints.find("same hostname and boot id") != std::string::npos,
         "same hostname and boot id apart hinted: " + one_way.hints);

  // Not transitive (0-1 and 1-2 both ways, 0-2 not): a host is ranks that all open each other.
  auto nt = same({0, 0, 0});
  nt[0][2] = nt[2][0] = false;
  HostMap chain = partition_hosts(probes({"a", "a", "a"}), nt);
  expect(chain.hosts == std::vector<std::vector<int>>({{0, 1}, {2}}), "non-transitive opens: {0,1} and {2}");

  // Shared /dev/shm under other hostnames (containers sharing it): one host, named by its first rank.
  auto shared = probes({"x", "y"});
  shared[1].boot_id = shared[0].boot_id;
  HostMap renamed = partition_hosts(shared, same({0, 0}));
  expect(renamed.count() == 1 && renamed.names[0] == "x" && renamed.hints.empty(),
         "one /dev/shm under two hostnames: one host");
  shared[1].boot_id = "other";
  expect(partition_hosts(shared, same({0, 0})).hints.find("different boot ids") != std::string::npos,
         "one /dev/shm with two boot ids is hinted");

  HostMap many = partition_hosts(probes({"a", "b", "c", "d", "e"}), same({0, 1, 2, 3, 4}));
  expect(many.describe().find(", ...") != std::string::npos && many.count() == 5, "five hosts: four listed");
}

void test_exchange() {
  constexpr int kWorld = 3;
  MemStore store;
  std::vector<HostMap> maps(kWorld);
  std::vector<std::string> errors(kWorld);
  std::vector<std::thread> ranks;
  for (int r = 0; r < kWorld; ++r)
    ranks.emplace_back([&, r] {
      try {
        maps[r] = map_hosts(store.rdv(std::chrono::seconds(20)), "purlin/hosts/", r, kWorld);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : ranks) t.join();
  for (int r = 0; r < kWorld; ++r) {
    expect(errors[r].empty(), "rank " + std::to_string(r) + " mapped the hosts: " + errors[r]);
    expect(maps[r].count() == 1 && maps[r].host_of == std::vector<int>(kWorld, 0),
           "threads of one process: one host on rank " + std::to_string(r));
  }
  expect(maps[0].names[0] == local_hostname(), "the host is named by its hostname");
  expect_eq(probes_left(), 0, "probes left in /dev/shm after the exchange");

  // Rank 1 never comes: rank 0 times out naming the key, and its probe is gone.
  MemStore lonely;
  std::string err;
  try {
    map_hosts(lonely.rdv(std::chrono::milliseconds(200)), "purlin/hosts/", 0, 2);
  } catch (const std::exception& e) {
    err = e.what();
  }
  expect(err.find("purlin/hosts/probe/1") != std::string::npos, "a missing rank's key is named: " + err);
  expect_eq(probes_left(), 0, "probes left in /dev/shm after a rank never came");
}

}  // namespace

int main() {
  test_encoding();
  test_partitions();
  test_exchange();
  return purlin::test::test_summary("test_host_map");
}
