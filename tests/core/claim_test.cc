// One writer per step: a save claims its step (CLAIM, created exclusively)
// before any rank writes, every file and report carries the claim's save
// id, and the leader commits only files of its own save. A second save of
// the same step fails at once naming the first and writes nothing into it.
//
// CKPT_WRITER_ROUNDS and CKPT_WRITER_PARAMS scale the rounds of two real
// `ckpt synth` processes racing for one step and their size
// (scripts/reliability-campaign.sh runs it long).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "ckpt/checkpointer.h"
#include "ckpt/communicator.h"
#include "ckpt/verify.h"
#include "core/root.h"
#include "format/manifest.h"
#include "format/root_files.h"
#include "pipeline/save_engine.h"
#include "testutil/test_util.h"
#include "util/bytes.h"
#include "util/clock.h"
#include "util/strings.h"

namespace ckpt::testing {
namespace {

namespace fs = std::filesystem;

const TensorSpec kWeight{"model.w", DType::kF32, {128, 256}};

std::string Ckpt(const std::string& args) { return StrCat(CKPT_BIN, " ", args, " 2>&1"); }

bool Has(std::string_view text, std::string_view part) { return text.find(part) != std::string_view::npos; }
bool Has(absl::string_view text, std::string_view part) {
  return Has(std::string_view(text.data(), text.size()), part);
}
bool Has(const std::string& text, std::string_view part) { return Has(std::string_view(text), part); }

CheckpointerOptions Options(const std::string& uri, int rank, int world) {
  CheckpointerOptions o;
  o.uri = uri;
  o.rank = rank;
  o.world_size = world;
  o.engine_options.block_size = 64 << 10;
  o.engine_options.staging_bytes = 4 << 20;
  o.commit_timeout_s = 60;
  return o;
}

// Rows [64 r, 64 r + 64) of kWeight, valued by `seed`.
std::vector<OwnedShard> Half(int rank, uint64_t seed) {
  return {MakeShard(kWeight, Box({64 * rank, 0}, {64, 256}), seed)};
}

// Elements of the committed `step` that are not the values of `seed`.
int64_t WrongElements(const std::string& uri, int64_t step, uint64_t seed) {
  auto storage = OpenStorage(uri);
  if (!storage.ok()) return -1;
  std::vector<OwnedShard> out = {EmptyShard(kWeight, Box::Whole(kWeight.shape))};
  State t = StateOf(out);
  auto st = LoadCheckpoint(**storage, t, step);
  if (!st.ok()) return -1;
  return Mismatches(out[0], seed);
}

// Saves the whole of kWeight, valued by `seed`, as `step` through `cp`.
absl::Status SaveWhole(Checkpointer& cp, int64_t step, uint64_t seed) {
  std::vector<OwnedShard> whole = {MakeShard(kWeight, Box::Whole(kWeight.shape), seed)};
  State st = StateOf(whole);
  auto h = cp.Save(step, st);
  return h.ok() ? h->Wait() : h.status();
}

StepClaim ForeignClaim(const std::string& host, int64_t pid) {
  StepClaim c;
  c.save_id = 0x5eed0000cafe0001ull;
  c.world_size = 2;
  c.host = host;
  c.pid = pid;
  c.claimed_unix_ns = UnixNanos();
  return c;
}

TEST(Claims, ClaimFilesRoundTripAndEveryFlippedBitIsRefused) {
  StepClaim c = ForeignClaim("node-17.cluster", 4242);
  const std::string text = EncodeClaim(c);
  auto back = DecodeClaim(text, "step-0000000001/CLAIM");
  ASSERT_OK(back);
  EXPECT_EQ(back->save_id, c.save_id);
  EXPECT_EQ(back->world_size, 2);
  EXPECT_EQ(back->host, "node-17.cluster");
  EXPECT_EQ(back->pid, 4242);
  EXPECT_EQ(back->claimed_unix_ns, c.claimed_unix_ns);
  for (size_t byte = 0; byte < text.size(); ++byte) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string bad = text;
      bad[byte] = static_cast<char>(bad[byte] ^ (1 << bit));
      auto d = DecodeClaim(bad, "step-0000000001/CLAIM");
      EXPECT_FALSE(d.ok()) << "byte " << byte << " bit " << bit;
      if (!d.ok()) {
        EXPECT_TRUE(Has(d.status().message(), "step-0000000001/CLAIM")) << d.status();
      }
    }
  }
  EXPECT_FALSE(DecodeClaim(text.substr(0, text.size() - 1), "CLAIM").ok());
  EXPECT_FALSE(DecodeClaim("", "CLAIM").ok());
  // Host names are written with printable bytes only.
  c.host = "bad host\nname";
  auto odd = DecodeClaim(EncodeClaim(c), "CLAIM");
  ASSERT_OK(odd);
  EXPECT_EQ(odd->host, "bad?host?name");
}

