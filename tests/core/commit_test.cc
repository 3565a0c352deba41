// The commit protocol: all-or-nothing across ranks, failures reported
// through handles, earlier checkpoints untouched, retention, crash safety.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <random>
#include <thread>

#include "ckpt/checkpointer.h"
#include "ckpt/verify.h"
#include "core/root.h"
#include "format/root_files.h"
#include "testutil/failing_storage.h"
#include "testutil/test_util.h"
#include "util/clock.h"

extern char** environ;

namespace ckpt::testing {
namespace {

const TensorSpec kSpec{"model.w", DType::kF32, {256, 1024}};

class CommitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = OpenStorage(dir_.Join("root"));
    ASSERT_OK(s);
    failing_ = std::make_shared<FailingStorage>(*s);
  }

  std::unique_ptr<Checkpointer> Open(int rank = 0, int world = 1, double timeout = 30, RetentionPolicy retention = {}) {
    CheckpointerOptions o;
    o.storage = failing_;
    o.rank = rank;
    o.world_size = world;
    o.engine_options.block_size = 64 << 10;
    o.engine_options.staging_bytes = 1 << 20;
    o.commit_timeout_s = timeout;
    o.retention = retention;
    auto cp = Checkpointer::Open(o);
    EXPECT_TRUE(cp.ok()) << cp.status();
    return cp.ok() ? std::move(cp).value() : nullptr;
  }

  absl::Status SaveStep(Checkpointer& cp, int64_t step, Box box = Box::Whole(kSpec.shape)) {
    std::vector<OwnedShard> s = {MakeShard(kSpec, box, static_cast<uint64_t>(step))};
    State st = StateOf(s);
    auto h = cp.Save(step, st);
    if (!h.ok()) return h.status();
    return h->Wait();
  }

  void ExpectLoads(int64_t step) {
    std::vector<OwnedShard> out = {EmptyShard(kSpec, Box::Whole(kSpec.shape))};
    State t = StateOf(out);
    auto st = LoadCheckpoint(*failing_, t, step);
    ASSERT_OK(st);
    EXPECT_EQ(Mismatches(out[0], static_cast<uint64_t>(st->step)), 0);
  }

  std::vector<int64_t> Committed() {
    std::vector<int64_t> out;
    auto steps = ListCheckpointSteps(*failing_);
    if (steps.ok()) {
      for (const StepInfo& s : *steps) {
        if (s.committed) out.push_back(s.step);
      }
    }
    return out;
  }

  TempDir dir_;
  std::shared_ptr<FailingStorage> failing_;
};

TEST_F(CommitTest, DiskFullFailsTheSaveAndKeepsEarlierCheckpoints) {
  auto cp = Open();
  ASSERT_OK(SaveStep(*cp, 1));
  failing_->FailWrites(ENOSPC, 200 << 10);
  absl::Status s = SaveStep(*cp, 2);
  ASSERT_TRUE(absl::IsResourceExhausted(s)) << s;
  EXPECT_NE(s.message().find("out of space"), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("step 2"), absl::string_view::npos) << s;
  auto latest = cp->LatestStep();
  ASSERT_OK(latest);
  EXPECT_EQ(*latest, 1);
  ExpectLoads(1);
  EXPECT_EQ(Committed(), std::vector<int64_t>{1});
  // Once space is back the next save succeeds; the failed step's leftovers
  // are collected.
  failing_->Heal();
  ASSERT_OK(SaveStep(*cp, 3));
  ExpectLoads(3);
  auto v = VerifyStep(*failing_, 3);
  ASSERT_OK(v);
  EXPECT_TRUE(v->ok());
  EXPECT_FALSE(std::filesystem::exists(dir_.Join("root/" + StepDir(2))));
}

