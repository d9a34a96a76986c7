// mem_store.h — an in-memory Store for threads acting as ranks: the C++ tests'
// stand-in for torch's Store behind a Rendezvous (backend/group/shm_group.h).
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>

#include "backend/group/shm_group.h"

namespace purlin::test {

// get() waits up to `wait` for the key, then throws naming it.
struct MemStore {
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::string, std::string> kv;

  backend::Rendezvous rdv(std::chrono::milliseconds wait) {
    backend::Rendezvous r;
    r.set = [this](const std::string& k, const std::string& v) {
      std::lock_guard<std::mutex> g(mu);
      kv[k] = v;
      cv.notify_all();
    };
    r.get = [this, wait](const std::string& k) {
      std::unique_lock<std::mutex> g(mu);
      if (!cv.wait_for(g, wait, [&] { return kv.count(k) > 0; })) throw std::runtime_error("timed out waiting for " + k);
      return kv[k];
    };
    return r;
  }
};

}  // namespace purlin::test
