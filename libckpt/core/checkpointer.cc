#include "ckpt/checkpointer.h"

#include <algorithm>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "ckpt/experimental/commit_arbiter.h"
#include "ckpt/version.h"
#include "core/claim.h"
#include "core/collective_plan.h"
#include "core/delta_tracker.h"
#include "core/load_step.h"
#include "core/publish.h"
#include "core/root.h"
#include "core/rule_commit.h"
#include "core/save_handle.h"
#include "core/save_pieces.h"
#include "core/storage_arbiter.h"
#include "format/manifest.h"
#include "format/root_files.h"
#include "pipeline/loader.h"
#include "pipeline/save_engine.h"
#include "storage/capabilities.h"
#include "util/bytes.h"
#include "util/clock.h"
#include "util/errors.h"
#include "util/log.h"
#include "util/strings.h"
#include "util/task_pool.h"

namespace ckpt {

const char* LibraryVersion() { return CKPT_VERSION_STRING; }

class Checkpointer::Impl {
 public:
  explicit Impl(CheckpointerOptions options, SaveLevel level = SaveLevel::kDurable)
      : options_(std::move(options)), level_(level) {}

  // The committer (the last member) runs what is queued and stops first.
  ~Impl() { (void)WaitAll(); }

  absl::Status Init() {
    if (options_.world_size < 1 || options_.rank < 0 || options_.rank >= options_.world_size) {
      return absl::InvalidArgumentError(
          StrCat("rank ", options_.rank, " is not within world size ", options_.world_size));
    }
    if (options_.zstd_level < -7 || options_.zstd_level > 22) {
      return absl::InvalidArgumentError(StrCat("zstd level ", options_.zstd_level, " is outside -7..22"));
    }
    if (options_.mesh) CKPT_RETURN_IF_ERROR(CheckMesh(*options_.mesh));
    if (options_.storage) {
      storage_ = options_.storage;
    } else {
      CKPT_ASSIGN_OR_RETURN(storage_, OpenStorage(options_.uri));
    }
    // A tiered root may drop a step's local copy once its manifest drained.
    if (auto* tiers = FindCapability<TierEviction>(*storage_)) tiers->CompleteWhenHolding(kManifestName);
    container_ = ResolveContainer(options_.container, storage_->uri());
    if (container_ == DataContainer::kHdf5 && LocalPath(*storage_, kLatestName).empty()) {
      return absl::InvalidArgumentError(
          StrCat(storage_->uri(), ": HDF5 data files need a root of local files (file://, posix://, hdf5://)"));
    }
    if (options_.engine) {
      engine_ = options_.engine;
    } else {
      CKPT_ASSIGN_OR_RETURN(engine_, SaveEngine::Create(options_.engine_options));
    }
    arbiter_ = options_.arbiter ? options_.arbiter : std::make_shared<StorageArbiter>(storage_, options_.world_size);
    return absl::OkStatus();
  }

  // Starts a save; counts it, or counts and logs why it could not start.
  absl::StatusOr<SaveHandle> Save(int64_t step, const State& state, const SaveOptions& save_options) {
    ScopedLogSink log(&options_.log);
    absl::StatusOr<SaveHandle> h = StartSave(step, state, save_options);
    if (!h.ok()) {
      LogFailedSave(step, h.status());
    } else {
      std::lock_guard<std::mutex> lock(counters_mu_);
      ++counts_.started;
    }
    return h;
  }