// The case: two `ckpt synth` jobs (dp=2,tp=2: four ranks each) save
// the same step with different seeds, started together. One commits; the
// other fails at once naming it (or, when it starts after the commit, is
// refused as a committed step); the committed step holds only the winner's
// values on a restore onto another mesh.
TEST(Claims, TwoSynthProcessesOnOneStepNeverMix) {
  const int rounds = std::getenv("CKPT_WRITER_ROUNDS") ? std::atoi(std::getenv("CKPT_WRITER_ROUNDS")) : 6;
  const std::string params = std::getenv("CKPT_WRITER_PARAMS") ? std::getenv("CKPT_WRITER_PARAMS") : "8M";
  int claimed = 0, after_commit = 0;
  double slowest_loser = 0;
  for (int round = 0; round < rounds; ++round) {
    TempDir tmp;
    const std::string root = tmp.Join("root");
    struct Run {
      uint64_t seed;
      CommandResult result;
      double seconds = 0;
    };
    std::vector<Run> runs = {{1000u + round, {}, 0}, {2000u + round, {}, 0}};
    std::atomic<bool> go{false};
    std::vector<std::thread> threads;
    for (int w = 0; w < 2; ++w) {
      threads.emplace_back([&, w] {
        while (!go.load()) std::this_thread::yield();
        // The second writer starts up to 60 ms later: simultaneous starts,
        // and starts while the first is writing.
        if (w == 1) std::this_thread::sleep_for(std::chrono::milliseconds(round * 60 / std::max(1, rounds - 1)));
        const double t0 = NowSeconds();
        runs[w].result = RunCommand(Ckpt(
            StrCat("synth --out ", root, " --params ", params, " --mesh dp=2,tp=2 --step 500 --seed ", runs[w].seed)));
        runs[w].seconds = NowSeconds() - t0;
      });
    }
    go = true;
    for (auto& t : threads) t.join();
    const std::string where = StrCat("round ", round, "\nA: ", runs[0].result.out, "\nB: ", runs[1].result.out);
    const int winners = (runs[0].result.code == 0) + (runs[1].result.code == 0);
    ASSERT_EQ(winners, 1) << where;
    const Run& win = runs[0].result.code == 0 ? runs[0] : runs[1];
    const Run& lose = runs[0].result.code == 0 ? runs[1] : runs[0];
    // Stopped by the other's claim, before writing or (a start that found
    // the other's step directory without its claim yet and collected it)
    // while writing.
    if (Has(lose.result.out, "claimed by another save") || Has(lose.result.out, "claimed the step while this save")) {
      EXPECT_EQ(lose.result.code, 1) << where;
      ++claimed;
    } else {
      EXPECT_TRUE(Has(lose.result.out, "already committed") || Has(lose.result.out, "not newer than")) << where;
      EXPECT_EQ(lose.result.code, 2) << where;
      ++after_commit;
    }
    slowest_loser = std::max(slowest_loser, lose.seconds);
    EXPECT_LT(lose.seconds, 30) << "the losing writer waited\n" << where;
    // Only the winner's save is in the step, and it holds only its values.
    auto storage = OpenStorage(root);
    ASSERT_OK(storage);
    auto m = ReadManifest(**storage, 500);
    ASSERT_OK(m);
    EXPECT_EQ(m->metadata["synth.seed"], std::to_string(win.seed)) << where;
    auto claim = ReadStepClaim(**storage, 500);
    ASSERT_OK(claim);
    for (const ManifestFile& f : m->files) EXPECT_EQ(f.save_id, claim->save_id) << f.name;
    auto v = RunCommand(Ckpt(StrCat("verify ", root, " --step 500")));
    EXPECT_EQ(v.code, 0) << v.out << where;
    auto rc = RunCommand(Ckpt(StrCat("restore-check ", root, " --step 500 --mesh dp=1,tp=4")));
    EXPECT_EQ(rc.code, 0) << rc.out << where;
    // Nothing of the loser is left behind.
    for (const auto& e : fs::directory_iterator(StrCat(root, "/", StepDir(500)))) {
      const std::string name = e.path().filename().string();
      EXPECT_FALSE(name.ends_with(".failed") || name.ends_with(".report") || name == "ABORTED") << name << where;
    }
  }
  std::printf(
      "two writers: %d rounds, %d losers stopped by the claim, %d refused after the commit, "
      "slowest loser %.2f s\n",
      rounds, claimed, after_commit, slowest_loser);
}

class ClaimBackends : public ::testing::TestWithParam<std::string> {};

