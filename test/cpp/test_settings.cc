// test_settings.cc — the settings registry and its agreement (no torch): how values compare across
// ranks (NOTE [settings across ranks]), a group's snapshot with its options over the environment
// (NOTE [group settings]), agree_on_settings' verdicts with W threads as ranks over an in-memory
// Rendezvous, and the derived ranks per GPU (NOTE [shared GPU]). Built and run by test_settings_cpu.py.
#include <condition_variable>
#include <cstdlib>
#include <map>
#include <mutex>
#include <regex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "backend/group/group_context.h"
#include "backend/group/setup_agreement.h"
#include "common/env.h"
#include "expect.h"

using namespace purlin;
using purlin::test::expect;
using purlin::test::expect_eq;

namespace {

using Map = std::map<std::string, std::string>;

// A Store in memory: get() waits for set().
struct MemoryStore {
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::string, std::string> kv;
  backend::Rendezvous rendezvous() {
    backend::Rendezvous r;
    r.set = [this](const std::string& k, const std::string& v) {
      std::lock_guard<std::mutex> g(mu);
      kv[k] = v;
      cv.notify_all();
    };
    r.get = [this](const std::string& k) {
      std::unique_lock<std::mutex> g(mu);
      cv.wait(g, [&] { return kv.count(k) > 0; });
      return kv[k];
    };
    return r;
  }
};

// Every rank's verdict when rank r's group is made with overrides[r].
std::vector<std::string> agree(const std::vector<std::map<std::string, std::string>>& overrides,
                               std::vector<int> global = {}) {
  MemoryStore store;
  const int W = static_cast<int>(overrides.size());
  std::vector<std::string> out(W);
  std::vector<std::thread> ts;
  for (int r = 0; r < W; ++r) {
    ts.emplace_back([&, r] {
      backend::GroupContext ctx{env::Settings(overrides[r]), global, 0};
      out[r] = backend::agree_on_settings(store.rendezvous(), "s/", r, W, ctx, "");
    });
  }
  for (auto& t : ts) t.join();
  return out;
}

bool has(const std::string& text, const std::string& pattern) { return std::regex_search(text, std::regex(pattern)); }

}  // namespace