TEST_F(CommitTest, IoErrorOnOneRankAbortsTheStepOnAllRanks) {
  SaveEngineOptions eo;
  eo.block_size = 64 << 10;
  auto r0 = Open(0, 2), r1 = Open(1, 2);
  {
    std::vector<OwnedShard> a = {MakeShard(kSpec, Box({0, 0}, {128, 1024}), 1)};
    std::vector<OwnedShard> b = {MakeShard(kSpec, Box({128, 0}, {128, 1024}), 1)};
    State sa = StateOf(a), sb = StateOf(b);
    auto h0 = r0->Save(1, sa);
    auto h1 = r1->Save(1, sb);
    ASSERT_OK(h0);
    ASSERT_OK(h1);
    ASSERT_OK(h0->Wait());
    ASSERT_OK(h1->Wait());
  }
  failing_->FailWrites(EIO, 100 << 10, DataFileName(1));
  std::vector<OwnedShard> a = {MakeShard(kSpec, Box({0, 0}, {128, 1024}), 2)};
  std::vector<OwnedShard> b = {MakeShard(kSpec, Box({128, 0}, {128, 1024}), 2)};
  State sa = StateOf(a), sb = StateOf(b);
  auto h0 = r0->Save(2, sa);
  auto h1 = r1->Save(2, sb);
  ASSERT_OK(h0);
  ASSERT_OK(h1);
  absl::Status s1 = h1->Wait();
  absl::Status s0 = h0->Wait();
  EXPECT_TRUE(absl::IsUnavailable(s1)) << s1;  // EIO: a retry may help
  EXPECT_NE(s1.message().find("I/O error"), absl::string_view::npos) << s1;
  EXPECT_TRUE(absl::IsAborted(s0)) << s0;
  EXPECT_NE(s0.message().find("rank 1"), absl::string_view::npos) << s0;
  EXPECT_EQ(Committed(), std::vector<int64_t>{1});
  ExpectLoads(kLatestStep);
}

TEST_F(CommitTest, MissingRankTimesOutAndNothingIsPublished) {
  auto r0 = Open(0, 1);
  ASSERT_OK(SaveStep(*r0, 1));
  auto leader = Open(0, 2, /*timeout=*/0.5);
  absl::Status s = SaveStep(*leader, 2, Box({0, 0}, {128, 1024}));
  ASSERT_TRUE(absl::IsDeadlineExceeded(s)) << s;
  EXPECT_NE(s.message().find("rank(s) 1 did not report"), absl::string_view::npos) << s;
  EXPECT_EQ(Committed(), std::vector<int64_t>{1});
  EXPECT_TRUE(std::filesystem::exists(dir_.Join("root/" + StepDir(2) + "/ABORTED")));
  ExpectLoads(kLatestStep);
}

TEST_F(CommitTest, GapsBetweenRanksAreRefusedAtCommit) {
  auto r0 = Open(0, 2), r1 = Open(1, 2);
  std::vector<OwnedShard> a = {MakeShard(kSpec, Box({0, 0}, {100, 1024}), 1)};
  std::vector<OwnedShard> b = {MakeShard(kSpec, Box({128, 0}, {128, 1024}), 1)};
  State sa = StateOf(a), sb = StateOf(b);
  auto h0 = r0->Save(1, sa);
  auto h1 = r1->Save(1, sb);
  ASSERT_OK(h0);
  ASSERT_OK(h1);
  absl::Status s = h0->Wait();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("[100:128, 0:1024] are not covered"), absl::string_view::npos) << s;
  EXPECT_FALSE(h1->Wait().ok());
  EXPECT_TRUE(Committed().empty());
}

TEST_F(CommitTest, RetentionKeepsLastAndMilestones) {
  RetentionPolicy rp;
  rp.keep_last = 2;
  rp.keep_every = 10;
  auto cp = Open(0, 1, 30, rp);
  for (int64_t step : {5, 10, 15, 20, 25, 30, 35}) ASSERT_OK(SaveStep(*cp, step));
  EXPECT_EQ(Committed(), (std::vector<int64_t>{10, 20, 30, 35}));
  for (int64_t step : {10, 20, 30, 35}) ExpectLoads(step);
}