std::string BackendUri(const std::string& kind, const TempDir& tmp) {
  if (kind == "hdf5") return "hdf5://" + tmp.Join("root");
  if (kind == "tiered") return "tiered://?local=" + tmp.Join("root") + "&durable=" + tmp.Join("durable");
  if (kind == "posix") return "posix://" + tmp.Join("root");
  return tmp.Join("root");
}

// Two jobs of two ranks each (a communicator per job) save one step at the
// same moment: every rank of one job learns the outcome of its leader's
// claim at once, and exactly one job commits, with its own values only.
TEST_P(ClaimBackends, RanksOfTheLosingJobAllFailAtOnce) {
  TempDir tmp;
  const std::string uri = BackendUri(GetParam(), tmp);
  int contested = 0;
  for (int round = 0; round < 8; ++round) {
    const int64_t step = 10 * (round + 1);
    std::vector<absl::Status> status(4);
    std::vector<double> seconds(4);
    std::vector<std::thread> threads;
    std::atomic<bool> go{false};
    for (int job = 0; job < 2; ++job) {
      auto comms = CreateLocalCommunicators(2);
      for (int r = 0; r < 2; ++r) {
        threads.emplace_back([&, job, r, comm = comms[r]] {
          CheckpointerOptions o = Options(uri, r, 2);
          o.communicator = comm;
          o.gc_on_open = false;
          auto cp = Checkpointer::Open(o);
          if (!cp.ok()) {
            status[job * 2 + r] = cp.status();
            return;
          }
          std::vector<OwnedShard> half = Half(r, 100u * job + static_cast<uint64_t>(step));
          State st = StateOf(half);
          while (!go.load()) std::this_thread::yield();
          const double t0 = NowSeconds();
          auto h = (*cp)->Save(step, st);
          status[job * 2 + r] = h.ok() ? h->Wait() : h.status();
          seconds[job * 2 + r] = NowSeconds() - t0;
        });
      }
    }
    go = true;
    for (auto& t : threads) t.join();
    const bool a = status[0].ok() && status[1].ok();
    const bool b = status[2].ok() && status[3].ok();
    ASSERT_NE(a, b) << status[0] << " / " << status[1] << " / " << status[2] << " / " << status[3];
    const int loser = a ? 1 : 0;
    for (int r = 0; r < 2; ++r) {
      const absl::Status& s = status[loser * 2 + r];
      // Claimed by the other job, or (it started late) committed by it.
      EXPECT_TRUE(absl::IsAborted(s) || absl::IsAlreadyExists(s) || absl::IsFailedPrecondition(s)) << s;
      contested += absl::IsAborted(s) && r == 0;
      if (absl::IsAborted(s)) {
        EXPECT_TRUE(Has(s.message(), "claimed by another save") || Has(s.message(), "claimed the step while this save"))
            << s;
      }
      EXPECT_LT(seconds[loser * 2 + r], 10) << s;
    }
    EXPECT_EQ(WrongElements(uri, step, 100u * (1 - loser) + static_cast<uint64_t>(step)), 0) << "round " << round;
    auto storage = OpenStorage(uri);
    ASSERT_OK(storage);
    auto v = VerifyStep(**storage, step);
    ASSERT_OK(v);
    EXPECT_TRUE(v->ok()) << (v->problems.empty() ? "" : v->problems[0].message);
  }
  std::printf("%s: %d of 8 rounds decided by the claim\n", GetParam().c_str(), contested);
}

