// The C API (include/ckpt/ckpt.h) over the C++ one. Built into its own
// library with hidden visibility: only the ckpt_* functions are exported.
#include <algorithm>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "ckpt/checkpointer.h"
#include "ckpt/ckpt.h"
#include "ckpt/log.h"
#include "ckpt/peer.h"
#include "ckpt/state.h"

namespace {

thread_local std::string g_last_error;

int Fail(const absl::Status& s) {
  g_last_error = std::string(s.message());
  switch (s.code()) {
    case absl::StatusCode::kOk:
      return CKPT_OK;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      return CKPT_INVALID_ARGUMENT;
    case absl::StatusCode::kNotFound:
      return CKPT_NOT_FOUND;
    case absl::StatusCode::kDataLoss:
      return CKPT_DATA_LOSS;
    case absl::StatusCode::kUnavailable:
      return CKPT_UNAVAILABLE;
    case absl::StatusCode::kResourceExhausted:
      return CKPT_RESOURCE_EXHAUSTED;
    case absl::StatusCode::kAborted:
      return CKPT_ABORTED;
    case absl::StatusCode::kDeadlineExceeded:
      return CKPT_DEADLINE_EXCEEDED;
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kAlreadyExists:
      return CKPT_FAILED_PRECONDITION;
    default:
      return CKPT_INTERNAL;
  }
}

int Result(const absl::Status& s) { return s.ok() ? CKPT_OK : Fail(s); }

int Invalid(const char* what) { return Fail(absl::InvalidArgumentError(what)); }

}  // namespace

struct ckpt_checkpointer {
  std::unique_ptr<ckpt::Checkpointer> cp;
};

struct ckpt_peer_memory {
  std::shared_ptr<ckpt::PeerMemory> memory;
  std::string endpoint;
};

struct ckpt_state {
  struct BlobOut {
    std::string name;
    bool global;
    void* buffer;
    size_t capacity;
    size_t* size;
    std::string bytes;
  };
  ckpt::State state;
  std::deque<BlobOut> outs;  // stable addresses: the State points at `bytes`
};

struct ckpt_save {
  ckpt::SaveHandle handle;
};

