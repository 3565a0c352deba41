// Backend behaviour beyond the conformance suite: plugins refused with clear
// errors, whole checkpoints through a plugin, fault injection (ENOSPC, short
// writes, bit flips, crashes), and the tiered backend's drain, eviction and
// loss of the local tier, including a process killed before its drain; the
// memory backend under writers of one file on many threads, and its spare
// memory reused from removed files.
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <thread>

#include "ckpt/checkpointer.h"
#include "ckpt/plugin_abi.h"
#include "ckpt/storage.h"
#include "ckpt/verify.h"
#include "storage/adapters/faulty/faulty_storage.h"
#include "storage/roots/mem/mem_storage.h"
#include "testutil/test_util.h"
#include "util/clock.h"
#include "util/errors.h"

#ifndef CKPT_TEST_PLUGIN_DIR
#error "CKPT_TEST_PLUGIN_DIR must name the directory of the built plugins"
#endif

extern char** environ;

namespace ckpt::testing {
namespace {

bool Has(const std::string& s, std::string_view what) { return s.find(what) != std::string::npos; }
bool Has(absl::string_view s, std::string_view what) { return Has(std::string(s), what); }

const TensorSpec kSpec{"layers.0.mlp.weight", DType::kF32, {512, 256}};

// Saves `step` with data of seed `step` through `cp`; returns the status.
absl::Status SaveStep(Checkpointer& cp, int64_t step) {
  std::vector<OwnedShard> in = {MakeShard(kSpec, Box::Whole(kSpec.shape), static_cast<uint64_t>(step))};
  State state = StateOf(in);
  auto h = cp.Save(step, state);
  if (!h.ok()) return h.status();
  return h->Wait();
}

// Loads `step` (or the latest) and returns how many elements differ from the
// generator with seed `seed`; -1 when the load fails.
int64_t LoadAndCount(Storage& storage, int64_t step, uint64_t seed, absl::Status* status = nullptr) {
  std::vector<OwnedShard> out = {EmptyShard(kSpec, Box::Whole(kSpec.shape))};
  State target = StateOf(out);
  auto st = LoadCheckpoint(storage, target, step);
  if (status != nullptr) *status = st.status();
  if (!st.ok()) return -1;
  return Mismatches(out[0], seed);
}

std::unique_ptr<Checkpointer> OpenCp(std::shared_ptr<Storage> storage, int64_t block = 64 << 10, int keep_last = 0) {
  CheckpointerOptions o;
  o.storage = std::move(storage);
  o.engine_options.block_size = static_cast<size_t>(block);
  o.retention.keep_last = keep_last;
  auto cp = Checkpointer::Open(o);
  EXPECT_TRUE(cp.ok()) << cp.status();
  return cp.ok() ? std::move(*cp) : nullptr;
}

// ---------------------------------------------------------------------------
// Plugins.

TEST(Plugins, BrokenPluginsAreRefusedWithTheReason) {
  const std::string dir = CKPT_TEST_BAD_PLUGIN_DIR;
  PluginInfo wrong = LoadStoragePlugin(dir + "/libckpt-bad-wrong_abi.so");
  EXPECT_EQ(wrong.table, nullptr);
  EXPECT_TRUE(Has(wrong.error, "libckpt-bad-wrong_abi.so")) << wrong.error;
  EXPECT_TRUE(Has(wrong.error, "ABI version 42")) << wrong.error;
  PluginInfo none = LoadStoragePlugin(dir + "/libckpt-bad-no_entry.so");
  EXPECT_TRUE(Has(none.error, "does not export ckpt_storage_plugin_entry")) << none.error;
  PluginInfo partial = LoadStoragePlugin(dir + "/libckpt-bad-incomplete.so");
  EXPECT_TRUE(Has(partial.error, "empty entries")) << partial.error;
  PluginInfo missing = LoadStoragePlugin(dir + "/libckpt-nowhere.so");
  EXPECT_TRUE(Has(missing.error, "cannot load")) << missing.error;
  TempDir t;
  WriteFile(t.Join("libgarbage.so"), "this is not an ELF file");
  PluginInfo garbage = LoadStoragePlugin(t.Join("libgarbage.so"));
  EXPECT_TRUE(Has(garbage.error, t.Join("libgarbage.so"))) << garbage.error;

  // On the path, they do not hide the working plugin, and an unknown scheme
  // names them.
  setenv("CKPT_PLUGIN_PATH", (dir + ":" + t.path() + ":" + CKPT_TEST_PLUGIN_DIR).c_str(), 1);
  auto s = OpenStorage("nosuch://x");
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Has(s.status().message(), "ABI version 42")) << s.status();
  EXPECT_TRUE(Has(s.status().message(), "libgarbage.so")) << s.status();
  auto ok = OpenStorage("localfs://" + t.Join("root"));
  ASSERT_OK(ok);
  EXPECT_EQ((*ok)->caps().engine, "plugin:localfs");
}

// A plugin built before the optional entries existed (its table ends after
// sync_dir) still loads and serves checkpoints; it only cannot create a
// file exclusively.
TEST(Plugins, TablesWithoutOptionalEntriesStillLoad) {
  const std::string dir = CKPT_TEST_BAD_PLUGIN_DIR;
  PluginInfo old = LoadStoragePlugin(dir + "/libckpt-localfs-abi1.so");
  ASSERT_NE(old.table, nullptr) << old.error;
  EXPECT_EQ(old.table->struct_size, CKPT_PLUGIN_REQUIRED_SIZE);
  setenv("CKPT_PLUGIN_PATH", dir.c_str(), 1);
  TempDir t;
  auto s = OpenStorage("localfs1://" + t.Join("root"));
  ASSERT_OK(s);
  const std::string v = "claim";
  absl::Status claim =
      (*s)->PutIfAbsent("CLAIM", absl::Span<const std::byte>(reinterpret_cast<const std::byte*>(v.data()), v.size()));
  EXPECT_TRUE(absl::IsUnimplemented(claim)) << claim;
  auto cp = OpenCp(*s);
  ASSERT_NE(cp, nullptr);
  ASSERT_OK(SaveStep(*cp, 1));
  EXPECT_EQ(LoadAndCount(**s, 1, 1), 0);
  // The claim is checked, then written: still there, still bound.
  EXPECT_TRUE(std::filesystem::exists(t.Join("root/step-0000000001/CLAIM")));
  auto report = VerifyStep(**s, 1);
  ASSERT_OK(report);
  EXPECT_TRUE(report->ok()) << (report->problems.empty() ? "" : report->problems[0].message);
}

TEST(Plugins, CheckpointThroughAPluginLoadsAndVerifies) {
  setenv("CKPT_PLUGIN_PATH", CKPT_TEST_PLUGIN_DIR, 1);
  TempDir dir;
  auto s = OpenStorage("localfs://" + dir.Join("root"));
  ASSERT_OK(s);
  auto cp = OpenCp(*s);
  ASSERT_NE(cp, nullptr);
  ASSERT_OK(SaveStep(*cp, 5));
  ASSERT_OK(SaveStep(*cp, 6));
  EXPECT_EQ(LoadAndCount(**s, 5, 5), 0);
  EXPECT_EQ(LoadAndCount(**s, kLatestStep, 6), 0);
  auto report = VerifyStep(**s, 6);
  ASSERT_OK(report);
  EXPECT_TRUE(report->ok());
  // The files are plain files: the file backend reads the same root.
  auto plain = OpenStorage(dir.Join("root"));
  ASSERT_OK(plain);
  EXPECT_EQ(LoadAndCount(**plain, 6, 6), 0);
  // A step another save holds is refused through the plugin's exclusive
  // create, before anything is written.
  const std::string other = "held by another save";
  ASSERT_OK(
      (*s)->PutIfAbsent("step-0000000007/CLAIM",
                        absl::Span<const std::byte>(reinterpret_cast<const std::byte*>(other.data()), other.size())));
  absl::Status held = SaveStep(*cp, 7);
  EXPECT_TRUE(absl::IsAborted(held)) << held;
  EXPECT_FALSE(std::filesystem::exists(dir.Join("root/step-0000000007/rank-000000.ckd")));
}

// ---------------------------------------------------------------------------
// file:// where the sandbox refuses io_uring: the posix engine takes over,
// said once, and checkpoints stay interchangeable.

std::string Capture(const std::string& cmd, int* code) {
  CommandResult r = RunCommand(cmd);
  *code = r.code;
  return r.out;
}

TEST(FileBackend, FallsBackToThreadsWhereIoUringIsRefused) {
  TempDir dir;
  const std::string root = dir.Join("root");
  int code = 0;
  std::string out = Capture(
      std::string(NO_URING_BIN) + " " + CKPT_BIN + " synth --out " + root + " --params 2M --mesh tp=2 --codec zstd",
      &code);
  ASSERT_EQ(code, 0) << out;
  const size_t first = out.find("io_uring unavailable");
  ASSERT_NE(first, std::string::npos) << out;
  EXPECT_EQ(out.find("io_uring unavailable", first + 1), std::string::npos) << "said more than once: " << out;
  EXPECT_TRUE(Has(out, "using the threads engine")) << out;
  // Read back both in the sandbox and with io_uring.
  out = Capture(std::string(NO_URING_BIN) + " " + CKPT_BIN + " restore-check " + root + " --mesh tp=3", &code);
  EXPECT_EQ(code, 0) << out;
  out = Capture(std::string(CKPT_BIN) + " verify " + root, &code);
  EXPECT_EQ(code, 0) << out;
  EXPECT_FALSE(Has(out, "io_uring unavailable")) << out;
  // Asking for io_uring explicitly is an error there, not a silent fallback.
  out = Capture(std::string(NO_URING_BIN) + " " + CKPT_BIN + " verify 'file://" + root + "?engine=io_uring'", &code);
  EXPECT_EQ(code, 2) << out;
  EXPECT_TRUE(Has(out, "io_uring requested but unavailable")) << out;
}

// ---------------------------------------------------------------------------
// faulty://

std::shared_ptr<FaultyStorage> Faulty(const std::string& uri) {
  auto s = OpenStorage(uri);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? std::dynamic_pointer_cast<FaultyStorage>(*s) : nullptr;
}

TEST(Faulty, RejectsUnknownOptions) {
  EXPECT_FALSE(OpenStorage("faulty://mem://x?fault.bogus=1").ok());
  EXPECT_FALSE(OpenStorage("faulty://mem://x?fault.enospc_after=lots").ok());
  EXPECT_FALSE(OpenStorage("faulty://").ok());
}

TEST(Faulty, EnospcMidSaveFailsCleanlyAndTheNextSaveSucceeds) {
  TempDir dir;
  auto f = Faulty("faulty://" + dir.Join("root"));
  ASSERT_NE(f, nullptr);
  auto cp = OpenCp(f);
  ASSERT_OK(SaveStep(*cp, 1));

  FaultPlan full;
  full.enospc_after = 200 << 10;  // a quarter of the next save's data
  f->SetPlan(full);
  absl::Status st = SaveStep(*cp, 2);
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Has(st.message(), "No space left on device")) << st;
  EXPECT_TRUE(Has(st.message(), "step-0000000002")) << st;
  EXPECT_GT(f->faults_injected(), 0);

