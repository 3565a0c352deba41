#include "common/synth_job.h"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <functional>
#include <map>
#include <random>

#include "absl/strings/numbers.h"
#include "ckpt/verify.h"
#include "common/stats.h"
#include "util/bytes.h"
#include "util/clock.h"
#include "util/errors.h"
#include "util/strings.h"

namespace ckpt::tools {
namespace {

constexpr char kParams[] = "synth.params";
constexpr char kDType[] = "synth.dtype";
constexpr char kAdam[] = "synth.adam";
constexpr char kZero[] = "synth.zero";
constexpr char kSeed[] = "synth.seed";
constexpr char kMesh[] = "synth.mesh";
constexpr char kLayers[] = "synth.layers";
constexpr char kExperts[] = "synth.experts";

uint64_t SaveIdFor(int64_t step) {
  static std::mt19937_64 rng(std::random_device{}() ^ static_cast<uint64_t>(UnixNanos()));
  uint64_t id = 0;
  while (id == 0) id = rng() ^ static_cast<uint64_t>(step);
  return id;
}

}  // namespace

std::string HumanBytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.1f %s", bytes, units[u]);
  return buf;
}

absl::StatusOr<std::unique_ptr<SyntheticJob>> SyntheticJob::Create(SynthJobOptions options) {
  std::unique_ptr<SyntheticJob> job(new SyntheticJob());
  job->options_ = std::move(options);
  CKPT_ASSIGN_OR_RETURN(job->model_, BuildSyntheticModel(job->options_.model, job->options_.mesh));
  CKPT_ASSIGN_OR_RETURN(job->engine_, CreateSaveEngine(job->options_.engine));
  CKPT_ASSIGN_OR_RETURN(std::shared_ptr<Storage> storage, OpenStorage(job->options_.uri));
  const int world = static_cast<int>(job->options_.mesh.NumRanks());
  if (job->options_.only_rank >= world) {
    return absl::InvalidArgumentError(
        StrCat("rank ", job->options_.only_rank, " is outside mesh ", job->options_.mesh.ToString()));
  }
  for (int r = 0; r < world; ++r) {
    if (job->options_.only_rank >= 0 && r != job->options_.only_rank) continue;
    CheckpointerOptions o;
    o.storage = storage;
    o.rank = r;
    o.world_size = world;
    o.codec = job->options_.codec;
    o.zstd_level = job->options_.zstd_level;
    o.engine = job->engine_;
    o.retention = job->options_.retention;
    o.delta = job->options_.delta;
    o.mesh = job->options_.mesh;
    o.direct_io = job->options_.direct_io;
    o.commit_timeout_s = job->options_.commit_timeout_s;
    o.communicator = job->options_.communicator;
    CKPT_ASSIGN_OR_RETURN(auto cp, Checkpointer::Open(o));
    job->ranks_.push_back(std::move(cp));
    job->rank_ids_.push_back(r);
  }
  const std::vector<TensorLayout>& layouts = job->model_.tensors;
  if (job->options_.only_rank >= 0) {
    CKPT_ASSIGN_OR_RETURN(std::vector<RankWrite> mine,
                          PlanRankWrites(layouts, job->options_.mesh, job->options_.only_rank));
    job->writes_.emplace_back();
    for (RankWrite& w : mine) {
      if (w.writes) job->writes_.back().emplace_back(w.tensor, std::move(w.box));
    }
  } else {
    CKPT_ASSIGN_OR_RETURN(SavePlan plan, PlanSave(layouts, job->options_.mesh));
    for (int r : job->rank_ids_) {
      job->writes_.emplace_back();
      for (int64_t ci : plan.by_rank[r]) {
        job->writes_.back().emplace_back(plan.chunks[ci].tensor, std::move(plan.chunks[ci].box));
      }
    }
  }
  return job;
}

