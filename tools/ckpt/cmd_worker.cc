// ckpt worker: one process of an elastic training job driven by the
// coordinator. It trains a small synthetic model whose update is a pure
// function of (step, global index), so the state after N steps is known
// exactly whatever the mesh was, and a restore can be checked bit for bit.
// The demo and the failure tests run several of these and kill some.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>
#include <thread>

#include "ckpt/checkpointer.h"
#include "ckpt/coordinator.h"
#include "ckpt/interval.h"
#include "ckpt/peer.h"
#include "ckpt/preempt.h"
#include "commands.h"
#include "common/cli.h"
#include "common/elastic_model.h"
#include "common/net_addr.h"
#include "util/aligned_buffer.h"
#include "util/clock.h"
#include "util/errors.h"
#include "util/strings.h"

namespace ckpt::tools {
namespace {

struct WorkerConfig {
  std::string connect, token, root, log_file, job = "elastic";
  int64_t steps = 40, save_every = 5, step_ms = 10;
  int64_t kill_during_save = -1;    // SIGKILL itself right after Save(step) returned
  int64_t kill_after_commit = -1;   // SIGKILL itself once step is committed
  int64_t corrupt_replica_at = -1;  // flip a bit of its bias copy while saving this step
  double join_timeout_s = 120;
  // The memory level: saves every memory_every steps into peers' memory.
  int64_t memory_every = 0;
  std::shared_ptr<PeerMemory> memory;
  // With a policy, rank 0's IntervalPolicy decides when to save and at
  // which level instead of save_every/memory_every (each process keeps its
  // own, for the generations in which it is rank 0).
  std::shared_ptr<IntervalPolicy> policy;
  // Bytes of extra state (f32 rows of 1,024) sharded over the ranks, never
  // updated: makes saves and restores the size of a real model's.
  int64_t ballast_bytes = 0;
  // Preemption: on SIGTERM or SIGUSR1 the ranks agree at the next step,
  // save it within this many seconds and exit with kPreemptedExitCode.
  double preempt_deadline_s = 0;
};

constexpr int64_t kBallastCols = 1024;

// Rows [first, first + count) of the ballast for `rank` of `world`; its
// values are a pure function of the global index, so a restore is checked.
class Ballast {
 public:
  Ballast(int64_t bytes, int rank, int world) {
    rows_ = bytes / (kBallastCols * 4);
    const int64_t per = rows_ / world, extra = rows_ % world;
    first_ = rank * per + std::min<int64_t>(rank, extra);
    count_ = per + (rank < extra ? 1 : 0);
    const size_t n = static_cast<size_t>(count_ * kBallastCols);
    v_.reserve(n);
    (void)PopulateForWrite(v_.data(), n * sizeof(float));  // one call, not a page fault per 4 KiB
    v_.resize(n);
  }
  static float Value(int64_t row, int64_t col) { return static_cast<float>((row * kBallastCols + col) % 65521); }
  void Init() {
    for (int64_t r = 0; r < count_; ++r) {
      for (int64_t j = 0; j < kBallastCols; ++j) v_[r * kBallastCols + j] = Value(first_ + r, j);
    }
  }
  TensorSpec spec() const { return TensorSpec{"optimizer.ballast", DType::kF32, {rows_, kBallastCols}}; }
  absl::Status AddTo(State& s) {
    if (rows_ == 0) return absl::OkStatus();
    Box box = Box::Whole(spec().shape);
    box.offsets[0] = first_;
    box.sizes[0] = count_;
    return s.AddShard(spec(), box, v_.data());
  }
  // Every 97th row of this rank's part, whole.
  absl::Status Check() const {
    for (int64_t r = 0; r < count_; r += 97) {
      for (int64_t j = 0; j < kBallastCols; ++j) {
        if (v_[r * kBallastCols + j] != Value(first_ + r, j)) {
          return absl::DataLossError(StrCat("optimizer.ballast[", first_ + r, ",", j, "] restored wrong"));
        }
      }
    }
    return absl::OkStatus();
  }