  absl::StatusOr<SaveHandle> StartSave(int64_t step, const State& state, const SaveOptions& save_options) {
    const double t0 = NowSeconds();
    CKPT_RETURN_IF_ERROR(CheckSaveRequest(step, save_options));
    std::lock_guard<std::mutex> save_lock(save_mu_);
    const std::string dir = StepDir(step);
    // The step's one writer: no byte is written before the claim is ours.
    ClaimRequest claim;
    claim.step = step;
    claim.rank = options_.rank;
    claim.world_size = options_.world_size;
    claim.allow_older_step = save_options.allow_older_step;
    claim.save_id = save_options.save_id;
    claim.claim_timeout_s = options_.commit_timeout_s;
    claim.collective_timeout_s = options_.collective_timeout_s;
    auto take_claim = [this, claim, dir](SaveJob& j) -> absl::Status {
      ScopedLogSink log(&options_.log);  // on the engine's thread
      CKPT_ASSIGN_OR_RETURN(j.save_id, ClaimForSave(*storage_, options_.communicator.get(), claim));
      // Leftovers of an earlier attempt at this step by this rank.
      (void)storage_->Remove(StrCat(dir, "/", ReportName(options_.rank)));
      (void)storage_->Remove(StrCat(dir, "/", FailedName(options_.rank)));
      if (IsLeader()) (void)storage_->Remove(StrCat(dir, "/", kAbortedName));
      return absl::OkStatus();
    };

    auto shared = std::make_shared<SaveHandle::Shared>();
    shared->step = step;
    shared->t_start = t0;
    shared->storage = storage_;

    auto job = std::make_shared<SaveJob>();
    job->storage = storage_;
    job->writer = MakeContainerWriter(container_);
    job->data_path = StrCat(dir, "/", job->writer->FileName(options_.rank));
    job->rank = options_.rank;
    job->step = step;
    job->codec = job->writer->frames_blocks() ? options_.codec : Codec::kNone;
    job->zstd_level = options_.zstd_level;
    job->direct = options_.direct_io;
    job->counters = shared->counters;
    // A communicator that must be called from this thread only (MPI's: the
    // application chose its thread level) has the claim taken first.
    const bool claim_first = options_.communicator && !options_.communicator->CallableFromAnyThread();
    if (claim_first) CKPT_RETURN_IF_ERROR(take_claim(*job));

    // Which replica writes each box that several ranks hold: with layouts,
    // each rank works it out alone (no collective); for boxes given one by
    // one, the leader does from every rank's list (with a communicator).
    // Both follow plan/'s rule.
    std::vector<bool> writes(state.shards().size(), true);
    const int tiles = job->writer->tiles_shards() ? options_.max_column_tiles : 1;
    std::shared_ptr<const SaveRules> rules;
    if (state.LaidOut()) {
      CKPT_RETURN_IF_ERROR(
          rank_rules_.Update(state, options_.rank, options_.world_size, options_.mesh, engine_->block_size(), tiles));
      writes = rank_rules_.writes();
      // The leader builds the manifest from the rules where every block is
      // framed (.ckd): the rank then reports a summary of its file. A save
      // with deltas reports its chunks, each naming its base.
      if (job->writer->frames_blocks() && !delta_.enabled()) rules = rank_rules_.rules();
    } else if (options_.communicator) {
      CKPT_ASSIGN_OR_RETURN(
          writes, AgreeOnWriters(*options_.communicator, state, options_.collective_timeout_s, &writer_cache_));
    }
    if (!claim_first) {
      // Claimed while the shards are staged (after the collective above, so
      // one collective runs at a time): the claim's fsyncs, and on the other
      // ranks the wait for the leader's verdict, need not lengthen the stall.
      job->before_writes = take_claim;
    }
    // Replica hashes for the arbiter's silent-data-corruption check, taken
    // now, while the shards cannot change.
    auto replicas = std::make_shared<std::vector<ReplicaHash>>();
    if (options_.arbiter && options_.hash_replicas) *replicas = HashReplicas(state, writes);
    // Pieces: non-empty shards (large ones as column tiles), then blobs.
    SavePieces pieces = BuildSavePieces(state, writes, tiles, options_.rank);
    // Which tiles are deltas, against which base (ckpt data files only).
    std::vector<std::optional<ManifestBase>> bases;
    if (delta_.enabled() && job->writer->frames_blocks()) {
      CKPT_ASSIGN_OR_RETURN(bases, delta_.Plan(step, pieces, &job->keep_alive));
    }
    auto tile_blocks = std::make_shared<std::vector<std::pair<uint64_t, uint64_t>>>();
    // The report skeleton needs the piece -> block mapping from Run.
    auto report = std::make_shared<Manifest>(NewRankReport(
        step, options_.world_size, job->codec, rules ? std::optional<Mesh>(rules->mesh) : options_.mesh, save_options));
    std::shared_ptr<RankSummary> summary;
    if (rules) {
      summary = std::make_shared<RankSummary>();
      summary->rank = options_.rank;
      summary->blobs = SummaryBlobsOf(state);
    }

    job->on_finished = [this, shared, report, replicas, rules, summary, tile_blocks](SaveJob& j, absl::Status s) {
      OnDataFinished(j, std::move(s), shared, report, std::move(*replicas), rules, summary, *tile_blocks);
    };
    {
      std::lock_guard<std::mutex> lock(mu_);
      inflight_.push_back(shared);
    }
    absl::Status run = engine_->Run(job, pieces.pieces);
    if (!run.ok()) {
      // The handle gets a copy of its own: it may be released on the
      // engine's finalizer thread while the caller reads what is returned.
      shared->SetDone(absl::Status(run.code(), run.message()), NowSeconds() - t0);
      delta_.Outcome(step, false);
      if (job->save_id == 0) {
        // Not claimed: the save never began, as when claiming first; the
        // error is Save's alone, not one of a save to wait for.
        std::lock_guard<std::mutex> lock(mu_);
        std::erase(inflight_, shared);
      }
      return run;
    }
    const uint64_t save_id = job->save_id;
    const double stall = NowSeconds() - t0;
    // Fill the report's chunks now that blocks are numbered (the job may
    // already be finishing, so this happens under the report's guard).
    {
      std::lock_guard<std::mutex> lock(report_mu_);
      report->stall_s = stall;
      if (!summary) FillReport(pieces, state, options_.rank, report.get(), bases.empty() ? nullptr : &bases);
      if (delta_.enabled()) {
        for (size_t i = 0; i < pieces.tiles.size(); ++i) {
          tile_blocks->push_back({pieces.pieces[i].first_block, pieces.pieces[i].block_count});
        }
      }
      report_ready_[report.get()] = true;
    }
    report_cv_.notify_all();
    {
      std::lock_guard<std::mutex> lock(shared->mu);
      shared->stats.step = step;
      shared->stats.save_id = save_id;
      shared->stats.stall_s = stall;
      // What this rank writes: a replica another rank writes is not its.
      int64_t logical = 0;
      for (const SavePiece& p : pieces.pieces) logical += static_cast<int64_t>(p.bytes);
      shared->stats.bytes_logical = logical;
    }
    return SaveHandle(shared);
  }