absl::Status SyntheticJob::SaveAsync(int64_t step, uint64_t seed) {
  if (InFlight()) return absl::FailedPreconditionError("a save is still in flight");
  pending_ = SynthSaveResult{};
  pending_.step = step;
  pending_.ranks = static_cast<int>(ranks_.size());
  SaveOptions so;
  so.allow_older_step = options_.allow_older_step;
  // The simulated ranks of this process are one save: they share its id,
  // so a second job's ranks cannot join it. (With a communicator the
  // leader chooses it.)
  if (!options_.communicator) so.save_id = SaveIdFor(step);
  so.metadata[kParams] = std::to_string(options_.model.params);
  so.metadata[kDType] = std::string(DTypeName(options_.model.dtype));
  so.metadata[kAdam] = options_.model.adam ? "1" : "0";
  so.metadata[kZero] = options_.model.zero ? "1" : "0";
  so.metadata[kSeed] = std::to_string(seed);
  so.metadata[kMesh] = options_.mesh.ToString();
  so.metadata[kLayers] = std::to_string(model_.layers);
  so.metadata[kExperts] = std::to_string(options_.model.experts);
  rank_start_.clear();
  // The values live on like a trainer's state: a single rank's buffers stay
  // allocated (and resident) across saves; with several simulated ranks
  // only the rank being staged holds memory.
  for (size_t local = 0; local < ranks_.size(); ++local) {
    const int r = rank_ids_[local];
    const double g0 = NowSeconds();
    // The state as a trainer declares it: every tensor by its layout, so
    // the Checkpointer plans this rank's writes alone and the leader builds
    // the manifest from the rules. Only the boxes this rank writes get
    // values; the replicas it holds are never read by the save, so they
    // stay untouched (and non-resident).
    State state;
    CKPT_RETURN_IF_ERROR(state.SetMesh(options_.mesh, r));
    // A single rank's values are generated again only for another seed.
    const bool fill = ranks_.size() > 1 || !buffers_seed_ || *buffers_seed_ != seed;
    if (ranks_.size() > 1) {
      buffers_.clear();
      held_.clear();
    }
    const std::vector<std::pair<int32_t, Box>>& writes = writes_[local];
    buffers_.resize(writes.size());
    std::vector<std::byte*> data_of(model_.tensors.size(), nullptr);
    for (size_t i = 0; i < writes.size(); ++i) {
      const auto& [tensor, box] = writes[i];
      const TensorSpec& spec = model_.tensors[tensor].spec;
      buffers_[i].resize(static_cast<size_t>(box.Volume()) * DTypeSize(spec.dtype));
      if (fill) FillSynthetic(spec, box, seed, buffers_[i].data());
      data_of[tensor] = buffers_[i].data();
    }
    size_t next_held = 0;
    for (size_t t = 0; t < model_.tensors.size(); ++t) {
      const TensorLayout& layout = model_.tensors[t];
      if (data_of[t] == nullptr) {
        CKPT_ASSIGN_OR_RETURN(std::optional<Box> box, RankBox(layout, options_.mesh, r));
        if (box.has_value() && !box->Empty()) {
          const size_t bytes = static_cast<size_t>(box->Volume()) * DTypeSize(layout.spec.dtype);
          if (next_held == held_.size()) held_.emplace_back();
          HeldBuffer& h = held_[next_held++];
          if (h.size != bytes) {
            h.data.reset(new std::byte[bytes]);
            h.size = bytes;
          }
          data_of[t] = h.data.get();
        }
      }
      CKPT_RETURN_IF_ERROR(state.AddLayout(layout, data_of[t]));
    }
    const std::string rng = StrCat("rng-state rank ", r, " seed ", seed);
    CKPT_RETURN_IF_ERROR(state.AddBlob("rng", rng.data(), rng.size(), BlobScope::kRank));
    if (r == 0) {
      CKPT_RETURN_IF_ERROR(state.AddBlob("data_position", &step, sizeof(step), BlobScope::kGlobal));
    }
    pending_.generate_s += NowSeconds() - g0;
    if (ranks_.size() == 1) buffers_seed_ = seed;
    rank_start_.push_back(NowSeconds());
    auto h = ranks_[local]->Save(step, state, so);
    if (!h.ok()) {
      // Ranks already staged fail at commit; wait for them before returning.
      for (auto& done : handles_) (void)done.Wait();
      handles_.clear();
      return h.status();
    }
    const SaveStats st = h->Stats();
    pending_.stall_max_s = std::max(pending_.stall_max_s, st.stall_s);
    pending_.stall_total_s += st.stall_s;
    pending_.bytes_logical += st.bytes_logical;
    handles_.push_back(*h);
  }
  return absl::OkStatus();
}

