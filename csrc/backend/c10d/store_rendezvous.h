// store_rendezvous.h — a torch-free Rendezvous (shm_group.h) over a c10d Store,
// for the setup code that must not see torch headers.
//
// A group sets itself up on its first collective (per device), exchanging keys
// through the Store. get() waits at most the group's timeout (not the Store's,
// which is the whole job's init timeout, 30 min by default) and then throws,
// naming the rank it waited for: keys end in the rank that sets them
// ("<prefix>/<rank>"), except a "token" key, which rank 0 sets.
#pragma once

#include <cctype>
#include <chrono>
#include <stdexcept>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "backend/group/shm_group.h"

namespace purlin::backend {

// Who sets `key` (see above), for a timeout message.
inline std::string setter_of(const std::string& key) {
  size_t i = key.size();
  while (i > 0 && std::isdigit(static_cast<unsigned char>(key[i - 1]))) --i;
  if (i < key.size()) return "rank " + key.substr(i);
  return "rank 0";
}

// `reached`: what the awaited rank has not done yet, for the timeout message.
inline Rendezvous store_rendezvous(c10::intrusive_ptr<c10d::Store> store, std::chrono::milliseconds timeout,
                                   std::string reached = "reached this group's first collective on the device") {
  Rendezvous rdv;
  rdv.set = [store](const std::string& k, const std::string& v) {
    store->set(k, std::vector<uint8_t>(v.begin(), v.end()));
  };
  rdv.get = [store, timeout, reached](const std::string& k) {
    const auto start = std::chrono::steady_clock::now();
    try {
      store->wait({k}, timeout);
    } catch (const std::exception&) {
      // Stores differ in what they throw on a timeout (TCPStore a DistStoreError, FileStore a plain
      // c10::Error): anything that ends the wait early (a lost store) is passed on as it is.
      if (std::chrono::steady_clock::now() - start < timeout * 9 / 10) throw;
      throw std::runtime_error("timed out after " + std::to_string(timeout.count()) + " ms in the group's set-up, " +
                               "waiting for " + setter_of(k) + " (store key '" + k + "'): it has not " + reached +
                               ", called another one, or gave up earlier");
    }
    const std::vector<uint8_t> v = store->get(k);
    return std::string(v.begin(), v.end());
  };
  return rdv;
}

}  // namespace purlin::backend
