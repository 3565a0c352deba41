// The Python module's native part (`ckpt._ckpt`): checkpointers, states
// that point at existing buffers (numpy arrays, torch tensors) without
// copying, asynchronous save handles. The GIL is released while ckpt works.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ckpt/checkpointer.h"
#include "ckpt/communicator.h"
#include "ckpt/data_position.h"
#include "ckpt/interval.h"
#include "ckpt/peer.h"
#include "ckpt/state.h"
#include "ckpt/synthetic.h"
#include "log_bridge.h"

namespace py = pybind11;

namespace {

// The Python classes of ckpt/errors.py, by status code (set by the package's
// __init__ through _set_error_classes before anything can fail).
std::map<int, py::handle>& ErrorClasses() {
  static auto* classes = new std::map<int, py::handle>();  // outlives the interpreter's teardown
  return *classes;
}

[[noreturn]] void Raise(absl::StatusCode code, const std::string& message) {
  auto& classes = ErrorClasses();
  auto it = classes.find(static_cast<int>(code));
  if (it == classes.end()) it = classes.find(static_cast<int>(absl::StatusCode::kUnknown));
  if (it == classes.end()) throw std::runtime_error(message);
  PyErr_SetString(it->second.ptr(), message.c_str());
  throw py::error_already_set();
}

void Check(const absl::Status& s) {
  if (!s.ok()) Raise(s.code(), std::string(s.message()));
}

// The library's own table: every dtype (fp8 included) and its aliases,
// numpy's names among them.
ckpt::DType ParseDType(const std::string& name) {
  auto dt = ckpt::ParseDType(name);
  if (!dt) Raise(absl::StatusCode::kInvalidArgument, "unsupported dtype '" + name + "'");
  return *dt;
}

// A State plus what keeps its buffers alive and the blobs it will receive.
// Where the buffer `owner` holds its bytes now, and how many: by the buffer
// protocol (numpy arrays), or data_ptr() and numel() * element_size()
// (torch tensors); nullopt when the owner says neither.
std::optional<std::pair<uintptr_t, int64_t>> BufferOf(const py::object& owner, bool* readonly = nullptr) {
  if (py::isinstance<py::buffer>(owner)) {
    py::buffer_info info = owner.cast<py::buffer>().request();
    if (readonly != nullptr) *readonly = info.readonly;
    return std::make_pair(reinterpret_cast<uintptr_t>(info.ptr),
                          static_cast<int64_t>(info.size) * static_cast<int64_t>(info.itemsize));
  }
  if (py::hasattr(owner, "numel") && py::hasattr(owner, "element_size") && py::hasattr(owner, "data_ptr")) {
    return std::make_pair(owner.attr("data_ptr")().cast<uintptr_t>(),
                          owner.attr("numel")().cast<int64_t>() * owner.attr("element_size")().cast<int64_t>());
  }
  return std::nullopt;
}

struct PyState {
  ckpt::State state;
  std::vector<py::object> owners;
  // A shard whose owner reports its buffer: where its box lies in it. A
  // numpy array resized with refcheck=False (or a tensor resized in place)
  // moves or frees its bytes, whatever references are held; a save or
  // load checks first that every such buffer still holds the box.
  struct Placed {
    std::string name;
    size_t owner = 0;  // index into owners
    uintptr_t data = 0;
    int64_t need = 0;
  };
  std::vector<Placed> placed;
  std::vector<std::string> read_only;  // shards a load must not write
  std::map<std::string, std::unique_ptr<std::string>> blob_outs;
  std::vector<std::unique_ptr<std::string>> blob_ins;

  // REQUIRES: the GIL.
  void CheckBuffersInPlace() const {
    for (const Placed& p : placed) {
      auto now = BufferOf(owners[p.owner]);
      if (!now || p.data < now->first || p.need > now->second ||
          p.data - now->first > static_cast<uintptr_t>(now->second - p.need)) {
        Raise(absl::StatusCode::kFailedPrecondition,
              "tensor '" + p.name +
                  "': its buffer was resized or moved after it was added to the state (the box no longer lies "
                  "in it); add it again");
      }
    }
  }
};

// A Communicator implemented in Python (e.g. over torch.distributed). Called
// from ckpt's threads with the GIL released; each call takes the GIL.
class PyCommunicator : public ckpt::Communicator {
 public:
  PyCommunicator(int rank, int size) : rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  absl::StatusOr<std::vector<std::string>> Gather(std::string_view mine, double timeout_s) override {
    return Call<std::vector<std::string>>("gather", py::bytes(std::string(mine)), timeout_s);
  }
  absl::StatusOr<std::string> Scatter(const std::vector<std::string>& from_leader, double timeout_s) override {
    py::gil_scoped_acquire gil;
    py::list l;
    for (const std::string& x : from_leader) l.append(py::bytes(x));
    return CallLocked<std::string>("scatter", l, timeout_s);
  }
  absl::StatusOr<std::string> Broadcast(std::string_view from_leader, double timeout_s) override {
    return Call<std::string>("broadcast", py::bytes(std::string(from_leader)), timeout_s);
  }
  absl::Status Barrier(double timeout_s) override {
    py::gil_scoped_acquire gil;
    py::function f = py::get_override(static_cast<const ckpt::Communicator*>(this), "barrier");
    if (!f) return absl::UnimplementedError("the communicator has no barrier()");
    try {
      f(timeout_s);
    } catch (py::error_already_set& e) {
      return absl::UnavailableError(std::string("barrier: ") + e.what());
    }
    return absl::OkStatus();
  }