  // The earlier checkpoint is intact and still the latest.
  f->Heal();
  auto latest = LatestCommittedStep(*f);
  ASSERT_OK(latest);
  EXPECT_EQ(*latest, 1);
  auto report = VerifyStep(*f, 1);
  ASSERT_OK(report);
  EXPECT_TRUE(report->ok());
  EXPECT_EQ(LoadAndCount(*f, kLatestStep, 1), 0);

  // Space again: the next save works and becomes the latest.
  ASSERT_OK(SaveStep(*cp, 3));
  EXPECT_EQ(LoadAndCount(*f, kLatestStep, 3), 0);
}

TEST(Faulty, ShortWritesAndEioFailTheSave) {
  for (const char* query : {"?fault.short_write_every=3", "?fault.eio_after=100K"}) {
    TempDir dir;
    auto f = Faulty("faulty://" + dir.Join("root") + query);
    ASSERT_NE(f, nullptr);
    auto cp = OpenCp(f);
    absl::Status st = SaveStep(*cp, 1);
    EXPECT_FALSE(st.ok()) << query;
    EXPECT_TRUE(Has(st.message(), "injected")) << st;
    f->Heal();
    EXPECT_FALSE(LatestCommittedStep(*f).ok()) << query;  // nothing was published
  }
}

