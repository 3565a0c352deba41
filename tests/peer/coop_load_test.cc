// Cooperative loads: dp=4 x tp=2 ranks (threads of this process, each with
// its own peer memory and server, real TCP on loopback) restore a step that
// every data-parallel replica needs whole. Each stored byte must be read
// from storage about once in all, every rank must get its shards bit-exact,
// and a reader that refuses, stays silent or sends bad bytes must only cost
// a failover to storage. A delta step loads cooperatively too.
#include <dirent.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "ckpt/checkpointer.h"
#include "ckpt/communicator.h"
#include "ckpt/coordinator.h"
#include "ckpt/load_exchange.h"
#include "ckpt/peer.h"
#include "coop_model.h"
#include "gtest/gtest.h"
#include "testutil/test_util.h"
#include "util/clock.h"
#include "util/errors.h"
#include "util/strings.h"

namespace ckpt::testing {
namespace {

constexpr uint64_t kSeed = kCoopSeed;
const std::string kToken = "coop-load-test-token-0123456789";

const Mesh& TheMesh() { return CoopMesh(); }
std::string HostOf(int r) { return CoopHostOf(r); }

// Every rank saves `steps` (the same values each time) to `root`, one
// writer for each replicated box; with `delta_chain`, the later steps are
// deltas of the first.
void SaveModel(const std::string& root, const std::vector<int64_t>& steps = {10}, int delta_chain = 0) {
  const int n = static_cast<int>(TheMesh().NumRanks());
  auto comms = CreateLocalCommunicators(n);
  std::vector<absl::Status> results(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      CheckpointerOptions o;
      o.uri = root;
      o.rank = r;
      o.world_size = n;
      o.codec = Codec::kZstd;
      o.mesh = TheMesh();
      o.engine_options.block_size = 64 << 10;
      o.engine_options.staging_bytes = 8 << 20;
      o.collective_timeout_s = 60;
      o.communicator = comms[r];
      o.delta.chain = delta_chain;
      auto cp = Checkpointer::Open(o);
      if (!cp.ok()) {
        results[r] = cp.status();
        return;
      }
      std::vector<OwnedShard> shards;
      State st;
      results[r] = CoopState(r, true, shards, &st);
      for (int64_t step : steps) {
        if (!results[r].ok()) return;
        auto h = (*cp)->Save(step, st);
        results[r] = h.ok() ? h->Wait() : h.status();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) ASSERT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r];
}

// Bytes of the step's data files: the checkpoint a load reads.
uint64_t DataFileBytes(const std::string& root) {
  const std::string dir = StrCat(root, "/step-0000000010");
  uint64_t total = 0;
  DIR* d = opendir(dir.c_str());
  EXPECT_NE(d, nullptr);
  if (d == nullptr) return 0;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name.rfind("rank-", 0) != 0 || !name.ends_with(".ckd")) continue;
    struct stat st;
    if (stat(StrCat(dir, "/", name).c_str(), &st) == 0) total += static_cast<uint64_t>(st.st_size);
  }
  closedir(d);
  return total;
}

// Wraps a rank's exchange to misbehave as a reader.
class HostileExchange final : public LoadExchange {
 public:
  enum class Mode { kRefuses, kSilent, kCorrupts };
  HostileExchange(std::shared_ptr<LoadExchange> inner, Mode mode) : inner_(std::move(inner)), mode_(mode) {}
  int rank() const override { return inner_->rank(); }
  const std::vector<std::string>& hosts() const override { return inner_->hosts(); }
  absl::Status Offer(const std::string& key, std::shared_ptr<const std::string> bytes) override {
    ++offers_;
    switch (mode_) {
      case Mode::kRefuses:
        return absl::ResourceExhaustedError("the test's reader has no room");
      case Mode::kSilent:
        return absl::OkStatus();  // says it offered, offers nothing
      case Mode::kCorrupts: {
        auto bad = std::make_shared<std::string>(*bytes);
        (*bad)[bad->size() / 2] ^= 0x20;
        return inner_->Offer(key, std::move(bad));
      }
    }
    return absl::OkStatus();
  }
  void Forgo(const std::string& key) override { inner_->Forgo(key); }
  absl::Status Fetch(int from, const std::string& key, absl::Span<std::byte> dst, double wait_s) override {
    return inner_->Fetch(from, key, dst, wait_s);
  }
  void Withdraw(const std::string& load) override { inner_->Withdraw(load); }
  int offers() const { return offers_; }

