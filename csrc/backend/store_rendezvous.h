// store_rendezvous.h — a torch-free Rendezvous (shm_group.h) over a c10d Store,
// for the setup code that must not see torch headers.
#pragma once

#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "backend/shm_group.h"

namespace purlin::backend {

// get() blocks until the key is set, bounded by the store's timeout.
inline Rendezvous store_rendezvous(c10::intrusive_ptr<c10d::Store> store) {
  Rendezvous rdv;
  rdv.set = [store](const std::string& k, const std::string& v) {
    store->set(k, std::vector<uint8_t>(v.begin(), v.end()));
  };
  rdv.get = [store](const std::string& k) {
    const std::vector<uint8_t> v = store->get(k);
    return std::string(v.begin(), v.end());
  };
  return rdv;
}

}  // namespace purlin::backend