// Removing an old step (an unlink of a large file can take a good part of a
// second) is housekeeping after the commit: Wait() covers it, the commit time
// in the save's stats does not.
TEST_F(CommitTest, RetentionIsNotPartOfTheCommitTime) {
  class SlowRemove : public ForwardingStorage {
   public:
    using ForwardingStorage::ForwardingStorage;
    absl::Status Remove(std::string_view path) override {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      return ForwardingStorage::Remove(path);
    }
    absl::Status RemoveAll(std::string_view dir) override {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      return ForwardingStorage::RemoveAll(dir);
    }
  };
  CheckpointerOptions o;
  o.storage = std::make_shared<SlowRemove>(failing_);
  o.engine_options.block_size = 64 << 10;
  o.engine_options.staging_bytes = 1 << 20;
  o.retention.keep_last = 1;
  auto cp = Checkpointer::Open(o);
  ASSERT_OK(cp);
  std::vector<OwnedShard> s1 = {MakeShard(kSpec, Box::Whole(kSpec.shape), 1)};
  std::vector<OwnedShard> s2 = {MakeShard(kSpec, Box::Whole(kSpec.shape), 2)};
  State st1 = StateOf(s1), st2 = StateOf(s2);
  auto h1 = (*cp)->Save(1, st1);
  ASSERT_OK(h1);
  ASSERT_OK(h1->Wait());
  const double t0 = NowSeconds();
  auto h2 = (*cp)->Save(2, st2);
  ASSERT_OK(h2);
  ASSERT_OK(h2->Wait());
  const double waited = NowSeconds() - t0;
  // Step 1's removal (MANIFEST.copy, MANIFEST, then the directory) slept at
  // least 0.9 s inside Wait(); none of it is in the commit time.
  EXPECT_EQ(Committed(), std::vector<int64_t>{2});
  EXPECT_GE(waited, 0.9);
  EXPECT_LT(h2->Stats().commit_s, waited - 0.8);
  EXPECT_GT(h2->Stats().commit_s, 0.0);
  ExpectLoads(2);
}

TEST_F(CommitTest, LeaderOpenCollectsLeftoversOfCrashedSaves) {
  {
    auto cp = Open();
    ASSERT_OK(SaveStep(*cp, 1));
  }
  // A save that died half-way: a step directory without a manifest.
  std::filesystem::create_directories(dir_.Join("root/" + StepDir(2)));
  WriteFile(dir_.Join("root/" + StepDir(2) + "/" + DataFileName(0)), std::string(5000, 'x'));
  WriteFile(dir_.Join("root/LATEST.tmp.123.0"), "partial");
  auto steps = ListCheckpointSteps(*failing_);
  ASSERT_OK(steps);
  ASSERT_EQ(steps->size(), 2u);
  EXPECT_FALSE((*steps)[1].committed);
  auto cp = Open();
  EXPECT_FALSE(std::filesystem::exists(dir_.Join("root/" + StepDir(2))));
  EXPECT_FALSE(std::filesystem::exists(dir_.Join("root/LATEST.tmp.123.0")));
  EXPECT_EQ(Committed(), std::vector<int64_t>{1});
  auto report = cp->CollectGarbage(true);
  ASSERT_OK(report);
  EXPECT_TRUE(report->removed_partial.empty());
}

// A storage outage fails the saves made meanwhile, each with its error,
// and leaves the checkpointer whole: once the storage is back the next save
// commits, the latest step loads, and nothing of the failed saves remains
// after the next job's cleanup.
TEST(Outage, SavesFailWhileTheStorageIsDownAndCommitOnceItIsBack) {
  TempDir dir;
  const std::string down = dir.Join("down");
  CheckpointerOptions o;
  o.uri = StrCat("faulty://", dir.Join("root"), "?fault.outage_file=", down);
  o.engine_options.staging_bytes = 1 << 20;
  o.commit_timeout_s = 10;
  auto cp = Checkpointer::Open(o);
  ASSERT_OK(cp);
  auto save = [&](int64_t step) -> absl::Status {
    std::vector<OwnedShard> s = {MakeShard(kSpec, Box::Whole(kSpec.shape), static_cast<uint64_t>(step))};
    State st = StateOf(s);
    auto h = (*cp)->Save(step, st);
    if (!h.ok()) return h.status();
    return h->Wait();
  };
  ASSERT_OK(save(1));
  WriteFile(down, "");
  for (int64_t step : {2, 3}) {
    absl::Status s = save(step);
    EXPECT_TRUE(absl::IsUnavailable(s)) << s;
    EXPECT_NE(s.message().find("the storage is down"), std::string_view::npos) << s;
  }
  std::filesystem::remove(down);
  ASSERT_OK(save(4));
  const SaveCounts counts = (*cp)->Counts();
  EXPECT_EQ(counts.committed, 2);
  EXPECT_EQ(counts.failed, 2);
  EXPECT_EQ(counts.last_failed_step, 3);
  EXPECT_NE(counts.last_error.find("the storage is down"), std::string::npos) << counts.last_error;
  EXPECT_EQ((*cp)->Counts(SaveLevel::kMemory).started, 0);
  auto latest = (*cp)->LatestStep();
  ASSERT_OK(latest);
  EXPECT_EQ(*latest, 4);
  cp->reset();
  auto again = Checkpointer::Open(o);  // the next job's leader cleans up
  ASSERT_OK(again);
  auto steps = (*again)->ListSteps();
  ASSERT_OK(steps);
  std::vector<int64_t> all;
  for (const StepInfo& s : *steps) all.push_back(s.step);
  EXPECT_EQ(all, (std::vector<int64_t>{1, 4}));
  std::vector<OwnedShard> out = {EmptyShard(kSpec, Box::Whole(kSpec.shape))};
  State t = StateOf(out);
  ASSERT_OK((*again)->Load(t, kLatestStep));
  EXPECT_EQ(Mismatches(out[0], 4), 0);
}

