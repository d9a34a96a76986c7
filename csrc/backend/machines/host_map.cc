// host_map.cc — see host_map.h (NOTE [host map]).
#include "backend/machines/host_map.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <random>
#include <sstream>

#include "atom/cpu/shm_segment.h"
#include "common/hex.h"

namespace purlin::backend {

namespace {

constexpr size_t kProbeBytes = 64;  // the nonce, in a page the kernel rounds up to anyway

std::string ranks_text(const std::vector<int>& ranks) {
  // "0-3" for a run, "0,2" otherwise.
  bool run = true;
  for (size_t i = 1; i < ranks.size(); ++i) run &= ranks[i] == ranks[i - 1] + 1;
  if (ranks.size() == 1) return "rank " + std::to_string(ranks[0]);
  if (run) return "ranks " + std::to_string(ranks.front()) + "-" + std::to_string(ranks.back());
  std::string s = "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? "," : "") + std::to_string(ranks[i]);
  return s;
}

// Unlinks names this rank created or opened, once every rank reported (or on the way out).
struct ProbeCleanup {
  std::vector<std::string> names;
  ~ProbeCleanup() {
    for (const std::string& n : names) shm_unlink(n.c_str());  // ENOENT: the owner or a peer was first
  }
};

}  // namespace

std::string HostProbe::encode() const {
  std::ostringstream os;
  // 'x' keeps hex fields non-empty for operator>>.
  os << 'x' << to_hex(hostname.data(), hostname.size()) << '\n'
     << 'x' << to_hex(boot_id.data(), boot_id.size()) << '\n'
     << 'x' << to_hex(segment.data(), segment.size()) << '\n' << pid << '\n' << nonce;
  return os.str();
}

HostProbe HostProbe::decode(const std::string& s) {
  std::istringstream is(s);
  std::string h, b, seg;
  HostProbe p;
  is >> h >> b >> seg >> p.pid >> p.nonce;
  if (!is || h.empty() || b.empty() || seg.empty()) throw std::runtime_error("malformed host probe '" + s + "'");
  p.hostname = from_hex(h.substr(1));
  p.boot_id = from_hex(b.substr(1));
  p.segment = from_hex(seg.substr(1));
  return p;
}

bool HostMap::even() const {
  for (const auto& h : hosts)
    if (h.size() != hosts[0].size()) return false;
  return true;
}

std::string HostMap::describe() const {
  std::string s = std::to_string(count()) + " host" + (count() == 1 ? "" : "s") + ": ";
  for (int h = 0; h < count() && h < 4; ++h)
    s += (h ? ", " : "") + ranks_text(hosts[h]) + " on '" + names[h] + "'";
  if (count() > 4) s += ", ...";
  return s;
}

HostMap partition_hosts(const std::vector<HostProbe>& probes, const std::vector<std::vector<bool>>& opened) {
  const int world = static_cast<int>(probes.size());
  auto both = [&](int i, int j) { return i == j || (opened[i][j] && opened[j][i]); };
  HostMap m;
  m.host_of.assign(world, -1);
  m.local_of.assign(world, -1);
  for (int i = 0; i < world; ++i) {
    if (m.host_of[i] >= 0) continue;
    std::vector<int> members{i};
    for (int j = i + 1; j < world; ++j) {
      if (m.host_of[j] >= 0) continue;
      bool all = true;
      for (int k : members) all &= both(j, k);
      if (all) members.push_back(j);
    }
    const int h = m.count();
    for (size_t l = 0; l < members.size(); ++l) {
      m.host_of[members[l]] = h;
      m.local_of[members[l]] = static_cast<int>(l);
    }
    m.hosts.push_back(std::move(members));
    m.names.push_back(probes[i].hostname);
  }
  // Hints: the first pair of each kind where the names say otherwise than the opens.
  std::string same_name_apart, one_way, apart_boot;
  for (int i = 0; i < world; ++i) {
    for (int j = i + 1; j < world; ++j) {
      const bool same_host = m.host_of[i] == m.host_of[j];
      const std::string pair = "ranks " + std::to_string(i) + " and " + std::to_string(j);
      if (!same_host && opened[i][j] != opened[j][i] && one_way.empty())
        one_way = pair + ": one opened the other's shared memory but not the reverse, so they count as two hosts";
      if (!same_host && probes[i].hostname == probes[j].hostname && probes[i].boot_id == probes[j].boot_id &&
          same_name_apart.empty())
        same_name_apart = pair + " report the same hostname and boot id but cannot open each other's shared "
                                 "memory (containers with their own /dev/shm?)";
      if (same_host && probes[i].boot_id != probes[j].boot_id && apart_boot.empty())
        apart_boot = pair + " share /dev/shm but report different boot ids";
    }
  }
  for (const std::string* h : {&one_way, &same_name_apart, &apart_boot})
    if (!h->empty()) m.hints += (m.hints.empty() ? "" : "; ") + *h;
  return m;
}

std::string local_hostname() {
  char host[256] = {0};
  if (gethostname(host, sizeof host - 1) != 0) return "";
  return host;
}

std::string local_boot_id() {
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(f, id);
  return id;
}

HostMap map_hosts(const Rendezvous& rdv, const std::string& key, int rank, int world) {
  ProbeCleanup cleanup;
  HostProbe mine;
  mine.hostname = local_hostname();
  mine.boot_id = local_boot_id();
  mine.pid = getpid();
  std::random_device rd;
  mine.nonce = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  atom::cpu::ShmSegment seg;
  try {
    std::ostringstream name;
    name << "/purlin_probe_" << mine.pid << "_" << std::hex << rd() << rd();
    seg = atom::cpu::ShmSegment::create(name.str(), kProbeBytes);
    std::memcpy(seg.data(), &mine.nonce, sizeof mine.nonce);
    mine.segment = seg.name();
    cleanup.names.push_back(mine.segment);
  } catch (const std::exception&) {
    // No /dev/shm here (or it is full): peers cannot open what is not there, so this
    // rank is a host of its own and its collectives run on the fallback.
  }

  std::vector<HostProbe> probes;
  for (const std::string& s : all_gather(rdv, key + "probe/", rank, world, mine.encode()))
    probes.push_back(HostProbe::decode(s));

  std::string mine_opened(world, '0');
  for (int r = 0; r < world; ++r) {
    if (r == rank || probes[r].segment.empty()) continue;
    try {
      atom::cpu::ShmSegment peer = atom::cpu::ShmSegment::open(probes[r].segment, kProbeBytes);
      uint64_t nonce = 0;
      std::memcpy(&nonce, peer.data(), sizeof nonce);
      if (nonce == probes[r].nonce) {
        mine_opened[r] = '1';
        cleanup.names.push_back(probes[r].segment);
      }
    } catch (const atom::cpu::ShmRefused&) {
      mine_opened[r] = '2';  // there, but not ours to trust (NOTE [checked segments]): two hosts for purlin
    } catch (const std::exception&) {
      // Not on this host (or not ours to open): leave '0'.
    }
  }
  const std::vector<std::string> all = all_gather(rdv, key + "opened/", rank, world, mine_opened);
  seg.unlink();  // every rank reported: nobody opens the probes any more (cleanup unlinks the peers' it opened)

  std::vector<std::vector<bool>> opened(world, std::vector<bool>(world, false));
  for (int i = 0; i < world; ++i) {
    if (static_cast<int>(all[i].size()) != world)
      throw std::runtime_error("rank " + std::to_string(i) + " reported a host probe of " +
                               std::to_string(all[i].size()) + " ranks, expected " + std::to_string(world));
    for (int j = 0; j < world; ++j) opened[i][j] = all[i][j] == '1';
  }
  HostMap m = partition_hosts(probes, opened);
  for (int i = 0; i < world; ++i) {
    if (!probes[i].segment.empty()) continue;
    m.hints += (m.hints.empty() ? "" : "; ") + std::string("rank ") + std::to_string(i) + " could not make a "
               "shared-memory segment (its /dev/shm is full or missing), so it counts as a host of its own";
    break;
  }
  for (int i = 0; i < world; ++i) {
    const size_t j = all[i].find('2');
    if (j == std::string::npos) continue;
    m.hints += (m.hints.empty() ? "" : "; ") + std::string("rank ") + std::to_string(i) + " found rank " +
               std::to_string(j) + "'s probe in its /dev/shm but refused it (another user's, or not mode 0600: the "
               "ranks of one host must run as one user), so they count as two hosts";
    break;
  }
  return m;
}

}  // namespace purlin::backend
