// s3:// against a real S3 server when things fail: uploads left by a dead
// saver aborted by gc, savers SIGKILLed mid-save, the gateway killed and
// restarted mid-save (s3_test.h: the server and the helpers).
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "ckpt/checkpointer.h"
#include "ckpt/verify.h"
#include "core/root.h"
#include "storage/capabilities.h"
#include "storage/roots/s3/s3_test.h"
#include "testutil/test_util.h"

extern char** environ;

namespace ckpt::testing {
namespace {

// Unfinished multipart uploads left by a saver that died are aborted by gc,
// except those of a step that may still be being written.
TEST(S3Gc, UnfinishedUploadsOfDeadSavesAreAborted) {
  REQUIRE_SERVER();
  const std::string prefix = UniquePrefix("gc");
  const std::string uri = Root(prefix);
  {
    auto cp = OpenCheckpointer(uri, Codec::kNone);
    ASSERT_NE(cp, nullptr);
    std::vector<OwnedShard> shards;
    State state = SmallState(shards);
    auto h = cp->Save(3, state);
    ASSERT_OK(h);
    ASSERT_OK(h->Wait());
  }
  auto storage = OpenOrDie(uri);
  ASSERT_NE(storage, nullptr);
  ASSERT_OK(storage->PutIfAbsent("step-0000000009/CLAIM", Bytes("a save on another host")));
  for (const char* key : {"step-0000000003/rank-000001.ckd", "stray.bin", "step-0000000009/rank-000000.ckd"}) {
    CommandResult r = RunCommand(
        Aws("s3api create-multipart-upload --bucket ckpt-test --key " + prefix + "/" + key + " --output text"));
    ASSERT_EQ(r.code, 0) << r.out;
  }
  auto before = ListPendingUploads(*storage);
  ASSERT_OK(before);
  ASSERT_EQ(before->size(), 3u);
  // Behind an adapter the uploads are found all the same (the capability
  // is forwarded): the dry run goes through faulty://.
  auto wrapped = OpenOrDie("faulty://" + uri);
  ASSERT_NE(wrapped, nullptr);
  ASSERT_OK(ListPendingUploads(*wrapped));
  EXPECT_EQ(ListPendingUploads(*wrapped)->size(), 3u);
  CommandResult dry = RunCommand(std::string(CKPT_BIN) + " gc " + Quote("faulty://" + uri) + " --json");
  ASSERT_EQ(dry.code, 0) << dry.out;
  EXPECT_NE(dry.out.find("would abort unfinished upload of stray.bin"), std::string::npos) << dry.out;
  ASSERT_EQ(ListPendingUploads(*storage)->size(), 3u) << "a dry run aborts nothing";
  CommandResult gc = RunCommand(std::string(CKPT_BIN) + " gc " + Quote(uri) + " --yes --json");
  ASSERT_EQ(gc.code, 0) << gc.out;
  EXPECT_NE(gc.out.find("\"aborted_uploads\":[\"step-0000000003/rank-000001.ckd\",\"stray.bin\"]"), std::string::npos)
      << gc.out;
  auto after = ListPendingUploads(*storage);
  ASSERT_OK(after);
  ASSERT_EQ(after->size(), 1u);
  EXPECT_EQ(after->front().path, "step-0000000009/rank-000000.ckd") << "the step being written keeps its upload";
  // The job's next start removes the unfinished step 9, and its upload.
  CommandResult partial = RunCommand(std::string(CKPT_BIN) + " gc " + Quote(uri) + " --yes --newer-partial");
  ASSERT_EQ(partial.code, 0) << partial.out;
  EXPECT_TRUE(ListPendingUploads(*storage)->empty());
  auto steps = ListCheckpointSteps(*storage);
  ASSERT_OK(steps);
  ASSERT_EQ(steps->size(), 1u);
  EXPECT_EQ(steps->front().step, 3);
}

pid_t SpawnSaver(const std::string& root, const std::string& err_path, int* out_fd) {
  int out[2];
  if (pipe(out) != 0) return -1;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, out[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&fa, out[0]);
  posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::string path = CRASH_SAVER_PATH;
  std::string mib = "24";  // several 5 MiB parts per step
  char* argv[] = {path.data(), const_cast<char*>(root.c_str()), mib.data(), nullptr};
  pid_t pid = -1;
  if (posix_spawn(&pid, path.c_str(), &fa, nullptr, argv, environ) != 0) pid = -1;
  posix_spawn_file_actions_destroy(&fa);
  close(out[1]);
  *out_fd = out[0];
  return pid;
}

// A saver SIGKILLed at random points of its saves to s3://: no step is ever
// committed without all of its data, the latest committed step loads, and
// what the dead saves left (objects and unfinished uploads) is cleaned by
// the next start and gc.
TEST(S3Crash, SigkillDuringSavesLeavesOnlyWholeSteps) {
  REQUIRE_SERVER();
  TempDir dir;
  const std::string root = Root(UniquePrefix("crash"), "&part_size=5M");
  std::mt19937 rng(2026);
  int64_t last_seen = 0;
  for (int round = 0; round < 5; ++round) {
    SCOPED_TRACE(round);
    int fd = -1;
    const pid_t pid = SpawnSaver(root, dir.Join("saver.stderr"), &fd);
    ASSERT_GT(pid, 0);
    char buf[64];
    if (read(fd, buf, sizeof(buf)) <= 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
      FAIL() << "saver produced no step; its stderr: " << ReadFile(dir.Join("saver.stderr"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 400));
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    close(fd);
    ASSERT_TRUE(WIFSIGNALED(status));
    auto storage = OpenOrDie(root);
    ASSERT_NE(storage, nullptr);
    // A kill between a commit and its manifest's copy (or mid-removal, after
    // the copy went) leaves a MANIFEST without its copy: the next open heals
    // it, as the restarted job does first.
    ASSERT_OK(HealManifestCopies(*storage));
    auto steps = ListCheckpointSteps(*storage);
    ASSERT_OK(steps);
    for (const StepInfo& s : *steps) {
      if (!s.committed) continue;
      // Committed means every file the manifest names is whole.
      auto report = VerifyStep(*storage, s.step);
      ASSERT_OK(report);
      std::string problems;
      for (const VerifyProblem& p : report->problems) problems += p.message + "\n";
      EXPECT_TRUE(report->ok()) << "step " << s.step << ":\n" << problems;
    }
    auto latest = LatestCommittedStep(*storage);
    ASSERT_OK(latest);
    EXPECT_GE(*latest, last_seen);
    last_seen = *latest;
    std::vector<OwnedShard> out = {
        EmptyShard(TensorSpec{"model.w", DType::kF32, {24 * 256, 1024}}, Box({0, 0}, {24 * 256, 1024}))};
    State t = StateOf(out);
    auto loaded = LoadCheckpoint(*storage, t);
    ASSERT_OK(loaded);
    EXPECT_EQ(Mismatches(out[0], static_cast<uint64_t>(*latest)), 0);
  }
  // The restarted job's open cleans what the last kill left.
  {
    CheckpointerOptions o;
    o.uri = root;
    o.retention.keep_last = 2;
    auto cp = Checkpointer::Open(o);
    ASSERT_OK(cp);
  }
  auto storage = OpenOrDie(root);
  ASSERT_NE(storage, nullptr);
  auto pending = ListPendingUploads(*storage);
  ASSERT_OK(pending);
  EXPECT_TRUE(pending->empty()) << pending->size() << " unfinished uploads left, first " << pending->front().path;
  auto steps = ListCheckpointSteps(*storage);
  ASSERT_OK(steps);
  for (const StepInfo& s : *steps) EXPECT_TRUE(s.committed) << "step " << s.step << " left uncommitted";
}

void Gateway(const std::string& what) {
  CommandResult r = RunCommand(std::string(S3_SERVER_SCRIPT) + " " + what);
  ASSERT_EQ(r.code, 0) << r.out;
}

// The gateway killed mid-save and started again: the save retries through
// it within its deadline. Killed for longer than the deadline: the save
// fails cleanly and the step before it still loads.
TEST(S3Restart, AGatewayKilledMidSaveIsRetriedThroughOrFailsCleanly) {
  REQUIRE_SERVER();
  setenv("CEPH_S3_DIR", std::filesystem::path(CKPT_S3_ENV_FILE).parent_path().c_str(), 1);
  const std::string prefix = UniquePrefix("restart");
  std::vector<OwnedShard> shards;
  for (int i = 0; i < 8; ++i) {
    TensorSpec spec{"layer" + std::to_string(i), DType::kF32, {4096, 1024}};  // 16 MiB each
    shards.push_back(MakeShard(spec, Box::Whole(spec.shape), 5));
  }
  State state = StateOf(shards);
  {
    auto cp = OpenCheckpointer(Root(prefix, "&part_size=5M&deadline=60"), Codec::kNone);
    ASSERT_NE(cp, nullptr);
    auto h1 = cp->Save(1, state);
    ASSERT_OK(h1);
    ASSERT_OK(h1->Wait());
    auto h2 = cp->Save(2, state);
    ASSERT_OK(h2);
    // Killed while the save uploads, or the test would prove nothing.
    ASSERT_TRUE(absl::IsDeadlineExceeded(h2->WaitFor(0))) << "the save ended before the gateway was killed";
    Gateway("kill-rgw");
    std::this_thread::sleep_for(std::chrono::seconds(2));
    Gateway("start-rgw");
    ASSERT_OK(h2->Wait());
  }
  {
    auto cp = OpenCheckpointer(Root(prefix, "&part_size=5M&deadline=2"), Codec::kNone);
    ASSERT_NE(cp, nullptr);
    Gateway("kill-rgw");
    auto h3 = cp->Save(3, state);
    absl::Status st = h3.ok() ? h3->Wait() : h3.status();
    Gateway("start-rgw");
    EXPECT_FALSE(st.ok());
    EXPECT_TRUE(absl::IsUnavailable(st) || absl::IsDeadlineExceeded(st)) << st;
  }
  auto storage = OpenOrDie(Root(prefix));
  ASSERT_NE(storage, nullptr);
  auto latest = LatestCommittedStep(*storage);
  ASSERT_OK(latest);
  EXPECT_EQ(*latest, 2);
  std::vector<OwnedShard> out;
  for (auto& s : shards) out.push_back(EmptyShard(s.spec, s.box));
  State target = StateOf(out);
  ASSERT_OK(LoadCheckpoint(*storage, target));
  for (auto& s : out) EXPECT_EQ(Mismatches(s, 5), 0) << s.spec.fqn;
}

}  // namespace
}  // namespace ckpt::testing