// Regression (a leader killed between the commit and removing the rank
// reports left them in the committed step for good): the next job's leader
// removes them from the newest committed step, `ckpt gc` from every one,
// and a dry run only lists them. The steps still load.
TEST_F(CommitTest, RankReportsLeftAfterACommitAreCollected) {
  {
    auto cp = Open();
    ASSERT_OK(SaveStep(*cp, 1));
    ASSERT_OK(SaveStep(*cp, 2));
  }
  const std::string old_report = dir_.Join("root/" + StepDir(1) + "/" + ReportName(0));
  const std::string new_report = dir_.Join("root/" + StepDir(2) + "/" + ReportName(0));
  const std::string new_report2 = dir_.Join("root/" + StepDir(2) + "/" + ReportName(1));
  for (const std::string& p : {old_report, new_report, new_report2}) WriteFile(p, std::string(300, 'r'));
  auto cp = Open();
  EXPECT_TRUE(std::filesystem::exists(old_report));
  EXPECT_FALSE(std::filesystem::exists(new_report));
  EXPECT_FALSE(std::filesystem::exists(new_report2));
  WriteFile(new_report, std::string(300, 'r'));
  GcOptions o;
  o.sweep_every_step = true;
  o.dry_run = true;
  auto dry = CollectGarbage(*failing_, o);
  ASSERT_OK(dry);
  EXPECT_EQ(dry->removed_reports.size(), 2u);
  EXPECT_TRUE(std::filesystem::exists(old_report));
  o.dry_run = false;
  auto swept = CollectGarbage(*failing_, o);
  ASSERT_OK(swept);
  EXPECT_EQ(swept->removed_reports,
            (std::vector<std::string>{StepDir(1) + "/" + ReportName(0), StepDir(2) + "/" + ReportName(0)}));
  EXPECT_EQ(swept->bytes_freed, 600);
  ASSERT_EQ(swept->reasons.size(), 2u);
  EXPECT_NE(swept->reasons[0].find("left in committed step 1"), std::string::npos) << swept->reasons[0];
  EXPECT_FALSE(std::filesystem::exists(old_report));
  EXPECT_FALSE(std::filesystem::exists(new_report));
  EXPECT_EQ(Committed(), (std::vector<int64_t>{1, 2}));
  ExpectLoads(1);
  ExpectLoads(2);
}

// Regression: a saver killed between writing step N's manifest and moving
// LATEST left LATEST at N-1; the next run then tried to save step N again.
TEST_F(CommitTest, LatestLaggingBehindACommittedManifestIsTolerated) {
  auto cp = Open();
  ASSERT_OK(SaveStep(*cp, 1));
  ASSERT_OK(SaveStep(*cp, 2));
  WriteFile(dir_.Join("root/LATEST"), EncodeLatest(1));
  auto latest = cp->LatestStep();
  ASSERT_OK(latest);
  EXPECT_EQ(*latest, 2);
  ExpectLoads(kLatestStep);
  EXPECT_FALSE(CheckLatestPointer(*failing_).has_value());  // stale, not broken
  ASSERT_OK(SaveStep(*cp, 3));                              // moves LATEST forward again
  EXPECT_EQ(ReadFile(dir_.Join("root/LATEST")), EncodeLatest(3));
}

