// test_custom_protocol.cc — a custom Spec of a built-in's shape gets the
// built-in's protocol (issue "custom collectives run at built-in speed").
//
// NOTE [custom Specs share the built-ins' protocols] The engines choose from
// the call's description (snac::CallDescription), which is derived from the
// Spec and one_buffer alone (NOTE [call shape from the Spec]), never from the
// collective's name. So a user's Spec equal to a built-in's (what
// torch_purlin.layouts builds for a built-in restated, test/unit/
// test_layouts.py), run through run_spec on the same tensors (its Request cut
// to the Spec's sizes, NOTE [custom call buffers]), gets the same CPU choice
// (one- or two-shot, direct local reads) and the same CUDA protocol, blocks,
// threads and rounds. This program checks every built-in of the golden
// table's sizes, worlds 2-8, plain and pool tensors, out of place and in
// place, and allows exactly two kinds of difference, each a promise a custom
// call cannot make:
//  - broadcast (description and, where the pool serves it, protocol): c10d's
//    broadcast passes one buffer as Input and Output on every rank
//    (one_buffer), so its root knows from its own buffer that the peers'
//    Outputs are pool tensors and writes straight into them (copy+peer-outputs,
//    above the parity-plan sizes). The Spec's root writes nothing and its
//    peers read nothing: a custom call's root passes no Output, so no rank
//    can tell that every peer's Output is in the pool, and the call stages.
//  - in-place all_to_all (c10d runs equal splits in place, round j writing
//    only what round j staged): nothing in its Spec says that form is safe
//    (a rank's Input is neither its Output aligned elementwise nor its own
//    chunk of it), so run_spec runs it from a copy of the Input, plain memory
//    disjoint from the Output, and it chooses as out of place does.
// Any other difference fails, and so does a run where the allowed ones do
// not occur. It reports how many calls choose alike and how many differ.
//
// Build: as protocol_choice_table.cc.
#include <cstdio>
#include <string>
#include <vector>

#include "atom/cuda/protocol/launch_config.h"
#include "builtin_calls.h"
#include "common/env.h"
#include "snac/spec_traits.h"

using namespace purlin;
using namespace purlin::backend;
using namespace purlin::test;

namespace {

struct Choice {
  std::string cpu, cuda;
};

std::string key(const snac::CallDescription& d) {
  const snac::SpecTraits& t = d.traits;
  return std::to_string(t.reduces) + std::to_string(t.every_rank_reads_input) +
         std::to_string(t.every_rank_writes_output) + std::to_string(t.inputs_unwritten_while_read) +
         std::to_string(d.inputs_everywhere) + std::to_string(d.outputs_everywhere) +
         std::to_string(d.inputs_at_one_offset) + std::to_string(d.outputs_writable_by_peers) +
         std::to_string(d.own_block);
}

// The choices of every rank's call (`calls`), as the engines make them.
Choice choose_all(const std::vector<Request>& calls, const cu::ProtocolSettings& s, int64_t cpu_two,
                  int64_t cuda_two, std::string* desc) {
  const int W = static_cast<int>(calls.size());
  const std::vector<PeerMeta> all = metas(calls);
  const snac::Spec spec = build_spec(calls[0], all);
  const int64_t es = static_cast<int64_t>(dtype_size(calls[0].dtype));
  Choice c;
  *desc = key(describe_call(calls[0], spec));
  c.cpu = runs_two_shot(describe_call(calls[0], spec), es, W, cpu_two) ? "two-shot" : "one-shot";
  for (int r = 0; r < W; ++r) {
    c.cpu += direct_local_reads(calls[r], describe_call(calls[r], spec), r) ? "1" : "0";
    const Chosen ch = choose(s, calls[r], all, r, cuda_two);
    c.cuda += ch.choice.protocol + "/" + std::to_string(ch.choice.blocks) + "/" + std::to_string(ch.choice.threads) +
              "/" + std::to_string(ch.choice.plan.rounds) + " ";
  }
  return c;
}

// Rank r's call of `spec` through run_spec on the built-in's buffers: a custom
// Request, cut to the Spec's sizes, never one buffer (NOTE [custom call buffers]).
Request as_custom(const Request& builtin, const snac::Spec& spec, int r) {
  Request k = builtin;
  k.op = CollOp::Custom;
  k.name = "custom";
  k.custom = &spec;
  k.redop = spec.redop;
  k.in_splits.clear();
  k.out_splits.clear();
  k.one_buffer = false;
  cut_to_spec(k, spec, r);
  if (custom_input_copied(k, spec, r))  // run_spec's copy: fresh plain memory
    k.in = reinterpret_cast<void*>(plain_base(r) + (uintptr_t{1} << 40));
  return k;
}

}  // namespace