std::vector<std::span<const std::byte>> SyntheticJob::Values() const {
  std::vector<std::span<const std::byte>> out;
  for (const auto& b : buffers_) out.emplace_back(b.data(), b.size());
  return out;
}

bool SyntheticJob::Done() const {
  for (const SaveHandle& h : handles_) {
    if (!h.Done()) return false;
  }
  return true;
}

absl::StatusOr<SynthSaveResult> SyntheticJob::Finish() {
  absl::Status first;
  for (size_t r = 0; r < handles_.size(); ++r) {
    absl::Status s = handles_[r].Wait();
    if (first.ok()) first = s;
    const SaveStats st = handles_[r].Stats();
    // Per-rank times count from that rank's Save call; shift to the first
    // rank's (generating the first rank's values is not part of the save).
    const double offset = rank_start_[r] - rank_start_.front();
    pending_.write_s = std::max(pending_.write_s, offset + st.write_s);
    pending_.commit_s = std::max(pending_.commit_s, offset + st.commit_s);
    pending_.bytes_stored += st.bytes_stored;
    pending_.bytes_written += st.bytes_written;
  }
  handles_.clear();
  if (!first.ok()) return first;
  return pending_;
}

namespace {

struct SynthMeta {
  SyntheticOptions model;
  uint64_t seed = 0;
  std::string saved_mesh;
};

absl::StatusOr<SynthMeta> MetaFrom(const std::map<std::string, std::string>& metadata, int64_t step) {
  auto get = [&](const char* key) -> absl::StatusOr<std::string> {
    auto it = metadata.find(key);
    if (it == metadata.end()) {
      return absl::FailedPreconditionError(
          StrCat("step ", step, " was not written by `ckpt synth` (no ", key, " in its metadata)"));
    }
    return it->second;
  };
  SynthMeta meta;
  CKPT_ASSIGN_OR_RETURN(std::string params, get(kParams));
  CKPT_ASSIGN_OR_RETURN(std::string dtype, get(kDType));
  CKPT_ASSIGN_OR_RETURN(std::string adam, get(kAdam));
  CKPT_ASSIGN_OR_RETURN(std::string zero, get(kZero));
  CKPT_ASSIGN_OR_RETURN(std::string seed_text, get(kSeed));
  int64_t p = 0;
  if (!ParseInt64(params, &p) || !absl::SimpleAtoi(seed_text, &meta.seed) || !ParseDType(dtype)) {
    return absl::DataLossError(StrCat("step ", step, ": malformed synth metadata"));
  }
  meta.model.params = p;
  meta.model.dtype = *ParseDType(dtype);
  meta.model.adam = adam == "1";
  meta.model.zero = zero == "1";
  // Written since the model stopped depending on the mesh; older steps used
  // the automatic layer count and no experts.
  int64_t v = 0;
  if (auto it = metadata.find(kLayers); it != metadata.end()) {
    if (!ParseInt64(it->second, &v)) return absl::DataLossError("malformed synth.layers");
    meta.model.layers = static_cast<int>(v);
  }
  if (auto it = metadata.find(kExperts); it != metadata.end()) {
    if (!ParseInt64(it->second, &v)) return absl::DataLossError("malformed synth.experts");
    meta.model.experts = static_cast<int>(v);
  }
  if (auto it = metadata.find(kMesh); it != metadata.end()) meta.saved_mesh = it->second;
  return meta;
}

// Loads rank r's boxes of `model` over `mesh` with `load` (`passes` times,
// the median time counted) and compares them with the generator, adding to
// `res`.
absl::Status CheckRank(const SyntheticModel& model, const Mesh& mesh, int64_t r, uint64_t seed,
                       const std::function<absl::StatusOr<LoadStats>(const State&)>& load, RestoreCheckResult* res,
                       int passes = 1, bool laid_out = false) {
  State target;
  std::vector<std::vector<std::byte>> buffers;
  std::vector<std::pair<const TensorSpec*, Box>> boxes;
  std::vector<int> box_of(model.tensors.size(), -1);  // per tensor, its index in boxes
  for (size_t t = 0; t < model.tensors.size(); ++t) {
    CKPT_ASSIGN_OR_RETURN(std::optional<Box> box, RankBox(model.tensors[t], mesh, r));
    if (!box || box->Empty()) continue;
    box_of[t] = static_cast<int>(boxes.size());
    boxes.emplace_back(&model.tensors[t].spec, *box);
  }
  buffers.resize(boxes.size());
  for (size_t i = 0; i < boxes.size(); ++i) {
    buffers[i].assign(static_cast<size_t>(boxes[i].second.Volume()) * DTypeSize(boxes[i].first->dtype),
                      std::byte{0xA5});
    if (!laid_out) CKPT_RETURN_IF_ERROR(target.AddShard(*boxes[i].first, boxes[i].second, buffers[i].data()));
  }
  if (laid_out) {
    // Every tensor declared by its layout, in the model's order, the ones
    // this rank holds nothing of too: what a cooperative load plans from.
    CKPT_RETURN_IF_ERROR(target.SetMesh(mesh, r));
    for (size_t t = 0; t < model.tensors.size(); ++t) {
      CKPT_RETURN_IF_ERROR(target.AddLayout(model.tensors[t], box_of[t] < 0 ? nullptr : buffers[box_of[t]].data()));
    }
  }
  std::vector<double> times;
  LoadStats ls;
  for (int p = 0; p < passes; ++p) {
    const double l0 = NowSeconds();
    CKPT_ASSIGN_OR_RETURN(ls, load(target));
    times.push_back(NowSeconds() - l0);
    ++res->loads;
  }
  res->load_seconds += Median(std::move(times));
  res->bytes_read += ls.bytes_read;
  res->bytes_decoded += ls.bytes_decoded;
  res->bytes_needed += ls.bytes_needed;
  res->cooperative = res->cooperative || ls.cooperative;
  res->bytes_from_storage += ls.cooperative ? ls.bytes_from_storage : ls.bytes_read;
  res->bytes_from_peers += ls.bytes_from_peers;
  res->bytes_for_peers += ls.bytes_for_peers;
  res->peer_failovers += ls.peer_failovers;
  for (size_t i = 0; i < boxes.size(); ++i) {
    int64_t first = -1;
    const int64_t bad = CheckSynthetic(*boxes[i].first, boxes[i].second, seed, buffers[i].data(), &first);
    res->elements += boxes[i].second.Volume();
    if (bad > 0 && res->first_mismatch.empty()) {
      res->first_mismatch = StrCat("rank ", r, " tensor '", boxes[i].first->fqn, "' box ", boxes[i].second.ToString(),
                                   " element ", first);
    }
    res->mismatches += bad;
  }
  return absl::OkStatus();
}

absl::StatusOr<SyntheticModel> ModelFor(const SynthMeta& meta, const Mesh& mesh, size_t tensors_in_step, int64_t step) {
  CKPT_ASSIGN_OR_RETURN(SyntheticModel model, BuildSyntheticModel(meta.model, mesh));
  if (model.tensors.size() != tensors_in_step) {
    return absl::FailedPreconditionError(StrCat("the model rebuilt for mesh ", mesh.ToString(), " has ",
                                                model.tensors.size(), " tensors but step ", step, " has ",
                                                tensors_in_step));
  }
  return model;
}

}  // namespace