INSTANTIATE_TEST_SUITE_P(Backends, ClaimBackends, ::testing::Values("file", "posix", "hdf5", "tiered"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

// Without a communicator, ranks given a save id check the claim against it
// before writing: a rank of another save writes nothing into the step.
TEST(Claims, ARankOfAnotherSaveWritesNothing) {
  TempDir tmp;
  const std::string root = tmp.Join("root");
  CheckpointerOptions lo = Options(root, 0, 2);
  lo.commit_timeout_s = 1;
  auto leader = Checkpointer::Open(lo);
  ASSERT_OK(leader);
  CheckpointerOptions ro = Options(root, 1, 2);
  ro.gc_on_open = false;
  auto stranger = Checkpointer::Open(ro);
  ASSERT_OK(stranger);
  std::vector<OwnedShard> a = Half(0, 1), b = Half(1, 2);
  State sa = StateOf(a), sb = StateOf(b);
  SaveOptions mine, theirs;
  mine.save_id = 0x1111;
  theirs.save_id = 0x2222;
  auto h0 = (*leader)->Save(7, sa, mine);
  ASSERT_OK(h0);
  EXPECT_EQ(h0->Stats().save_id, 0x1111u);
  const double t0 = NowSeconds();
  auto h1 = (*stranger)->Save(7, sb, theirs);
  ASSERT_FALSE(h1.ok());
  EXPECT_TRUE(absl::IsAborted(h1.status())) << h1.status();
  EXPECT_TRUE(Has(h1.status().message(), "claimed by another save 0x0000000000001111")) << h1.status();
  EXPECT_LT(NowSeconds() - t0, 1);
  EXPECT_FALSE(fs::exists(StrCat(root, "/", StepDir(7), "/", DataFileName(1))));
  // The leader gives up on its missing rank; its claim is released, so the
  // step can be saved again.
  absl::Status s = h0->Wait();
  EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
  EXPECT_FALSE(fs::exists(StrCat(root, "/", StepDir(7), "/CLAIM")));
  EXPECT_TRUE(fs::exists(StrCat(root, "/", StepDir(7), "/ABORTED")));
  auto solo = Checkpointer::Open(Options(root, 0, 1));
  ASSERT_OK(solo);
  ASSERT_OK(SaveWhole(**solo, 7, 3));
  EXPECT_EQ(WrongElements(root, 7, 3), 0);
}

// A save whose claim is replaced while it writes (a new job's start removed
// its step) stops at once and writes nothing more into the step.
TEST(Claims, ALostClaimStopsTheSaveAtOnce) {
  TempDir tmp;
  const std::string root = tmp.Join("root");
  auto leader = Checkpointer::Open(Options(root, 0, 2));  // rank 1 never reports
  ASSERT_OK(leader);
  std::vector<OwnedShard> a = Half(0, 1);
  State sa = StateOf(a);
  auto h = (*leader)->Save(3, sa);
  ASSERT_OK(h);
  ASSERT_OK(h->WaitDurable());
  const std::string claim = StrCat(root, "/", StepDir(3), "/CLAIM");
  const std::string other = EncodeClaim(ForeignClaim("elsewhere", 99));
  WriteFile(claim, other);
  const double t0 = NowSeconds();
  absl::Status s = h->Wait();
  EXPECT_TRUE(absl::IsAborted(s)) << s;
  EXPECT_TRUE(Has(s.message(), "claimed the step while this save")) << s;
  EXPECT_LT(NowSeconds() - t0, 5);
  EXPECT_EQ(ReadFile(claim), other);  // the other save's claim is left alone
  EXPECT_FALSE(fs::exists(StrCat(root, "/", StepDir(3), "/ABORTED")));
}

// The open-time cleanup removes the claims of saves that are gone (another
// host's, or a dead process's on this one) and keeps a live process's; a
// save of a step a live process holds fails at once naming it.
TEST(Claims, StaleClaimsAreCollectedAndLiveOnesKept) {
  TempDir tmp;
  const std::string root = tmp.Join("root");
  {
    auto cp = Checkpointer::Open(Options(root, 0, 1));
    ASSERT_OK(cp);
    ASSERT_OK(SaveWhole(**cp, 1, 1));
  }
  std::fflush(nullptr);  // the children must not print this process's buffers
  const pid_t live = fork();
  ASSERT_GE(live, 0);
  if (live == 0) {
    pause();
    _exit(0);
  }
  const pid_t dead = fork();
  ASSERT_GE(dead, 0);
  if (dead == 0) _exit(0);
  ASSERT_EQ(waitpid(dead, nullptr, 0), dead);
  auto plant = [&](int64_t step, const std::string& host, int64_t pid) {
    fs::create_directories(StrCat(root, "/", StepDir(step)));
    WriteFile(StrCat(root, "/", StepDir(step), "/CLAIM"), EncodeClaim(ForeignClaim(host, pid)));
    WriteFile(StrCat(root, "/", StepDir(step), "/", DataFileName(0)), std::string(4096, 'x'));
  };
  plant(2, "another-host", live);  // cannot be checked from here: a leftover
  plant(3, ThisHostName(), live);  // a save still running here
  plant(4, ThisHostName(), dead);  // a save that died here
  {
    auto cp = Checkpointer::Open(Options(root, 0, 1));
    ASSERT_OK(cp);
    EXPECT_FALSE(fs::exists(StrCat(root, "/", StepDir(2))));
    EXPECT_TRUE(fs::exists(StrCat(root, "/", StepDir(3), "/CLAIM")));
    EXPECT_FALSE(fs::exists(StrCat(root, "/", StepDir(4))));
    auto storage = OpenStorage(root);
    ASSERT_OK(storage);
    GcOptions gc;
    gc.dry_run = true;
    gc.remove_newer_partial = true;  // as when a job opens the root
    auto report = CollectGarbageIn(**storage, gc);
    ASSERT_OK(report);
    EXPECT_EQ(report->kept_running, std::vector<int64_t>{3});
    std::vector<OwnedShard> w = {MakeShard(kWeight, Box::Whole(kWeight.shape), 3)};
    State st = StateOf(w);
    auto h = (*cp)->Save(3, st);
    ASSERT_FALSE(h.ok());
    EXPECT_TRUE(absl::IsAborted(h.status())) << h.status();
    EXPECT_TRUE(Has(h.status().message(), StrCat("pid ", live))) << h.status();
  }
  kill(live, SIGKILL);
  ASSERT_EQ(waitpid(live, nullptr, 0), live);
  auto cp = Checkpointer::Open(Options(root, 0, 1));
  ASSERT_OK(cp);
  EXPECT_FALSE(fs::exists(StrCat(root, "/", StepDir(3))));
  ASSERT_OK(SaveWhole(**cp, 3, 3));
  EXPECT_EQ(WrongElements(root, 3, 3), 0);
}

// The manifest commits the claim: a CLAIM replaced after the commit is
// found by verify and rewritten, byte for byte, by repair.
TEST(Claims, TheManifestBindsTheClaim) {
  TempDir tmp;
  const std::string root = tmp.Join("root");
  auto cp = Checkpointer::Open(Options(root, 0, 1));
  ASSERT_OK(cp);
  std::vector<OwnedShard> w = {MakeShard(kWeight, Box::Whole(kWeight.shape), 5)};
  State st = StateOf(w);
  auto h = (*cp)->Save(5, st);
  ASSERT_OK(h);
  ASSERT_OK(h->Wait());
  const std::string claim = StrCat(root, "/", StepDir(5), "/CLAIM");
  const std::string original = ReadFile(claim);
  auto decoded = DecodeClaim(original, "CLAIM");
  ASSERT_OK(decoded);
  EXPECT_EQ(decoded->save_id, h->Stats().save_id);
  EXPECT_EQ(decoded->pid, getpid());
  EXPECT_EQ(decoded->host, ThisHostName());
  WriteFile(claim, EncodeClaim(ForeignClaim("elsewhere", 1)));
  auto v = RunCommand(Ckpt(StrCat("verify ", root, " --step 5")));
  EXPECT_EQ(v.code, 1) << v.out;
  EXPECT_TRUE(Has(v.out, StrCat(StepDir(5), "/CLAIM"))) << v.out;
  EXPECT_TRUE(Has(v.out, "not the claim the manifest committed")) << v.out;
  auto r = RunCommand(Ckpt(StrCat("repair ", root)));
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(ReadFile(claim), original);
  v = RunCommand(Ckpt(StrCat("verify ", root, " --step 5")));
  EXPECT_EQ(v.code, 0) << v.out;
  // A committed step cannot be claimed again.
  auto again = (*cp)->Save(5, st, SaveOptions{.allow_older_step = true});
  ASSERT_FALSE(again.ok());
  EXPECT_TRUE(absl::IsAlreadyExists(again.status())) << again.status();
}

// The same values saved twice give the same blocks and index; only the save
// id tells the two files apart. A file of the other save, put in place of
// the committed one, fails verify and Load.
TEST(Claims, AFileOfAnotherSaveFailsVerifyAndLoad) {
  TempDir tmp;
  for (const char* name : {"a", "b"}) {
    auto cp = Checkpointer::Open(Options(tmp.Join(name), 0, 1));
    ASSERT_OK(cp);
    ASSERT_OK(SaveWhole(**cp, 9, 9));
  }
  const std::string rel = StrCat("/", StepDir(9), "/", DataFileName(0));
  fs::copy_file(tmp.Join("b") + rel, tmp.Join("a") + rel, fs::copy_options::overwrite_existing);
  EXPECT_EQ(WrongElements(tmp.Join("a"), 9, 9), -1);  // refused
  auto storage = OpenStorage(tmp.Join("a"));
  ASSERT_OK(storage);
  std::vector<OwnedShard> out = {EmptyShard(kWeight, Box::Whole(kWeight.shape))};
  State t = StateOf(out);
  auto st = LoadCheckpoint(**storage, t, 9);
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Has(st.status().message(), "a file of another save")) << st.status();
  EXPECT_TRUE(Has(st.status().message(), DataFileName(0))) << st.status();
  auto v = VerifyStep(**storage, 9);
  ASSERT_OK(v);
  EXPECT_FALSE(v->ok());
}

// A storage whose claims (PutIfAbsent of a CLAIM) wait, up to `wait_s`, until
// each engine given has staged its `need` bytes since mark(), and which
// counts what is written, created or removed after mark() and before the
// claim is taken.
class SlowClaims : public ForwardingStorage {
 public:
  using Engines = std::vector<std::pair<const SaveEngine*, int64_t>>;  // engine, need
  SlowClaims(std::shared_ptr<Storage> base, Engines engines, double wait_s = 10)
      : ForwardingStorage(std::move(base)), engines_(std::move(engines)), wait_s_(wait_s), start_(engines_.size()) {}
  /// Call before each save.
  void mark() {
    claimed_ = false;
    for (size_t i = 0; i < engines_.size(); ++i) start_[i] = engines_[i].first->bytes_staged();
    armed_ = true;
  }
  bool ready_before_claim() const { return ready_before_claim_; }
  int writes_before_claim() const { return writes_before_claim_; }

  absl::Status PutIfAbsent(std::string_view path, absl::Span<const std::byte> data) override {
    if (!path.ends_with(StrCat("/", kClaimName))) return Write(path, ForwardingStorage::PutIfAbsent(path, data));
    const double deadline = NowSeconds() + wait_s_;
    while (!Ready() && NowSeconds() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ready_before_claim_ = Ready();
    absl::Status s = ForwardingStorage::PutIfAbsent(path, data);
    if (s.ok()) claimed_ = true;
    return s;
  }
  absl::StatusOr<std::unique_ptr<WritableFile>> OpenWritable(std::string_view path,
                                                             const WriteOptions& options = {}) override {
    (void)Write(path, absl::OkStatus());  // counts it; the open itself follows
    return ForwardingStorage::OpenWritable(path, options);
  }
  absl::Status PutAtomic(std::string_view path, absl::Span<const std::byte> data) override {
    return Write(path, ForwardingStorage::PutAtomic(path, data));
  }
  absl::Status Remove(std::string_view path) override { return Write(path, ForwardingStorage::Remove(path)); }
  absl::Status RemoveAll(std::string_view dir) override { return Write(dir, ForwardingStorage::RemoveAll(dir)); }

 private:
  bool Ready() const {
    for (size_t i = 0; i < engines_.size(); ++i) {
      if (engines_[i].first->bytes_staged() - start_[i] < engines_[i].second) return false;
    }
    return true;
  }
  absl::Status Write(std::string_view path, absl::Status s) {
    if (armed_ && !claimed_) {
      ++writes_before_claim_;
      std::fprintf(stderr, "before the claim: %.*s\n", static_cast<int>(path.size()), path.data());
    }
    return s;
  }

  const Engines engines_;
  const double wait_s_;
  std::vector<std::atomic<int64_t>> start_;
  std::atomic<bool> armed_{false}, claimed_{false}, ready_before_claim_{false};
  std::atomic<int> writes_before_claim_{0};
};

const TensorSpec kBig{"model.big", DType::kF32, {1024, 1024}};  // 4 MiB

struct SlowClaimJob {
  std::shared_ptr<SaveEngine> engine;
  std::shared_ptr<SlowClaims> storage;
  std::unique_ptr<Checkpointer> cp;
};

// An engine of 64 KiB blocks and an arena of `arena` bytes.
std::shared_ptr<SaveEngine> SmallEngine(size_t arena) {
  SaveEngineOptions eo;
  eo.block_size = 64 << 10;
  eo.staging_bytes = arena;
  auto engine = CreateSaveEngine(eo);
  EXPECT_OK(engine);
  return engine.ok() ? *engine : nullptr;
}

// A checkpointer on `root` with an arena of `arena` bytes, whose claims
// wait until its engine has staged `need` bytes of the save.
SlowClaimJob OpenSlowClaims(const std::string& root, size_t arena, int64_t need) {
  SlowClaimJob j;
  j.engine = SmallEngine(arena);
  if (j.engine == nullptr) return j;
  auto base = OpenStorage(root);
  EXPECT_OK(base);
  if (!base.ok()) return j;
  j.storage = std::make_shared<SlowClaims>(*base, SlowClaims::Engines{{j.engine.get(), need}});
  CheckpointerOptions o = Options(root, 0, 1);
  o.storage = j.storage;
  o.engine = j.engine;
  auto cp = Checkpointer::Open(o);
  EXPECT_OK(cp);
  if (cp.ok()) j.cp = std::move(*cp);
  return j;
}

// Elements of kBig in the committed `step` under `root` that are not the
// values of `seed`.
int64_t WrongBigElements(const std::string& root, int64_t step, uint64_t seed) {
  auto storage = OpenStorage(root);
  if (!storage.ok()) return -1;
  std::vector<OwnedShard> out = {EmptyShard(kBig, Box::Whole(kBig.shape))};
  State t = StateOf(out);
  if (!LoadCheckpoint(**storage, t, step).ok()) return -1;
  return Mismatches(out[0], seed);
}

// The trainer's stall is the staging copy or the claim, whichever is
// longer: the shards are staged while the claim is taken, and nothing
// reaches the storage before it is.
TEST(Claims, ShardsAreStagedWhileTheClaimIsTakenAndNothingIsWrittenBeforeIt) {
  TempDir tmp;
  const std::string root = tmp.Join("root");
  SlowClaimJob j = OpenSlowClaims(root, 8 << 20, kBig.NumElements() * 4);
  ASSERT_NE(j.cp, nullptr);
  std::vector<OwnedShard> whole = {MakeShard(kBig, Box::Whole(kBig.shape), 5)};
  State st = StateOf(whole);
  j.storage->mark();
  auto h = j.cp->Save(1, st);
  ASSERT_OK(h);
  EXPECT_TRUE(j.storage->ready_before_claim()) << "the claim was taken before the shards were staged";
  EXPECT_EQ(j.storage->writes_before_claim(), 0);
  ASSERT_OK(h->Wait());
  EXPECT_EQ(h->Stats().bytes_logical, kBig.NumElements() * 4);
  EXPECT_EQ(WrongBigElements(root, 1, 5), 0);
}

// An arena smaller than the state fills while the claim is pending; the
// save goes on once it is taken.
TEST(Claims, AnArenaSmallerThanTheStateWaitsForTheClaim) {
  TempDir tmp;
  const std::string root = tmp.Join("root");
  SlowClaimJob j = OpenSlowClaims(root, 512 << 10, 256 << 10);
  ASSERT_NE(j.cp, nullptr);
  for (int64_t step = 1; step <= 2; ++step) {
    std::vector<OwnedShard> whole = {MakeShard(kBig, Box::Whole(kBig.shape), 10 + step)};
    State st = StateOf(whole);
    j.storage->mark();
    auto h = j.cp->Save(step, st);
    ASSERT_OK(h);
    EXPECT_TRUE(j.storage->ready_before_claim()) << "step " << step;
    EXPECT_EQ(j.storage->writes_before_claim(), 0);
    ASSERT_OK(h->Wait());
    EXPECT_EQ(WrongBigElements(root, step, 10 + step), 0);
  }
}

// A step held by another live save: the claim fails while the shards are
// being staged; the save returns the reason, writes nothing into the step
// (the other save's data file is left as it was), and gives back every
// slot of the arena, so the next step saves.
TEST(Claims, AClaimRefusedWhileStagingWritesNothingAndFreesTheArena) {
  TempDir tmp;
  const std::string root = tmp.Join("root");
  SlowClaimJob j = OpenSlowClaims(root, 512 << 10, 256 << 10);
  ASSERT_NE(j.cp, nullptr);
  const std::string step_dir = StrCat(root, "/", StepDir(5));
  fs::create_directories(step_dir);
  const std::string theirs = EncodeClaim(ForeignClaim(ThisHostName(), getpid()));
  WriteFile(StrCat(step_dir, "/", kClaimName), theirs);
  WriteFile(StrCat(step_dir, "/", DataFileName(0)), "their data");
  std::vector<OwnedShard> whole = {MakeShard(kBig, Box::Whole(kBig.shape), 7)};
  State st = StateOf(whole);
  j.storage->mark();
  auto h = j.cp->Save(5, st);
  ASSERT_FALSE(h.ok());
  EXPECT_TRUE(absl::IsAborted(h.status())) << h.status();
  EXPECT_TRUE(Has(h.status().message(), "claimed by another")) << h.status();
  EXPECT_TRUE(j.storage->ready_before_claim());
  EXPECT_EQ(j.storage->writes_before_claim(), 0);
  // The refusal is Save's answer, not a save left to wait for.
  EXPECT_OK(j.cp->WaitAll());
  EXPECT_EQ(ReadFile(StrCat(step_dir, "/", DataFileName(0))), "their data");
  EXPECT_EQ(ReadFile(StrCat(step_dir, "/", kClaimName)), theirs);
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(step_dir)) names.push_back(e.path().filename().string());
  EXPECT_EQ(names.size(), 2u);
  auto next = j.cp->Save(6, st);
  ASSERT_OK(next);
  ASSERT_OK(next->Wait());
  EXPECT_EQ(WrongBigElements(root, 6, 7), 0);
}

// A communicator whose collectives must come from one thread (as MPI's at
// a low thread level): notes every call from another.
class ThreadBoundComm : public Communicator {
 public:
  explicit ThreadBoundComm(std::shared_ptr<Communicator> base) : base_(std::move(base)) {}
  void Bind() { owner_ = std::this_thread::get_id(); }
  int stray_calls() const { return stray_; }
  int rank() const override { return base_->rank(); }
  int size() const override { return base_->size(); }
  absl::StatusOr<std::vector<std::string>> Gather(std::string_view mine, double timeout_s) override {
    Check();
    return base_->Gather(mine, timeout_s);
  }
  absl::StatusOr<std::string> Scatter(const std::vector<std::string>& from_leader, double timeout_s) override {
    Check();
    return base_->Scatter(from_leader, timeout_s);
  }
  absl::StatusOr<std::string> Broadcast(std::string_view from_leader, double timeout_s) override {
    Check();
    return base_->Broadcast(from_leader, timeout_s);
  }
  absl::Status Barrier(double timeout_s) override {
    Check();
    return base_->Barrier(timeout_s);
  }

 private:
  void Check() {
    if (std::this_thread::get_id() != owner_) ++stray_;
  }
  std::shared_ptr<Communicator> base_;
  std::thread::id owner_;
  std::atomic<int> stray_{0};
};

// Two ranks, threads of this process, each with its own engine, on one
// root; the leader's claim waits until both have staged their half. With
// `bound`, the communicators must be called from each rank's own thread.
struct TwoRankRun {
  bool ready_before_claim = false;
  int writes_before_claim = -1;
  int stray_calls = 0;
};
TwoRankRun SaveTwoRanksWithSlowClaims(const std::string& root, bool bound) {
  TwoRankRun out;
  std::vector<std::shared_ptr<SaveEngine>> engines;
  for (int r = 0; r < 2; ++r) {
    engines.push_back(SmallEngine(4 << 20));
    if (engines.back() == nullptr) return out;
  }
  auto base = OpenStorage(root);
  EXPECT_OK(base);
  if (!base.ok()) return out;
  const int64_t half = kBig.NumElements() * 4 / 2;
  auto storage = std::make_shared<SlowClaims>(
      *base, SlowClaims::Engines{{engines[0].get(), half}, {engines[1].get(), half}}, bound ? 1.0 : 10.0);
  std::vector<std::shared_ptr<Communicator>> comms = CreateLocalCommunicators(2);
  std::vector<std::shared_ptr<ThreadBoundComm>> bound_comms;
  if (bound) {
    for (auto& c : comms) {
      bound_comms.push_back(std::make_shared<ThreadBoundComm>(c));
      c = bound_comms.back();
    }
  }
  std::vector<std::unique_ptr<Checkpointer>> cps(2);
  std::vector<absl::Status> results(2);
  storage->mark();
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      if (bound) bound_comms[r]->Bind();
      CheckpointerOptions o = Options(root, r, 2);
      o.storage = storage;
      o.engine = engines[r];
      o.communicator = comms[r];
      o.gc_on_open = false;
      auto cp = Checkpointer::Open(o);
      if (!cp.ok()) {
        results[r] = cp.status();
        return;
      }
      std::vector<OwnedShard> mine = {MakeShard(kBig, Box({512 * r, 0}, {512, 1024}), 21)};
      State st = StateOf(mine);
      auto h = (*cp)->Save(1, st);
      results[r] = h.ok() ? h->Wait() : h.status();
      cps[r] = std::move(*cp);
    });
  }
  for (auto& t : ranks) t.join();
  EXPECT_OK(results[0]);
  EXPECT_OK(results[1]);
  out.ready_before_claim = storage->ready_before_claim();
  out.writes_before_claim = storage->writes_before_claim();
  for (auto& c : bound_comms) out.stray_calls += c->stray_calls();
  EXPECT_EQ(WrongBigElements(root, 1, 21), 0);
  return out;
}

// With a communicator that may be called from any thread, every rank stages
// while the leader claims and broadcasts its verdict.
TEST(Claims, RanksStageWhileTheLeaderClaimsThroughTheCommunicator) {
  TempDir tmp;
  TwoRankRun run = SaveTwoRanksWithSlowClaims(tmp.Join("root"), /*bound=*/false);
  EXPECT_TRUE(run.ready_before_claim) << "a rank waited for the claim before staging";
  EXPECT_EQ(run.writes_before_claim, 0);
}

// A communicator bound to the caller's thread is never called from another:
// the claim comes first there, and the save is the same.
TEST(Claims, ACommunicatorBoundToItsThreadIsCalledOnlyFromIt) {
  TempDir tmp;
  TwoRankRun run = SaveTwoRanksWithSlowClaims(tmp.Join("root"), /*bound=*/true);
  EXPECT_EQ(run.stray_calls, 0);
  EXPECT_FALSE(run.ready_before_claim);  // the claim came before the staging
  EXPECT_EQ(run.writes_before_claim, 0);
}

}  // namespace
}  // namespace ckpt::testing