 private:
  std::shared_ptr<LoadExchange> inner_;
  Mode mode_;
  std::atomic<int> offers_{0};
};

struct LoadRun {
  std::vector<LoadStats> stats;
  std::vector<int64_t> mismatches;
  int hostile_offers = 0;
};

// Every rank loads step 10 with its own peer memory and exchange.
// `hostile_rank` >= 0 wraps that rank's exchange.
LoadRun LoadAll(const std::string& root, LoadOptions lo, int hostile_rank = -1,
                HostileExchange::Mode mode = HostileExchange::Mode::kRefuses) {
  const int n = static_cast<int>(TheMesh().NumRanks());
  // Pieces of four 64 KiB blocks: every rank reads some for the others.
  lo.cooperative_piece_bytes = 256 << 10;
  auto comms = CreateLocalCommunicators(n);
  LoadRun run;
  run.stats.resize(n);
  run.mismatches.assign(n, -1);
  std::vector<absl::Status> results(n);
  std::vector<std::shared_ptr<HostileExchange>> hostile(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      results[r] = [&]() -> absl::Status {
        PeerMemoryOptions mo;
        mo.token = kToken;
        mo.domain = HostOf(r);
        mo.io_timeout_s = 10;
        CKPT_ASSIGN_OR_RETURN(std::shared_ptr<PeerMemory> memory, PeerMemory::Start(mo));
        CKPT_ASSIGN_OR_RETURN(std::shared_ptr<LoadExchange> exchange, OpenLoadExchange(memory, *comms[r], 60));
        if (r == hostile_rank) {
          hostile[r] = std::make_shared<HostileExchange>(exchange, mode);
          exchange = hostile[r];
        }
        CheckpointerOptions o;
        o.uri = root;
        o.rank = r;
        o.world_size = n;
        o.collective_timeout_s = 60;
        o.communicator = comms[r];
        o.load_exchange = exchange;
        o.gc_on_open = false;
        o.engine_options.staging_bytes = 1;  // loads only
        CKPT_ASSIGN_OR_RETURN(std::unique_ptr<Checkpointer> cp, Checkpointer::Open(o));
        std::vector<OwnedShard> shards;
        State st;
        CKPT_RETURN_IF_ERROR(CoopState(r, false, shards, &st));
        CKPT_ASSIGN_OR_RETURN(run.stats[r], cp->Load(st, 10, lo));
        int64_t bad = 0;
        for (const OwnedShard& s : shards) bad += Mismatches(s, kSeed);
        run.mismatches[r] = bad;
        // Held until every rank's load is over: the load's barrier.
        return absl::OkStatus();
      }();
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) {
    EXPECT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r];
    EXPECT_EQ(run.mismatches[r], 0) << "rank " << r << " did not restore bit-exact";
  }
  if (hostile_rank >= 0 && hostile[hostile_rank] != nullptr) run.hostile_offers = hostile[hostile_rank]->offers();
  return run;
}

struct Totals {
  int64_t from_storage = 0, from_peers = 0, for_peers = 0, failovers = 0;
};
Totals Sum(const LoadRun& run) {
  Totals t;
  for (const LoadStats& s : run.stats) {
    t.from_storage += s.bytes_from_storage;
    t.from_peers += s.bytes_from_peers;
    t.for_peers += s.bytes_for_peers;
    t.failovers += s.peer_failovers;
  }
  return t;
}

class CoopLoad : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    SaveModel(dir_->path());
    stored_ = DataFileBytes(dir_->path());
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static TempDir* dir_;
  static uint64_t stored_;
};
TempDir* CoopLoad::dir_ = nullptr;
uint64_t CoopLoad::stored_ = 0;

