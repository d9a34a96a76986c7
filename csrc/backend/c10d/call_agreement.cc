// call_agreement.cc — see call_agreement.h (NOTE [call agreement]).
#include "backend/c10d/call_agreement.h"

#include <chrono>
#include <cstring>
#include <thread>

#include <ATen/ATen.h>

#include "backend/fallback/fallback.h"

namespace purlin::backend {

namespace {

constexpr int kFixed = 10;           // int64 fields before the splits
constexpr int64_t kErrorBytes = 240;  // a rank's own error, cut to this many bytes

int64_t descriptor_bytes(int world) { return 8 * (kFixed + 2 * int64_t{world}) + kErrorBytes; }

void pack(const CallDescriptor& d, uint8_t* out, int world) {
  std::vector<int64_t> w(static_cast<size_t>(kFixed + 2 * world), 0);
  int64_t factor_bits;
  std::memcpy(&factor_bits, &d.factor, 8);
  const int64_t err = std::min<int64_t>(static_cast<int64_t>(d.error.size()), kErrorBytes);
  const int64_t fixed[kFixed] = {d.op, d.dtype, d.redop, d.root, d.elements, d.tensors, d.layout, d.pairs,
                                 factor_bits, err};
  std::copy(fixed, fixed + kFixed, w.begin());
  for (int r = 0; r < world; ++r) {
    w[kFixed + r] = d.sends[r];
    w[kFixed + world + r] = d.expects[r];
  }
  std::memcpy(out, w.data(), w.size() * 8);
  std::memset(out + w.size() * 8, 0, kErrorBytes);
  std::memcpy(out + w.size() * 8, d.error.data(), static_cast<size_t>(err));
}

CallDescriptor unpack(const uint8_t* in, int world) {
  CallDescriptor d(world);
  std::vector<int64_t> w(static_cast<size_t>(kFixed + 2 * world));
  std::memcpy(w.data(), in, w.size() * 8);
  d.op = w[0];
  d.dtype = w[1];
  d.redop = w[2];
  d.root = w[3];
  d.elements = w[4];
  d.tensors = w[5];
  d.layout = w[6];
  d.pairs = w[7] != 0;
  std::memcpy(&d.factor, &w[8], 8);
  const int64_t err = std::max<int64_t>(0, std::min<int64_t>(w[9], kErrorBytes));
  for (int r = 0; r < world; ++r) {
    d.sends[r] = w[kFixed + r];
    d.expects[r] = w[kFixed + world + r];
  }
  d.error.assign(reinterpret_cast<const char*>(in + w.size() * 8), static_cast<size_t>(err));
  return d;
}

std::string op_name(int64_t op) {
  const auto& names = Fallback::op_names();
  return op >= 0 && op < static_cast<int64_t>(names.size()) ? names[static_cast<size_t>(op)] : "(no op)";
}

std::string dtype_name_of(int64_t t) {
  return t < 0 ? "(none)" : c10::toString(static_cast<at::ScalarType>(t));
}

std::string redop_name_of(int64_t op) {
  switch (op) {
    case -1: return "(none)";
    case c10d::ReduceOp::SUM: return "SUM";
    case c10d::ReduceOp::AVG: return "AVG";
    case c10d::ReduceOp::PRODUCT: return "PRODUCT";
    case c10d::ReduceOp::MIN: return "MIN";
    case c10d::ReduceOp::MAX: return "MAX";
    case c10d::ReduceOp::PREMUL_SUM: return "PREMUL_SUM";
    default: return std::to_string(op);
  }
}

// "" or "<what>: rank 0 <v0>, rank q <vq>" for the first rank whose value differs from rank 0's.
template <class Get, class Show>
std::string differ(const std::vector<CallDescriptor>& ds, const char* what, Get get, Show show) {
  for (size_t q = 1; q < ds.size(); ++q)
    if (get(ds[q]) != get(ds[0]))
      return std::string(what) + ": rank 0 " + show(get(ds[0])) + ", rank " + std::to_string(q) + " " +
             show(get(ds[q]));
  return "";
}

std::string disagreement(const std::vector<CallDescriptor>& ds) {
  std::string errors;
  int n = 0;
  for (size_t q = 0; q < ds.size(); ++q)
    if (!ds[q].error.empty() && n++ < 3) errors += (errors.empty() ? "" : "; ") + ("rank " + std::to_string(q) + ": " + ds[q].error);
  if (!errors.empty()) return errors;
  auto num = [](int64_t v) { return std::to_string(v); };
  for (const std::string& why : {
           differ(ds, "the ranks called different collectives", [](const CallDescriptor& d) { return d.op; },
                  [](int64_t v) { return "called " + op_name(v); }),
           differ(ds, "the ranks passed different dtypes", [](const CallDescriptor& d) { return d.dtype; },
                  [](int64_t v) { return "passed " + dtype_name_of(v); }),
           differ(ds, "the ranks passed different reduce ops", [](const CallDescriptor& d) { return d.redop; },
                  [](int64_t v) { return "passed " + redop_name_of(v); }),
           differ(ds, "the ranks passed different roots", [](const CallDescriptor& d) { return d.root; },
                  [num](int64_t v) { return "passed root " + num(v); }),
           differ(ds, "the ranks passed different numbers of tensors", [](const CallDescriptor& d) { return d.tensors; },
                  [num](int64_t v) { return "passed " + num(v); }),
           differ(ds, "the ranks passed different element counts", [](const CallDescriptor& d) { return d.elements; },
                  [num](int64_t v) { return "passed " + num(v) + " elements"; }),
           differ(ds, "the ranks passed tensors of different element counts",
                  [](const CallDescriptor& d) { return d.layout; },
                  [](int64_t v) { return "passed tensors of digest " + std::to_string(v); })})
    if (!why.empty()) return why;
  if (ds[0].pairs) {
    for (size_t r = 0; r < ds.size(); ++r)
      for (size_t j = 0; j < ds.size(); ++j)
        if (ds[r].sends[j] != ds[j].expects[r])
          return "rank " + std::to_string(r) + " sends " + std::to_string(ds[r].sends[j]) + " elements to rank " +
                 std::to_string(j) + ", which expects " + std::to_string(ds[j].expects[r]) + " from it";
  }
  return "";
}

}  // namespace

int64_t layout_digest(const std::vector<int64_t>& counts) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the counts' bytes
  for (int64_t c : counts)
    for (int b = 0; b < 8; ++b) h = (h ^ ((static_cast<uint64_t>(c) >> (8 * b)) & 0xff)) * 1099511628211ull;
  return static_cast<int64_t>(h >> 1);
}