  absl::StatusOr<LoadStats> Load(const State& target, int64_t step, const LoadOptions& options) {
    ScopedLogSink log(&options_.log);
    const MemoryReads before = MemoryReadsOf(*storage_);
    absl::StatusOr<LoadStats> stats =
        !options_.communicator ? LoadStepAlone(*storage_, target, step, options_.rank, options)
                               : LoadStepTogether(*storage_, *options_.communicator, target, step, options_.rank,
                                                  options, options_.collective_timeout_s, options_.load_exchange.get());
    if (!stats.ok()) return stats;
    const MemoryReads after = MemoryReadsOf(*storage_);
    stats->level = level_;
    stats->bytes_from_memory = after.own - before.own;
    stats->bytes_from_peers += after.peers - before.peers;
    stats->bytes_rebuilt_from_parity = after.rebuilt - before.rebuilt;
    stats->memory_pieces_lost = after.pieces_lost - before.pieces_lost;
    // A cooperative load counted what it read from storage itself.
    if (!stats->cooperative) stats->bytes_from_storage = level_ == SaveLevel::kMemory ? 0 : stats->bytes_read;
    return stats;
  }

  absl::Status WaitAll() {
    std::vector<std::shared_ptr<SaveHandle::Shared>> handles;
    {
      std::lock_guard<std::mutex> lock(mu_);
      handles = inflight_;
    }
    absl::Status first;
    for (auto& h : handles) {
      absl::Status s = SaveHandle(h).Wait();
      if (first.ok()) first = s;
    }
    std::lock_guard<std::mutex> lock(mu_);
    std::erase_if(inflight_, [](const auto& h) {
      std::lock_guard<std::mutex> l(h->mu);
      return h->done;
    });
    return first;
  }

