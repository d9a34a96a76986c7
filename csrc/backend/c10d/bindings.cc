// bindings.cc — torch_purlin._C: the backend class, the Spec API, plan
// inspection and the env registry. The one file that includes torch/extension.h.
#include <torch/extension.h>
#include <torch/csrc/utils/pybind.h>

#include <pybind11/chrono.h>
#include <pybind11/stl.h>

#include <optional>

#include "backend/c10d/gil_released_holder.h"
#include "backend/c10d/purlin_backend.h"
#include "backend/group/protocol_table.h"
#include "common/env.h"
#include "snac/collectives.h"
#include "snac/plan.h"

namespace py = pybind11;
using namespace purlin;

namespace {

// Holds a Python callable make(store, rank, size, timeout, device_type) -> Backend; acquires the
// GIL to call and to release it.
backend::Fallback::GroupFactory wrap_factory(py::object fn) {
  if (fn.is_none()) return nullptr;
  // A backend may die during interpreter shutdown (groups never destroyed):
  // then the callable is leaked rather than touched without an interpreter.
  auto holder = std::shared_ptr<py::object>(new py::object(std::move(fn)), [](py::object* p) {
    if (!Py_IsInitialized() || _Py_IsFinalizing()) return;
    py::gil_scoped_acquire g;
    delete p;
  });
  return [holder](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, std::chrono::milliseconds timeout,
                  const std::string& device) {
    py::gil_scoped_acquire g;
    py::object o = (*holder)(store, rank, size, timeout, device);
    return o.cast<c10::intrusive_ptr<c10d::Backend>>();
  };
}

py::dict plan_to_dict(const snac::Plan& p) {
  py::list ops;
  for (const auto& op : p.ops) {
    py::list srcs;
    for (int k = 0; k < op.src_count; ++k) {
      const auto& s = p.srcs[op.src_begin + k];
      srcs.append(py::make_tuple(static_cast<int>(s.buf), s.rank, s.offset));
    }
    ops.append(py::dict(py::arg("code") = static_cast<int>(op.code), py::arg("flag") = static_cast<int>(op.flag),
                        py::arg("peer") = op.peer, py::arg("value") = op.value,
                        py::arg("dst") = py::make_tuple(static_cast<int>(op.dst.buf), op.dst.rank, op.dst.offset),
                        py::arg("n") = op.n, py::arg("srcs") = srcs, py::arg("phase") = std::string(op.phase)));
  }
  return py::dict(py::arg("rank") = p.rank, py::arg("world") = p.world, py::arg("rounds") = p.rounds,
                  py::arg("steps") = p.steps, py::arg("workspace_elems") = p.workspace_elems, py::arg("ops") = ops,
                  py::arg("text") = p.describe());
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "torch-purlin native core";

  py::enum_<RedOp>(m, "RedOp")
      .value("SUM", RedOp::Sum)
      .value("AVG", RedOp::Avg)
      .value("PRODUCT", RedOp::Product)
      .value("MIN", RedOp::Min)
      .value("MAX", RedOp::Max)
      .value("PREMUL_SUM", RedOp::PremulSum);
  py::enum_<snac::OpKind>(m, "OpKind").value("COPY", snac::OpKind::Copy).value("REDUCE", snac::OpKind::Reduce);

  // NOTE [spec bindings]: every constructor and builder takes named arguments; a copy Spec has no
  // reduce op (its `redop` reads None), a reduce Spec's defaults to SUM.
  py::class_<snac::Region>(m, "Region", "A 2-D strided view of a flat buffer, in elements: `rows` runs of `row_len` "
                                        "contiguous elements, run i starting at offset + i * stride.")
      .def(py::init([](int64_t offset, int64_t rows, int64_t row_len, int64_t stride) {
             return snac::Region{offset, rows, row_len, stride < 0 ? row_len : stride};
           }),
           py::arg("offset"), py::arg("rows"), py::arg("row_len"), py::arg("stride") = -1,
           "stride defaults to row_len (a contiguous region)")
      .def_readwrite("offset", &snac::Region::offset)
      .def_readwrite("rows", &snac::Region::rows)
      .def_readwrite("row_len", &snac::Region::row_len)
      .def_readwrite("stride", &snac::Region::stride)
      .def("numel", &snac::Region::numel)
      .def("__repr__", [](const snac::Region& r) {
        return "Region(offset=" + std::to_string(r.offset) + ", rows=" + std::to_string(r.rows) +
               ", row_len=" + std::to_string(r.row_len) + ", stride=" + std::to_string(r.stride) + ")";
      });
  py::class_<snac::Placement>(m, "Placement", "A region of one rank's input (a source) or output (a dest).")
      .def(py::init([](int rank, snac::Region region) { return snac::Placement{rank, region}; }), py::arg("rank"),
           py::arg("region"))
      .def_readwrite("rank", &snac::Placement::rank)
      .def_readwrite("region", &snac::Placement::region)
      .def("__repr__", [](const snac::Placement& p) {
        return "Placement(rank=" + std::to_string(p.rank) + ", " + py::repr(py::cast(p.region)).cast<std::string>() +
               ")";
      });
  py::class_<snac::Chunk>(m, "Chunk", "Elements read from `sources` and written to every one of `dests`, numbered "
                                      "row-major through each region (all of one element count).")
      .def(py::init([](std::vector<snac::Placement> s, std::vector<snac::Placement> d) {
             return snac::Chunk{std::move(s), std::move(d)};
           }),
           py::arg("sources"), py::arg("dests"))
      .def_readwrite("sources", &snac::Chunk::sources)
      .def_readwrite("dests", &snac::Chunk::dests)
      .def("numel", &snac::Chunk::numel);
  py::class_<snac::Spec>(m, "Spec", "A collective: chunks, copy or reduce, over `world` ranks (validated when made).")
      .def(py::init([](std::string name, snac::OpKind kind, int world, std::vector<snac::Chunk> chunks,
                       std::optional<RedOp> redop) {
             if (kind == snac::OpKind::Copy && redop)
               throw py::value_error("spec '" + name + "': a copy Spec takes no reduce op");
             snac::Spec s;
             s.name = std::move(name);
             s.kind = kind;
             s.redop = redop.value_or(RedOp::Sum);
             s.world = world;
             s.chunks = std::move(chunks);
             try {
               s.finalize();
             } catch (const std::exception& e) {
               throw py::value_error(e.what());
             }
             return s;
           }),
           py::arg("name"), py::arg("kind"), py::arg("world"), py::arg("chunks"), py::arg("redop") = py::none(),
           "kind: OpKind.COPY (each chunk has one source) or OpKind.REDUCE (dests get the reduction of every "
           "source by `redop`, SUM when omitted)")
      .def_readonly("name", &snac::Spec::name)
      .def_readonly("kind", &snac::Spec::kind)
      .def_property_readonly("redop",
                             [](const snac::Spec& s) -> std::optional<RedOp> {
                               if (s.kind == snac::OpKind::Copy) return std::nullopt;
                               return s.redop;
                             })
      .def_readonly("world", &snac::Spec::world)
      .def_readonly("chunks", &snac::Spec::chunks)
      .def_readonly("input_numel", &snac::Spec::input_numel)
      .def_readonly("output_numel", &snac::Spec::output_numel)
      .def("__repr__", [](const snac::Spec& s) {
        return "Spec(name='" + s.name + "', kind=" + (s.kind == snac::OpKind::Copy ? "COPY" : "REDUCE") +
               ", world=" + std::to_string(s.world) + ", chunks=" + std::to_string(s.chunks.size()) + ")";
      });

  auto specs = m.def_submodule("specs", "built-in collectives as Specs (sizes in elements)");
  specs.def("all_reduce", &snac::all_reduce, py::arg("world"), py::arg("n"), py::arg("op") = RedOp::Sum,
            "every rank: n in -> n out, reduced over all ranks");
  specs.def("reduce", &snac::reduce, py::arg("world"), py::arg("n"), py::arg("op"), py::arg("root"),
            "every rank: n in; root: n out, reduced over all ranks");
  specs.def("broadcast", &snac::broadcast, py::arg("world"), py::arg("n"), py::arg("root"),
            "root's n elements copied to every other rank");
  specs.def("all_gather", &snac::all_gather, py::arg("world"), py::arg("n"),
            "every rank: n in -> world*n out, rank r's block at r*n");
  specs.def("reduce_scatter", &snac::reduce_scatter, py::arg("world"), py::arg("n"), py::arg("op") = RedOp::Sum,
            "every rank: world*n in -> n out; rank r gets block r reduced over ranks");
  specs.def("all_to_all", &snac::all_to_all, py::arg("world"), py::arg("splits"),
            "splits[s][d] elements from rank s to rank d; inputs by destination, outputs by source");
  specs.def("gather", &snac::gather, py::arg("world"), py::arg("n"), py::arg("root"),
            "every rank: n in; root: world*n out");
  specs.def("scatter", &snac::scatter, py::arg("world"), py::arg("n"), py::arg("root"),
            "root: world*n in; every rank: n out");
  specs.def("barrier", &snac::barrier, py::arg("world"), "no data: the arrival handshake only");
  specs.def("interleaved_all_gather", &snac::interleaved_all_gather, py::arg("world"), py::arg("rows"),
            py::arg("row_len"), "output row i*world + r = rank r's row i");

  m.def(
      "make_plan",
      [](const snac::Spec& spec, int rank, int64_t slot_elems, int64_t align_elems, bool two_shot, bool direct_local,
         bool read_peer_inputs, bool push, bool write_peer_outputs) {
        snac::PlanOptions o;
        o.slot_elems = slot_elems;
        o.align_elems = align_elems;
        o.reduce_algo = two_shot ? snac::ReduceAlgo::TwoShot : snac::ReduceAlgo::OneShot;
        o.direct_local = direct_local;
        o.read_peer_inputs = read_peer_inputs;
        o.write_peer_outputs = write_peer_outputs;
        o.push = push;
        return plan_to_dict(snac::make_plan(spec, rank, o));
      },
      py::arg("spec"), py::arg("rank"), py::arg("slot_elems"), py::arg("align_elems") = 1,
      py::arg("two_shot") = false, py::arg("direct_local") = true, py::arg("read_peer_inputs") = false, py::arg("push") = false,
      py::arg("write_peer_outputs") = false);

  m.def("env_vars", []() {
    py::list out;
    for (const auto& v : env::registry()) out.append(py::make_tuple(v.name, v.default_value, v.meaning));
    return out;
  });
  // The registry with how each variable is classed (NOTE [settings across ranks]): (name, default,
  // meaning, audience "user" | "tuning", across "local" | "equal" | "combined").
  m.def("env_registry", []() {
    py::list out;
    for (const auto& v : env::registry()) {
      const char* across = v.across == env::Across::Equal ? "equal" : v.across == env::Across::Combined ? "combined"
                                                                                                        : "local";
      out.append(py::make_tuple(v.name, v.default_value, v.meaning, v.audience == env::Audience::User ? "user" : "tuning",
                                across));
    }
    return out;
  });
  m.def("env_retired", []() {
    py::list out;
    for (const auto& r : env::retired()) out.append(py::make_tuple(r.name, r.instead, r.fatal));
    return out;
  });

  // NOTE [protocol table]: bytes from which `op` runs on NCCL under `table` in
  // a group of `world` ranks (0: never), and a per-world byte list's value.
  m.def("nccl_table_from", [](const std::string& table, const std::string& op, int world) {
    return backend::NcclTable::parse(table, world).from(op);
  }, py::arg("table"), py::arg("op"), py::arg("world") = 2);
  m.def("bytes_for_world", [](const std::string& text, int world, const std::string& var) {
    return backend::bytes_for_world(text, world, var.c_str());
  }, py::arg("text"), py::arg("world"), py::arg("var") = "TORCH_PURLIN_CUDA_TWO_SHOT_BYTES");

  auto backend_cls =
      // NOTE [no GIL at the last reference] (gil_released_holder.h)
      py::class_<backend::PurlinBackend, c10d::Backend, backend::GilReleasedHolder<backend::PurlinBackend>>(
          m, "PurlinBackend");
  using PurlinOptions = backend::PurlinBackend::PurlinOptions;
  // NOTE [group settings]: settings are checked against the registry here, where the user names them.
  py::class_<PurlinOptions, c10d::Backend::Options, c10::intrusive_ptr<PurlinOptions>>(backend_cls, "Options")
      .def(py::init([](std::chrono::milliseconds timeout, std::map<std::string, std::string> settings) {
             try {
               env::Settings check(settings);
             } catch (const std::invalid_argument& e) {
               throw py::value_error(e.what());
             }
             return c10::make_intrusive<PurlinOptions>(timeout, std::move(settings));
           }),
           py::arg("timeout"), py::arg("settings") = std::map<std::string, std::string>{})
      .def_readonly("settings", &PurlinOptions::settings)
      .def("__deepcopy__",
           [](const PurlinOptions& self, py::dict) { return c10::make_intrusive<PurlinOptions>(self); });
  backend_cls
      // NOTE [group settings]: `settings` (a group's options), `global_ranks` (torch's
      // global_ranks_in_group) and `host_ranks` (the job's ranks on this host) make its GroupContext.
      // Collective (the members agree on their settings): the wait runs without the GIL.
      .def(py::init([](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                       std::chrono::milliseconds timeout, py::object make_fallback,
                       std::map<std::string, std::string> settings, std::vector<int> global_ranks, int host_ranks) {
             std::shared_ptr<backend::GroupContext> ctx;
             try {
               ctx = std::make_shared<backend::GroupContext>(
                   backend::GroupContext{env::Settings(settings), std::move(global_ranks), host_ranks});
             } catch (const std::invalid_argument& e) {
               throw py::value_error(e.what());
             }
             backend::Fallback::GroupFactory factory = wrap_factory(std::move(make_fallback));
             py::gil_scoped_release no_gil;
             return backend::GilReleasedHolder<backend::PurlinBackend>(c10::make_intrusive<backend::PurlinBackend>(
                 store, rank, size, timeout, std::move(factory), std::move(ctx)));
           }),
           py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"), py::arg("make_fallback"),
           py::arg("settings") = std::map<std::string, std::string>{}, py::arg("global_ranks") = std::vector<int>{},
           py::arg("host_ranks") = 0)
      .def_property_readonly("options", &backend::PurlinBackend::getBackendOptions)
      // NOTE [split groups] (split_group.cc): new_group() on a device-bound default group asks the
      // non-members' backend for a "no color" split; a purlin split involves no non-member.
      .def("perform_nocolor_split", [](backend::PurlinBackend&, const py::object& /*device*/) {})
      .def("counters", &backend::PurlinBackend::counters)
      .def(
          "empty",
          [](backend::PurlinBackend& self, std::vector<int64_t> sizes, at::ScalarType dtype, at::Device device) {
            return self.empty_symmetric(sizes, at::TensorOptions().dtype(dtype).device(device));
          },
          py::arg("sizes"), py::arg("dtype"), py::arg("device"))
      .def("last_launch",
           [](const backend::PurlinBackend& self) {
             auto [protocol, blocks, threads, overlapped] = self.last_launch();
             py::object sms = blocks < 0 ? py::none() : py::object(py::int_(blocks));  // -1: NCCL (not known)
             return py::dict(py::arg("protocol") = protocol, py::arg("blocks") = sms, py::arg("threads") = threads,
                             py::arg("overlapped") = overlapped);
           })
      .def("protocol_counts", &backend::PurlinBackend::protocol_counts)
      .def(
          "run_spec",
          [](backend::PurlinBackend& self, const snac::Spec& spec, at::Tensor input, at::Tensor output) {
            return self.run_spec(spec, input, output);
          },
          py::arg("spec"), py::arg("input"), py::arg("output"), py::call_guard<py::gil_scoped_release>());
}