int main() {
  // ---- values as ranks compare them ----
  const env::Var* two_shot = env::find("TORCH_PURLIN_CPU_TWO_SHOT_BYTES");
  const env::Var* forced = env::find("TORCH_PURLIN_FORCE_FALLBACK");
  expect(two_shot && forced && !env::find("TORCH_PURLIN_FORCE_NCCL"), "registry lookups");
  expect(env::normalize(*two_shot, "256K") == env::normalize(*two_shot, "262144"), "256K == 262144");
  expect(env::normalize(*two_shot, "256K,@2=1M") == env::normalize(*two_shot, " @2=1048576 , 262144"),
         "byte lists compare without order or spaces");
  expect(env::normalize(*two_shot, "1K") != env::normalize(*two_shot, "256K"), "1K != 256K");
  expect(env::normalize(*forced, "Broadcast,cpu:scatter") == env::normalize(*forced, "cpu:scatter,broadcast"),
         "op lists compare without order or case");
  bool threw = false;
  try {
    env::normalize(*two_shot, "256K,@two=1M");
  } catch (const std::invalid_argument& e) {
    threw = has(e.what(), "TORCH_PURLIN_CPU_TWO_SHOT_BYTES") && has(e.what(), "@two=1m");
  }
  expect(threw, "a malformed @W item names the variable and the item");

  // ---- a group's snapshot ----
  setenv("TORCH_PURLIN_CPU_WORKSPACE_BYTES", "1M", 1);
  env::Settings s(Map{{"TORCH_PURLIN_CPU_TWO_SHOT_BYTES", "4K"}});
  setenv("TORCH_PURLIN_CPU_WORKSPACE_BYTES", "2M", 1);  // later changes do not reach the snapshot
  expect_eq(s.get_bytes("TORCH_PURLIN_CPU_WORKSPACE_BYTES"), 1 << 20, "the environment as it was");
  expect(s.get("TORCH_PURLIN_CPU_TWO_SHOT_BYTES") == "4K", "options over the environment");
  expect(s.source("TORCH_PURLIN_CPU_TWO_SHOT_BYTES") == env::Settings::Source::Options &&
             s.source("TORCH_PURLIN_CPU_WORKSPACE_BYTES") == env::Settings::Source::Environment &&
             s.source("TORCH_PURLIN_DEBUG") == env::Settings::Source::Default,
         "sources");
  unsetenv("TORCH_PURLIN_CPU_WORKSPACE_BYTES");
  threw = false;
  try {
    env::Settings bad(Map{{"TORCH_PURLIN_FORCE_NCCL", "all"}});
  } catch (const std::invalid_argument& e) {
    threw = has(e.what(), "no longer read") && has(e.what(), "FORCE_FALLBACK=cuda:");
  }
  expect(threw, "a retired name in options says what replaces it");
  threw = false;
  try {
    env::Settings bad(Map{{"TORCH_PURLIN_NOPE", "1"}});
  } catch (const std::invalid_argument& e) {
    threw = has(e.what(), "TORCH_PURLIN_NOPE");
  }
  expect(threw, "an unknown name in options raises");

  // ---- agreement ----
  for (const std::string& v : agree({{}, {}, {}})) expect(v.empty(), "defaults agree: " + v);
  std::vector<std::string> v = agree({{{"TORCH_PURLIN_CPU_TWO_SHOT_BYTES", "1K"}}, {}, {}});
  for (int r = 0; r < 3; ++r)
    expect(has(v[r], "TORCH_PURLIN_CPU_TWO_SHOT_BYTES must be equal") &&
               has(v[r], "rank 0 '1K' \\(from the group's options\\)") &&
               has(v[r], std::string("rank 1 and rank 2 '") + two_shot->default_value + "' \\(the default\\)"),
           "a difference is named alike on every rank: " + v[r]);
  v = agree({{}, {{"TORCH_PURLIN_CPU_WORKSPACE_BYTES", "bogus"}}}, {3, 5});
  expect(has(v[0], "rank 1 \\(global rank 5\\) could not set up the group: TORCH_PURLIN_CPU_WORKSPACE_BYTES") &&
             v[0] == v[1],
         "an unreadable value names the rank and its global rank: " + v[0]);
  v = agree({{{"TORCH_PURLIN_LOG", "0"}, {"TORCH_PURLIN_CUDA_LINE_BYTES", "4K"}},
             {{"TORCH_PURLIN_CUDA_BLOCKS", "8"}}});
  expect(v[0].empty() && v[1].empty(), "own and combined settings may differ: " + v[0]);
  v = agree({{{"TORCH_PURLIN_FORCE_FALLBACK", "all_reduce"}}, {}});
  expect(has(v[1], "TORCH_PURLIN_FORCE_FALLBACK must be equal") && has(v[1], "rank 1 unset \\(the default\\)"),
         "a forced fallback on one rank: " + v[1]);

  // ---- ranks per GPU (NOTE [shared GPU]) ----
  backend::GroupContext c{env::Settings(), {}, 4};
  expect_eq(c.job_ranks_per_gpu(1), 4, "4 ranks, 1 GPU");
  expect_eq(c.job_ranks_per_gpu(2), 2, "4 ranks, 2 GPUs");
  expect_eq(c.job_ranks_per_gpu(8), 1, "4 ranks, 8 GPUs");
  expect_eq(c.job_ranks_per_gpu(0), 0, "GPUs not known");
  c.host_ranks = 3;
  expect_eq(c.job_ranks_per_gpu(2), 2, "3 ranks, 2 GPUs: rounded up");
  c.host_ranks = 0;
  expect_eq(c.job_ranks_per_gpu(2), 0, "ranks not known");
  return purlin::test::test_summary("test_settings");
}