  absl::StatusOr<GcReport> CollectGarbage(bool dry_run, int64_t just_committed = -1) {
    ScopedLogSink log(&options_.log);
    GcOptions gc;
    gc.retention = options_.retention;
    gc.dry_run = dry_run;
    if (just_committed >= 0) gc.protect.insert(just_committed);
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const auto& h : inflight_) {
        std::lock_guard<std::mutex> hl(h->mu);
        if (!h->done) gc.protect.insert(h->step);
      }
    }
    return CollectGarbageIn(*storage_, gc);
  }

  bool IsLeader() const { return options_.rank == 0; }

  SaveCounts counts() const {
    std::lock_guard<std::mutex> lock(counters_mu_);
    return counts_;
  }

  Storage& storage() { return *storage_; }
  const CheckpointerOptions& options() const { return options_; }
  void SetDeltaOptions(const DeltaOptions& delta) {
    std::lock_guard<std::mutex> lock(save_mu_);  // between saves
    delta_.SetOptions(delta);
  }

 private:
  // Engine finalizer thread: this rank's data file is durable (or failed).
  void OnDataFinished(SaveJob& j, absl::Status s, std::shared_ptr<SaveHandle::Shared> shared,
                      std::shared_ptr<Manifest> report, std::vector<ReplicaHash> replicas,
                      std::shared_ptr<const SaveRules> rules, std::shared_ptr<RankSummary> summary,
                      const std::vector<std::pair<uint64_t, uint64_t>>& tile_blocks) {
    ScopedLogSink log(&options_.log);
    const std::string dir = StepDir(j.step);
    const double write_s = NowSeconds() - shared->t_start;
    bool lost_claim = false;
    if (s.ok()) {
      {
        std::unique_lock<std::mutex> lock(report_mu_);
        report_cv_.wait(lock, [&] { return report_ready_.count(report.get()) > 0; });
        report_ready_.erase(report.get());
      }
      CompleteReport(j, write_s, report.get());
      if (!tile_blocks.empty()) {
        // What each delta stored, against its base's whole size.
        std::vector<uint64_t> stored(tile_blocks.size(), 0);
        for (size_t i = 0; i < tile_blocks.size(); ++i) {
          for (uint64_t b = 0; b < tile_blocks[i].second; ++b)
            stored[i] += j.index[tile_blocks[i].first + b].stored_len;
        }
        delta_.Written(j.step, j.save_id, stored);
      }
      {
        std::lock_guard<std::mutex> lock(shared->mu);
        shared->stats.bytes_stored = j.bytes_stored;
        shared->stats.bytes_written = static_cast<int64_t>(j.file_size);
        shared->stats.blocks = static_cast<int64_t>(j.index.size());
      }
      // Nothing goes into a step this save no longer holds.
      s = CheckOwnClaim(*storage_, j.step, j.save_id);
      lost_claim = LostClaim(s);
      // The report's atomic write also makes the data file's directory
      // entry durable (same directory).
      if (s.ok()) {
        std::string bytes;
        if (summary) {
          summary->binding = RuleBinding(j.step, j.save_id, rules->hash);
          SummarizeFile(DataFileEntry(j), summary.get());
          summary->stall_s = static_cast<float>(report->stall_s);
          summary->write_s = static_cast<float>(write_s);
          summary->bytes_stored = static_cast<uint64_t>(j.bytes_stored);
          bytes = EncodeRankSummary(*summary);
        } else {
          bytes = EncodeManifest(*report);
        }
        s = storage_->PutAtomic(StrCat(dir, "/", ReportName(j.rank)), AsBytesView(bytes));
      }
    } else {
      std::lock_guard<std::mutex> lock(report_mu_);
      report_ready_.erase(report.get());
    }
    {
      SaveVote vote;
      vote.ok = s.ok();
      vote.save_id = j.save_id;
      vote.error = std::string(s.message());
      vote.write_s = write_s;
      vote.bytes = static_cast<int64_t>(j.file_size);
      vote.replicas = std::move(replicas);
      {
        std::lock_guard<std::mutex> lock(report_mu_);
        vote.stall_s = report->stall_s;
      }
      absl::Status v = arbiter_->Vote(j.rank, j.step, vote);
      if (s.ok() && !v.ok()) s = Annotate(v, "voting on the commit");
    }
    if (!s.ok()) {
      if (!lost_claim) {
        (void)storage_->PutAtomic(
            StrCat(dir, "/", FailedName(j.rank)),
            AsBytesView(TagMarker(j.save_id, std::string_view(s.message().data(), s.message().size()))));
        if (IsLeader())
          (void)AbortStep(*storage_, j.step, j.save_id, absl::AbortedError(StrCat("leader failed: ", s.message())));
      }
      LogFailedSave(j.step, s);
      delta_.Outcome(j.step, false);
      shared->SetDone(s, NowSeconds() - shared->t_start);
      return;
    }
    shared->SetDurable(absl::OkStatus(), write_s);
    const int64_t step = j.step;
    const uint64_t id = j.save_id;
    committer_.Submit([this, step, id, shared, rules, report] {
      ScopedLogSink log(&options_.log);
      absl::Status st = IsLeader() ? CollectAndPublish(step, id, rules.get(), *report) : AwaitOutcome(step);
      // The commit time ends here; removing older steps is not part of it.
      const double commit_s = NowSeconds() - shared->t_start;
      if (st.ok() && IsLeader()) CollectAfterCommit(step);
      if (st.ok() && level_ == SaveLevel::kMemory) DropOlderMemorySteps(step);
      if (!st.ok()) {
        LogFailedSave(step, st);
      } else {
        std::lock_guard<std::mutex> lock(counters_mu_);
        ++counts_.committed;
      }
      delta_.Outcome(step, st.ok());
      shared->SetDone(st, commit_s);
    });
  }

  // Leader: waits for the arbiter's decision (every rank's report on the
  // storage, or the coordinator's votes), then commits and says so.
  absl::Status CollectAndPublish(int64_t step, uint64_t id, const SaveRules* rules, const Manifest& head) {
    absl::Status decided = arbiter_->AwaitDecision(step, options_.commit_timeout_s);
    if (!decided.ok()) return AbortStep(*storage_, step, id, decided);
    const RuleCommit by_rules{rules, &rule_manifest_, &head};
    absl::Status published = PublishStep(*storage_, step, id, options_.world_size, rules ? &by_rules : nullptr);
    // Retention runs after the other ranks are told (the caller), and never
    // removes the step just committed, nor a save of this process still in
    // flight.
    absl::Status told = arbiter_->Published(step, published);
    if (published.ok() && !told.ok()) {
      return Annotate(told, StrCat("step ", step, " is committed, but telling the arbiter failed"));
    }
    return published;
  }

  // Memory level, every rank: once `step` is committed, the older steps in
  // this process's memory (its own files and the copies it holds for
  // others) are no longer needed; removing them here also removes this
  // rank's copies from its replica holders. Steps still in flight are newer.
  // The bases of the step's deltas stay.
  void DropOlderMemorySteps(int64_t step) {
    std::set<int64_t> bases;
    auto m = ReadManifest(*storage_, step);
    if (!m.ok()) return;  // keep everything rather than a base it needs
    for (const ManifestBase& b : m->bases) bases.insert(b.step);
    auto entries = storage_->List("");
    if (!entries.ok()) return;
    for (const DirEntry& e : *entries) {
      std::optional<int64_t> s = e.is_dir ? ParseStepDir(e.name) : std::nullopt;
      if (s && *s < step && !bases.count(*s)) (void)storage_->RemoveAll(e.name);
    }
  }

  // Retention after a commit, said in the log: what it removed and why,
  // or why it could not (the step stays committed either way).
  void CollectAfterCommit(int64_t step) {
    auto gc = CollectGarbage(false, step);
    if (!gc.ok()) {
      LogWarning(StrCat("step ", step, " is committed, but applying retention failed: ", gc.status().ToString()));
      return;
    }
    for (const std::string& why : gc->reasons) LogInfo(why);
  }

  // A save that did not commit is also said in the log: its handle may
  // never be waited on.
  void LogFailedSave(int64_t step, const absl::Status& why) {
    {
      std::lock_guard<std::mutex> lock(counters_mu_);
      ++counts_.failed;
      counts_.last_failed_step = step;
      counts_.last_error = why.ToString();
    }
    LogWarning(
        StrCat(SaveLevelName(level_), " save of step ", step, " by rank ", options_.rank, " failed: ", why.ToString()));
  }

  // Non-leader: waits until the leader committed or aborted the step.
  absl::Status AwaitOutcome(int64_t step) { return arbiter_->AwaitOutcome(step, options_.commit_timeout_s + 30); }

  CheckpointerOptions options_;
  const SaveLevel level_;
  mutable std::mutex counters_mu_;
  SaveCounts counts_;  // REQUIRES: counters_mu_
  std::shared_ptr<Storage> storage_;
  DataContainer container_ = DataContainer::kCkpt;
  /// The coordinator's, or the shared storage's (StorageArbiter).
  std::shared_ptr<CommitArbiter> arbiter_;
  std::shared_ptr<SaveEngine> engine_;
  std::mutex save_mu_;
  WriterCache writer_cache_;    // REQUIRES: save_mu_
  RankRules rank_rules_;        // REQUIRES: save_mu_
  RuleManifest rule_manifest_;  // the committer thread's
  DeltaTracker delta_{options_.delta};

  std::mutex report_mu_;
  std::condition_variable report_cv_;
  std::map<const Manifest*, bool> report_ready_;

  std::mutex mu_;
  std::vector<std::shared_ptr<SaveHandle::Shared>> inflight_;  // REQUIRES: mu_
  // Commits saves in the order their writes finished: one thread, last so
  // that it stops before anything it uses goes.
  TaskPool committer_{1};
};

