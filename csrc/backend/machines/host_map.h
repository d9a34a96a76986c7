// host_map.h — which ranks of a group share a host, learned when the group sets
// itself up, by what purlin actually needs: a shared-memory segment every rank
// of a host can open. Torch-free: the backend passes the Store as a Rendezvous.
//
// NOTE [host map]
// purlin's CPU Atom maps every peer's /dev/shm segment, and its CUDA Atom maps
// every peer's IPC handle: both need the ranks on one host. A group spanning
// hosts (a multi-node job, or containers on one node with their own /dev/shm)
// failed at its first collective with "shm_open failed ... No such file or
// directory". So before anything else a group learns its hosts:
//   probe   every rank creates a small segment under a random name, writes a
//           random nonce into it, and publishes through the Store its hostname,
//           boot id (/proc/sys/kernel/random/boot_id), pid, the segment's name
//           and the nonce;
//   opened  every rank opens (read-write, as the Atom does) every peer's segment,
//           checks the nonce, and publishes which it could open; a probe that
//           is there but fails NOTE [checked segments] (another user's, not
//           0600, not the probe's size) is not opened and is never read: the
//           pair counts as two hosts, as a permission error would make it,
//           and the map's hints say why;
//   unlink  once every rank has reported, each unlinks its own probe and every
//           peer's it opened (either alone leaves nothing in /dev/shm: a probe
//           whose owner died after the others opened it is removed by them; a
//           failed exchange unlinks this rank's own on the way out). Only a rank
//           killed between creating its probe and publishing its name can leave
//           one (a 64-byte segment), as with any /dev/shm user.
//   map     every rank derives the same partition from the same data: ranks i
//           and j may share a host only if i opened j's probe and j opened i's
//           (one direction alone, e.g. a permission, is not enough); hosts are
//           built greedily in rank order, a rank joining the first host all of
//           whose ranks it shares both directions with (in practice the
//           relation is "the same /dev/shm", an equivalence). Hosts are
//           numbered by their lowest rank; a rank's local index is its place in
//           its host's ascending ranks.
// Hostname and boot id are hints only, for messages: containers on one node may
// share a hostname pattern yet not /dev/shm (two hosts for purlin), or share
// /dev/shm under different hostnames (one host). Where the hints and the opens
// disagree, HostMap::hints says so.
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