// Every kind of storage operation fails in turn, with EIO and with ENOSPC,
// and again with latency on everything: the save (or load) fails with an
// error naming the operation, the file and the errno, this process goes on,
// the earlier checkpoint stays intact and the latest, and once the fault
// clears the next save commits.
TEST(Faulty, EveryOperationKindFailsCleanly) {
  int injected = 0, cases = 0;
  for (const char* kind : {"write", "finish", "put", "list", "sync_dir", "read", "remove"}) {
    for (int err : {EIO, ENOSPC}) {
      TempDir dir;
      auto f = Faulty("faulty://" + dir.Join("root"));
      ASSERT_NE(f, nullptr);
      // Retention keeps 2: the third save removes the first step, so GC's
      // removals and directory syncs happen too.
      auto cp = OpenCp(f, 64 << 10, 2);
      ASSERT_OK(SaveStep(*cp, 1));
      FaultPlan plan;
      plan.fail_on = {kind};
      plan.fail_errno = err;
      plan.latency_s = 0.001;
      f->SetPlan(plan);
      const std::string what = absl::StrCat(kind, "/", err == EIO ? "EIO" : "ENOSPC");
      const std::string errno_text = err == EIO ? "Input/output error" : "No space left on device";
      if (std::string_view(kind) == "read") {
        absl::Status st;
        EXPECT_EQ(LoadAndCount(*f, 1, 1, &st), -1) << what;
        EXPECT_TRUE(Has(st.message(), "read of ") && Has(st.message(), "(injected)")) << what << ": " << st;
        EXPECT_TRUE(Has(st.message(), errno_text)) << what << ": " << st;
      } else if (std::string_view(kind) == "remove" || std::string_view(kind) == "sync_dir") {
        // Only retention and leftover collection remove and sync directories
        // on their own (atomic writes sync theirs inside the backend): the
        // save commits, and what was not removed is collected later.
        absl::Status st = SaveStep(*cp, 2);
        EXPECT_TRUE(st.ok()) << what << ": " << st;
        st = SaveStep(*cp, 4);  // retention now removes step 1, and fails to
        EXPECT_TRUE(st.ok()) << what << ": " << st;
      } else {
        absl::Status st = SaveStep(*cp, 2);
        ASSERT_FALSE(st.ok()) << what;
        EXPECT_TRUE(Has(st.message(), "(injected)")) << what << ": " << st;
        EXPECT_TRUE(Has(st.message(), errno_text)) << what << ": " << st;
        EXPECT_TRUE(Has(st.message(), absl::StrCat(kind, " of "))) << what << ": " << st;
      }
      injected += static_cast<int>(f->faults_injected());
      EXPECT_GT(f->faults_injected(), 0) << what;
      ++cases;
      f->Heal();
      // The latest checkpoint from before the fault is intact (for GC
      // faults: the newest, the one GC was cleaning up after).
      const bool housekeeping = std::string_view(kind) == "remove" || std::string_view(kind) == "sync_dir";
      const int64_t intact = housekeeping ? 4 : 1;
      auto report = VerifyStep(*f, intact);
      ASSERT_TRUE(report.ok()) << what << ": " << report.status();
      EXPECT_TRUE(report->ok()) << what;
      EXPECT_EQ(LoadAndCount(*f, intact, intact), 0) << what;
      absl::Status again = SaveStep(*cp, 5);
      ASSERT_TRUE(again.ok()) << what << ": " << again;
      EXPECT_EQ(LoadAndCount(*f, kLatestStep, 5), 0) << what;
      if (housekeeping) {
        // What GC could not remove then is gone now.
        EXPECT_FALSE(std::filesystem::exists(dir.Join("root/step-0000000001"))) << what;
      }
    }
  }
  std::printf("faults: %d cases, %d injected\n", cases, injected);
}