const char* SaveLevelName(SaveLevel level) { return level == SaveLevel::kMemory ? "memory" : "durable"; }

absl::StatusOr<std::unique_ptr<Checkpointer>> Checkpointer::Open(CheckpointerOptions options) {
  std::unique_ptr<Impl> memory;
  if (options.memory_storage) {
    // One staging arena and one set of threads for both levels.
    if (!options.engine) {
      CKPT_ASSIGN_OR_RETURN(options.engine, SaveEngine::Create(options.engine_options));
    }
    CheckpointerOptions m = options;
    m.storage = options.memory_storage;
    m.uri = options.memory_storage->uri();
    m.arbiter = options.memory_arbiter;
    m.container = DataContainer::kCkpt;
    m.retention = RetentionPolicy{};
    m.gc_on_open = false;
    m.memory_storage.reset();
    m.memory_arbiter.reset();
    memory = std::make_unique<Impl>(std::move(m), SaveLevel::kMemory);
    CKPT_RETURN_IF_ERROR(memory->Init());
  }
  auto impl = std::make_unique<Impl>(std::move(options));
  CKPT_RETURN_IF_ERROR(impl->Init());
  ScopedLogSink log(&impl->options().log);
  if (impl->IsLeader() && impl->options().gc_on_open) {
    CKPT_RETURN_IF_ERROR(CleanRootAtJobStart(impl->storage(), impl->options().retention));
  }
  if (impl->options().communicator && impl->options().gc_on_open) {
    // No rank may start writing before the leader's cleanup is done.
    CKPT_RETURN_IF_ERROR(impl->options().communicator->Barrier(impl->options().collective_timeout_s));
  }
  return std::unique_ptr<Checkpointer>(new Checkpointer(std::move(impl), std::move(memory)));
}

