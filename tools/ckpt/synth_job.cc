#include "synth_job.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/numbers.h"
#include "ckpt/verify.h"
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
  CKPT_ASSIGN_OR_RETURN(job->plan_, PlanSave(job->model_.tensors, job->options_.mesh));
  CKPT_ASSIGN_OR_RETURN(job->engine_, CreateSaveEngine(job->options_.engine));
  CKPT_ASSIGN_OR_RETURN(std::shared_ptr<Storage> storage, OpenStorage(job->options_.uri));
  const int world = static_cast<int>(job->options_.mesh.NumRanks());
  for (int r = 0; r < world; ++r) {
    CheckpointerOptions o;
    o.storage = storage;
    o.rank = r;
    o.world_size = world;
    o.codec = job->options_.codec;
    o.zstd_level = job->options_.zstd_level;
    o.engine = job->engine_;
    o.retention = job->options_.retention;
    o.mesh = job->options_.mesh;
    o.direct_io = job->options_.direct_io;
    o.commit_timeout_s = job->options_.commit_timeout_s;
    CKPT_ASSIGN_OR_RETURN(auto cp, Checkpointer::Open(o));
    job->ranks_.push_back(std::move(cp));
  }
  return job;
}

absl::Status SyntheticJob::SaveAsync(int64_t step, uint64_t seed) {
  if (InFlight()) return absl::FailedPreconditionError("a save is still in flight");
  pending_ = SynthSaveResult{};
  pending_.step = step;
  pending_.ranks = static_cast<int>(ranks_.size());
  SaveOptions so;
  so.metadata[kParams] = std::to_string(options_.model.params);
  so.metadata[kDType] = std::string(DTypeName(options_.model.dtype));
  so.metadata[kAdam] = options_.model.adam ? "1" : "0";
  so.metadata[kZero] = options_.model.zero ? "1" : "0";
  so.metadata[kSeed] = std::to_string(seed);
  so.metadata[kMesh] = options_.mesh.ToString();
  so.metadata[kLayers] = std::to_string(model_.layers);
  so.metadata[kExperts] = std::to_string(options_.model.experts);
  t_start_ = NowSeconds();
  rank_start_.clear();
  std::vector<std::vector<std::byte>> buffers;
  for (size_t r = 0; r < ranks_.size(); ++r) {
    const double g0 = NowSeconds();
    State state;
    buffers.clear();
    buffers.resize(plan_.by_rank[r].size());
    for (size_t i = 0; i < plan_.by_rank[r].size(); ++i) {
      const ChunkAssignment& c = plan_.chunks[plan_.by_rank[r][i]];
      const TensorSpec& spec = model_.tensors[c.tensor].spec;
      buffers[i].resize(static_cast<size_t>(c.box.Volume()) * DTypeSize(spec.dtype));
      FillSynthetic(spec, c.box, seed, buffers[i].data());
      CKPT_RETURN_IF_ERROR(state.AddShard(spec, c.box, buffers[i].data()));
    }
    const std::string rng = StrCat("rng-state rank ", r, " seed ", seed);
    CKPT_RETURN_IF_ERROR(state.AddBlob("rng", rng.data(), rng.size(), BlobScope::kRank));
    if (r == 0) {
      CKPT_RETURN_IF_ERROR(state.AddBlob("data_position", &step, sizeof(step), BlobScope::kGlobal));
    }
    pending_.generate_s += NowSeconds() - g0;
    rank_start_.push_back(NowSeconds());
    auto h = ranks_[r]->Save(step, state, so);
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
    // Per-rank times count from that rank's Save call; shift to the job's.
    const double offset = rank_start_[r] - t_start_;
    pending_.write_s = std::max(pending_.write_s, offset + st.write_s);
    pending_.commit_s = std::max(pending_.commit_s, offset + st.commit_s);
    pending_.bytes_stored += st.bytes_stored;
    pending_.bytes_written += st.bytes_written;
  }
  handles_.clear();
  if (!first.ok()) return first;
  return pending_;
}