TEST(Faulty, BitFlipsOnReadAreCaughtByChecksums) {
  TempDir dir;
  auto f = Faulty("faulty://" + dir.Join("root"));
  auto cp = OpenCp(f);
  ASSERT_OK(SaveStep(*cp, 1));
  FaultPlan flips;
  flips.flip_read_every = 2;  // the block index reads clean, the data does not
  flips.match = ".ckd";       // data files only: the manifest reads clean
  f->SetPlan(flips);
  absl::Status st;
  EXPECT_EQ(LoadAndCount(*f, 1, 1, &st), -1);
  EXPECT_TRUE(Has(st.message(), "checksum")) << st;
  EXPECT_TRUE(Has(st.message(), kSpec.fqn)) << st;
  f->Heal();
  EXPECT_EQ(LoadAndCount(*f, 1, 1), 0);  // the data on disk was never damaged
}

TEST(Faulty, CrashDropsWhatWasNotDurable) {
  TempDir dir;
  auto f = Faulty("faulty://" + dir.Join("root") + "?fault.crash=1");
  auto cp = OpenCp(f, 64 << 10);
  ASSERT_OK(SaveStep(*cp, 1));
  FaultPlan slow;
  slow.crash_mode = true;
  slow.latency_s = 0.05;  // each of the 8 blocks waits: the crash lands mid-save
  f->SetPlan(slow);
  std::vector<OwnedShard> in = {MakeShard(kSpec, Box::Whole(kSpec.shape), 2)};
  State state = StateOf(in);
  auto h = cp->Save(2, state);
  ASSERT_OK(h);
  f->Crash();
  absl::Status st = h->Wait();
  EXPECT_FALSE(st.ok());
  EXPECT_TRUE(Has(st.message(), "simulated crash")) << st;
  FaultPlan plain;
  plain.crash_mode = true;
  f->SetPlan(plain);
  auto latest = LatestCommittedStep(*f);
  ASSERT_OK(latest);
  EXPECT_EQ(*latest, 1);
  EXPECT_EQ(LoadAndCount(*f, kLatestStep, 1), 0);
  ASSERT_OK(SaveStep(*cp, 3));
  EXPECT_EQ(LoadAndCount(*f, kLatestStep, 3), 0);
}

TEST(Faulty, ReadsShareOneLinkOfTheReadBandwidth) {
  TempDir dir;
  const std::string data(4 << 20, 'x');
  {
    auto s = OpenStorage(dir.path());
    ASSERT_OK(s);
    ASSERT_OK((*s)->PutAtomic(
        "blob", absl::Span<const std::byte>(reinterpret_cast<const std::byte*>(data.data()), data.size())));
  }
  // 8 MB/s: 4 MiB takes about half a second, however many threads read it.
  auto f = OpenStorage("faulty://" + dir.path() + "?fault.read_bandwidth=8M");
  ASSERT_OK(f);
  auto file = (*f)->OpenReadable("blob");
  ASSERT_OK(file);
  const double t0 = NowSeconds();
  std::vector<std::thread> readers;
  std::atomic<int> failed{0};
  for (int t = 0; t < 4; ++t) {
    readers.emplace_back([&, t] {
      std::vector<std::byte> buf(1 << 20);
      if (!(*file)->ReadAt(static_cast<uint64_t>(t) << 20, absl::MakeSpan(buf)).ok()) ++failed;
    });
  }
  for (auto& r : readers) r.join();
  const double took = NowSeconds() - t0;
  EXPECT_EQ(failed.load(), 0);
  EXPECT_GT(took, 0.45) << "4 MiB at 8 MB/s";
  EXPECT_LT(took, 3.0);
  // Asynchronous reads complete no sooner.
  std::vector<std::byte> buf(1 << 20);
  std::promise<absl::Status> done;
  const double t1 = NowSeconds();
  (*file)->ReadAsync(0, absl::MakeSpan(buf), [&](absl::Status st) { done.set_value(st); });
  EXPECT_OK(done.get_future().get());
  EXPECT_GT(NowSeconds() - t1, 0.11) << "1 MiB at 8 MB/s";
  EXPECT_FALSE(OpenStorage("faulty://" + dir.path() + "?fault.read_bandwidth=fast").ok());
}

// ---------------------------------------------------------------------------
// tiered://

std::string TieredUri(const TempDir& dir, const std::string& extra = "") {
  return "tiered://?local=" + dir.Join("local") + "&durable=" + dir.Join("durable") + extra;
}

TEST(Tiered, DrainsInOrderAndSurvivesLosingTheLocalTier) {
  TempDir dir;
  {
    auto s = OpenStorage(TieredUri(dir));
    ASSERT_OK(s);
    auto cp = OpenCp(*s);
    for (int64_t step : {10, 20}) {
      std::vector<OwnedShard> in = {MakeShard(kSpec, Box::Whole(kSpec.shape), static_cast<uint64_t>(step))};
      State state = StateOf(in);
      auto h = cp->Save(step, state);
      ASSERT_OK(h);
      ASSERT_OK(h->WaitReplicated());
    }
    // The durable tier alone is a complete root holding both steps.
    auto durable = OpenStorage(dir.Join("durable"));
    ASSERT_OK(durable);
    auto latest = LatestCommittedStep(**durable);
    ASSERT_OK(latest);
    EXPECT_EQ(*latest, 20);
    for (int64_t step : {10, 20}) {
      auto report = VerifyStep(**durable, step);
      ASSERT_OK(report);
      EXPECT_TRUE(report->ok()) << step;
    }
  }
  // The node is replaced: the local tier is gone.
  std::filesystem::remove_all(dir.Join("local"));
  auto s = OpenStorage(TieredUri(dir));
  ASSERT_OK(s);
  EXPECT_EQ(LoadAndCount(**s, kLatestStep, 20), 0);
  EXPECT_EQ(LoadAndCount(**s, 10, 10), 0);
}