absl::StatusOr<int64_t> LatestCommittedStep(Storage& storage) { return ResolveLatest(storage); }

bool IsCheckpointRootEntry(std::string_view name) {
  return name.starts_with(kLatestName) || ParseStepDir(name).has_value();
}

absl::StatusOr<int64_t> ReadLatestPointer(Storage& storage) {
  CKPT_ASSIGN_OR_RETURN(const std::string text, storage.GetAll(kLatestName));
  return DecodeLatest(text);
}

absl::StatusOr<LoadStats> LoadCheckpoint(Storage& storage, const State& target, int64_t step, int rank,
                                         const LoadOptions& options) {
  return LoadStepAlone(storage, target, step, rank, options);
}

absl::StatusOr<std::vector<StepInfo>> ListCheckpointSteps(Storage& storage) { return ListStepsIn(storage); }

absl::StatusOr<StepInfo> DescribeCheckpointStep(Storage& storage, int64_t step) {
  auto ex = ExamineStep(storage, step, GridChunks::kGridsOnly);
  if (ex.ok()) return std::move(ex->info);
  if (absl::IsNotFound(ex.status()) || absl::IsDeadlineExceeded(ex.status())) return ex.status();
  // As ListCheckpointSteps has it: a step the storage could not read.
  StepInfo info;
  info.step = step;
  info.state = StepState::kUnreadable;
  info.damage = std::string(ex.status().message());
  return info;
}