extern "C" {

int ckpt_api_version(void) { return CKPT_API_VERSION; }

const char* ckpt_last_error(void) { return g_last_error.c_str(); }

void ckpt_set_log_sink(ckpt_log_fn fn, void* user) {
  if (fn == nullptr) {
    ckpt::SetLogSink(nullptr);
    return;
  }
  ckpt::SetLogSink([fn, user](ckpt::LogLevel level, std::string_view component, std::string_view message) {
    const std::string c(component), m(message);
    fn(user, static_cast<int>(level), c.c_str(), m.c_str());
  });
}

void ckpt_options_init(ckpt_options* o) {
  if (o == nullptr) return;
  std::memset(o, 0, sizeof(*o));
  o->world_size = 1;
  o->zstd_level = 1;
  o->staging_bytes = size_t{256} << 20;
  o->commit_timeout_s = 600;
}

namespace {

// The C++ options of `o` (checked), with the memory level's storage when
// given.
int OpenWith(const ckpt_options* o, std::shared_ptr<ckpt::Storage> memory_storage, ckpt_checkpointer** out) {
  if (o == nullptr || out == nullptr || o->uri == nullptr)
    return Invalid("ckpt_open: options, uri and out are required");
  if (o->codec < CKPT_CODEC_NONE || o->codec > CKPT_CODEC_AUTO) return Invalid("ckpt_open: unknown codec");
  ckpt::CheckpointerOptions co;
  co.uri = o->uri;
  co.rank = o->rank;
  co.world_size = o->world_size;
  co.codec = static_cast<ckpt::Codec>(o->codec);
  co.zstd_level = o->zstd_level;
  if (o->staging_bytes > 0) co.engine_options.staging_bytes = o->staging_bytes;
  co.retention.keep_last = o->keep_last;
  if (o->commit_timeout_s > 0) co.commit_timeout_s = o->commit_timeout_s;
  co.memory_storage = std::move(memory_storage);
  auto cp = ckpt::Checkpointer::Open(co);
  if (!cp.ok()) return Fail(cp.status());
  *out = new ckpt_checkpointer{std::move(cp).value()};
  return CKPT_OK;
}

// `n` endpoints at `list` (none when n is 0), or an error naming `what`.
bool Endpoints(const char* const* list, size_t n, const char* what, std::vector<std::string>* out) {
  if (n > 0 && list == nullptr) {
    Invalid(what);
    return false;
  }
  for (size_t i = 0; i < n; ++i) {
    if (list[i] == nullptr) {
      Invalid(what);
      return false;
    }
    out->emplace_back(list[i]);
  }
  return true;
}

ckpt::SaveLevel LevelOf(int level) {
  return level == CKPT_LEVEL_MEMORY ? ckpt::SaveLevel::kMemory : ckpt::SaveLevel::kDurable;
}

}  // namespace

int ckpt_open(const ckpt_options* o, ckpt_checkpointer** out) { return OpenWith(o, nullptr, out); }

int ckpt_peer_memory_start(const char* token, const char* domain, const char* listen, int64_t budget_bytes,
                           ckpt_peer_memory** out) {
  if (token == nullptr || out == nullptr) return Invalid("ckpt_peer_memory_start: token and out are required");
  ckpt::PeerMemoryOptions po;
  po.token = token;
  if (domain != nullptr) po.domain = domain;
  if (listen != nullptr) po.listen = listen;
  if (budget_bytes > 0) po.budget_bytes = budget_bytes;
  auto m = ckpt::PeerMemory::Start(po);
  if (!m.ok()) return Fail(m.status());
  *out = new ckpt_peer_memory{*m, (*m)->endpoint()};
  return CKPT_OK;
}

const char* ckpt_peer_memory_endpoint(const ckpt_peer_memory* memory) {
  return memory == nullptr ? "" : memory->endpoint.c_str();
}

void ckpt_peer_memory_free(ckpt_peer_memory* memory) { delete memory; }

void ckpt_memory_route_init(ckpt_memory_route* route) {
  if (route == nullptr) return;
  std::memset(route, 0, sizeof(*route));
  route->struct_size = sizeof(*route);
}

int ckpt_open_with_memory(const ckpt_options* options, ckpt_peer_memory* memory, const ckpt_memory_route* route,
                          ckpt_checkpointer** out) {
  if (memory == nullptr || route == nullptr) return Invalid("ckpt_open_with_memory: memory and route are required");
  if (route->struct_size < sizeof(ckpt_memory_route)) {
    return Invalid("ckpt_open_with_memory: the route's struct_size is unset (call ckpt_memory_route_init)");
  }
  ckpt::PeerRoute r;
  r.erasure_k = route->erasure_k;
  r.erasure_m = route->erasure_m;
  std::vector<std::string> holders;
  size_t total = 0;
  if (route->owner_count > 0 && route->holder_counts == nullptr) {
    return Invalid("ckpt_open_with_memory: owner_count without holder_counts");
  }
  for (size_t o = 0; o < route->owner_count; ++o) total += route->holder_counts[o];
  if (!Endpoints(route->replicas, route->replica_count, "ckpt_open_with_memory: a NULL replica", &r.replicas) ||
      !Endpoints(route->peers, route->peer_count, "ckpt_open_with_memory: a NULL peer", &r.peers) ||
      !Endpoints(route->holders, total, "ckpt_open_with_memory: a NULL holder", &holders)) {
    return CKPT_INVALID_ARGUMENT;
  }
  std::vector<std::vector<std::string>> by_owner(route->owner_count);
  for (size_t o = 0, at = 0; o < route->owner_count; at += route->holder_counts[o], ++o) {
    by_owner[o].assign(holders.begin() + static_cast<std::ptrdiff_t>(at),
                       holders.begin() + static_cast<std::ptrdiff_t>(at + route->holder_counts[o]));
  }
  r.holders = [by_owner = std::move(by_owner)](int64_t, int owner) {
    const size_t o = static_cast<size_t>(std::max(owner, 0));
    return o < by_owner.size() ? by_owner[o] : std::vector<std::string>{};
  };
  auto storage = ckpt::OpenPeerStorage(memory->memory, std::move(r));
  if (!storage.ok()) return Fail(storage.status());
  return OpenWith(options, std::move(storage).value(), out);
}

int ckpt_set_delta(ckpt_checkpointer* cp, int chain, double rebase_ratio) {
  if (cp == nullptr) return Invalid("ckpt_set_delta: no checkpointer");
  ckpt::DeltaOptions d;
  d.chain = chain;
  if (rebase_ratio > 0) d.rebase_ratio = rebase_ratio;
  absl::Status s = cp->cp->SetDeltaOptions(d);
  return s.ok() ? CKPT_OK : Fail(s);
}

void ckpt_close(ckpt_checkpointer* cp) {
  if (cp == nullptr) return;
  (void)cp->cp->WaitAll();
  delete cp;
}

int ckpt_state_new(ckpt_state** out) {
  if (out == nullptr) return Invalid("ckpt_state_new: out is required");
  *out = new ckpt_state;
  return CKPT_OK;
}

void ckpt_state_free(ckpt_state* state) { delete state; }

int ckpt_state_add_shard(ckpt_state* state, const char* name, int dtype, int ndim, const int64_t* global_shape,
                         const int64_t* offsets, const int64_t* sizes, void* data) {
  if (state == nullptr || name == nullptr) return Invalid("ckpt_state_add_shard: state and name are required");
  if (dtype < CKPT_F64 || dtype > CKPT_BOOL) return Invalid("ckpt_state_add_shard: unknown dtype");
  if (ndim < 0 || ndim > 32 || (ndim > 0 && (global_shape == nullptr || offsets == nullptr || sizes == nullptr))) {
    return Invalid("ckpt_state_add_shard: ndim must be 0..32 with shape, offsets and sizes for each dimension");
  }
  ckpt::TensorSpec spec{name, static_cast<ckpt::DType>(dtype), ckpt::Shape(global_shape, global_shape + ndim)};
  ckpt::Box box;
  box.offsets.assign(offsets, offsets + ndim);
  box.sizes.assign(sizes, sizes + ndim);
  return Result(state->state.AddShard(spec, box, data));
}

namespace {

absl::StatusOr<ckpt::TensorLayout> LayoutOf(const ckpt_layout* l) {
  if (l == nullptr || l->name == nullptr) return absl::InvalidArgumentError("ckpt_layout: a name is required");
  if (l->dtype < CKPT_F64 || l->dtype > CKPT_BOOL) {
    return absl::InvalidArgumentError(std::string("tensor '") + l->name + "': unknown dtype");
  }
  if (l->ndim < 0 || l->ndim > 32 || (l->ndim > 0 && l->shape == nullptr) || l->n_placements < 0 ||
      l->n_placements > 32 || (l->n_placements > 0 && l->placements == nullptr) || l->n_split_order < 0 ||
      l->n_split_order > 32 || (l->n_split_order > 0 && l->split_order == nullptr)) {
    return absl::InvalidArgumentError(std::string("tensor '") + l->name +
                                      "': ndim, n_placements and n_split_order must be 0..32, with their arrays");
  }
  ckpt::TensorLayout out;
  out.spec = ckpt::TensorSpec{l->name, static_cast<ckpt::DType>(l->dtype), ckpt::Shape(l->shape, l->shape + l->ndim)};
  for (int i = 0; i < l->n_placements; ++i) {
    const ckpt_placement& p = l->placements[i];
    ckpt::Placement placement = p.shard ? ckpt::Placement::Shard(p.dim) : ckpt::Placement::Replicate();
    out.placements.push_back(std::move(placement));
  }
  out.split_order.assign(l->split_order, l->split_order + l->n_split_order);
  out.owner_dim = l->owner_dim;
  out.owner_index = l->owner_index;
  return out;
}

// The cuts of each sharding placement: mesh size + 1 values, once the mesh is known.
absl::Status AddCuts(const ckpt_layout* l, const ckpt::Mesh& mesh, ckpt::TensorLayout* out) {
  for (int i = 0; i < l->n_placements && i < mesh.ndim(); ++i) {
    const ckpt_placement& p = l->placements[i];
    if (p.shard && p.cuts != nullptr) {
      out->placements[i].boundaries.assign(p.cuts, p.cuts + mesh.sizes[i] + 1);
    }
  }
  if (l->n_placements > mesh.ndim()) {
    return absl::InvalidArgumentError(std::string("tensor '") + l->name + "': " + std::to_string(l->n_placements) +
                                      " placements for a mesh of " + std::to_string(mesh.ndim()) + " dimensions");
  }
  return absl::OkStatus();
}

}  // namespace

void ckpt_layout_init(ckpt_layout* layout) {
  if (layout == nullptr) return;
  *layout = ckpt_layout{};
  layout->owner_dim = -1;
}

int ckpt_state_set_mesh(ckpt_state* state, int ndim, const char* const* names, const int64_t* sizes, int64_t rank) {
  if (state == nullptr || ndim < 1 || ndim > 32 || names == nullptr || sizes == nullptr) {
    return Invalid("ckpt_state_set_mesh: a state and 1..32 named dimensions with their sizes are required");
  }
  ckpt::Mesh mesh;
  for (int i = 0; i < ndim; ++i) {
    if (names[i] == nullptr) return Invalid("ckpt_state_set_mesh: a dimension without a name");
    mesh.names.emplace_back(names[i]);
    mesh.sizes.push_back(sizes[i]);
  }
  return Result(state->state.SetMesh(mesh, rank));
}

int ckpt_state_layout_box(const ckpt_state* state, const ckpt_layout* layout, int64_t* offsets, int64_t* sizes,
                          int* held) {
  if (state == nullptr || held == nullptr) return Invalid("ckpt_state_layout_box: state and held are required");
  if (!state->state.mesh().has_value()) {
    return Fail(absl::FailedPreconditionError("ckpt_state_layout_box: the state has no mesh (ckpt_state_set_mesh)"));
  }
  auto l = LayoutOf(layout);
  if (!l.ok()) return Fail(l.status());
  if (absl::Status s = AddCuts(layout, *state->state.mesh(), &*l); !s.ok()) return Fail(s);
  auto box = ckpt::RankBox(*l, *state->state.mesh(), state->state.mesh_rank());
  if (!box.ok()) return Fail(box.status());
  *held = box->has_value() ? 1 : 0;
  if (box->has_value() && layout->ndim > 0) {
    if (offsets == nullptr || sizes == nullptr) return Invalid("ckpt_state_layout_box: offsets and sizes are required");
    for (int d = 0; d < layout->ndim; ++d) {
      offsets[d] = (**box).offsets[d];
      sizes[d] = (**box).sizes[d];
    }
  }
  return CKPT_OK;
}

int ckpt_state_add_layout(ckpt_state* state, const ckpt_layout* layout, void* data) {
  if (state == nullptr) return Invalid("ckpt_state_add_layout: a state is required");
  auto l = LayoutOf(layout);
  if (!l.ok()) return Fail(l.status());
  if (state->state.mesh().has_value()) {
    if (absl::Status s = AddCuts(layout, *state->state.mesh(), &*l); !s.ok()) return Fail(s);
  }
  return Result(state->state.AddLayout(*l, data));
}

int ckpt_state_add_blob(ckpt_state* state, const char* name, const void* data, size_t size, int global) {
  if (state == nullptr || name == nullptr) return Invalid("ckpt_state_add_blob: state and name are required");
  return Result(state->state.AddBlob(name, data, size, global ? ckpt::BlobScope::kGlobal : ckpt::BlobScope::kRank));
}

int ckpt_state_add_blob_out(ckpt_state* state, const char* name, void* buffer, size_t capacity, size_t* size,
                            int global) {
  if (state == nullptr || name == nullptr || (buffer == nullptr && capacity > 0)) {
    return Invalid("ckpt_state_add_blob_out: state, name and a buffer are required");
  }
  state->outs.push_back(ckpt_state::BlobOut{name, global != 0, buffer, capacity, size, {}});
  ckpt_state::BlobOut& o = state->outs.back();
  absl::Status s = state->state.AddBlobOut(name, &o.bytes, global ? ckpt::BlobScope::kGlobal : ckpt::BlobScope::kRank);
  if (!s.ok()) state->outs.pop_back();
  return Result(s);
}

int ckpt_save_start(ckpt_checkpointer* cp, int64_t step, const ckpt_state* state, ckpt_save** out) {
  return ckpt_save_start_with(cp, step, state, nullptr, out);
}

void ckpt_save_options_init(ckpt_save_options* options) {
  if (options == nullptr) return;
  *options = ckpt_save_options{};
}

int ckpt_save_start_with(ckpt_checkpointer* cp, int64_t step, const ckpt_state* state, const ckpt_save_options* options,
                         ckpt_save** out) {
  return ckpt_save_start_at(cp, step, state, options, CKPT_LEVEL_DURABLE, out);
}

int ckpt_save_start_at(ckpt_checkpointer* cp, int64_t step, const ckpt_state* state, const ckpt_save_options* options,
                       int level, ckpt_save** out) {
  if (cp == nullptr || state == nullptr || out == nullptr)
    return Invalid("ckpt_save_start: cp, state and out are required");
  if (level != CKPT_LEVEL_DURABLE && level != CKPT_LEVEL_MEMORY) return Invalid("ckpt_save_start_at: unknown level");
  ckpt::SaveOptions so;
  so.level = LevelOf(level);
  if (options != nullptr) {
    if (options->metadata_count > 0 && (options->metadata_keys == nullptr || options->metadata_values == nullptr))
      return Invalid("ckpt_save_start_with: metadata_count without metadata_keys and metadata_values");
    for (size_t i = 0; i < options->metadata_count; ++i) {
      if (options->metadata_keys[i] == nullptr || options->metadata_values[i] == nullptr)
        return Invalid("ckpt_save_start_with: a metadata key or value is NULL");
      so.metadata[options->metadata_keys[i]] = options->metadata_values[i];
    }
    so.allow_older_step = options->allow_older_step != 0;
    so.save_id = options->save_id;
  }
  auto h = cp->cp->Save(step, state->state, so);
  if (!h.ok()) return Fail(h.status());
  *out = new ckpt_save{std::move(h).value()};
  return CKPT_OK;
}

int ckpt_save_id(ckpt_save* save, uint64_t* id) {
  if (save == nullptr || id == nullptr) return Invalid("ckpt_save_id: save and id are required");
  *id = save->handle.Stats().save_id;
  return CKPT_OK;
}

int ckpt_save_poll(ckpt_save* save, int* done) {
  if (save == nullptr || done == nullptr) return Invalid("ckpt_save_poll: save and done are required");
  *done = save->handle.Done() ? 1 : 0;
  return *done ? Result(save->handle.Wait()) : CKPT_OK;
}

int ckpt_save_wait(ckpt_save* save) {
  if (save == nullptr) return Invalid("ckpt_save_wait: save is required");
  return Result(save->handle.Wait());
}

int ckpt_save_times(ckpt_save* save, double* stall_s, double* commit_s) {
  if (save == nullptr) return Invalid("ckpt_save_times: save is required");
  const ckpt::SaveStats st = save->handle.Stats();
  if (stall_s != nullptr) *stall_s = st.stall_s;
  if (commit_s != nullptr) *commit_s = st.commit_s;
  return CKPT_OK;
}

void ckpt_save_free(ckpt_save* save) { delete save; }

int ckpt_load(ckpt_checkpointer* cp, int64_t step, ckpt_state* state) {
  return ckpt_load_at(cp, step, state, CKPT_LEVEL_DURABLE, nullptr);
}

void ckpt_load_stats_init(ckpt_load_stats* stats) {
  if (stats == nullptr) return;
  std::memset(stats, 0, sizeof(*stats));
  stats->struct_size = sizeof(*stats);
}

int ckpt_load_at(ckpt_checkpointer* cp, int64_t step, ckpt_state* state, int level, ckpt_load_stats* stats) {
  if (cp == nullptr || state == nullptr) return Invalid("ckpt_load: cp and state are required");
  if (level != CKPT_LEVEL_DURABLE && level != CKPT_LEVEL_MEMORY) return Invalid("ckpt_load_at: unknown level");
  if (stats != nullptr && stats->struct_size == 0) {
    return Invalid("ckpt_load_at: the stats' struct_size is unset (call ckpt_load_stats_init)");
  }
  ckpt::LoadOptions lo;
  lo.level = LevelOf(level);
  auto loaded = cp->cp->Load(state->state, step < 0 ? ckpt::kLatestStep : step, lo);
  if (!loaded.ok()) return Fail(loaded.status());
  if (stats != nullptr) {
    // Only the fields the caller's struct holds.
    ckpt_load_stats s;
    ckpt_load_stats_init(&s);
    s.step = loaded->step;
    s.level = loaded->level == ckpt::SaveLevel::kMemory ? CKPT_LEVEL_MEMORY : CKPT_LEVEL_DURABLE;
    s.seconds = loaded->seconds;
    s.bytes_read = loaded->bytes_read;
    s.bytes_from_memory = loaded->bytes_from_memory;
    s.bytes_from_peers = loaded->bytes_from_peers;
    s.bytes_from_storage = loaded->bytes_from_storage;
    s.bytes_rebuilt_from_parity = loaded->bytes_rebuilt_from_parity;
    s.memory_pieces_lost = loaded->memory_pieces_lost;
    const size_t keep = stats->struct_size;
    std::memcpy(stats, &s, std::min(keep, sizeof(s)));
    stats->struct_size = keep;
  }
  for (ckpt_state::BlobOut& o : state->outs) {
    if (o.bytes.size() > o.capacity) {
      return Fail(absl::InvalidArgumentError("blob '" + o.name + "' holds " + std::to_string(o.bytes.size()) +
                                             " bytes, the buffer " + std::to_string(o.capacity)));
    }
    if (!o.bytes.empty()) std::memcpy(o.buffer, o.bytes.data(), o.bytes.size());
    if (o.size != nullptr) *o.size = o.bytes.size();
  }
  return CKPT_OK;
}

int ckpt_latest_step(ckpt_checkpointer* cp, int64_t* step) {
  if (cp == nullptr || step == nullptr) return Invalid("ckpt_latest_step: cp and step are required");
  auto latest = cp->cp->LatestStep();
  if (!latest.ok()) return Fail(latest.status());
  *step = *latest;
  return CKPT_OK;
}

}  // extern "C"