// Regression (a flipped bit in the newest MANIFEST made "latest" quietly
// mean the step before, and the next save's GC delete the damaged step):
// the damaged step stays the latest committed one, loads from its copy, and
// with both manifests damaged a load of the latest fails naming the newest
// intact step unless falling back is allowed; nothing removes it.
TEST_F(CommitTest, DamagedNewestManifestIsReportedNeverSkippedOrCollected) {
  auto cp = Open();
  ASSERT_OK(SaveStep(*cp, 1));
  ASSERT_OK(SaveStep(*cp, 2));
  FlipBit(dir_.Join("root/" + StepDir(2) + "/MANIFEST"), 60, 1);
  auto latest = cp->LatestStep();
  ASSERT_OK(latest);
  EXPECT_EQ(*latest, 2);
  auto steps = cp->ListSteps();
  ASSERT_OK(steps);
  EXPECT_EQ((*steps)[1].state, StepState::kDamaged);
  EXPECT_TRUE((*steps)[1].committed);  // loadable from the copy
  EXPECT_NE((*steps)[1].damage.find("MANIFEST at byte offset 48"), std::string::npos) << (*steps)[1].damage;
  ExpectLoads(kLatestStep);
  FlipBit(dir_.Join("root/" + StepDir(2) + "/MANIFEST.copy"), 60, 1);
  std::vector<OwnedShard> owned = {MakeShard(kSpec, Box::Whole(kSpec.shape), 0)};
  State target = StateOf(owned);
  auto refused = cp->Load(target, kLatestStep);
  ASSERT_TRUE(absl::IsDataLoss(refused.status())) << refused.status();
  EXPECT_NE(refused.status().message().find("the newest intact step is 1"), std::string::npos) << refused.status();
  LoadOptions fallback;
  fallback.allow_fallback = true;
  auto stats = cp->Load(target, kLatestStep, fallback);
  ASSERT_OK(stats);
  EXPECT_EQ(stats->step, 1);
  EXPECT_EQ(stats->fell_back_from, 2);
  EXPECT_NE(stats->damage_note.find("restored step 1 instead"), std::string::npos) << stats->damage_note;
  // The next save and its GC keep the damaged step, and say so.
  ASSERT_OK(SaveStep(*cp, 3));
  auto gc = cp->CollectGarbage(true);
  ASSERT_OK(gc);
  EXPECT_EQ(gc->kept_damaged, std::vector<int64_t>{2});
  EXPECT_TRUE(std::filesystem::exists(dir_.Join("root/" + StepDir(2) + "/" + DataFileName(0))));
}

TEST_F(CommitTest, BackToBackSavesAreSerialized) {
  auto cp = Open();
  std::vector<OwnedShard> a = {MakeShard(kSpec, Box::Whole(kSpec.shape), 1)};
  std::vector<OwnedShard> b = {MakeShard(kSpec, Box::Whole(kSpec.shape), 2)};
  State sa = StateOf(a), sb = StateOf(b);
  auto h1 = cp->Save(1, sa);
  auto h2 = cp->Save(2, sb);  // while step 1 is still being written
  ASSERT_OK(h1);
  ASSERT_OK(h2);
  ASSERT_OK(cp->WaitAll());
  EXPECT_TRUE(h1->Done());
  EXPECT_EQ(Committed(), (std::vector<int64_t>{1, 2}));
  ExpectLoads(1);
  ExpectLoads(2);
}

#ifndef CRASH_SAVER_PATH
#error "CRASH_SAVER_PATH must name the crash_saver helper"
#endif

// Opening `root` as the leader (keep-last 2) leaves only committed steps,
// at most two.
void ExpectReopenLeavesOnlyKeptSteps(const std::string& root) {
  CheckpointerOptions o;
  o.uri = root;
  o.retention.keep_last = 2;
  auto cp = Checkpointer::Open(o);
  ASSERT_OK(cp);
  auto steps = (*cp)->ListSteps();
  ASSERT_OK(steps);
  EXPECT_LE(steps->size(), 2u);
  for (const StepInfo& s : *steps) EXPECT_TRUE(s.committed) << s.step;
}