TEST_F(CoopLoad, EveryReplicatedByteIsReadFromStorageOnce) {
  ASSERT_GT(stored_, uint64_t{1} << 20);
  const LoadRun run = LoadAll(dir_->path(), LoadOptions{});
  const Totals t = Sum(run);
  for (const LoadStats& s : run.stats) EXPECT_TRUE(s.cooperative);
  const double ratio = static_cast<double>(t.from_storage) / static_cast<double>(stored_);
  std::printf("stored %llu bytes; read from storage %lld (%.3fx), from peers %lld, failovers %lld\n",
              static_cast<unsigned long long>(stored_), static_cast<long long>(t.from_storage), ratio,
              static_cast<long long>(t.from_peers), static_cast<long long>(t.failovers));
  EXPECT_LE(ratio, 1.05);
  EXPECT_GT(t.from_peers, 0);
  EXPECT_EQ(t.failovers, 0);
  // Each piece is read for 3 other replicas, or for 7 other ranks.
  EXPECT_GE(t.from_peers, 3 * t.for_peers);
  EXPECT_LE(t.from_peers, 7 * t.for_peers);
  // Spread over the hosts: each reads a share, none all of it.
  std::map<std::string, int64_t> by_host;
  for (int r = 0; r < static_cast<int>(run.stats.size()); ++r) by_host[HostOf(r)] += run.stats[r].bytes_for_peers;
  for (const auto& [host, bytes] : by_host) {
    EXPECT_GT(bytes, 0) << host;
    EXPECT_LT(bytes, t.for_peers / 2) << host;
  }
}

// A delta step loads cooperatively: the pieces passed between ranks are its
// delta frames, and each receiver rebuilds them from the base's blocks,
// which it reads from storage itself.
TEST(CoopLoadDeltas, ADeltaStepLoadsCooperativelyAndBitExact) {
  TempDir dir;
  SaveModel(dir.path(), {5, 10}, /*delta_chain=*/4);
  const LoadRun run = LoadAll(dir.path(), LoadOptions{});
  const Totals t = Sum(run);
  int64_t delta_blocks = 0, from_bases = 0;
  for (const LoadStats& s : run.stats) {
    EXPECT_TRUE(s.cooperative);
    delta_blocks += s.delta_blocks;
    from_bases += s.bytes_read_from_bases;
  }
  EXPECT_GT(delta_blocks, 0);
  EXPECT_GT(from_bases, 0);
  EXPECT_GT(t.from_peers, 0);
  EXPECT_EQ(t.failovers, 0);
}

TEST_F(CoopLoad, TurnedOffEveryReplicaReadsItsOwn) {
  LoadOptions lo;
  lo.cooperative = false;
  const LoadRun run = LoadAll(dir_->path(), lo);
  const Totals t = Sum(run);
  for (const LoadStats& s : run.stats) EXPECT_FALSE(s.cooperative);
  EXPECT_EQ(t.from_peers, 0);
  EXPECT_GT(static_cast<double>(t.from_storage), 3.5 * static_cast<double>(stored_));
}

TEST_F(CoopLoad, AReaderThatRefusesItsPiecesCostsOnlyFailovers) {
  const LoadRun run = LoadAll(dir_->path(), LoadOptions{}, 3, HostileExchange::Mode::kRefuses);
  ASSERT_GT(run.hostile_offers, 0) << "rank 3 read nothing for others";
  EXPECT_GT(Sum(run).failovers, 0);
}

TEST_F(CoopLoad, ASilentReaderIsWaitedForOnceThenPassedOver) {
  LoadOptions lo;
  lo.cooperative_wait_s = 0.5;
  const double t0 = NowSeconds();
  const LoadRun run = LoadAll(dir_->path(), lo, 4, HostileExchange::Mode::kSilent);
  ASSERT_GT(run.hostile_offers, 0);
  EXPECT_GT(Sum(run).failovers, 0);
  // Each of the others waits once for rank 4, not once per piece.
  EXPECT_LT(NowSeconds() - t0, 20.0);
}

TEST_F(CoopLoad, BadBytesFromAReaderAreCaughtAndReadFromStorage) {
  const LoadRun run = LoadAll(dir_->path(), LoadOptions{}, 5, HostileExchange::Mode::kCorrupts);
  ASSERT_GT(run.hostile_offers, 0);
  EXPECT_GT(Sum(run).failovers, 0);
}