 private:
  int64_t rows_ = 0, first_ = 0, count_ = 0;
  std::vector<float> v_;
};

// Unix time in microseconds.
int64_t UnixMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// A failed collective or commit often arrives just before the coordinator's
// stop notice: give the notice a moment.
bool Stopped(CoordinatorClient& client) {
  for (int i = 0; i < 40 && !client.stop_requested(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return client.stop_requested();
}

void Log(const WorkerConfig& c, const std::string& line) {
  if (c.log_file.empty()) {
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
    return;
  }
  std::ofstream(c.log_file, std::ios::app) << line << "\n";
}

// Rank 0 asks its policy whether to save after `step` and at which level,
// and tells the others (one byte through the coordinator's broadcast, every
// step: all ranks must save the same steps). The last step is always saved
// durably; a memory save the generation cannot make (too few failure
// domains) is made durable instead.
absl::StatusOr<std::optional<SaveLevel>> PolicyDecision(const WorkerConfig& c, CoordinatorClient& client,
                                                        const Assignment& a, int64_t step, bool previous_committed) {
  std::string decision;
  if (a.first_rank == 0) {
    std::optional<SaveLevel> level = c.policy->NextLevel(NowSeconds(), previous_committed);
    if (step == c.steps) level = SaveLevel::kDurable;
    if (level == SaveLevel::kMemory && !a.memory_level()) level = SaveLevel::kDurable;
    decision.assign(1, !level ? 'n' : *level == SaveLevel::kMemory ? 'm' : 'd');
    if (level) {
      c.policy->SaveStarted(NowSeconds(), *level);
      Log(c, StrCat("policy: step ", step, " level=", SaveLevelName(*level), " interval_s=", c.policy->interval_s(),
                    " durable_every=", c.policy->durable_every()));
    }
  }
  auto told = client.communicator(0)->Broadcast(decision, 60);
  if (!told.ok()) return told.status();
  if (*told == "m") return std::optional<SaveLevel>(SaveLevel::kMemory);
  if (*told == "d") return std::optional<SaveLevel>(SaveLevel::kDurable);
  if (*told == "n") return std::optional<SaveLevel>();
  return absl::InternalError(StrCat("step ", step, ": rank 0 sent the save decision '", *told, "'"));
}

// One generation: open, restore, train and save until done or stopped.
// Returns true when the job finished.
absl::StatusOr<bool> RunGeneration(const WorkerConfig& c, CoordinatorClient& client, const Assignment& a) {
  const int64_t assigned_at = UnixMicros();
  const int rank = a.first_rank;
  ElasticShard shard(rank, a.world_size);
  Ballast ballast(c.ballast_bytes, rank, a.world_size);
  const double alloc_s = static_cast<double>(UnixMicros() - assigned_at) / 1e6;  // the new shards' memory
  auto state_of = [&]() -> absl::StatusOr<State> {
    State s = shard.state();
    CKPT_RETURN_IF_ERROR(ballast.AddTo(s));
    return s;
  };
  CheckpointerOptions o;
  o.uri = c.root;
  o.rank = rank;
  o.world_size = a.world_size;
  o.communicator = client.communicator(0);
  o.arbiter = client.arbiter();
  o.hash_replicas = true;
  o.collective_timeout_s = 60;
  o.commit_timeout_s = 60;
  o.engine_options.staging_bytes = 8 << 20;
  o.engine_options.block_size = 64 << 10;
  const bool memory_restore = a.restore_level == SaveLevel::kMemory && a.restore_step >= 0;
  if (c.memory) {
    // Steps other than the one restored are saved again by this generation.
    c.memory->DropStepsExcept(memory_restore ? a.restore_step : -1);
    if (a.memory_level() || memory_restore) {
      auto storage = OpenPeerStorage(c.memory, a.memory_route());
      if (!storage.ok()) return storage.status();
      o.memory_storage = *storage;
      o.memory_arbiter = client.memory_arbiter();
    }
    if (!a.memory_level()) Log(c, StrCat("rank=", rank, " no memory-level saves: ", a.memory_note));
  }
  auto cp = Checkpointer::Open(o);
  if (!cp.ok()) return Stopped(client) ? absl::StatusOr<bool>(false) : cp.status();
  int64_t step = 0;
  std::string restored;
  if (a.restore_step >= 0) {
    auto target = state_of();
    if (!target.ok()) return target.status();
    LoadOptions lo;
    lo.level = a.restore_level;
    auto loaded = (*cp)->Load(*target, a.restore_step, lo);
    if (!loaded.ok()) return Stopped(client) ? absl::StatusOr<bool>(false) : loaded.status();
    CKPT_RETURN_IF_ERROR(ballast.Check());
    step = a.restore_step;
    restored = StrCat(" level=", SaveLevelName(loaded->level), " from_memory=", loaded->bytes_from_memory,
                      " from_peers=", loaded->bytes_from_peers, " from_storage=", loaded->bytes_from_storage,
                      " rebuilt=", loaded->bytes_rebuilt_from_parity, " pieces_lost=", loaded->memory_pieces_lost,
                      " load_s=", loaded->seconds);
  } else {
    shard.Init();
    ballast.Init();
  }
  // `at`: when this rank is ready for its first step; `assigned_at`: when
  // its assignment arrived (Unix microseconds).
  Log(c, StrCat("generation=", a.generation, " rank=", rank, " world=", a.world_size, " restore=", a.restore_step,
                restored, " alloc_s=", alloc_s, " assigned_at=", assigned_at, " at=", UnixMicros()));
  std::optional<SaveHandle> last;
  SaveLevel last_level = SaveLevel::kDurable;
  while (step < c.steps) {
    if (client.stop_requested()) {
      Log(c, StrCat("rank=", rank, " stop at step ", step, ": ", client.stop_reason()));
      return false;
    }
    ++step;
    shard.Train(step);
    std::this_thread::sleep_for(std::chrono::milliseconds(c.step_ms));
    if (c.preempt_deadline_s > 0) {
      auto now = AgreeOnPreemption(o.communicator.get(), o.collective_timeout_s);
      if (!now.ok()) return Stopped(client) ? absl::StatusOr<bool>(false) : now.status();
      if (*now) {
        auto state = state_of();
        if (!state.ok()) return state.status();
        const PreemptionSave p = SaveForPreemption(**cp, step, *state, c.preempt_deadline_s);
        std::string levels;
        for (SaveLevel l : p.committed) levels += StrCat(levels.empty() ? "" : ",", SaveLevelName(l));
        Log(c, StrCat("rank=", rank, " preempted at step ", step, " committed=", levels.empty() ? "none" : levels,
                      " seconds=", p.seconds, p.abandoned ? " abandoned" : ""));
        std::fflush(nullptr);
        std::_Exit(kPreemptedExitCode);  // what is left in flight is abandoned, never committed
      }
    }
    bool durable = step % c.save_every == 0 || step == c.steps;
    bool memory = !durable && c.memory_every > 0 && step % c.memory_every == 0 && a.memory_level();
    if (c.policy) {
      auto level = PolicyDecision(c, client, a, step, last ? last->Done() : true);
      if (!level.ok()) return Stopped(client) ? absl::StatusOr<bool>(false) : level.status();
      durable = *level == SaveLevel::kDurable;
      memory = *level == SaveLevel::kMemory;
    }
    if (!durable && !memory) continue;
    if (last) {
      absl::Status prev = last->Wait();
      if (!prev.ok() && last_level == SaveLevel::kMemory && !client.stop_requested()) {
        // A memory save that failed (a full budget, a replica holder gone)
        // costs that step's copy only: training and durable saves go on.
        Log(c, StrCat("rank=", rank, " memory step ", last->Stats().step, " not committed: ", prev.message()));
      } else if (absl::IsDataLoss(prev)) {
        // Not committed (replicas disagreed); training goes on.
        Log(c, StrCat("rank=", rank, " step ", last->Stats().step, " not committed: ", prev.message()));
      } else if (!prev.ok()) {
        Log(c, StrCat("rank=", rank, " save failed: ", prev.message()));
        return Stopped(client) ? absl::StatusOr<bool>(false) : prev;
      } else {
        if (c.policy && rank == 0) {
          c.policy->RecordSave(last->Stats(), last_level);
        }
        std::string held;
        if (c.memory) {
          const PeerMemoryStats m = c.memory->Stats();
          held = StrCat(" memory_held=", m.held_bytes, " memory_spare=", m.spare_bytes, " memory_files=", m.files,
                        " rss=", tools::ResidentBytes(), " rss_peak=", static_cast<int64_t>(tools::PeakRssBytes()));
        }
        Log(c, StrCat("rank=", rank, " committed ", last_level == SaveLevel::kMemory ? "memory " : "", "step ",
                      last->Stats().step, held));
      }
      if (last->Stats().step == c.kill_after_commit) kill(getpid(), SIGKILL);
    }
    const bool corrupt = step == c.corrupt_replica_at;
    if (corrupt) shard.FlipBiasBit();
    SaveOptions so;
    so.level = memory ? SaveLevel::kMemory : SaveLevel::kDurable;
    auto state = state_of();
    if (!state.ok()) return state.status();
    auto h = (*cp)->Save(step, *state, so);
    if (corrupt) shard.FlipBiasBit();  // Save has copied and hashed it
    if (!h.ok()) {
      Log(c, StrCat("rank=", rank, " save of step ", step, " refused: ", h.status().message()));
      return Stopped(client) ? absl::StatusOr<bool>(false) : h.status();
    }
    if (step == c.kill_during_save) kill(getpid(), SIGKILL);
    last = std::move(h).value();
    last_level = so.level;
  }
  if (last) {
    absl::Status s = last->Wait();
    if (!s.ok()) {
      Log(c, StrCat("rank=", rank, " final save failed: ", s.message()));
      return Stopped(client) ? absl::StatusOr<bool>(false) : s;
    }
    Log(c, StrCat("rank=", rank, " committed step ", last->Stats().step));
  }
  Log(c, StrCat("rank=", rank, " done at step ", step));
  return true;
}

}  // namespace

int WorkerMain(int argc, char** argv, int first) {
  WorkerConfig c;
  std::string token_file;
  double heartbeat_ms = 200;
  Args args("worker", "--connect HOST:PORT[,HOST:PORT...] --token-file F --root DIR [--steps N --save-every K]",
            "One process of an elastic training job: joins the coordinator, restores the\n"
            "step it names (resharded onto the new world size), trains a small synthetic\n"
            "model and saves asynchronously every K steps through the coordinator's\n"
            "two-phase commit; when the coordinator ends the generation (a worker died) it\n"
            "joins again and carries on. Used by `ckpt demo` and the failure tests.");
  args.String("connect", &c.connect, "coordinator address HOST:PORT; replicas as HOST:PORT,HOST:PORT,...");
  args.String("token-file", &token_file, "file holding the job's token");
  args.String("root", &c.root, "checkpoint root shared by the workers");
  args.Int("steps", &c.steps, "train until this step (default 40)");
  args.Int("save-every", &c.save_every, "save every K steps (default 5) to the root: the durable level");
  args.Double("preempt-deadline", &c.preempt_deadline_s,
              "on SIGTERM or SIGUSR1: at the next step every rank saves it within this many seconds, then exits "
              "143 (0, the default: the signals keep their default action)");
  args.Int("memory-every", &c.memory_every,
           "also save every M steps into the memory level (peers' memory; 0: off, the default)");
  double policy_mtbf = 0, policy_min_interval = 0.2;
  bool memory_level = false;
  args.Double("policy-mtbf", &policy_mtbf,
              "rank 0's IntervalPolicy decides when to save, and at which level with --memory-level, from this "
              "mean time between failures in seconds and the save costs it measures (replaces --save-every and "
              "--memory-every; 0: off, the default)");
  args.Double("policy-min-interval", &policy_min_interval, "with --policy-mtbf: seconds between saves at least (0.2)");
  args.Switch("memory-level", &memory_level, "use the memory level (implied by --memory-every)");
  std::string domain, memory_listen;
  int64_t memory_budget = int64_t{1} << 30;
  args.String("domain", &domain, "failure domain of this process for the memory level (default: the host name)");
  args.String("memory-listen", &memory_listen,
              "HOST:PORT the memory level listens on and advertises (default: this host's address on the route to "
              "the coordinator, port 0)");
  args.Int("memory-budget", &memory_budget, "bytes of peers' and own checkpoint files held at most (default 1 GiB)");
  args.Size("ballast", &c.ballast_bytes,
            "extra state sharded over the ranks, saved and restored with the model (e.g. 1G; default 0)", true);
  args.Int("step-ms", &c.step_ms, "milliseconds of 'compute' per step (default 10)");
  args.Double("heartbeat-ms", &heartbeat_ms, "heartbeat interval (default 200)");
  args.Int("kill-during-save", &c.kill_during_save, "SIGKILL this process right after Save(step) returns");
  args.Int("kill-after-commit", &c.kill_after_commit, "SIGKILL this process once step is committed");
  args.Int("corrupt-replica-at", &c.corrupt_replica_at,
           "flip a bit of this rank's bias copy while saving this step (SDC drill)");
  args.String("log", &c.log_file, "append progress lines to this file (default stdout)");
  int exit = 0;
  if (!args.Parse(argc, argv, first, &exit)) return exit;
  if (c.connect.empty() || token_file.empty() || c.root.empty()) {
    std::fprintf(stderr, "ckpt worker: --connect, --token-file and --root are required\n");
    return kExitUsage;
  }
  auto token = ReadJobToken(token_file);
  if (!token.ok()) {
    std::fprintf(stderr, "ckpt worker: %s\n", std::string(token.status().message()).c_str());
    return kExitUsage;
  }
  c.token = *token;
  if (c.preempt_deadline_s < 0) {
    std::fprintf(stderr, "ckpt worker: --preempt-deadline takes seconds >= 0\n");
    return kExitUsage;
  }
  if (c.preempt_deadline_s > 0) {
    if (absl::Status w = WatchForPreemption({SIGTERM, SIGUSR1}); !w.ok()) {
      std::fprintf(stderr, "ckpt worker: %s\n", std::string(w.message()).c_str());
      return kExitUsage;
    }
  }
  if (policy_mtbf < 0 || policy_min_interval < 0) {
    std::fprintf(stderr, "ckpt worker: --policy-mtbf and --policy-min-interval take seconds >= 0\n");
    return kExitUsage;
  }
  if (c.memory_every > 0) memory_level = true;
  if (policy_mtbf > 0) {
    // Starting estimates for a small model on local disk; each save's
    // measured costs replace them.
    IntervalPolicyOptions po;
    po.mtbf_s = policy_mtbf;
    po.two_level = memory_level;
    po.stall_s = 0.02;
    po.write_s = 0.2;
    po.restart_s = 5;
    po.memory_stall_s = 0.01;
    po.memory_write_s = 0.05;
    po.memory_restart_s = 2;
    po.min_interval_s = policy_min_interval;
    po.max_interval_s = std::max(policy_min_interval, 3600.0);
    c.policy = std::make_shared<IntervalPolicy>(po);
  }
  if (memory_level && memory_listen.empty()) {
    // Peers on other hosts reach this one at the address its route to the
    // coordinator leaves from (127.0.0.1 when the coordinator is local).
    auto local = LocalAddressToward(c.connect);
    if (!local.ok()) {
      std::fprintf(stderr,
                   "ckpt worker: the memory level needs an address the other hosts reach: %s; give --memory-listen\n",
                   std::string(local.status().message()).c_str());
      return kExitUsage;
    }
    memory_listen = *local + ":0";
  }
  if (memory_level) {
    PeerMemoryOptions po;
    po.listen = memory_listen;
    po.token = c.token;
    po.domain = domain;
    po.budget_bytes = memory_budget;
    auto memory = PeerMemory::Start(po);
    if (!memory.ok()) {
      std::fprintf(stderr, "ckpt worker: %s\n", std::string(memory.status().message()).c_str());
      return kExitUsage;
    }
    c.memory = *memory;
  }
  CoordinatorClientOptions co;
  co.peer_memory = c.memory;
  co.address = c.connect;
  co.token = c.token;
  co.job = c.job;
  co.heartbeat_s = heartbeat_ms / 1000.0;
  auto client = CoordinatorClient::Connect(co);
  if (!client.ok()) {
    std::fprintf(stderr, "ckpt worker: %s\n", std::string(client.status().message()).c_str());
    return kExitUsage;
  }
  for (int attempt = 0; attempt < 20; ++attempt) {
    auto a = (*client)->Join(c.join_timeout_s);
    if (absl::IsOutOfRange(a.status())) {  // waited as a spare; the others finished the job
      std::fprintf(stderr, "ckpt worker: %s\n", std::string(a.status().message()).c_str());
      return kExitOk;
    }
    if (!a.ok()) {
      std::fprintf(stderr, "ckpt worker: join: %s\n", std::string(a.status().message()).c_str());
      return absl::IsPermissionDenied(a.status()) ? kExitUsage : kExitProblem;
    }
    auto done = RunGeneration(c, **client, *a);
    if (!done.ok()) {
      std::fprintf(stderr, "ckpt worker: %s\n", std::string(done.status().message()).c_str());
      if (!Stopped(**client)) return kExitProblem;
      continue;
    }
    if (*done) {
      (void)(*client)->Leave();
      return kExitOk;
    }
  }
  std::fprintf(stderr, "ckpt worker: gave up after 20 generations\n");
  return kExitProblem;
}

}  // namespace ckpt::tools
