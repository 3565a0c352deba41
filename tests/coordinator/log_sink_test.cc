// The library's messages go to the sink set for them and never to stderr:
// a save's retention, the cleanup of a crashed save at Open, a load from a
// manifest copy, a save that fails on ckpt's threads, the coordinator's
// lines and the memory level's, each with its level and component; a
// Checkpointer's own sink takes its messages from the process's.
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ckpt/checkpointer.h"
#include "ckpt/coordinator.h"
#include "ckpt/log.h"
#include "ckpt/peer.h"
#include "coordinator/harness.h"
#include "format/root_files.h"
#include "testutil/test_util.h"

namespace ckpt::testing {
namespace {

const TensorSpec kSpec{"w", DType::kF32, {64, 256}};

struct Said {
  LogLevel level;
  std::string component, message;
};

// Collects what a sink is given.
class Collector {
 public:
  LogSink sink() {
    return [this](LogLevel level, std::string_view component, std::string_view message) {
      std::lock_guard<std::mutex> lock(mu_);
      said_.push_back(Said{level, std::string(component), std::string(message)});
    };
  }
  bool Has(LogLevel level, std::string_view component, std::string_view part) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const Said& s : said_) {
      if (s.level == level && s.component == component && s.message.find(part) != std::string::npos) return true;
    }
    return false;
  }
  std::string All() {
    std::lock_guard<std::mutex> lock(mu_);
    std::string out;
    for (const Said& s : said_) out += StrCat(LogLevelName(s.level), " [", s.component, "] ", s.message, "\n");
    return out;
  }
  size_t size() {
    std::lock_guard<std::mutex> lock(mu_);
    return said_.size();
  }

 private:
  std::mutex mu_;
  std::vector<Said> said_;
};

// fd 2 goes to a file while alive; Release gives back what reached it.
class CapturedStderr {
 public:
  explicit CapturedStderr(std::string path) : path_(std::move(path)) {
    std::fflush(stderr);
    saved_ = dup(2);
    const int fd = open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    dup2(fd, 2);
    close(fd);
  }
  ~CapturedStderr() { Release(); }
  std::string Release() {
    if (saved_ < 0) return ReadFile(path_);
    std::fflush(stderr);
    dup2(saved_, 2);
    close(saved_);
    saved_ = -1;
    return ReadFile(path_);
  }

 private:
  std::string path_;
  int saved_ = -1;
};

absl::Status SaveStep(Checkpointer& cp, int64_t step) {
  std::vector<OwnedShard> s = {MakeShard(kSpec, Box::Whole(kSpec.shape), static_cast<uint64_t>(step))};
  State st = StateOf(s);
  auto h = cp.Save(step, st);
  if (!h.ok()) return h.status();
  return h->Wait();
}

std::unique_ptr<Checkpointer> OpenRoot(const std::string& uri, LogSink log = nullptr) {
  CheckpointerOptions o;
  o.uri = uri;
  o.retention.keep_last = 1;
  o.engine_options.staging_bytes = 1 << 20;
  o.log = std::move(log);
  auto cp = Checkpointer::Open(o);
  EXPECT_TRUE(cp.ok()) << cp.status();
  return cp.ok() ? std::move(cp).value() : nullptr;
}

class LogSinkTest : public ::testing::Test {
 protected:
  void TearDown() override { SetLogSink(nullptr); }
  TempDir dir_;
};