int main() {
  auto bytes_of = [](const char* name) { return env::parse_bytes(env::find(name)->default_value, name); };
  const cu::LaunchConfig config = cu::launch_config_sm90(cu::DeviceInfo{9, 0, 132});
  const std::vector<CollOp> ops = {CollOp::AllReduce, CollOp::Reduce,  CollOp::Broadcast, CollOp::AllGather,
                                   CollOp::ReduceScatter, CollOp::AllToAll, CollOp::Gather,   CollOp::Scatter};
  const std::vector<int64_t> sizes = {4, 4000, 256 << 10, (1 << 20) + 4096, 8 << 20, 20 << 20, 100 << 20};
  int failed = 0, same = 0, differ = 0, broadcast_differ = 0, copied_calls = 0;
  for (int W = 2; W <= 8; ++W) {
    const cu::ProtocolSettings s = cu::make_protocol_settings(
        W, bytes_of("TORCH_PURLIN_CUDA_WORKSPACE_BYTES"), bytes_of("TORCH_PURLIN_CUDA_LINE_BYTES"),
        bytes_of("TORCH_PURLIN_CUDA_PARITY_BYTES"), cu::LineFormat::Auto, config);
    const int64_t cpu_two = bytes_for_world(env::find("TORCH_PURLIN_CPU_TWO_SHOT_BYTES")->default_value, W,
                                            "TORCH_PURLIN_CPU_TWO_SHOT_BYTES");
    const int64_t cuda_two = bytes_for_world(env::find("TORCH_PURLIN_CUDA_TWO_SHOT_BYTES")->default_value, W,
                                             "TORCH_PURLIN_CUDA_TWO_SHOT_BYTES");
    for_each_case(W, ops, sizes, [&](const Case& c) {
      const CollOp op = c.op;
      std::vector<Request> builtin, custom;
      for (int r = 0; r < W; ++r) builtin.push_back(make_call(c, W, r).rq);
      // The same Spec through run_spec, on the same tensors (NOTE [custom call buffers]).
      const snac::Spec spec = build_spec(builtin[0], metas(builtin));
      bool copied = false;
      for (int r = 0; r < W; ++r) {
        custom.push_back(as_custom(builtin[r], spec, r));
        copied |= custom.back().in != builtin[r].in;
      }
      std::string db, dc;
      const Choice b = choose_all(builtin, s, cpu_two, cuda_two, &db);
      const Choice k = choose_all(custom, s, cpu_two, cuda_two, &dc);
      const bool alike = b.cpu == k.cpu && b.cuda == k.cuda;
      alike ? ++same : ++differ;
      // The allowed differences (NOTE [custom Specs share the built-ins' protocols]).
      bool overlaps = false;  // c10d passes overlapping tensors (it copies uneven all_to_all itself)
      for (const Request& rq : builtin) overlaps |= io_alias(rq) != IoAlias::Disjoint;
      const bool copy_form = overlaps && op == CollOp::AllToAll;
      const bool peer_outputs = b.cuda.find("peer-outputs") != std::string::npos;
      bool ok = copied == copy_form;
      if (op == CollOp::Broadcast) {
        ok &= db != dc && alike == !peer_outputs && k.cuda.find("peer-outputs") == std::string::npos;
        broadcast_differ += !alike;
      } else {
        ok &= db == dc && (alike || copied);
      }
      copied_calls += copied;
      if (ok) return;
      ++failed;
      std::printf("FAIL %s: built-in [%s] cpu %s cuda %s | custom%s [%s] cpu %s cuda %s\n",
                  describe(c, W).c_str(), db.c_str(), b.cpu.c_str(), b.cuda.c_str(),
                  copied ? " (input copied)" : "", dc.c_str(), k.cpu.c_str(), k.cuda.c_str());
    });
  }
  if (broadcast_differ == 0 || copied_calls == 0) {
    ++failed;
    std::printf("FAIL the allowed differences did not occur (broadcast %d, copied inputs %d): the sweep changed\n",
                broadcast_differ, copied_calls);
  }
  std::printf("custom Specs: %d calls with the built-in's protocol, %d with another (%d broadcast to pool outputs, "
              "%d in-place all_to_all run from a copy), %d failed\n",
              same, differ, broadcast_differ, differ - broadcast_differ, failed);
  return failed == 0 ? 0 : 1;
}
