// host_map.h — which ranks of a group share a host, learned when the group sets
// itself up, by what purlin actually needs: a shared-memory segment every rank
// of a host can open. Torch-free: the backend passes the Store as a Rendezvous.
//
// NOTE [host map]
// The CPU Atom maps every peer's /dev/shm segment and the CUDA Atom every peer's
// IPC handle, so both need the ranks on one host; a group spanning hosts (nodes,
// or containers with their own /dev/shm) would fail at its first collective. So
// before anything else a group learns its hosts from what the ranks can open,
// not from names: every rank creates a small probe segment holding a random
// nonce and publishes its name through the Store; every rank opens every peer's
// (as the Atom does, NOTE [checked segments]), checks the nonce and publishes
// which it opened; then each unlinks its own and those it opened, so nothing is
// left in /dev/shm. Every rank derives the same partition from the same data:
// ranks share a host only if each opened the other's probe; hosts are built
// greedily in rank order and numbered by their lowest rank, a rank's local
// index is its place among its host's ranks. Hostname and boot id are hints
// for messages only (HostMap::hints says where they disagree with the opens).
// Details: docs/DESIGN.md, "Host map".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/group/shm_group.h"

namespace purlin::backend {

// What one rank publishes in the probe step.
struct HostProbe {
  std::string hostname, boot_id, segment;  // segment: "" if this rank could not create one
  int64_t pid = 0;
  uint64_t nonce = 0;

  std::string encode() const;  // fields separated by '\n', free text hex-encoded
  static HostProbe decode(const std::string& s);
};

struct HostMap {
  std::vector<int> host_of;             // group rank -> host index
  std::vector<int> local_of;            // group rank -> index among its host's ranks
  std::vector<std::vector<int>> hosts;  // host index -> its ranks, ascending; hosts ordered by lowest rank
  std::vector<std::string> names;       // host index -> hostname of its lowest rank (messages only)
  std::string hints;                    // where hostname / boot id disagree with the opens ("" if nowhere)

  int count() const { return static_cast<int>(hosts.size()); }
  // Every host has the same number of ranks.
  bool even() const;
  // "2 hosts: ranks 0-1 on 'a', ranks 2-3 on 'b'" (at most 4 hosts listed).
  std::string describe() const;
};

// The partition every rank derives (see NOTE [host map]). opened[i][j]: rank i
// opened rank j's probe (opened[i][i] is ignored).
HostMap partition_hosts(const std::vector<HostProbe>& probes, const std::vector<std::vector<bool>>& opened);

// The whole exchange, collective over `rdv` (keys under `key`, each ending in
// the setting rank). Throws std::runtime_error if a rank does not report (the
// Rendezvous's bounded wait); this rank's probe is unlinked either way.
HostMap map_hosts(const Rendezvous& rdv, const std::string& key, int rank, int world);

// This machine's hostname and boot id ("" where unreadable).
std::string local_hostname();
std::string local_boot_id();

}  // namespace purlin::backend