 private:
  template <typename T, typename... Args>
  absl::StatusOr<T> Call(const char* name, Args&&... args) {
    py::gil_scoped_acquire gil;
    return CallLocked<T>(name, std::forward<Args>(args)...);
  }
  template <typename T, typename... Args>
  absl::StatusOr<T> CallLocked(const char* name, Args&&... args) {
    py::function f = py::get_override(static_cast<const ckpt::Communicator*>(this), name);
    if (!f) return absl::UnimplementedError(std::string("the communicator has no ") + name + "()");
    try {
      return f(std::forward<Args>(args)...).template cast<T>();
    } catch (py::error_already_set& e) {
      return absl::UnavailableError(std::string(name) + ": " + e.what());
    } catch (py::cast_error& e) {
      return absl::InvalidArgumentError(std::string(name) + " returned the wrong type: " + e.what());
    }
  }
  int rank_, size_;
};

// The buffer checks of a shard added to a Python state; `add` adds it.
template <typename Add>
void AddPlaced(PyState& s, const ckpt::TensorSpec& spec, const ckpt::Box& box, uintptr_t data, py::object owner,
               int64_t nbytes, bool writable, Add add) {
  // The owner says how large the buffer is: numpy arrays and other buffers
  // by the buffer protocol, torch tensors by numel() and element_size().
  bool readonly = false;
  const auto buffer = BufferOf(owner, &readonly);
  if (nbytes < 0) {
    if (!buffer) {
      Raise(absl::StatusCode::kInvalidArgument,
            "tensor '" + spec.fqn + "': pass nbytes (the size of the buffer at data_ptr) or an owner that knows it");
    }
    nbytes = buffer->second;
    writable = writable && !readonly;
  }
  const int64_t need = box.Volume() * static_cast<int64_t>(ckpt::DTypeSize(spec.dtype));
  if (need > nbytes) {
    Raise(absl::StatusCode::kInvalidArgument,
          "tensor '" + spec.fqn + "': box " + box.ToString() + " of " + std::string(ckpt::DTypeName(spec.dtype)) +
              " needs " + std::to_string(need) + " bytes, the buffer holds " + std::to_string(nbytes));
  }
  Check(add());
  if (buffer) s.placed.push_back(PyState::Placed{spec.fqn, s.owners.size(), data, need});
  s.owners.push_back(std::move(owner));
  if (!writable) s.read_only.push_back(spec.fqn);
}

// A layout from Python: placements are None (replicate), a tensor dimension
// (shard evenly) or (dimension, cuts).
ckpt::TensorLayout PyLayout(const std::string& name, const std::string& dtype, const std::vector<int64_t>& shape,
                            const py::list& placements, int owner_dim, int64_t owner_index,
                            const std::vector<int>& split_order) {
  ckpt::TensorLayout l;
  l.spec = ckpt::TensorSpec{name, ParseDType(dtype), ckpt::Shape(shape.begin(), shape.end())};
  Check(ckpt::CheckTensorSpec(l.spec));
  for (const py::handle& p : placements) {
    if (p.is_none()) {
      l.placements.push_back(ckpt::Placement::Replicate());
    } else if (py::isinstance<py::int_>(p)) {
      l.placements.push_back(ckpt::Placement::Shard(p.cast<int>()));
    } else if (py::isinstance<py::tuple>(p) && py::len(p) == 2) {
      auto t = p.cast<py::tuple>();
      ckpt::Placement shard = ckpt::Placement::Shard(t[0].cast<int>());
      shard.boundaries = t[1].cast<std::vector<int64_t>>();
      l.placements.push_back(std::move(shard));
    } else {
      Raise(absl::StatusCode::kInvalidArgument,
            "tensor '" + name + "': a placement is None, a tensor dimension, or (dimension, cuts)");
    }
  }
  l.split_order = split_order;
  l.owner_dim = owner_dim;
  l.owner_index = owner_index;
  return l;
}

ckpt::SaveLevel ParseLevel(const std::string& level) {
  if (level == "durable") return ckpt::SaveLevel::kDurable;
  if (level == "memory") return ckpt::SaveLevel::kMemory;
  Raise(absl::StatusCode::kInvalidArgument, "level must be 'durable' or 'memory', not '" + level + "'");
}

// The error classes, dtype sizes and the Communicator a trainer implements.
void BindBasics(py::module_& m) {
  m.doc() = "ckpt: asynchronous sharded checkpoints (native part)";
  m.attr("LATEST") = ckpt::kLatestStep;
  m.def(
      "_set_error_classes",
      [](py::dict classes) {
        for (auto [code, cls] : classes) ErrorClasses()[code.cast<int>()] = cls.inc_ref();
      },
      "Called once by the package: status code -> exception class.");
  m.def(
      "dtype_size", [](const std::string& name) { return ckpt::DTypeSize(ParseDType(name)); }, py::arg("dtype"),
      "Bytes per element of a dtype name (any the library knows: f32, bfloat16, float8_e4m3fn, ...).");

  py::class_<ckpt::Communicator, PyCommunicator, std::shared_ptr<ckpt::Communicator>>(m, "Communicator")
      .def(py::init<int, int>(), py::arg("rank"), py::arg("size"),
           "Subclass and define gather(bytes, timeout) -> list[bytes] (rank 0; [] elsewhere), "
           "scatter(list[bytes], timeout) -> bytes, broadcast(bytes, timeout) -> bytes, barrier(timeout).")
      .def_property_readonly("rank", &ckpt::Communicator::rank)
      .def_property_readonly("size", &ckpt::Communicator::size);
}

// IntervalPolicy: when to save next.
void BindIntervalPolicy(py::module_& m) {
  py::class_<ckpt::IntervalPolicy>(m, "IntervalPolicy")
      .def(py::init([](double mtbf_s, double restart_s, double stall_s, double write_s, double min_interval_s,
                       double max_interval_s, bool two_level, double memory_stall_s, double memory_write_s,
                       double memory_restart_s, double survivable) {
             ckpt::IntervalPolicyOptions o;
             o.mtbf_s = mtbf_s;
             o.restart_s = restart_s;
             o.stall_s = stall_s;
             o.write_s = write_s;
             o.min_interval_s = min_interval_s;
             o.max_interval_s = max_interval_s;
             o.two_level = two_level;
             o.memory_stall_s = memory_stall_s;
             o.memory_write_s = memory_write_s;
             o.memory_restart_s = memory_restart_s;
             o.survivable = survivable;
             return std::make_unique<ckpt::IntervalPolicy>(o);
           }),
           py::arg("mtbf_s") = 24 * 3600.0, py::arg("restart_s") = 600.0, py::arg("stall_s") = 1.0,
           py::arg("write_s") = 30.0, py::arg("min_interval_s") = 60.0, py::arg("max_interval_s") = 24 * 3600.0,
           py::arg("two_level") = false, py::arg("memory_stall_s") = 0.2, py::arg("memory_write_s") = 2.0,
           py::arg("memory_restart_s") = 60.0, py::arg("survivable") = 0.9,
           "How often to checkpoint, from the failure rate and the measured save costs (docs/interval.md); "
           "with two_level, memory and durable saves.")
      .def("should_checkpoint", &ckpt::IntervalPolicy::ShouldCheckpoint, py::arg("now_s"),
           py::arg("previous_durable") = true)
      .def(
          "next_level",
          [](ckpt::IntervalPolicy& p, double now_s, bool previous_committed) -> std::string {
            const std::optional<ckpt::SaveLevel> level = p.NextLevel(now_s, previous_committed);
            return level ? std::string(ckpt::SaveLevelName(*level)) : std::string();
          },
          py::arg("now_s"), py::arg("previous_committed") = true,
          "Two levels: 'memory', 'durable' or '' (no save now).")
      .def(
          "save_started",
          [](ckpt::IntervalPolicy& p, double now_s, const std::string& level) {
            if (level != "memory" && level != "durable") throw py::value_error("level is 'memory' or 'durable'");
            p.SaveStarted(now_s, level == "memory" ? ckpt::SaveLevel::kMemory : ckpt::SaveLevel::kDurable);
          },
          py::arg("now_s"), py::arg("level") = "durable")
      .def(
          "record_save",
          [](ckpt::IntervalPolicy& p, const ckpt::SaveHandle& h, const std::string& level) {
            if (level.empty()) return p.RecordSave(h.Stats());
            if (level != "memory" && level != "durable") throw py::value_error("level is 'memory' or 'durable'");
            p.RecordSave(h.Stats(), level == "memory" ? ckpt::SaveLevel::kMemory : ckpt::SaveLevel::kDurable);
          },
          py::arg("handle"), py::arg("level") = "",
          "Folds a finished save's measured stall and write time into the estimates (of `level`'s, with two "
          "levels).")
      .def("set_mtbf", &ckpt::IntervalPolicy::SetMtbf)
      .def_property_readonly("durable_every", &ckpt::IntervalPolicy::durable_every)
      .def_property_readonly("interval_s", &ckpt::IntervalPolicy::interval_s)
      .def_property_readonly("stall_s", &ckpt::IntervalPolicy::stall_s)
      .def_property_readonly("write_s", &ckpt::IntervalPolicy::write_s);
}

// The synthetic state of `ckpt synth`.
void BindSynthetic(py::module_& m) {
  // The deterministic transformer-like state of `ckpt synth`, for comparing
  // other savers on the same bytes (benchmarks/run).
  m.def(
      "synthetic_tensors",
      [](int64_t params, const std::string& dtype, int layers) {
        ckpt::SyntheticOptions o;
        o.params = params;
        o.dtype = ParseDType(dtype);
        o.layers = layers;
        auto mesh = ckpt::Mesh::Parse("dp=1");
        Check(mesh.status());
        auto model = ckpt::BuildSyntheticModel(o, *mesh);
        Check(model.status());
        std::vector<std::pair<std::string, std::vector<int64_t>>> out;
        for (const ckpt::TensorLayout& t : model->tensors) {
          out.emplace_back(t.spec.fqn, std::vector<int64_t>(t.spec.shape.begin(), t.spec.shape.end()));
        }
        return out;
      },
      py::arg("params"), py::arg("dtype") = "bfloat16", py::arg("layers") = 0,
      "(name, shape) of each tensor of the synthetic model of `ckpt synth --params`.");
  m.def(
      "fill_synthetic",
      [](const std::string& name, const std::string& dtype, std::vector<int64_t> shape, uint64_t seed, uintptr_t data) {
        ckpt::TensorSpec spec{name, ParseDType(dtype), ckpt::Shape(shape.begin(), shape.end())};
        py::gil_scoped_release release;
        ckpt::FillSynthetic(spec, ckpt::Box::Whole(spec.shape), seed, reinterpret_cast<void*>(data));
      },
      py::arg("name"), py::arg("dtype"), py::arg("shape"), py::arg("seed"), py::arg("data_ptr"),
      "Writes the synthetic values of a whole tensor into the packed buffer at data_ptr.");
}

// State: the tensors and blobs a save writes or a load fills.
void BindState(py::module_& m) {
  py::class_<PyState>(m, "State")
      .def(py::init<>())
      .def(
          "add_shard",
          [](PyState& s, const std::string& name, const std::string& dtype, std::vector<int64_t> global_shape,
             std::vector<int64_t> offsets, std::vector<int64_t> sizes, uintptr_t data, py::object owner, int64_t nbytes,
             bool writable) {
            if (offsets.size() != global_shape.size() || sizes.size() != global_shape.size()) {
              Raise(absl::StatusCode::kInvalidArgument,
                    "tensor '" + name + "': shape, offsets and sizes need one entry per dimension");
            }
            ckpt::TensorSpec spec{name, ParseDType(dtype), ckpt::Shape(global_shape.begin(), global_shape.end())};
            ckpt::Box box;
            box.offsets.assign(offsets.begin(), offsets.end());
            box.sizes.assign(sizes.begin(), sizes.end());
            Check(ckpt::CheckTensorSpec(spec));
            AddPlaced(s, spec, box, data, std::move(owner), nbytes, writable,
                      [&] { return s.state.AddShard(spec, box, reinterpret_cast<void*>(data)); });
          },
          py::arg("name"), py::arg("dtype"), py::arg("global_shape"), py::arg("offsets"), py::arg("sizes"),
          py::arg("data_ptr"), py::arg("owner"), py::arg("nbytes") = -1, py::arg("writable") = true,
          "A packed row-major buffer at data_ptr holding the box [offsets, offsets+sizes) of a tensor; "
          "`owner` is kept alive with the state. The box must fit the buffer: `nbytes`, or what the owner "
          "reports (buffer protocol, or numel() * element_size()). A state with a read-only shard can be "
          "saved but not loaded into.")
      .def(
          "set_mesh",
          [](PyState& s, std::vector<std::string> names, std::vector<int64_t> sizes, int64_t rank) {
            if (names.size() != sizes.size()) {
              Raise(absl::StatusCode::kInvalidArgument, "set_mesh: one size per dimension name");
            }
            ckpt::Mesh mesh;
            mesh.names = std::move(names);
            mesh.sizes = std::move(sizes);
            Check(s.state.SetMesh(mesh, rank));
          },
          py::arg("names"), py::arg("sizes"), py::arg("rank"),
          "The mesh the state's layouts are over (dimension names and sizes, row-major rank order) and this "
          "rank's place in it; once, before add_layout.")
      .def(
          "layout_box",
          [](const PyState& s, const std::string& name, const std::string& dtype, std::vector<int64_t> global_shape,
             py::list placements, int owner_dim, int64_t owner_index, std::vector<int> split_order) -> py::object {
            if (!s.state.mesh()) Raise(absl::StatusCode::kFailedPrecondition, "layout_box: the state has no mesh");
            const ckpt::TensorLayout layout =
                PyLayout(name, dtype, global_shape, placements, owner_dim, owner_index, split_order);
            auto box = ckpt::RankBox(layout, *s.state.mesh(), s.state.mesh_rank());
            Check(box.status());
            if (!box->has_value()) return py::none();
            const ckpt::Box& b = **box;
            return py::make_tuple(std::vector<int64_t>(b.offsets.begin(), b.offsets.end()),
                                  std::vector<int64_t>(b.sizes.begin(), b.sizes.end()));
          },
          py::arg("name"), py::arg("dtype"), py::arg("global_shape"), py::arg("placements"), py::arg("owner_dim") = -1,
          py::arg("owner_index") = 0, py::arg("split_order") = std::vector<int>{},
          "(offsets, sizes) of the box this rank holds of the layout, or None; declares nothing.")
      .def(
          "add_layout",
          [](PyState& s, const std::string& name, const std::string& dtype, std::vector<int64_t> global_shape,
             py::list placements, uintptr_t data, py::object owner, int64_t nbytes, bool writable, int owner_dim,
             int64_t owner_index, std::vector<int> split_order) {
            if (!s.state.mesh()) {
              Raise(absl::StatusCode::kFailedPrecondition,
                    "tensor '" + name + "': add_layout needs the mesh first (set_mesh)");
            }
            const ckpt::TensorLayout layout =
                PyLayout(name, dtype, global_shape, placements, owner_dim, owner_index, split_order);
            auto box = ckpt::RankBox(layout, *s.state.mesh(), s.state.mesh_rank());
            Check(box.status());
            if (!box->has_value() || (**box).Empty()) {
              Check(s.state.AddLayout(layout, reinterpret_cast<void*>(data)));
              return;
            }
            AddPlaced(s, layout.spec, **box, data, std::move(owner), nbytes, writable,
                      [&] { return s.state.AddLayout(layout, reinterpret_cast<void*>(data)); });
          },
          py::arg("name"), py::arg("dtype"), py::arg("global_shape"), py::arg("placements"), py::arg("data_ptr") = 0,
          py::arg("owner") = py::none(), py::arg("nbytes") = -1, py::arg("writable") = true, py::arg("owner_dim") = -1,
          py::arg("owner_index") = 0, py::arg("split_order") = std::vector<int>{},
          "Declares a tensor by its layout over the mesh and adds the box this rank holds (layout_box), packed "
          "row-major at data_ptr. `placements` has one entry per mesh dimension: None (replicated), a tensor "
          "dimension (split into even parts along it) or (dimension, cuts). Every rank declares every tensor, "
          "in the same order; a state whose tensors all have layouts is saved without any rank sending its "
          "chunk list.")
      .def(
          "add_blob",
          [](PyState& s, const std::string& name, py::bytes data, bool global) {
            s.blob_ins.push_back(std::make_unique<std::string>(data));
            const std::string& b = *s.blob_ins.back();
            Check(
                s.state.AddBlob(name, b.data(), b.size(), global ? ckpt::BlobScope::kGlobal : ckpt::BlobScope::kRank));
          },
          py::arg("name"), py::arg("data"), py::arg("global_") = false)
      .def(
          "want_blob",
          [](PyState& s, const std::string& name, bool global) {
            auto& out = s.blob_outs[name];
            out = std::make_unique<std::string>();
            Check(s.state.AddBlobOut(name, out.get(), global ? ckpt::BlobScope::kGlobal : ckpt::BlobScope::kRank));
          },
          py::arg("name"), py::arg("global_") = false, "Asks a load to fill this blob; read it with blob().")
      .def("blob", [](const PyState& s, const std::string& name) {
        auto it = s.blob_outs.find(name);
        if (it == s.blob_outs.end()) Raise(absl::StatusCode::kNotFound, "no blob '" + name + "' was asked for");
        return py::bytes(*it->second);
      });
}

// PeerMemory: the memory level's store.
void BindPeerMemory(py::module_& m) {
  py::class_<ckpt::PeerMemory, std::shared_ptr<ckpt::PeerMemory>>(m, "PeerMemory")
      .def(py::init([](const std::string& token, const std::string& domain, int64_t budget_bytes,
                       const std::string& listen) {
             ckpt::PeerMemoryOptions o;
             o.token = token;
             o.domain = domain;
             o.budget_bytes = budget_bytes;
             o.listen = listen;
             absl::StatusOr<std::shared_ptr<ckpt::PeerMemory>> pm;
             {
               py::gil_scoped_release release;
               pm = ckpt::PeerMemory::Start(o);
             }
             Check(pm.status());
             return std::move(pm).value();
           }),
           py::arg("token"), py::arg("domain") = "", py::arg("budget_bytes") = int64_t{4} << 30,
           py::arg("listen") = "127.0.0.1:0",
           "This process's part of the memory level: a bounded store and the TCP server through which "
           "peers place and read copies (every connection proves the job's token). domain: the failure "
           "domain (default: the host name).")
      .def_property_readonly("endpoint", &ckpt::PeerMemory::endpoint)
      .def_property_readonly("domain", &ckpt::PeerMemory::domain)
      .def(
          "stats",
          [](const ckpt::PeerMemory& pm) {
            const ckpt::PeerMemoryStats st = pm.Stats();
            py::dict d;
            d["budget_bytes"] = st.budget_bytes;
            d["held_bytes"] = st.held_bytes;
            d["peak_bytes"] = st.peak_bytes;
            d["files"] = st.files;
            d["refused"] = st.refused;
            d["bytes_received"] = st.bytes_received;
            d["bytes_served"] = st.bytes_served;
            d["spare_bytes"] = st.spare_bytes;
            return d;
          },
          "Memory held, its peak, files refused for the budget, bytes received from and served to peers.")
      .def(
          "holdings",
          [](const ckpt::PeerMemory& pm) {
            py::list out;
            for (const ckpt::PeerHolding& h : pm.Holdings()) out.append(py::make_tuple(h.step, h.generation, h.owners));
            return out;
          },
          "(step, generation, owner ranks) of the steps whose files this process holds.")
      .def("drop_steps_except", &ckpt::PeerMemory::DropStepsExcept, py::arg("step"),
           "Forgets every step but `step` (-1: all).");
  m.def(
      "place_replicas",
      [](const std::vector<std::string>& domains, int replicas) {
        auto p = ckpt::PlaceReplicas(domains, replicas);
        Check(p.status());
        return std::move(p).value();
      },
      py::arg("domains"), py::arg("replicas") = 1,
      "For each rank (by its failure domain), the ranks whose memory holds its copies: `replicas` of them, "
      "each in another domain, spread evenly.");
  m.def(
      "place_erasure",
      [](const std::vector<std::string>& domains, int k, int m) {
        auto p = ckpt::PlaceErasure(domains, k, m);
        Check(p.status());
        return std::move(p).value();
      },
      py::arg("domains"), py::arg("k") = 4, py::arg("m") = 2,
      "For each rank (by its failure domain), the k + m ranks whose memory holds piece j of its erasure-coded "
      "files (k data, m parity), each in another domain, piece 0 the rank itself.");
}

// SaveHandle: a save in flight.
void BindSaveHandle(py::module_& m) {
  py::class_<ckpt::SaveHandle>(m, "SaveHandle")
      .def(
          "wait",
          [](const ckpt::SaveHandle& h) {
            absl::Status s;
            {
              py::gil_scoped_release release;
              s = h.Wait();
            }
            Check(s);
          },
          "Blocks until the step is committed; raises if it failed.")
      .def("done", &ckpt::SaveHandle::Done)
      .def_property_readonly("stall_s", [](const ckpt::SaveHandle& h) { return h.Stats().stall_s; })
      .def_property_readonly("commit_s", [](const ckpt::SaveHandle& h) { return h.Stats().commit_s; })
      .def_property_readonly("bytes_stored", [](const ckpt::SaveHandle& h) { return h.Stats().bytes_stored; })
      .def_property_readonly("save_id", [](const ckpt::SaveHandle& h) { return h.Stats().save_id; });
}

// The data position (ckpt/data_position.h); ckpt.torch.DataPosition wraps it.
void BindDataPosition(py::module_& m) {
  py::class_<ckpt::DataPosition>(m, "DataPosition")
      .def(py::init([](int64_t size, int64_t batch_size, uint64_t seed, bool shuffle) {
             if (size < 1 || batch_size < 1) {
               Raise(absl::StatusCode::kInvalidArgument, "a data position needs size >= 1 and batch_size >= 1, not " +
                                                             std::to_string(size) + ", " + std::to_string(batch_size));
             }
             return ckpt::DataPosition(size, batch_size, seed, shuffle);
           }),
           py::arg("size"), py::arg("batch_size"), py::arg("seed") = 0, py::arg("shuffle") = true)
      .def_property_readonly("size", &ckpt::DataPosition::size)
      .def_property_readonly("batch_size", &ckpt::DataPosition::batch_size)
      .def_property_readonly("seed", &ckpt::DataPosition::seed)
      .def_property_readonly("shuffle", &ckpt::DataPosition::shuffle)
      .def_property_readonly("epoch", &ckpt::DataPosition::epoch)
      .def_property_readonly("consumed", &ckpt::DataPosition::consumed)
      .def("index_at", &ckpt::DataPosition::IndexAt, py::arg("epoch"), py::arg("position"))
      .def("slice", &ckpt::DataPosition::Slice, py::arg("position"), py::arg("count"))
      .def("batch", &ckpt::DataPosition::Batch, py::arg("rank"), py::arg("world"))
      .def("advance", &ckpt::DataPosition::Advance, py::arg("world"))
      .def("encode", &ckpt::DataPosition::Encode)
      .def("restore", [](ckpt::DataPosition& p, const std::string& record) { Check(p.Restore(record)); });
}

// Checkpointer: saves and loads of one rank.
void BindCheckpointer(py::module_& m) {
  py::class_<ckpt::Checkpointer>(m, "Checkpointer")
      .def(
          py::init([](const std::string& uri, int rank, int world_size, const std::string& codec, int keep_last,
                      int64_t staging_bytes, bool direct_io, std::shared_ptr<ckpt::Communicator> communicator,
                      int staging_threads, std::shared_ptr<ckpt::PeerMemory> memory,
                      std::vector<std::string> memory_replicas, std::vector<std::vector<std::string>> memory_holders,
                      std::vector<std::string> memory_peers, std::shared_ptr<ckpt::PeerMemory> exchange_memory,
                      double cpu_budget, const std::string& background, double memory_send_bytes_per_s, int delta_chain,
                      double delta_rebase_ratio, int64_t keep_within, const std::string& memory_erasure) {
            ckpt::CheckpointerOptions o;
            o.uri = uri;
            o.rank = rank;
            o.world_size = world_size;
            if (communicator) {
              o.communicator = communicator;
              o.rank = communicator->rank();
              o.world_size = communicator->size();
            }
            auto c = ckpt::ParseCodec(codec);
            if (!c) Raise(absl::StatusCode::kInvalidArgument, "codec must be " + ckpt::CodecChoices());
            o.codec = *c;
            o.retention.keep_last = keep_last;
            if (keep_within < 0) Raise(absl::StatusCode::kInvalidArgument, "keep_within must be >= 0");
            o.retention.keep_within = keep_within;
            if (delta_chain < 0 || !(delta_rebase_ratio > 0)) {
              Raise(absl::StatusCode::kInvalidArgument, "delta_chain must be >= 0 and delta_rebase_ratio > 0");
            }
            o.delta.chain = delta_chain;
            o.delta.rebase_ratio = delta_rebase_ratio;
            o.engine_options.staging_bytes = static_cast<size_t>(staging_bytes);
            if (staging_threads < 0) Raise(absl::StatusCode::kInvalidArgument, "staging_threads must be >= 0");
            o.engine_options.staging_threads = staging_threads;
            o.engine_options.cpu_budget = cpu_budget;
            // The background threads' CPU policy: "batch" (nice 10 and
            // SCHED_BATCH), "idle" (SCHED_IDLE) or "normal" (the caller's).
            if (background != "batch" && background != "idle" && background != "normal") {
              Raise(absl::StatusCode::kInvalidArgument, "background must be \"batch\", \"idle\" or \"normal\"");
            }
            o.engine_options.background_idle = background == "idle";
            if (background == "normal") o.engine_options.background_nice = 0;
            o.direct_io = direct_io;
            if (memory) {
              // The memory level: this rank's files go to `memory_replicas`;
              // rank k's files of a save are read from memory_holders[k]
              // (every peer when that is not given).
              // With memory_erasure "K+M", memory_replicas are the holders of
              // pieces 1 .. K+M-1 (piece 0 stays in `memory`).
              ckpt::PeerRoute route;
              if (!memory_erasure.empty()) {
                char extra = 0;
                if (std::sscanf(memory_erasure.c_str(), "%d+%d%c", &route.erasure_k, &route.erasure_m, &extra) != 2) {
                  Raise(absl::StatusCode::kInvalidArgument, "memory_erasure wants \"K+M\", e.g. \"4+2\"");
                }
              }
              route.replicas = std::move(memory_replicas);
              route.peers = memory_peers;
              route.send_bytes_per_s = memory_send_bytes_per_s;
              route.holders = [holders = std::move(memory_holders), peers = std::move(memory_peers)](
                                  int64_t, int owner) -> std::vector<std::string> {
                if (owner >= 0 && static_cast<size_t>(owner) < holders.size()) return holders[owner];
                return peers;
              };
              auto storage = ckpt::OpenPeerStorage(memory, std::move(route));
              Check(storage.status());
              o.memory_storage = std::move(storage).value();
            }
            if (exchange_memory && communicator) {
              // Cooperative loads: the ranks pass each other the pieces
              // they read (a collective: every rank constructs together).
              absl::StatusOr<std::shared_ptr<ckpt::LoadExchange>> ex;
              {
                py::gil_scoped_release release;
                ex = ckpt::OpenLoadExchange(exchange_memory, *communicator, o.collective_timeout_s);
              }
              Check(ex.status());
              o.load_exchange = std::move(ex).value();
            }
            absl::StatusOr<std::unique_ptr<ckpt::Checkpointer>> cp;
            {
              py::gil_scoped_release release;
              cp = ckpt::Checkpointer::Open(o);
            }
            Check(cp.status());
            return std::move(cp).value();
          }),
          py::arg("uri"), py::arg("rank") = 0, py::arg("world_size") = 1, py::arg("codec") = "none",
          py::arg("keep_last") = 0, py::arg("staging_bytes") = int64_t{256} << 20, py::arg("direct_io") = true,
          py::arg("communicator") = nullptr, py::arg("staging_threads") = 0, py::arg("memory") = nullptr,
          py::arg("memory_replicas") = std::vector<std::string>{},
          py::arg("memory_holders") = std::vector<std::vector<std::string>>{},
          py::arg("memory_peers") = std::vector<std::string>{}, py::arg("exchange_memory") = nullptr,
          py::arg("cpu_budget") = 0.0, py::arg("background") = "batch", py::arg("memory_send_bytes_per_s") = 0.0,
          py::arg("delta_chain") = 0, py::arg("delta_rebase_ratio") = 0.9, py::arg("keep_within") = 0,
          py::arg("memory_erasure") = "", py::keep_alive<1, 9>())
      .def(
          "save",
          [](ckpt::Checkpointer& cp, int64_t step, PyState& state, std::map<std::string, std::string> metadata,
             bool allow_older_step, uint64_t save_id, const std::string& level) {
            ckpt::SaveOptions so;
            so.level = ParseLevel(level);
            so.metadata = std::move(metadata);
            so.allow_older_step = allow_older_step;
            so.save_id = save_id;
            state.CheckBuffersInPlace();
            absl::StatusOr<ckpt::SaveHandle> h;
            {
              py::gil_scoped_release release;
              h = cp.Save(step, state.state, so);
            }
            Check(h.status());
            return std::move(h).value();
          },
          py::arg("step"), py::arg("state"), py::arg("metadata") = std::map<std::string, std::string>{},
          py::arg("allow_older_step") = false, py::arg("save_id") = uint64_t{0}, py::arg("level") = "durable",
          "Copies the state's buffers and returns a SaveHandle; the rest happens in the background. "
          "metadata is recorded in the manifest; allow_older_step saves a step at or below the latest; "
          "save_id (nonzero, the same on every rank, unique per attempt) ties the ranks of one save "
          "together when they have no communicator. level='memory' saves into the memory level (peers' "
          "memory, given by the constructor's memory=...).")
      .def(
          "load",
          [](ckpt::Checkpointer& cp, PyState& state, int64_t step, const std::string& level, bool stats,
             bool cooperative) -> py::object {
            if (!state.read_only.empty()) {
              Raise(absl::StatusCode::kInvalidArgument,
                    "tensor '" + state.read_only.front() +
                        "': its buffer is read-only; a load writes into the buffers it is given");
            }
            ckpt::LoadOptions lo;
            lo.level = ParseLevel(level);
            lo.cooperative = cooperative;
            state.CheckBuffersInPlace();
            absl::StatusOr<ckpt::LoadStats> st;
            {
              py::gil_scoped_release release;
              st = cp.Load(state.state, step, lo);
            }
            Check(st.status());
            if (!stats) return py::int_(st->step);
            py::dict d;
            d["step"] = st->step;
            d["level"] = ckpt::SaveLevelName(st->level);
            d["seconds"] = st->seconds;
            d["bytes_read"] = st->bytes_read;
            d["bytes_from_memory"] = st->bytes_from_memory;
            d["bytes_from_peers"] = st->bytes_from_peers;
            d["bytes_from_storage"] = st->bytes_from_storage;
            d["manifest_bytes"] = st->manifest_bytes;
            d["cooperative"] = st->cooperative;
            d["bytes_for_peers"] = st->bytes_for_peers;
            d["peer_failovers"] = st->peer_failovers;
            d["delta_blocks"] = st->delta_blocks;
            d["bytes_read_from_bases"] = st->bytes_read_from_bases;
            d["bytes_rebuilt_from_parity"] = st->bytes_rebuilt_from_parity;
            d["memory_pieces_lost"] = st->memory_pieces_lost;
            return d;
          },
          py::arg("state"), py::arg("step") = ckpt::kLatestStep, py::arg("level") = "durable", py::arg("stats") = false,
          py::arg("cooperative") = true,
          "Fills the state's buffers; returns the step, or with stats=True a dict: step, level, seconds, "
          "bytes_read, bytes_from_memory, bytes_from_peers, bytes_from_storage, manifest_bytes (of the step's "
          "manifest, read by this rank itself), cooperative, bytes_for_peers, peer_failovers, delta_blocks (blocks "
          "rebuilt from a delta and its base), bytes_read_from_bases, bytes_rebuilt_from_parity and "
          "memory_pieces_lost (an erasure-coded memory level's data pieces rebuilt). A load of a "
          "laid-out state by every rank of a checkpointer built with exchange_memory is cooperative "
          "(cooperative=False turns it off): ranks that need the same bytes read them once and pass them on.")
      .def(
          "latest_step",
          [](ckpt::Checkpointer& cp, const std::string& level) -> py::object {
            const ckpt::SaveLevel l = ParseLevel(level);
            absl::StatusOr<int64_t> s;
            {
              py::gil_scoped_release release;
              s = cp.LatestStep(l);
            }
            if (absl::IsNotFound(s.status())) return py::none();
            Check(s.status());
            return py::int_(*s);
          },
          py::arg("level") = "durable", "The latest committed step of the level; None when there is none.")
      .def(
          "committed_steps",
          [](ckpt::Checkpointer& cp) {
            absl::StatusOr<std::vector<ckpt::StepInfo>> steps;
            {
              py::gil_scoped_release release;
              steps = cp.ListSteps();
            }
            Check(steps.status());
            std::vector<int64_t> out;
            for (const ckpt::StepInfo& s : *steps) {
              if (s.committed) out.push_back(s.step);
            }
            return out;
          },
          "The committed steps of the durable level, oldest first.")
      .def(
          "counts",
          [](const ckpt::Checkpointer& cp, const std::string& level) {
            const ckpt::SaveCounts c =
                cp.Counts(level == "memory" ? ckpt::SaveLevel::kMemory : ckpt::SaveLevel::kDurable);
            py::dict d;
            d["started"] = c.started;
            d["committed"] = c.committed;
            d["failed"] = c.failed;
            d["last_failed_step"] = c.last_failed_step;
            d["last_error"] = c.last_error;
            return d;
          },
          py::arg("level") = "durable",
          "What this checkpointer's saves of the level came to: started, committed, failed, last_failed_step, "
          "last_error.")
      .def_property_readonly("rank", [](const ckpt::Checkpointer& cp) { return cp.options().rank; })
      .def_property_readonly("world_size", [](const ckpt::Checkpointer& cp) { return cp.options().world_size; })
      .def("wait_all", [](ckpt::Checkpointer& cp) {
        absl::Status s;
        {
          py::gil_scoped_release release;
          s = cp.WaitAll();
        }
        Check(s);
      });
}

}  // namespace

PYBIND11_MODULE(_ckpt, m) {
  BindBasics(m);
  BindLogBridge(m);
  BindIntervalPolicy(m);
  BindSynthetic(m);
  BindState(m);
  BindPeerMemory(m);
  BindSaveHandle(m);
  BindDataPosition(m);
  BindCheckpointer(m);
}