TEST_F(LogSinkTest, NothingReachesStderrOnceASinkIsSet) {
  Collector got;
  SetLogSink(got.sink());
  CapturedStderr err(dir_.Join("stderr"));
  const std::string root = dir_.Join("root");
  {
    auto cp = OpenRoot(root);
    ASSERT_NE(cp, nullptr);
    ASSERT_OK(SaveStep(*cp, 1));
    ASSERT_OK(SaveStep(*cp, 2));  // retention removes step 1
  }
  // A crashed save's leftovers, collected when the next job opens the root;
  // then a damaged MANIFEST: the load reads the copy and says so.
  std::filesystem::create_directories(root + "/" + StepDir(3));
  WriteFile(root + "/" + StepDir(3) + "/" + DataFileName(0), std::string(100, 'x'));
  ASSERT_NE(OpenRoot(root), nullptr);
  WriteFile(root + "/" + StepDir(2) + "/" + std::string(kManifestName), "not a manifest");
  {
    std::vector<OwnedShard> out = {EmptyShard(kSpec, Box::Whole(kSpec.shape))};
    State t = StateOf(out);
    auto storage = OpenStorage(root);
    ASSERT_OK(storage);
    ASSERT_OK(LoadCheckpoint(**storage, t, kLatestStep));
    EXPECT_EQ(Mismatches(out[0], 2), 0);
  }
  // A save whose report cannot be written fails on ckpt's threads.
  {
    auto bad = OpenRoot(StrCat("faulty://", dir_.Join("bad"), "?fault.fail_on=put&fault.match=.report"));
    ASSERT_NE(bad, nullptr);
    EXPECT_FALSE(SaveStep(*bad, 1).ok());
  }
  // A coordinator and a memory level without log options of their own.
  CoordinatorOptions co = InProcess(dir_, 1);
  co.log = nullptr;
  auto coord = Coordinator::Start(co);
  ASSERT_OK(coord);
  {
    CoordinatorClientOptions cl;
    cl.address = StrCat("127.0.0.1:", (*coord)->port());
    cl.token = kToken;
    cl.heartbeat_s = 0.1;
    auto client = CoordinatorClient::Connect(cl);
    ASSERT_OK(client);
    ASSERT_OK((*client)->Join(10));
    ASSERT_OK((*client)->Leave());
  }
  PeerMemoryOptions po;
  po.token = kToken;
  auto peer = PeerMemory::Start(po);
  ASSERT_OK(peer);
  const std::string ep = (*peer)->endpoint();
  const int fd = RawConnect(std::stoi(ep.substr(ep.rfind(':') + 1)));
  ASSERT_GE(fd, 0);
  const std::string garbage(64, '\x7f');
  ASSERT_EQ(write(fd, garbage.data(), garbage.size()), static_cast<ssize_t>(garbage.size()));
  for (int i = 0; i < 500 && !got.Has(LogLevel::kInfo, "peer", "closed"); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  close(fd);
  peer->reset();
  coord->reset();
  const std::string text = err.Release();
  EXPECT_EQ(text, "") << text.size() << " bytes reached stderr";
  const std::string all = got.All();
  EXPECT_TRUE(got.Has(LogLevel::kInfo, "", "removed committed step 1: past retention")) << all;
  EXPECT_TRUE(got.Has(LogLevel::kInfo, "", "partial step 3")) << all;
  EXPECT_TRUE(got.Has(LogLevel::kWarning, "", "loading step 2")) << all;
  EXPECT_TRUE(got.Has(LogLevel::kWarning, "", "durable save of step 1 by rank 0 failed")) << all;
  EXPECT_TRUE(got.Has(LogLevel::kInfo, "coordinator", "joined")) << all;
  EXPECT_TRUE(got.Has(LogLevel::kInfo, "peer", "closed")) << all;
}

TEST_F(LogSinkTest, ACheckpointersOwnSinkTakesItsMessages) {
  Collector process, own;
  SetLogSink(process.sink());
  {
    auto cp = OpenRoot(dir_.Join("root"), own.sink());
    ASSERT_NE(cp, nullptr);
    ASSERT_OK(SaveStep(*cp, 1));
    ASSERT_OK(SaveStep(*cp, 2));
    auto bad = OpenRoot(StrCat("faulty://", dir_.Join("bad"), "?fault.fail_on=put&fault.match=.report"), own.sink());
    ASSERT_NE(bad, nullptr);
    EXPECT_FALSE(SaveStep(*bad, 1).ok());
  }
  EXPECT_TRUE(own.Has(LogLevel::kInfo, "", "removed committed step 1")) << own.All();
  EXPECT_TRUE(own.Has(LogLevel::kWarning, "", "save of step 1 by rank 0 failed")) << own.All();
  EXPECT_EQ(process.size(), 0u) << process.All();
}

TEST_F(LogSinkTest, StderrSinkWritesOneLinePerMessageAtItsLevel) {
  SetLogSink(StderrLogSink(LogLevel::kWarning));
  CapturedStderr err(dir_.Join("stderr"));
  LogMessage(LogLevel::kInfo, "", "not shown");
  LogMessage(LogLevel::kWarning, "", "shown");
  LogMessage(LogLevel::kError, "coordinator", "also shown");
  EXPECT_EQ(err.Release(), "ckpt: shown\nckpt coordinator: also shown\n");
}

}  // namespace
}  // namespace ckpt::testing