absl::StatusOr<SyntheticOptions> SyntheticOptionsOf(const std::map<std::string, std::string>& metadata, int64_t step,
                                                    uint64_t* seed) {
  CKPT_ASSIGN_OR_RETURN(SynthMeta meta, MetaFrom(metadata, step));
  if (seed != nullptr) *seed = meta.seed;
  return meta.model;
}

absl::StatusOr<RestoreCheckResult> RestoreCheck(Storage& storage, int64_t step, const Mesh& mesh,
                                                const LoadOptions& options, int load_passes) {
  const double t0 = NowSeconds();
  // Not owned: the caller keeps `storage` alive for the whole check.
  CKPT_ASSIGN_OR_RETURN(
      std::unique_ptr<StepReader> reader,
      StepReader::Open(std::shared_ptr<Storage>(std::shared_ptr<Storage>(), &storage), step, options.allow_fallback));
  step = reader->step();
  RestoreCheckResult res;
  res.damage_note = reader->damage_note();
  res.load_seconds = NowSeconds() - t0;  // finding and reading the manifest is part of a load
  CKPT_ASSIGN_OR_RETURN(SynthMeta meta, MetaFrom(reader->metadata(), step));
  CKPT_ASSIGN_OR_RETURN(SyntheticModel model, ModelFor(meta, mesh, reader->tensors().size(), step));
  res.step = step;
  res.ranks = static_cast<int>(mesh.NumRanks());
  res.tensors = static_cast<int64_t>(model.tensors.size());
  res.saved_mesh = meta.saved_mesh;
  for (int64_t r = 0; r < mesh.NumRanks(); ++r) {
    CKPT_RETURN_IF_ERROR(CheckRank(
        model, mesh, r, meta.seed,
        [&](const State& target) { return reader->Load(target, static_cast<int>(r), options); }, &res,
        std::max(1, load_passes)));
  }
  res.seconds = NowSeconds() - t0;
  return res;
}

