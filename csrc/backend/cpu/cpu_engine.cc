// cpu_engine.cc — see cpu_engine.h.
#include "backend/cpu/cpu_engine.h"

#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include "atom/cpu/cpu_atom.h"
#include "backend/group/protocol_table.h"
#include "backend/group/setup_agreement.h"
#include "backend/group/shm_capacity.h"
#include "common/env.h"
#include "snac/executor.h"

namespace purlin::backend {

CpuEngine::CpuEngine(int rank, int world, std::chrono::milliseconds timeout, Rendezvous rdv, GroupHealth* health,
                       std::shared_ptr<const GroupContext> ctx)
    : rank_(rank), world_(world), rdv_(std::move(rdv)), channel_(rank, world, timeout, health), ctx_(std::move(ctx)) {}

CpuEngine::~CpuEngine() = default;

void CpuEngine::set_timeout(std::chrono::milliseconds t) { channel_.set_timeout(t); }

// The group's settings (agreed when it was made, NOTE [group settings]) are
// read here, on its first collective, and checked by every rank together
// (NOTE [setup agreement]) before the segments, with rank 0's verdict on
// /dev/shm (NOTE [shm capacity]).
void CpuEngine::ensure_atom(const char* op) {
  if (channel_.is_open()) return;
  size_t ws = 0;
  std::string mine;
  try {
    const env::Settings& settings = ctx_->settings;
    two_shot_bytes_ = two_shot_bytes(settings, "TORCH_PURLIN_CPU_TWO_SHOT_BYTES", world_);  // NOTE [protocol table]
    debug_ = settings.get_bool("TORCH_PURLIN_DEBUG");
    round_bytes_ = settings.get_bytes("TORCH_PURLIN_CPU_ROUND_BYTES");  // NOTE [cpu rounds]
    if (round_bytes_ < 4096) throw std::invalid_argument("TORCH_PURLIN_CPU_ROUND_BYTES must be at least 4K");
    ws = static_cast<size_t>(settings.get_bytes("TORCH_PURLIN_CPU_WORKSPACE_BYTES"));
    if (ws < 4096) throw std::invalid_argument("TORCH_PURLIN_CPU_WORKSPACE_BYTES must be at least 4K");
    if (rank_ == 0) {  // NOTE [shm capacity]: rank 0 sizes every rank's workspace (make_shm_group publishes it)
      const bool is_explicit = settings.source("TORCH_PURLIN_CPU_WORKSPACE_BYTES") != env::Settings::Source::Default;
      const WorkspaceChoice c = ShmCapacity::choose(
          {world_, ws, is_explicit, meta_blob_bytes(world_), GroupHealth::kRecordBytes}, atom::cpu::ShmSpace::now());
      if (!c.error.empty()) throw std::runtime_error(c.error);
      ws = c.bytes;
      if (!c.note.empty() && settings.get_bool("TORCH_PURLIN_LOG"))
        std::fprintf(stderr, "[purlin] %s: %s (logged once)\n", ctx_->rank_name(rank_).c_str(), c.note.c_str());
    }
  } catch (const std::exception& e) {
    mine = e.what();
  }
  std::string why;
  try {
    why = agree_on_setup(rdv_, "purlin/cpu/setup/", rank_, world_, mine);
    if (why.empty()) channel_.open("cpu", ws, meta_blob_bytes(world_), rdv_);
  } catch (const std::exception& e) {  // a rank that does not arrive (store_rendezvous.h), a segment not made
    why = e.what();
  }
  if (!why.empty()) {
    channel_.fail_setup(why);  // the keys are spent: a second attempt could not agree again
    throw std::runtime_error(error_prefix(op, rank_) + why);
  }
}

// The cache key holds every fact the plan depends on: the Spec's inputs
// (plan_key) and this rank's aliasing; two-shot and direct local reads follow
// from them and the call's description.
const snac::Plan& CpuEngine::plan_for(const Request& rq, const std::vector<PeerMeta>& all) {
  int64_t shift = 0;
  const IoAlias alias = io_alias(rq, &shift);
  std::string key = plan_key(rq, all);
  key += 'a';
  key += static_cast<char>('0' + static_cast<int>(alias));
  key += "/s";
  key += std::to_string(shift);
  if (const snac::Plan* p = plans_.find(key)) return *p;
  const size_t esize = dtype_size(rq.dtype);
  snac::Spec spec = build_spec(rq, all);
  const snac::CallDescription call = describe_call(rq, spec);
  snac::PlanOptions opt;
  opt.align_elems = std::max<int64_t>(1, 64 / static_cast<int64_t>(esize));
  opt.slot_elems = cpu_slot_elems(static_cast<int64_t>(channel_.atom().workspace_bytes()), round_bytes_,
                                  static_cast<int64_t>(esize), opt.align_elems);  // NOTE [cpu rounds]
  opt.direct_local = direct_local_reads(rq, call, rank_);  // NOTE [direct local reads]
  opt.reduce_algo = runs_two_shot(call, static_cast<int64_t>(esize), world_, two_shot_bytes_)
                        ? snac::ReduceAlgo::TwoShot
                        : snac::ReduceAlgo::OneShot;  // NOTE [protocol table]
  auto plan = std::make_unique<snac::Plan>(snac::make_plan(spec, rank_, opt));
  if (debug_) std::fprintf(stderr, "[purlin] new plan for %s: %s", spec.name.c_str(), plan->describe().c_str());
  return plans_.insert(std::move(key), std::move(plan));
}

void CpuEngine::run(Request& rq) {
  channel_.begin_call(rq.name);
  ensure_atom(rq.name);
  atom::WaitSite site{rq.name, "", channel_.next_seq()};
  const std::vector<PeerMeta> all = channel_.arrive_and_check(rq, site);  // NOTE [arrival]

  const snac::Plan& plan = plan_for(rq, all);
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
    snac::execute(plan, channel_.atom(), args);
  } catch (const atom::TimeoutError& e) {
    channel_.wait_ended(e);
  }
  step_base_ += plan.steps;
}

}  // namespace purlin::backend
