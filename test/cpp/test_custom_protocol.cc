// test_custom_protocol.cc — a custom Spec of a built-in's shape gets the
// built-in's protocol (issue "custom collectives run at built-in speed").
//
// NOTE [custom Specs share the built-ins' protocols] The engines choose from
// the call's description (snac::CallDescription: the Spec's traits and the
// call's shape), never from the collective's name. So a user's Spec equal to
// a built-in's (what torch_purlin.layouts builds for a built-in restated,
// test/unit/test_layouts.py) run through run_spec gets the same CPU choice
// (one- or two-shot, direct local reads) and the same CUDA protocol, blocks,
// threads and rounds, wherever the two calls' descriptions agree. They differ
// only where c10d's call promises what a Spec does not say: a rank that
// passes no input or output (gather, scatter, reduce), outputs peers may
// write into (all_gather, broadcast), a rank's own block in place (all_gather,
// reduce_scatter). This program checks every built-in of the golden table's
// sizes, worlds 2-8, plain and pool buffers, out of place: equal choices where
// the descriptions agree, at least one such call of all_reduce's and
// all_to_all's shape (whose c10d calls promise nothing a Spec does not say),
// and reports how many calls differ in description (docs/ROADMAP.md: deriving
// those promises from the Spec is open).
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

// Every rank's metadata as its peers read it.
std::vector<PeerMeta> metas(const std::vector<Request>& calls) {
  const int W = static_cast<int>(calls.size());
  std::vector<PeerMeta> all;
  for (const Request& rq : calls) {
    const auto blob = encode_meta(rq, W);
    all.push_back(decode_meta(blob.data(), W));
  }
  return all;
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

}  // namespace

int main() {
  auto bytes_of = [](const char* name) { return env::parse_bytes(env::find(name)->default_value, name); };
  const cu::LaunchConfig config = cu::launch_config_sm90(cu::DeviceInfo{9, 0, 132});
  const CollOp ops[] = {CollOp::AllReduce, CollOp::Reduce,  CollOp::Broadcast, CollOp::AllGather,
                        CollOp::ReduceScatter, CollOp::AllToAll, CollOp::Gather,   CollOp::Scatter};
  const int64_t sizes[] = {4, 4000, 256 << 10, (1 << 20) + 4096, 8 << 20, 20 << 20, 100 << 20};
  int failed = 0, same = 0, differ = 0;
  std::vector<int> same_per_op(static_cast<int>(CollOp::kCount), 0);
  for (int W = 2; W <= 8; ++W) {
    const cu::ProtocolSettings s = cu::make_protocol_settings(
        W, bytes_of("TORCH_PURLIN_CUDA_WORKSPACE_BYTES"), bytes_of("TORCH_PURLIN_CUDA_LINE_BYTES"),
        bytes_of("TORCH_PURLIN_CUDA_PARITY_BYTES"), cu::LineFormat::Auto, config);
    const int64_t cpu_two = bytes_for_world(env::find("TORCH_PURLIN_CPU_TWO_SHOT_BYTES")->default_value, W,
                                            "TORCH_PURLIN_CPU_TWO_SHOT_BYTES");
    const int64_t cuda_two = bytes_for_world(env::find("TORCH_PURLIN_CUDA_TWO_SHOT_BYTES")->default_value, W,
                                             "TORCH_PURLIN_CUDA_TWO_SHOT_BYTES");
    for (CollOp op : ops)
      for (bool uneven : {false, true}) {
        if (uneven && op != CollOp::AllToAll) continue;
        for (int64_t bytes : sizes)
          for (bool pool : {false, true}) {
            Case c;
            c.op = op;
            c.n = bytes / 4;
            c.uneven = uneven;
            c.pool = pool;
            std::vector<Request> builtin, custom;
            for (int r = 0; r < W; ++r) builtin.push_back(make_call(c, W, r).rq);
            // The same Spec through run_spec: a custom request on the same buffers.
            const snac::Spec spec = build_spec(builtin[0], metas(builtin));
            for (const Request& rq : builtin) {
              Request k = rq;
              k.op = CollOp::Custom;
              k.name = "custom";
              k.custom = &spec;
              k.in_splits.clear();
              k.out_splits.clear();
              custom.push_back(k);
            }
            std::string db, dc;
            const Choice b = choose_all(builtin, s, cpu_two, cuda_two, &db);
            const Choice k = choose_all(custom, s, cpu_two, cuda_two, &dc);
            if (db != dc) {
              ++differ;
              continue;
            }
            ++same_per_op[static_cast<int>(op)];
            if (b.cpu == k.cpu && b.cuda == k.cuda) {
              ++same;
              continue;
            }
            ++failed;
            std::printf("FAIL %s: built-in cpu %s cuda %s | custom cpu %s cuda %s\n", describe(c, W).c_str(),
                        b.cpu.c_str(), b.cuda.c_str(), k.cpu.c_str(), k.cuda.c_str());
          }
      }
  }
  for (CollOp op : {CollOp::AllReduce, CollOp::AllToAll})
    if (same_per_op[static_cast<int>(op)] == 0) {
      ++failed;
      std::printf("FAIL %s: no call whose custom form has the built-in's description\n", op_name(op));
    }
  std::printf("custom Specs: %d calls with the built-in's protocol, %d calls whose c10d form says more, %d failed\n",
              same, differ, failed);
  return failed == 0 ? 0 : 1;
}
