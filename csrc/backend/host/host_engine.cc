// host_engine.cc — see host_engine.h.
#include "backend/host/host_engine.h"

#include <cstdio>
#include <stdexcept>

#include "atom/cpu/cpu_atom.h"
#include "backend/host/protocol_table.h"
#include "backend/host/setup_agreement.h"
#include "common/env.h"
#include "snac/arrival.h"
#include "snac/executor.h"

namespace purlin::backend {

namespace {
constexpr size_t kMaxPlans = 256;

}  // namespace

HostEngine::HostEngine(int rank, int world, std::chrono::milliseconds timeout, Rendezvous rdv,
                       const std::atomic<bool>* aborted, std::shared_ptr<const GroupContext> ctx)
    : rank_(rank), world_(world), timeout_(timeout), rdv_(std::move(rdv)), aborted_(aborted), ctx_(std::move(ctx)) {}

HostEngine::~HostEngine() = default;

void HostEngine::set_timeout(std::chrono::milliseconds t) {
  timeout_ = t;
  if (atom_) atom_->set_timeout(t);
}

// The group's settings (agreed when it was made, NOTE [group settings]) are
// read here, on its first collective, and checked by every rank together
// (NOTE [setup agreement]) before the segments.
void HostEngine::ensure_atom(const char* op) {
  if (atom_) return;
  size_t ws = 0;
  std::string mine;
  try {
    constexpr const char* kTwoShot = "TORCH_PURLIN_CPU_TWO_SHOT_BYTES";  // NOTE [protocol table]: @W= items
    const env::Settings& settings = ctx_->settings;
    two_shot_bytes_ = bytes_for_world(settings.get(kTwoShot), world_, kTwoShot);
    debug_ = settings.get_bool("TORCH_PURLIN_DEBUG");
    ws = static_cast<size_t>(settings.get_bytes("TORCH_PURLIN_CPU_WORKSPACE_BYTES"));
    if (ws < 4096) throw std::invalid_argument("TORCH_PURLIN_CPU_WORKSPACE_BYTES must be at least 4K");
  } catch (const std::exception& e) {
    mine = e.what();
  }
  std::string why;
  try {
    why = agree_on_setup(rdv_, "purlin/cpu/setup/", rank_, world_, mine);
    if (why.empty()) atom_ = make_shm_group("cpu", rank_, world_, ws, meta_blob_bytes(world_), timeout_, rdv_, aborted_);
  } catch (const std::exception& e) {  // a rank that does not arrive (store_rendezvous.h), a segment not made
    why = e.what();
  }
  if (!why.empty()) {
    broken_ = why;  // the keys are spent: a second attempt could not agree again
    throw std::runtime_error(error_prefix(op, rank_) + why);
  }
}

const snac::Plan& HostEngine::plan_for(const Request& rq, const std::vector<PeerMeta>& all, bool direct_local) {
  const size_t esize = dtype_size(rq.dtype);
  const int64_t bytes = std::max(all[0].in_numel, all[0].out_numel) * static_cast<int64_t>(esize);
  snac::PlanOptions opt;
  opt.align_elems = std::max<int64_t>(1, 64 / static_cast<int64_t>(esize));
  opt.slot_elems = static_cast<int64_t>(atom_->workspace_bytes() / 2 / esize) / opt.align_elems * opt.align_elems;
  opt.direct_local = direct_local;
  opt.reduce_algo = (rq.op == CollOp::AllReduce && world_ > 1 && bytes >= two_shot_bytes_) ? snac::ReduceAlgo::TwoShot
                                                                                         : snac::ReduceAlgo::OneShot;
  std::string key = plan_key(rq, all) + (direct_local ? "/d" : "/s") +
                    (opt.reduce_algo == snac::ReduceAlgo::TwoShot ? "2" : "1");
  auto it = plans_.find(key);
  if (it != plans_.end()) return *it->second;
  if (plans_.size() >= kMaxPlans) plans_.clear();
  snac::Spec spec = build_spec(rq, all);
  auto plan = std::make_unique<snac::Plan>(snac::make_plan(spec, rank_, opt));
  if (debug_) std::fprintf(stderr, "[purlin] new plan for %s: %s", spec.name.c_str(), plan->describe().c_str());
  return *plans_.emplace(key, std::move(plan)).first->second;
}

void HostEngine::run(Request& rq) {
  if (!broken_.empty())
    throw std::runtime_error(error_prefix(rq.name, rank_) + "the group is unusable after an earlier failure: " + broken_);
  ensure_atom(rq.name);
  const uint64_t seq = ++seq_;
  atom::WaitSite site{rq.name, "", seq};
  const std::vector<std::byte> blob = encode_meta(rq, world_);
  std::vector<PeerMeta> all;
  try {
    std::vector<const std::byte*> blobs = snac::arrive(*atom_, seq, blob.data(), blob.size(), site);
    for (const std::byte* b : blobs) all.push_back(decode_meta(b, world_));
  } catch (const atom::TimeoutError& e) {
    broken_ = e.what();
    throw std::runtime_error(e.what());
  }
  const std::string why = check_agreement(all, rank_);
  if (!why.empty()) throw std::invalid_argument(error_prefix(rq.name, rank_) + why);

  const snac::Plan& plan = plan_for(rq, all, direct_local_reads(rq, rank_));  // NOTE [direct local reads]
  std::vector<double> scales;
  if (rq.redop == RedOp::PremulSum)
    for (const auto& m : all) scales.push_back(m.scale);
  snac::ExecArgs args;
  args.input = rq.in;
  args.output = rq.out;
  args.dtype = rq.dtype;
  args.redop = rq.redop;
  args.scales = scales.empty() ? nullptr : scales.data();
  args.step_base = step_base_;
  args.site = site;
  try {
    snac::execute(plan, *atom_, args);
  } catch (const atom::TimeoutError& e) {
    broken_ = e.what();
    throw std::runtime_error(e.what());
  }
  step_base_ += plan.steps;
}

}  // namespace purlin::backend