// A saver process SIGKILLed at random points of its save loop: after every
// kill the latest committed step loads and verifies, no half-written step is
// ever listed as committed, and reopening collects the leftovers.
TEST(CrashTest, SigkillDuringSaveLeavesLatestLoadable) {
  TempDir dir;
  const std::string root = dir.Join("root");
  std::mt19937 rng(99);
  int64_t last_seen = 0;
  const int kKills = 12;
  for (int round = 0; round < kKills; ++round) {
    int out[2];
    ASSERT_EQ(pipe(out), 0);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, out[1], STDOUT_FILENO);
    posix_spawn_file_actions_addclose(&fa, out[0]);
    const std::string err_path = dir.Join("saver.stderr");
    posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    std::string path = CRASH_SAVER_PATH;
    char* argv[] = {path.data(), const_cast<char*>(root.c_str()), nullptr};
    pid_t pid;
    ASSERT_EQ(posix_spawn(&pid, path.c_str(), &fa, nullptr, argv, environ), 0);
    posix_spawn_file_actions_destroy(&fa);
    close(out[1]);
    // Wait for one committed step of this round, then kill at a random
    // moment of a later save.
    char buf[64];
    ssize_t n = read(out[0], buf, sizeof(buf));
    if (n <= 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
      FAIL() << "saver produced no step; its stderr: " << ReadFile(err_path);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 150));
    kill(pid, SIGKILL);
    int status;
    waitpid(pid, &status, 0);
    close(out[0]);
    ASSERT_TRUE(WIFSIGNALED(status));

    auto storage = OpenStorage(root);
    ASSERT_OK(storage);
    auto latest = LatestCommittedStep(**storage);
    ASSERT_OK(latest);
    EXPECT_GT(*latest, last_seen);
    last_seen = *latest;
    std::vector<OwnedShard> outbuf = {
        EmptyShard(TensorSpec{"model.w", DType::kF32, {2048, 1024}}, Box({0, 0}, {2048, 1024}))};
    State t = StateOf(outbuf);
    std::string pos;
    ASSERT_OK(t.AddBlobOut("position", &pos, BlobScope::kGlobal));
    auto loaded = LoadCheckpoint(**storage, t);
    ASSERT_OK(loaded);
    EXPECT_EQ(Mismatches(outbuf[0], static_cast<uint64_t>(*latest)), 0);
    EXPECT_EQ(pos, std::to_string(*latest));
    // A kill between a commit and its manifest's copy is healed by the
    // next open (what the restarted job does first).
    ASSERT_OK(HealManifestCopies(**storage));
    auto steps = ListCheckpointSteps(**storage);
    ASSERT_OK(steps);
    for (const StepInfo& s : *steps) {
      if (!s.committed) continue;
      auto v = VerifyStep(**storage, s.step);
      ASSERT_OK(v);
      EXPECT_TRUE(v->ok()) << "step " << s.step << ": " << v->problems.front().message;
    }
    EXPECT_FALSE(CheckLatestPointer(**storage).has_value());
  }
  // Reopening as leader removes every leftover; retention bounds disk use.
  ExpectReopenLeavesOnlyKeptSteps(root);
}

// Bytes of every file under `dir`.
uint64_t DiskUse(const std::string& dir) {
  uint64_t total = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) total += e.file_size();
  }
  return total;
}

// The crash campaign: a saver process killed at an exact storage operation
// (the faulty backend's kill_at_op), so that kills land in every phase of a
// save, its commit and the GC that follows: data writes, fsyncs, the rank
// report, the MANIFEST rename, the LATEST update, removals. With
// `power_loss`, writes not yet made durable are also lost (the backend holds
// them until their file's fsync). After each kill the root is reopened: the
// latest committed step loads with the right values and every committed step
// verifies; nothing uncommitted is ever listed as committed; leftovers are
// collected and disk use stays bounded. CKPT_CRASH_ROUNDS sets the number of
// kills (scripts/reliability-campaign.sh runs thousands).
class CrashCampaign : public ::testing::TestWithParam<bool> {};