TEST(Tiered, KeepLocalEvictsOlderDrainedSteps) {
  TempDir dir;
  auto s = OpenStorage(TieredUri(dir, "&keep_local=1"));
  ASSERT_OK(s);
  auto cp = OpenCp(*s);
  for (int64_t step : {1, 2, 3}) ASSERT_OK(SaveStep(*cp, step));
  ASSERT_OK(WaitReplicated(**s));
  std::vector<std::string> local;
  for (const auto& e : std::filesystem::directory_iterator(dir.Join("local"))) {
    if (e.is_directory()) local.push_back(e.path().filename().string());
  }
  ASSERT_EQ(local.size(), 1u);
  EXPECT_EQ(local[0], "step-0000000003");
  // Evicted steps still load, from the durable tier.
  EXPECT_EQ(LoadAndCount(**s, 1, 1), 0);
  EXPECT_EQ(LoadAndCount(**s, kLatestStep, 3), 0);
}

TEST(Tiered, DrainErrorsReachWaitReplicated) {
  TempDir dir;
  auto s = OpenStorage("tiered://?local=" + dir.Join("local") + "&durable=faulty://" + dir.Join("durable") +
                       "%3Ffault.enospc_after%3D0");
  ASSERT_OK(s);
  auto cp = OpenCp(*s);
  std::vector<OwnedShard> in = {MakeShard(kSpec, Box::Whole(kSpec.shape), 1)};
  State state = StateOf(in);
  auto h = cp->Save(1, state);
  ASSERT_OK(h);
  ASSERT_OK(h->Wait());  // the local commit is fine
  absl::Status st = h->WaitReplicated();
  EXPECT_FALSE(st.ok());
  EXPECT_TRUE(Has(st.message(), "durable tier")) << st;
  EXPECT_TRUE(Has(st.message(), "No space")) << st;
  EXPECT_EQ(LoadAndCount(**s, kLatestStep, 1), 0);  // still loads from local
}

// A tiered root in `dir` whose step 4 has drained to the durable tier.
absl::StatusOr<std::shared_ptr<Storage>> TieredRootHoldingStep4(const TempDir& dir) {
  CKPT_ASSIGN_OR_RETURN(std::shared_ptr<Storage> s, OpenStorage(TieredUri(dir)));
  {
    auto cp = OpenCp(s);
    if (cp == nullptr) return absl::InternalError("no Checkpointer on the tiered root");
    CKPT_RETURN_IF_ERROR(SaveStep(*cp, 4));
  }
  CKPT_RETURN_IF_ERROR(WaitReplicated(*s));
  return s;
}

// Tools reach each copy of a tiered root through the Tiers capability,
// also behind an adapter; a root of one copy has none.
TEST(Tiered, EachTierIsOpenToToolsThroughTheTiersCapability) {
  TempDir dir;
  auto s = TieredRootHoldingStep4(dir);
  ASSERT_OK(s);
  std::vector<StorageTier> tiers = TiersOf(**s);
  ASSERT_EQ(tiers.size(), 2u);
  EXPECT_EQ(tiers[0].name, "local");
  EXPECT_EQ(tiers[1].name, "durable");
  ASSERT_OK(tiers[0].storage->FileSize("step-0000000004/MANIFEST"));
  ASSERT_OK(tiers[1].storage->FileSize("step-0000000004/MANIFEST"));
  // Evicting the local copy shows in the local tier alone.
  std::filesystem::remove_all(dir.Join("local/step-0000000004"));
  EXPECT_TRUE(absl::IsNotFound(tiers[0].storage->FileSize("step-0000000004/MANIFEST").status()));
  EXPECT_TRUE(tiers[1].storage->FileSize("step-0000000004/MANIFEST").ok());

  auto wrapped = OpenStorage("faulty://tiered://?local=" + dir.Join("local") + "&durable=" + dir.Join("durable"));
  ASSERT_OK(wrapped);
  EXPECT_EQ(TiersOf(**wrapped).size(), 2u) << "the adapter forwards the capability";
  auto plain = OpenStorage(dir.Join("durable"));
  ASSERT_OK(plain);
  EXPECT_TRUE(TiersOf(**plain).empty());
}

TEST(Storage, StorageUriEscapesAPathForTheBackendNamed) {
  EXPECT_EQ(StorageUri("safetensors", "/models/llama 3"), "safetensors:///models/llama%203");
  TempDir dir;
  const std::string odd = dir.Join("a dir?with&odd=chars%41");
  std::filesystem::create_directories(odd);
  auto s = OpenStorage(StorageUri("file", odd));
  ASSERT_OK(s);
  const std::string one = "1";
  ASSERT_OK((*s)->PutAtomic("x", absl::Span<const std::byte>(reinterpret_cast<const std::byte*>(one.data()), 1)));
  EXPECT_TRUE(std::filesystem::exists(odd + "/x"));
}