absl::StatusOr<RestoreCheckResult> RestoreCheckCollective(std::shared_ptr<Storage> storage, int64_t step,
                                                          const Mesh& mesh, std::shared_ptr<Communicator> comm,
                                                          const LoadOptions& options,
                                                          std::shared_ptr<LoadExchange> exchange) {
  const double t0 = NowSeconds();
  const double timeout = 600;
  if (comm->size() != mesh.NumRanks()) {
    return absl::InvalidArgumentError(StrCat("mesh ", mesh.ToString(), " has ", mesh.NumRanks(),
                                             " ranks but the job has ", comm->size(), " processes"));
  }
  // The leader reads the manifest's metadata once and shares it.
  std::string header;
  if (comm->rank() == 0) {
    auto reader = StepReader::Open(storage, step);
    if (reader.ok()) {
      ByteWriter w;
      w.SVar((*reader)->step());
      w.Var((*reader)->tensors().size());
      w.Var((*reader)->metadata().size());
      for (const auto& [k, v] : (*reader)->metadata()) {
        w.Str(k);
        w.Str(v);
      }
      header = "+" + w.Take();
    } else {
      header = StrCat("!", reader.status().message());
    }
  }
  CKPT_ASSIGN_OR_RETURN(header, comm->Broadcast(header, timeout));
  if (header.empty() || header[0] == '!') {
    return absl::FailedPreconditionError(header.empty() ? "no header" : header.substr(1));
  }
  ByteReader r(std::string_view(header).substr(1), "restore-check header");
  step = r.SVar();
  const uint64_t tensors = r.Var();
  std::map<std::string, std::string> metadata;
  const uint64_t n = r.Count(1 << 20, "metadata");
  for (uint64_t i = 0; i < n && r.ok(); ++i) {
    std::string k = r.Str();
    metadata[k] = r.Str();
  }
  if (!r.ok()) return r.status();
  CKPT_ASSIGN_OR_RETURN(SynthMeta meta, MetaFrom(metadata, step));
  CKPT_ASSIGN_OR_RETURN(SyntheticModel model, ModelFor(meta, mesh, tensors, step));

  CheckpointerOptions o;
  o.storage = storage;
  o.rank = comm->rank();
  o.world_size = comm->size();
  o.communicator = comm;
  o.load_exchange = std::move(exchange);
  o.gc_on_open = false;                // a checker never changes the root
  o.engine_options.staging_bytes = 1;  // this process only loads
  CKPT_ASSIGN_OR_RETURN(auto cp, Checkpointer::Open(o));
  RestoreCheckResult res;
  res.step = step;
  res.ranks = static_cast<int>(mesh.NumRanks());
  res.tensors = static_cast<int64_t>(model.tensors.size());
  res.saved_mesh = meta.saved_mesh;
  CKPT_RETURN_IF_ERROR(CheckRank(
      model, mesh, comm->rank(), meta.seed, [&](const State& target) { return cp->Load(target, step, options); }, &res,
      1, true));
  // Sum every rank's figures on the leader.
  ByteWriter w;
  w.SVar(res.elements);
  w.SVar(res.mismatches);
  w.SVar(res.bytes_read);
  w.SVar(res.bytes_decoded);
  w.SVar(res.bytes_needed);
  w.SVar(res.loads);
  w.Str(res.first_mismatch);
  w.SVar(res.cooperative ? 1 : 0);
  w.SVar(res.bytes_from_storage);
  w.SVar(res.bytes_from_peers);
  w.SVar(res.bytes_for_peers);
  w.SVar(res.peer_failovers);
  CKPT_ASSIGN_OR_RETURN(std::vector<std::string> all, comm->Gather(w.Take(), timeout));
  if (comm->rank() == 0) {
    RestoreCheckResult sum = res;
    sum.elements = sum.mismatches = sum.bytes_read = sum.bytes_decoded = sum.bytes_needed = sum.loads = 0;
    sum.bytes_from_storage = sum.bytes_from_peers = sum.bytes_for_peers = sum.peer_failovers = 0;
    sum.first_mismatch.clear();
    size_t cooperating = 0;  // ranks whose load was cooperative
    for (const std::string& msg : all) {
      ByteReader rr(msg, "restore-check result");
      sum.elements += rr.SVar();
      sum.mismatches += rr.SVar();
      sum.bytes_read += rr.SVar();
      sum.bytes_decoded += rr.SVar();
      sum.bytes_needed += rr.SVar();
      sum.loads += rr.SVar();
      std::string first = rr.Str();
      if (sum.first_mismatch.empty()) sum.first_mismatch = first;
      cooperating += rr.SVar() != 0 ? 1 : 0;
      sum.bytes_from_storage += rr.SVar();
      sum.bytes_from_peers += rr.SVar();
      sum.bytes_for_peers += rr.SVar();
      sum.peer_failovers += rr.SVar();
      if (!rr.ok()) return rr.status();
    }
    sum.cooperative = cooperating == all.size();
    res = sum;
  }
  res.seconds = NowSeconds() - t0;
  return res;
}