// The ranks as processes of their own, joined through a coordinator, each
// behind its own slow link to storage so that the restore takes seconds;
// rank 3's process is SIGKILLed while it reads its pieces for the others.
TEST_F(CoopLoad, AReaderKilledMidRestoreLeavesEveryOtherRankBitExact) {
  TempDir dir;
  CoordinatorOptions co;
  co.state_dir = dir.Join("state");
  co.token = kToken;
  co.min_nodes = co.max_nodes = 8;
  co.heartbeat_s = 0.2;
  co.dead_after = 5;
  co.log = [](const std::string&) {};
  auto coord = Coordinator::Start(co);
  ASSERT_OK(coord);
  const std::string address = StrCat("127.0.0.1:", (*coord)->port());
  // 192 KB/s per process: each rank's share of the pieces (about 0.5 MB)
  // takes seconds to read.
  const std::string root = StrCat("faulty://", dir_->path(), "?fault.read_bandwidth=192K");
  std::vector<pid_t> pids;
  for (int i = 0; i < 8; ++i) {
    const std::string out = dir.Join(StrCat("out-", i));
    std::vector<std::string> args = {COOP_RANK_PATH, address, kToken, root, out, std::to_string(256 << 10)};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = -1;
    ASSERT_EQ(posix_spawn(&pid, COOP_RANK_PATH, nullptr, nullptr, argv.data(), environ), 0);
    pids.push_back(pid);
  }
  // Rank 3's process, once every rank is loading.
  pid_t victim = -1;
  const double t0 = NowSeconds();
  int loading = 0;
  while (NowSeconds() - t0 < 60 && loading < 8) {
    loading = 0;
    for (int i = 0; i < 8; ++i) {
      const std::string text = ReadFile(dir.Join(StrCat("out-", i)));
      if (text.find("loading") != std::string::npos) ++loading;
      int rank = -1, pid = -1;
      if (std::sscanf(text.c_str(), "joined %d %d", &rank, &pid) == 2 && rank == 3) victim = pid;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(loading, 8) << "the ranks did not all start loading";
  ASSERT_GT(victim, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  // Every process ends: the victim killed, the others once loaded.
  std::map<pid_t, int> exits;
  while (NowSeconds() - t0 < 120 && exits.size() < pids.size()) {
    for (pid_t p : pids) {
      int status = 0;
      if (exits.count(p) == 0 && waitpid(p, &status, WNOHANG) == p) exits[p] = status;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (pid_t p : pids) {
    if (exits.count(p) == 0) {
      kill(p, SIGKILL);
      waitpid(p, nullptr, 0);
    }
  }
  ASSERT_EQ(exits.size(), pids.size()) << "some ranks never finished";
  EXPECT_TRUE(WIFSIGNALED(exits[victim]));
  int64_t failovers = 0, from_peers = 0;
  int loaded = 0;
  for (int i = 0; i < 8; ++i) {
    const std::string text = ReadFile(dir.Join(StrCat("out-", i)));
    const size_t at = text.find("loaded ");
    int rank = -1, joined_pid = -1;
    std::sscanf(text.c_str(), "joined %d %d", &rank, &joined_pid);
    if (joined_pid == victim) {
      EXPECT_EQ(at, std::string::npos) << "rank 3 finished before it was killed:\n" << text;
      continue;
    }
    ASSERT_NE(at, std::string::npos) << "rank " << rank << ":\n" << text;
    long long r, bad, st, peers, mine, fo;
    ASSERT_EQ(std::sscanf(text.c_str() + at, "loaded %lld %lld %lld %lld %lld %lld", &r, &bad, &st, &peers, &mine, &fo),
              6);
    EXPECT_EQ(bad, 0) << "rank " << r << " did not restore bit-exact";
    failovers += fo;
    from_peers += peers;
    ++loaded;
  }
  EXPECT_EQ(loaded, 7);
  EXPECT_GT(failovers, 0) << "no rank read a piece of the dead reader's from storage";
  EXPECT_GT(from_peers, 0);
}

}  // namespace
}  // namespace ckpt::testing