TEST(Tiered, RepairRestoresAFlippedBlockFromTheOtherTier) {
  TempDir dir;
  auto s = TieredRootHoldingStep4(dir);
  ASSERT_OK(s);
  auto local = OpenStorage(dir.Join("local"));
  auto durable = OpenStorage(dir.Join("durable"));
  ASSERT_OK(local);
  ASSERT_OK(durable);
  const std::string data = dir.Join("local/step-0000000004/rank-000000.ckd");
  FlipBit(data, 3 * 4096 + 17, 2);
  auto before = VerifyStep(**local, 4);
  ASSERT_OK(before);
  ASSERT_FALSE(before->ok());

  auto dry = RepairStep(**local, **durable, 4, /*dry_run=*/true);
  ASSERT_OK(dry);
  EXPECT_TRUE(dry->ok());
  ASSERT_EQ(dry->repaired.size(), 1u);
  EXPECT_FALSE(VerifyStep(**local, 4)->ok()) << "a dry run wrote";

  auto fixed = RepairStep(**local, **durable, 4);
  ASSERT_OK(fixed);
  EXPECT_TRUE(fixed->ok()) << fixed->lost.size();
  EXPECT_LE(fixed->bytes_rewritten, 1 << 20);  // the differing piece, not the file
  EXPECT_TRUE(VerifyStep(**local, 4)->ok());
  EXPECT_EQ(ReadFile(data), ReadFile(dir.Join("durable/step-0000000004/rank-000000.ckd")));

  // A damaged MANIFEST is replaced.
  FlipBit(dir.Join("local/step-0000000004/MANIFEST"), 60, 1);
  auto manifest = RepairStep(**local, **durable, 4);
  ASSERT_OK(manifest);
  EXPECT_TRUE(manifest->ok());
  EXPECT_TRUE(VerifyStep(**local, 4)->ok());

  // The same block damaged in both tiers: reported as lost, with the place.
  FlipBit(data, 3 * 4096 + 17, 2);
  FlipBit(dir.Join("durable/step-0000000004/rank-000000.ckd"), 3 * 4096 + 17, 2);
  auto lost = RepairStep(**local, **durable, 4);
  ASSERT_OK(lost);
  ASSERT_FALSE(lost->ok());
  EXPECT_TRUE(Has(lost->lost[0], "rank-000000.ckd at byte offset")) << lost->lost[0];
  EXPECT_TRUE(Has(lost->lost[0], "damaged too")) << lost->lost[0];
}

