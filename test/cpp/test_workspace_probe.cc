// test_workspace_probe.cc — the setup probes of a CUDA group (workspace_probe.h):
// their encoding, and the verdict every rank derives from all of them: one
// host, one GPU per rank unless every rank lets them share (NOTE [shared
// GPU]), and the SM budget of ranks that share a GPU. No GPU needed.
#include <cstdio>
#include <string>
#include <vector>

#include "atom/cuda/host/workspace_probe.h"
#include "expect.h"

namespace cu = purlin::atom::cuda;

using purlin::test::expect;

static cu::WorkspaceProbe probe(const std::string& bus, int share) {
  cu::WorkspaceProbe p;
  p.host = "node a";
  p.bus = bus;
  p.major = 9;
  p.sms = 132;
  p.ws = 64 << 20;
  p.lines = 1 << 20;
  p.parity = 16 << 20;
  p.format = 2;
  p.share = share;
  return p;
}

static bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

int main() {
  // Encoding: every field survives, free text with spaces and newlines too.
  cu::WorkspaceProbe a = probe("0000:1b:00.0", 1);
  a.host = "host with spaces\nand a newline";
  a.error = "no GPU: CUDA_VISIBLE_DEVICES=\"\"";
  a.blocks = 7;
  const cu::WorkspaceProbe b = cu::WorkspaceProbe::decode(a.encode());
  expect(b.host == a.host && b.bus == a.bus && b.error == a.error && b.major == 9 && b.sms == 132 && b.blocks == 7 &&
             b.ws == a.ws && b.lines == a.lines && b.parity == a.parity && b.format == 2 && b.share == 1,
         "a probe decodes to what was encoded");
  expect(cu::WorkspaceProbe::decode(probe("x", 0).encode()).error.empty(), "no error decodes as none");

  std::string shared = "stale";
  // One GPU per rank: fine, nothing shared.
  expect(cu::check_probes({probe("g0", 0), probe("g1", 0)}, &shared).empty() && shared.empty(), "distinct GPUs");
  // Two ranks on one GPU, one of them not allowing it: refused, the pair and the setting named.
  std::string why = cu::check_probes({probe("g0", 1), probe("g1", 0), probe("g0", 0)}, &shared);
  expect(has(why, "rank 0 and rank 2 share GPU g0") && has(why, "TORCH_PURLIN_CUDA_SHARE_GPU=1") && shared.empty(),
         "sharing refused unless every rank allows it: " + why);
  // Every rank allows it: accepted, the first sharing pair named.
  why = cu::check_probes({probe("g0", 1), probe("g1", 1), probe("g1", 1), probe("g0", 1)}, &shared);
  expect(why.empty() && shared == "rank 1 and rank 2 share GPU g1", "sharing allowed: '" + why + "' / '" + shared + "'");
  // A rank's own error comes first, and a second host is refused.
  cu::WorkspaceProbe bad = probe("g1", 1);
  bad.error = "TORCH_PURLIN_CUDA_WORKSPACE_BYTES must be at least 64K";
  why = cu::check_probes({probe("g0", 1), bad}, &shared);
  expect(why == "rank 1: TORCH_PURLIN_CUDA_WORKSPACE_BYTES must be at least 64K", "a rank's error: " + why);
  cu::WorkspaceProbe far = probe("g1", 0);
  far.host = "node b";
  why = cu::check_probes({probe("g0", 0), far}, &shared);
  expect(has(why, "one host") && has(why, "node b"), "two hosts: " + why);

  // Ranks per GPU and the SM budget.
  expect(cu::ranks_per_gpu({probe("g0", 1), probe("g1", 1)}) == 1, "one rank per GPU");
  expect(cu::ranks_per_gpu({probe("g0", 1), probe("g1", 1), probe("g0", 1), probe("g0", 1)}) == 3, "three on g0");
  expect(cu::ranks_per_gpu({}) == 0, "no ranks");
  expect(cu::budget_ranks_per_gpu({probe("g0", 1), probe("g0", 1)}) == 2, "budget: the group's own ranks");
  expect(cu::budget_ranks_per_gpu({probe("g0", 4), probe("g0", 4)}) == 4, "budget: the job's ranks on the GPU");
  expect(cu::budget_ranks_per_gpu({probe("g0", 4)}) == 4, "budget: a one-rank group among three others");
  expect(cu::budget_ranks_per_gpu({probe("g0", 0), probe("g1", 0)}) == 1, "budget: no sharing");
  expect(cu::sm_budget(132, 1) == 132, "a GPU of its own: every SM");
  expect(cu::sm_budget(132, 2) == 33 && cu::sm_budget(132, 4) == 16 && cu::sm_budget(132, 8) == 8,
         "shared: half an equal share");
  expect(cu::sm_budget(4, 8) == 1, "at least one SM");

  return purlin::test::test_summary("workspace probe");
}