Checkpointer::Checkpointer(std::unique_ptr<Impl> impl, std::unique_ptr<Impl> memory)
    : impl_(std::move(impl)), memory_(std::move(memory)) {}
Checkpointer::~Checkpointer() = default;

Checkpointer::Impl* Checkpointer::For(SaveLevel level) const {
  return level == SaveLevel::kMemory ? memory_.get() : impl_.get();
}

absl::StatusOr<SaveHandle> Checkpointer::Save(int64_t step, const State& state, const SaveOptions& options) {
  Impl* impl = For(options.level);
  if (impl == nullptr) {
    return absl::FailedPreconditionError(
        StrCat("step ", step, ": a memory-level save needs CheckpointerOptions::memory_storage"));
  }
  return impl->Save(step, state, options);
}

absl::StatusOr<LoadStats> Checkpointer::Load(const State& target, int64_t step, const LoadOptions& options) {
  Impl* impl = For(options.level);
  if (impl == nullptr) {
    return absl::FailedPreconditionError("a memory-level load needs CheckpointerOptions::memory_storage");
  }
  return impl->Load(target, step, options);
}

absl::StatusOr<int64_t> Checkpointer::LatestStep() { return LatestStep(SaveLevel::kDurable); }

absl::StatusOr<int64_t> Checkpointer::LatestStep(SaveLevel level) {
  Impl* impl = For(level);
  if (impl == nullptr)
    return absl::FailedPreconditionError("the memory level needs CheckpointerOptions::memory_storage");
  return ResolveLatest(impl->storage());
}

absl::StatusOr<std::vector<StepInfo>> Checkpointer::ListSteps() { return ListStepsIn(impl_->storage()); }

absl::StatusOr<GcReport> Checkpointer::CollectGarbage(bool dry_run) { return impl_->CollectGarbage(dry_run); }

absl::Status Checkpointer::SetDeltaOptions(const DeltaOptions& delta) {
  if (delta.chain < 0 || !(delta.rebase_ratio > 0)) {
    return absl::InvalidArgumentError(
        StrCat("delta chain ", delta.chain, " must be >= 0 and rebase ratio ", delta.rebase_ratio, " > 0"));
  }
  impl_->SetDeltaOptions(delta);
  if (memory_) memory_->SetDeltaOptions(delta);
  return absl::OkStatus();
}

SaveCounts Checkpointer::Counts(SaveLevel level) const {
  Impl* impl = For(level);
  return impl == nullptr ? SaveCounts{} : impl->counts();
}

absl::Status Checkpointer::WaitAll() {
  absl::Status memory = memory_ ? memory_->WaitAll() : absl::OkStatus();
  absl::Status durable = impl_->WaitAll();
  return durable.ok() ? memory : durable;
}

Storage& Checkpointer::storage() { return impl_->storage(); }

Storage* Checkpointer::memory_storage() { return memory_ ? &memory_->storage() : nullptr; }

const CheckpointerOptions& Checkpointer::options() const { return impl_->options(); }

}  // namespace ckpt