absl::StatusOr<SynthSaveResult> CombineSaveResults(Communicator& comm, const SynthSaveResult& mine) {
  ByteWriter w;
  w.SVar(mine.bytes_logical);
  w.SVar(mine.bytes_stored);
  w.SVar(mine.bytes_written);
  for (double v : {mine.stall_max_s, mine.stall_total_s, mine.write_s, mine.commit_s, mine.generate_s}) {
    w.U64(std::bit_cast<uint64_t>(v));
  }
  CKPT_ASSIGN_OR_RETURN(std::vector<std::string> all, comm.Gather(w.Take(), 600));
  SynthSaveResult sum = mine;
  if (comm.rank() != 0) return sum;
  sum = SynthSaveResult{};
  sum.step = mine.step;
  sum.ranks = comm.size();
  for (const std::string& msg : all) {
    ByteReader r(msg, "save result");
    sum.bytes_logical += r.SVar();
    sum.bytes_stored += r.SVar();
    sum.bytes_written += r.SVar();
    const double stall = std::bit_cast<double>(r.U64());
    const double stall_total = std::bit_cast<double>(r.U64());
    const double write = std::bit_cast<double>(r.U64());
    const double commit = std::bit_cast<double>(r.U64());
    const double generate = std::bit_cast<double>(r.U64());
    if (!r.ok()) return r.status();
    sum.stall_max_s = std::max(sum.stall_max_s, stall);
    sum.stall_total_s += stall_total;
    sum.write_s = std::max(sum.write_s, write);
    sum.commit_s = std::max(sum.commit_s, commit);
    sum.generate_s = std::max(sum.generate_s, generate);
  }
  return sum;
}

}  // namespace ckpt::tools
