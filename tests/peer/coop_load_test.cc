// Cooperative loads: dp=4 x tp=2 ranks (threads of this process, each with
// its own peer memory and server, real TCP on loopback) restore a step that
// every data-parallel replica needs whole. Each stored byte must be read
// from storage about once in all, every rank must get its shards bit-exact,
// and a reader that refuses, stays silent or sends bad bytes must only cost
// a failover to storage.
#include <dirent.h>
#include <sys/stat.h>

#include <atomic>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "ckpt/checkpointer.h"
#include "ckpt/communicator.h"
#include "ckpt/load_exchange.h"
#include "ckpt/peer.h"
#include "gtest/gtest.h"
#include "testutil/test_util.h"
#include "util/clock.h"
#include "util/errors.h"
#include "util/strings.h"

namespace ckpt::testing {
namespace {

constexpr uint64_t kSeed = 58;
const std::string kToken = "coop-load-test-token-0123456789";

TensorLayout Layout(std::string fqn, Shape shape, std::vector<Placement> placements) {
  TensorLayout l;
  l.spec = TensorSpec{std::move(fqn), DType::kF32, std::move(shape)};
  l.placements = std::move(placements);
  return l;
}

// Replicated over dp, split over tp, and a tensor every rank holds whole.
std::vector<TensorLayout> Model() {
  const Placement R = Placement::Replicate();
  return {Layout("attn.w", {512, 768}, {R, Placement::Shard(1)}), Layout("mlp.w", {768, 512}, {R, Placement::Shard(0)}),
          Layout("embed", {1000, 256}, {R, R}), Layout("norm", {768}, {R, R})};
}

const Mesh& TheMesh() {
  static const Mesh mesh = *Mesh::Parse("dp=4,tp=2");
  return mesh;
}

// Rank r's host: one data-parallel replica per host.
std::string HostOf(int r) { return StrCat("host-", r / 2); }

absl::Status LaidOut(const std::vector<TensorLayout>& model, int rank, std::vector<OwnedShard>& shards, State* st,
                     bool fill) {
  CKPT_RETURN_IF_ERROR(st->SetMesh(TheMesh(), rank));
  for (const TensorLayout& l : model) {
    CKPT_ASSIGN_OR_RETURN(std::optional<Box> box, RankBox(l, TheMesh(), rank));
    shards.push_back(fill ? MakeShard(l.spec, *box, kSeed) : EmptyShard(l.spec, *box));
  }
  for (size_t i = 0; i < model.size(); ++i) CKPT_RETURN_IF_ERROR(st->AddLayout(model[i], shards[i].data.data()));
  return absl::OkStatus();
}

// Every rank saves step 10 to `root` (one writer for each replicated box).
void SaveModel(const std::string& root) {
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
      o.collective_timeout_s = 60;
      o.communicator = comms[r];
      auto cp = Checkpointer::Open(o);
      if (!cp.ok()) {
        results[r] = cp.status();
        return;
      }
      std::vector<OwnedShard> shards;
      State st;
      results[r] = LaidOut(Model(), r, shards, &st, true);
      if (!results[r].ok()) return;
      auto h = (*cp)->Save(10, st);
      results[r] = h.ok() ? h->Wait() : h.status();
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
        CKPT_ASSIGN_OR_RETURN(std::unique_ptr<Checkpointer> cp, Checkpointer::Open(o));
        std::vector<OwnedShard> shards;
        State st;
        CKPT_RETURN_IF_ERROR(LaidOut(Model(), r, shards, &st, false));
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
  lo.cooperative_wait_s = 1;
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

}  // namespace
}  // namespace ckpt::testing