absl::StatusOr<RestoreCheckResult> RestoreCheck(Storage& storage, int64_t step,
                                                const Mesh& mesh, const LoadOptions& options) {
  const double t0 = NowSeconds();
  if (step == kLatestStep) {
    CKPT_ASSIGN_OR_RETURN(step, LatestCommittedStep(storage));
  }
  CKPT_ASSIGN_OR_RETURN(CheckpointSummary summary, SummarizeStep(storage, step));
  auto get = [&](const char* key) -> absl::StatusOr<std::string> {
    auto it = summary.metadata.find(key);
    if (it == summary.metadata.end()) {
      return absl::FailedPreconditionError(StrCat(
          "step ", step, " was not written by `ckpt synth` (no ", key, " in its metadata)"));
    }
    return it->second;
  };
  SyntheticOptions model_opts;
  uint64_t seed = 0;
  {
    CKPT_ASSIGN_OR_RETURN(std::string params, get(kParams));
    CKPT_ASSIGN_OR_RETURN(std::string dtype, get(kDType));
    CKPT_ASSIGN_OR_RETURN(std::string adam, get(kAdam));
    CKPT_ASSIGN_OR_RETURN(std::string zero, get(kZero));
    CKPT_ASSIGN_OR_RETURN(std::string seed_text, get(kSeed));
    int64_t p = 0;
    if (!ParseInt64(params, &p) || !absl::SimpleAtoi(seed_text, &seed) || !ParseDType(dtype)) {
      return absl::DataLossError(StrCat("step ", step, ": malformed synth metadata"));
    }
    model_opts.params = p;
    model_opts.dtype = *ParseDType(dtype);
    model_opts.adam = adam == "1";
    model_opts.zero = zero == "1";
    // Written since the model stopped depending on the mesh; older steps
    // used the automatic layer count and no experts.
    int64_t v = 0;
    if (auto it = summary.metadata.find(kLayers); it != summary.metadata.end()) {
      if (!ParseInt64(it->second, &v)) return absl::DataLossError("malformed synth.layers");
      model_opts.layers = static_cast<int>(v);
    }
    if (auto it = summary.metadata.find(kExperts); it != summary.metadata.end()) {
      if (!ParseInt64(it->second, &v)) return absl::DataLossError("malformed synth.experts");
      model_opts.experts = static_cast<int>(v);
    }
  }
  CKPT_ASSIGN_OR_RETURN(SyntheticModel model, BuildSyntheticModel(model_opts, mesh));
  RestoreCheckResult res;
  res.step = step;
  res.ranks = static_cast<int>(mesh.NumRanks());
  res.tensors = static_cast<int64_t>(model.tensors.size());
  res.saved_mesh = summary.metadata.count(kMesh) ? summary.metadata[kMesh] : "";
  // Tensors must be the same set: the layout may differ, the model may not.
  if (model.tensors.size() != summary.tensors.size()) {
    return absl::FailedPreconditionError(StrCat(
        "the model rebuilt for mesh ", mesh.ToString(), " has ", model.tensors.size(),
        " tensors but step ", step, " has ", summary.tensors.size(),
        " (a pipeline depth above the layer count changes the model)"));
  }
  for (int64_t r = 0; r < mesh.NumRanks(); ++r) {
    State target;
    std::vector<std::vector<std::byte>> buffers;
    std::vector<std::pair<const TensorSpec*, Box>> boxes;
    for (const TensorLayout& t : model.tensors) {
      CKPT_ASSIGN_OR_RETURN(std::optional<Box> box, RankBox(t, mesh, r));
      if (!box || box->Empty()) continue;
      boxes.emplace_back(&t.spec, *box);
    }
    buffers.resize(boxes.size());
    for (size_t i = 0; i < boxes.size(); ++i) {
      buffers[i].assign(static_cast<size_t>(boxes[i].second.Volume()) *
                            DTypeSize(boxes[i].first->dtype),
                        std::byte{0xA5});
      CKPT_RETURN_IF_ERROR(target.AddShard(*boxes[i].first, boxes[i].second, buffers[i].data()));
    }
    CKPT_ASSIGN_OR_RETURN(LoadStats ls,
                          LoadCheckpoint(storage, target, step, static_cast<int>(r), options));
    res.bytes_read += ls.bytes_read;
    res.bytes_decoded += ls.bytes_decoded;
    res.bytes_needed += ls.bytes_needed;
    for (size_t i = 0; i < boxes.size(); ++i) {
      int64_t first = -1;
      const int64_t bad = CheckSynthetic(*boxes[i].first, boxes[i].second, seed,
                                         buffers[i].data(), &first);
      res.elements += boxes[i].second.Volume();
      if (bad > 0 && res.first_mismatch.empty()) {
        res.first_mismatch = StrCat("rank ", r, " tensor '", boxes[i].first->fqn, "' box ",
                                    boxes[i].second.ToString(), " element ", first);
      }
      res.mismatches += bad;
    }
  }
  res.seconds = NowSeconds() - t0;
  return res;
}

}  // namespace ckpt::tools