// A process that commits on the local tier and is killed while its drain to
// a slow durable tier is still running: the local commit loads, and the
// durable tier holds no step it cannot load.
TEST(Tiered, KilledBeforeTheDrainCompletes) {
  TempDir dir;
  const std::string uri =
      "tiered://?local=" + dir.Join("local") + "&durable=faulty://" + dir.Join("durable") + "%3Ffault.latency%3D200ms";
  int out[2];
  ASSERT_EQ(pipe(out), 0);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  posix_spawn_file_actions_addclose(&actions, out[0]);
  std::string bin = CKPT_BIN;
  std::vector<std::string> args = {bin,    "synth",  "--out", uri,     "--params", "4M", "--block-size",
                                   "256K", "--step", "7",     "--json"};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid;
  const int spawned = posix_spawn(&pid, bin.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ASSERT_EQ(spawned, 0);
  close(out[1]);
  // synth prints its JSON once the step is committed (locally), then drains.
  std::string got;
  char buf[4096];
  ssize_t n;
  while (got.find('\n') == std::string::npos && (n = read(out[0], buf, sizeof(buf))) > 0) got.append(buf, n);
  ASSERT_TRUE(Has(got, "\"step\":7")) << got;
  kill(pid, SIGKILL);
  int wstatus;
  waitpid(pid, &wstatus, 0);
  close(out[0]);
  ASSERT_TRUE(WIFSIGNALED(wstatus)) << "synth finished its drain before the kill";

  auto local = OpenStorage(dir.Join("local"));
  ASSERT_OK(local);
  auto latest = LatestCommittedStep(**local);
  ASSERT_OK(latest);
  EXPECT_EQ(*latest, 7);
  auto report = VerifyStep(**local, 7);
  ASSERT_OK(report);
  EXPECT_TRUE(report->ok());
  auto durable = OpenStorage(dir.Join("durable"));
  ASSERT_OK(durable);
  EXPECT_FALSE(LatestCommittedStep(**durable).ok()) << "the durable tier published an undrained step";
}

// Writers of one file copy in parallel, out of order and from the end down,
// `reserve` bytes reserved (less than the file: it grows while others copy);
// every fifth piece is left unwritten. Every byte reads back as written, the
// holes as zero.
void CheckParallelWrites(Storage& st, const std::string& path, size_t reserve) {
  auto w = st.OpenWritable(path, WriteOptions{});
  ASSERT_OK(w);
  const size_t piece = 65536 + 13, pieces = 96, threads = 4;
  (*w)->Reserve(reserve);
  std::vector<std::byte> want(piece * pieces);
  for (size_t i = 0; i < want.size(); ++i) {
    want[i] = (i / piece) % 5 == 1 ? std::byte{0} : static_cast<std::byte>((i * 2654435761u) >> 13);
  }
  std::atomic<int> done{0}, failed{0};
  std::vector<std::thread> ts;
  for (size_t t = 0; t < threads; ++t) {
    ts.emplace_back([&, t] {
      for (size_t k = pieces - 1 - t; k < pieces; k -= threads) {  // from the end down
        if (k % 5 != 1) {
          (*w)->WriteAsync(k * piece, absl::Span<const std::byte>(want.data() + k * piece, piece),
                           [&](absl::Status s) { s.ok() ? ++done : ++failed; });
        }
        if (k < threads) break;
      }
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(done.load(), static_cast<int>(pieces - (pieces + 3) / 5));
  EXPECT_EQ(failed.load(), 0);
  ASSERT_OK((*w)->Finish(want.size()));
  auto r = st.OpenReadable(path);
  ASSERT_OK(r);
  ASSERT_EQ((*r)->size(), want.size());
  std::vector<std::byte> got(want.size());
  ASSERT_OK((*r)->ReadAt(0, absl::Span<std::byte>(got)));
  EXPECT_TRUE(got == want);
}

TEST(MemStorage, OutOfOrderWritesFromManyThreadsReadBackExactly) {
  auto st = OpenStorage("mem://");
  ASSERT_OK(st);
  CheckParallelWrites(**st, "d/f", (65536 + 13) * 5);
}

// A write past the end leaves a hole that reads as zero, as in a file; a
// smaller final size cuts the file, and a read past it is refused by name.
TEST(MemStorage, HolesReadAsZeroAndTheFinalSizeCuts) {
  auto st = OpenStorage("mem://");
  ASSERT_OK(st);
  auto w = (*st)->OpenWritable("h", WriteOptions{});
  ASSERT_OK(w);
  const std::vector<std::byte> ones(4096, std::byte{1});
  const uint64_t at = (uint64_t{3} << 20) + 5;
  (*w)->WriteAsync(at, absl::Span<const std::byte>(ones), [](absl::Status s) { EXPECT_OK(s); });
  (*w)->WriteAsync(0, absl::Span<const std::byte>(ones.data(), 10), [](absl::Status s) { EXPECT_OK(s); });
  ASSERT_OK((*w)->Drain());
  auto r = (*st)->OpenReadable("h");
  ASSERT_OK(r);
  EXPECT_EQ((*r)->size(), at + ones.size());
  std::vector<std::byte> got(at + ones.size(), std::byte{7});
  ASSERT_OK((*r)->ReadAt(0, absl::Span<std::byte>(got)));
  for (uint64_t i = 0; i < got.size(); ++i) {
    const std::byte expect = i < 10 || i >= at ? std::byte{1} : std::byte{0};
    ASSERT_EQ(got[i], expect) << "byte " << i;
  }
  ASSERT_OK((*w)->Finish(100));
  EXPECT_EQ((*r)->size(), 100u);
  std::byte b[8];
  absl::Status past = (*r)->ReadAt(96, absl::Span<std::byte>(b, 8));
  EXPECT_TRUE(absl::IsOutOfRange(past)) << past;
  EXPECT_NE(past.message().find("mem:h"), std::string::npos) << past;
  EXPECT_NE(past.message().find("byte offset 96"), std::string::npos) << past;
}

// A write no memory can hold fails that write with a clear error, and the
// file reports it when drained; nothing else is disturbed.
TEST(MemStorage, AWriteBeyondAnyMemoryFailsCleanly) {
  auto st = OpenStorage("mem://");
  ASSERT_OK(st);
  auto w = (*st)->OpenWritable("big", WriteOptions{});
  ASSERT_OK(w);
  const std::vector<std::byte> one(1, std::byte{1});
  absl::Status got;
  (*w)->WriteAsync(uint64_t{1} << 62, absl::Span<const std::byte>(one), [&](absl::Status s) { got = s; });
  EXPECT_TRUE(absl::IsResourceExhausted(got)) << got;
  EXPECT_NE(got.message().find("mem:big"), std::string::npos) << got;
  EXPECT_TRUE(absl::IsResourceExhausted((*w)->Drain()));
  (*w)->WriteAsync(UINT64_MAX, absl::Span<const std::byte>(one), [&](absl::Status s) { got = s; });
  EXPECT_TRUE(absl::IsInvalidArgument(got)) << got;
  auto size = (*st)->FileSize("big");
  ASSERT_OK(size);
  EXPECT_EQ(*size, 0u);
}

// Writes `data` at `offset` of `w` and waits for it.
void WriteAt(WritableFile& w, uint64_t offset, absl::Span<const std::byte> data) {
  absl::Status st = absl::InternalError("not called");
  w.WriteAsync(offset, data, [&](absl::Status s) { st = s; });
  ASSERT_OK(w.Drain());
  ASSERT_OK(st);
}

// A file of `n` bytes of `fill`, written whole, then removed: its memory is
// what the next file of that size gets from the spare pool.
void WriteAndRemove(Storage& s, const std::string& path, size_t n, std::byte fill) {
  std::vector<std::byte> bytes(n, fill);
  auto w = s.OpenWritable(path, WriteOptions{false});
  ASSERT_OK(w);
  (*w)->Reserve(n);
  WriteAt(**w, 0, bytes);
  ASSERT_OK((*w)->Finish(n));
  w->reset();
  ASSERT_OK(s.Remove(path));
}

TEST(MemStorage, SpareMemoryIsReusedAndReadsAsWrittenOrZero) {
  constexpr size_t kMiB = size_t{1} << 20;
  auto s = OpenStorage("mem://spare-reuse?spare=64M");
  ASSERT_OK(s);
  Storage& st = **s;
  EXPECT_EQ(internal::MemSpareBytesHeld(st), 0);
  WriteAndRemove(st, "old", 16 * kMiB, std::byte{0xAB});
  EXPECT_EQ(internal::MemSpareBytesHeld(st), static_cast<int64_t>(16 * kMiB));

  // Writes out of order into the old memory: the gaps between them read as
  // zero, never as the old file's bytes.
  auto w = st.OpenWritable("new", WriteOptions{false});
  ASSERT_OK(w);
  (*w)->Reserve(16 * kMiB);
  EXPECT_EQ(internal::MemSpareBytesHeld(st), 0) << "the reservation takes the spare buffer";
  std::vector<std::byte> a(kMiB, std::byte{1}), b(kMiB, std::byte{2});
  WriteAt(**w, 8 * kMiB, a);
  WriteAt(**w, 2 * kMiB, b);
  ASSERT_OK((*w)->Finish(12 * kMiB));  // grows past the written bytes
  auto got = st.GetAll("new");
  ASSERT_OK(got);
  ASSERT_EQ(got->size(), 12 * kMiB);
  size_t bad = got->size();
  for (size_t i = 0; i < got->size() && bad == got->size(); ++i) {
    const char want = (i >= 8 * kMiB && i < 9 * kMiB) ? 1 : (i >= 2 * kMiB && i < 3 * kMiB) ? 2 : 0;
    if ((*got)[i] != want) bad = i;
  }
  EXPECT_EQ(bad, got->size()) << "first wrong byte (the old file's bytes read back)";
}

TEST(MemStorage, SparePoolKeepsAtMostItsBudgetAndOnlyLargeBuffers) {
  constexpr size_t kMiB = size_t{1} << 20;
  auto s = OpenStorage("mem://spare-budget?spare=20M");
  ASSERT_OK(s);
  WriteAndRemove(**s, "a", 16 * kMiB, std::byte{1});
  WriteAndRemove(**s, "b", 16 * kMiB, std::byte{2});  // no room: freed
  EXPECT_EQ(internal::MemSpareBytesHeld(**s), static_cast<int64_t>(16 * kMiB));
  WriteAndRemove(**s, "small", kMiB, std::byte{3});  // below 4 MiB: freed
  EXPECT_EQ(internal::MemSpareBytesHeld(**s), static_cast<int64_t>(16 * kMiB));
  // A file much smaller than the kept buffer does not take it.
  WriteAndRemove(**s, "c", 8 * kMiB, std::byte{4});
  EXPECT_EQ(internal::MemSpareBytesHeld(**s), static_cast<int64_t>(16 * kMiB));
  // Without spare, nothing is kept.
  auto plain = OpenStorage("mem://spare-none");
  ASSERT_OK(plain);
  WriteAndRemove(**plain, "a", 16 * kMiB, std::byte{1});
  EXPECT_EQ(internal::MemSpareBytesHeld(**plain), 0);
}

TEST(MemStorage, SpareOptionIsChecked) {
  EXPECT_FALSE(OpenStorage("mem://spare-bad?spare=lots").ok());
  EXPECT_FALSE(OpenStorage("mem://spare-bad?spare=-1").ok());
  auto unknown = OpenStorage("mem://spare-bad?sparse=1M");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("sparse"), absl::string_view::npos) << unknown.status();
  ASSERT_OK(OpenStorage("mem://spare-once?spare=8M"));
  ASSERT_OK(OpenStorage("mem://spare-once"));  // shares the store as opened
  auto other = OpenStorage("mem://spare-once?spare=16M");
  ASSERT_FALSE(other.ok());
  EXPECT_NE(other.status().message().find("spare=8388608"), absl::string_view::npos) << other.status();
}

// The same into a spare buffer full of an old file's bytes (run under TSan
// too): no old byte shows through a hole.
TEST(MemStorage, ParallelWritesIntoSpareMemory) {
  auto s = OpenStorage("mem://spare-parallel?spare=32M");
  ASSERT_OK(s);
  const size_t size = (65536 + 13) * 96;
  WriteAndRemove(**s, "old", size, std::byte{0xEE});
  ASSERT_EQ(internal::MemSpareBytesHeld(**s), static_cast<int64_t>(size));
  CheckParallelWrites(**s, "new", size);
  EXPECT_EQ(internal::MemSpareBytesHeld(**s), 0) << "the new file did not take the spare buffer";
}

// Saves under retention into a store with spare memory: each step reuses
// the memory of the one retention removed, and every step loads exactly.
TEST(MemStorage, RetentionRecyclesStepsThroughSpareMemory) {
  TensorSpec spec{"w", DType::kF32, {1536, 1024}};  // 6 MiB
  CheckpointerOptions o;
  auto st = OpenStorage("mem://spare-retention?spare=64M");
  ASSERT_OK(st);
  o.storage = *st;
  o.retention.keep_last = 1;
  auto cp = Checkpointer::Open(o);
  ASSERT_OK(cp);
  int64_t held_after_first_removal = 0;
  for (int64_t step = 1; step <= 4; ++step) {
    std::vector<OwnedShard> in = {MakeShard(spec, Box::Whole(spec.shape), static_cast<uint64_t>(step))};
    auto h = (*cp)->Save(step, StateOf(in));
    ASSERT_OK(h);
    ASSERT_OK(h->Wait());
    // Step 2's removal of step 1 fills the pool with one data file's
    // buffer; from then on each step takes it and gives back its
    // predecessor's, so the pool holds the same. (Without reuse it would
    // hold one buffer more per step.)
    const int64_t held = internal::MemSpareBytesHeld(**st);
    if (step == 2) held_after_first_removal = held;
    if (step >= 2) {
      EXPECT_GT(held, 0) << "step " << step - 1 << " was removed";
      EXPECT_EQ(held, held_after_first_removal) << "step " << step << " did not reuse the spare buffer";
    }
    std::vector<OwnedShard> out = {EmptyShard(spec, Box::Whole(spec.shape))};
    State target = StateOf(out);
    ASSERT_OK((*cp)->Load(target));
    EXPECT_EQ(Mismatches(out[0], static_cast<uint64_t>(step)), 0) << "step " << step;
  }
}

}  // namespace
}  // namespace ckpt::testing