AgreedCall agree_on_call(c10d::Backend& engine, const CallDescriptor& mine, const std::string& who,
                         const std::string& legend, const std::atomic<bool>& aborted) {
  const int world = engine.getSize();
  const int64_t bytes = descriptor_bytes(world);
  at::Tensor in = at::empty({bytes}, at::kByte), out = at::empty({bytes * world}, at::kByte);
  pack(mine, in.data_ptr<uint8_t>(), world);
  try {
    c10::intrusive_ptr<c10d::Work> work = engine._allgather_base(out, in, c10d::AllgatherOptions());
    for (int polls = 0; !work->isCompleted(); ++polls) {
      TORCH_CHECK(!aborted.load(std::memory_order_relaxed), "the group was aborted while this rank waited for the "
                  "others to call it");
      if (polls < 200)
        std::this_thread::yield();
      else
        std::this_thread::sleep_for(std::chrono::microseconds(polls < 2000 ? 50 : 500));
    }
    work->wait();
  } catch (const std::exception& e) {
    const auto* c10e = dynamic_cast<const c10::Error*>(&e);
    TORCH_CHECK(false, who, "exchanging the call's arguments with the group's other ranks failed: ", c10e ? c10e->what_without_backtrace() : e.what(), legend);
  }
  AgreedCall call;
  const uint8_t* p = out.data_ptr<uint8_t>();
  for (int r = 0; r < world; ++r) call.ranks.push_back(unpack(p + r * bytes, world));
  const std::string why = disagreement(call.ranks);
  TORCH_CHECK(why.empty(), who, why, " (every rank of the group raises this; nothing was sent, and the group stays "
              "usable)", legend);
  return call;
}

}  // namespace purlin::backend