TEST_P(CrashCampaign, KillsAtEveryPhaseLeaveTheLatestStepLoadable) {
  const bool power_loss = GetParam();
  const int rounds = std::getenv("CKPT_CRASH_ROUNDS") ? std::atoi(std::getenv("CKPT_CRASH_ROUNDS")) : 60;
  TempDir dir;
  const std::string root = dir.Join("root");
  std::mt19937 rng(power_loss ? 7 : 11);
  int64_t last_seen = 0;
  uint64_t max_use = 0;
  std::map<std::string, int> phases;
  const TensorSpec spec{"model.w", DType::kF32, {256, 1024}};  // 1 MiB: 4 blocks a step
  for (int round = 0; round < rounds; ++round) {
    const int op = 1 + static_cast<int>(rng() % 60);
    const std::string uri = StrCat("faulty://", root, "?fault.kill_at_op=", op, power_loss ? "&fault.crash=1" : "");
    const std::string err_path = dir.Join("saver.stderr");
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    std::string path = CRASH_SAVER_PATH;
    std::string mib = "1";
    char* argv[] = {path.data(), const_cast<char*>(uri.c_str()), mib.data(), nullptr};
    pid_t pid;
    ASSERT_EQ(posix_spawn(&pid, path.c_str(), &fa, nullptr, argv, environ), 0);
    posix_spawn_file_actions_destroy(&fa);
    int status = 0;
    for (int i = 0; i < 2000 && waitpid(pid, &status, WNOHANG) == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (kill(pid, 0) == 0 && waitpid(pid, &status, WNOHANG) == 0) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      FAIL() << "round " << round << ": the saver did not reach operation " << op;
    }
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
        << "round " << round << " op " << op << ": " << ReadFile(err_path);

    // Where did it die? Look at the newest step directory.
    auto storage = OpenStorage(root);
    ASSERT_OK(storage);
    auto steps = ListCheckpointSteps(**storage);
    ASSERT_OK(steps);
    auto latest = LatestCommittedStep(**storage);
    if (!steps->empty()) {
      const StepInfo& newest = steps->back();
      const std::string sdir = StrCat(root, "/", StepDir(newest.step));
      std::string phase;
      if (newest.committed && newest.state == StepState::kDamaged &&
          newest.damage.find("MANIFEST.copy is missing") != std::string::npos) {
        phase = "after the MANIFEST rename, before its copy";
      } else if (newest.committed) {
        phase = latest.ok() && *latest == newest.step &&
                        ReadFile(StrCat(root, "/", kLatestName)).find(std::to_string(newest.step)) != std::string::npos
                    ? "committed (then in GC or the next open)"
                    : "after the MANIFEST rename, before LATEST";
      } else if (std::filesystem::exists(StrCat(sdir, "/", ReportName(0)))) {
        phase = "after the rank report, before the MANIFEST";
      } else if (std::filesystem::exists(StrCat(sdir, "/", DataFileName(0)))) {
        phase = "while writing or syncing data";
      } else {
        phase = "before any data";
      }
      phases[phase]++;
    }
    if (!latest.ok()) {
      ASSERT_EQ(last_seen, 0) << "round " << round << ": a committed step was lost: " << latest.status();
      continue;
    }
    EXPECT_GE(*latest, last_seen) << "round " << round;
    last_seen = *latest;
    std::vector<OwnedShard> out = {EmptyShard(spec, Box::Whole(spec.shape))};
    State t = StateOf(out);
    std::string pos;
    ASSERT_OK(t.AddBlobOut("position", &pos, BlobScope::kGlobal));
    ASSERT_OK(LoadCheckpoint(**storage, t));
    EXPECT_EQ(Mismatches(out[0], static_cast<uint64_t>(*latest)), 0) << "round " << round;
    EXPECT_EQ(pos, std::to_string(*latest));
    // A kill between the MANIFEST rename and its copy (or between removing
    // a retired step's copy and its MANIFEST) leaves a step without the
    // copy; the next open (the restarted job) writes it. Any other damage
    // is a bug.
    for (const StepInfo& st : *steps) {
      if (st.state != StepState::kDamaged) continue;
      EXPECT_NE(st.damage.find("MANIFEST.copy is missing"), std::string::npos)
          << "round " << round << ": " << st.damage;
    }
    auto healed = HealManifestCopies(**storage);
    ASSERT_OK(healed);
    for (const StepInfo& st : *steps) {
      if (!st.committed) continue;
      auto v = VerifyStep(**storage, st.step);
      ASSERT_OK(v);
      EXPECT_TRUE(v->ok()) << "round " << round << " step " << st.step << ": " << v->problems.front().message;
    }
    max_use = std::max(max_use, DiskUse(root));
  }
  // Reopening as the leader removes every leftover.
  ExpectReopenLeavesOnlyKeptSteps(root);
  // Two kept steps, one in flight and one leftover at most, each ~1 MiB.
  EXPECT_LT(max_use, uint64_t{6} << 20) << "disk use grew over the rounds";
  std::printf("%s: %d kills, latest step %lld, peak disk use %.1f MiB; where they landed:\n",
              power_loss ? "power loss" : "SIGKILL", rounds, static_cast<long long>(last_seen),
              static_cast<double>(max_use) / (1 << 20));
  for (const auto& [phase, n] : phases) std::printf("  %3d  %s\n", n, phase.c_str());
  if (rounds >= 50) {
    EXPECT_GE(phases.size(), 4u) << "the kills did not reach every phase";
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, CrashCampaign, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& i) { return i.param ? "PowerLoss" : "Sigkill"; });

}  // namespace
}  // namespace ckpt::testing
