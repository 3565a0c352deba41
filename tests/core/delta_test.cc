// Delta saves (CheckpointerOptions::delta): chunks stored as XOR deltas
// against a base step, chains bounded, per-chunk decisions by measurement,
// and every step of a chain restoring bit-exactly.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <random>
#include <set>

#include "ckpt/checkpointer.h"
#include "ckpt/synthetic.h"
#include "ckpt/verify.h"
#include "core/root.h"
#include "format/manifest.h"
#include "pipeline/block_stream.h"
#include "pipeline/delta_chain.h"
#include "testutil/test_util.h"
#include "util/cpu.h"
#include "util/strings.h"

namespace ckpt::testing {
namespace {

constexpr size_t kBlock = 64 << 10;

// A training state in miniature: a frozen tensor, one that drifts a little
// each step (few low bits change), and one that changes wholly each step.
struct MiniState {
  std::vector<OwnedShard> shards;
  std::mt19937_64 rng{42};

  MiniState() {
    shards.push_back(MakeShard(TensorSpec{"frozen", DType::kF32, {256, 512}}, Box::Whole({256, 512}), 1));
    shards.push_back(MakeShard(TensorSpec{"drift", DType::kBF16, {512, 512}}, Box::Whole({512, 512}), 2));
    shards.push_back(MakeShard(TensorSpec{"noise", DType::kF32, {128, 512}}, Box::Whole({128, 512}), 3));
  }
  void Step() {
    auto& drift = shards[1].data;
    for (size_t i = 0; i < drift.size() / 64; ++i) {
      drift[(rng() % (drift.size() / 2)) * 2] ^= std::byte{1};  // the lowest mantissa bit of some elements
    }
    for (auto& b : shards[2].data) b = static_cast<std::byte>(rng());
  }
};

std::unique_ptr<Checkpointer> OpenDelta(const std::string& uri, int chain, RetentionPolicy retention = {}) {
  CheckpointerOptions o;
  o.uri = uri;
  o.codec = Codec::kAuto;
  o.engine_options.block_size = kBlock;
  o.engine_options.staging_bytes = 2 << 20;
  o.commit_timeout_s = 30;
  o.delta.chain = chain;
  o.retention = retention;
  auto cp = Checkpointer::Open(o);
  EXPECT_TRUE(cp.ok()) << cp.status();
  return cp.ok() ? std::move(cp).value() : nullptr;
}

// The base step of the tensor's chunks (-1: whole), which are saved alike.
int64_t BaseStepOf(const Manifest& m, const std::string& fqn) {
  const ManifestTensor* t = m.FindTensor(fqn);
  EXPECT_NE(t, nullptr) << fqn;
  if (t == nullptr || t->chunks.empty()) return -2;
  std::set<int64_t> steps;
  for (const ManifestChunk& c : t->chunks) {
    const ManifestBase* b = m.BaseOf(c);
    steps.insert(b == nullptr ? -1 : b->step);
  }
  EXPECT_EQ(steps.size(), 1u) << fqn << " in step " << m.step;
  return *steps.begin();
}

// The manifests of steps first, first + 10, ... last at `uri`.
std::map<int64_t, Manifest> ManifestsOf(const std::string& uri, int64_t first, int64_t last) {
  std::map<int64_t, Manifest> m;
  auto storage = OpenStorage(uri);
  EXPECT_OK(storage);
  if (!storage.ok()) return m;
  for (int64_t step = first; step <= last; step += 10) {
    auto read = ReadManifest(**storage, step);
    EXPECT_OK(read);
    if (read.ok()) m[step] = *read;
  }
  return m;
}

void ExpectRestores(Checkpointer& cp, int64_t step, const std::vector<OwnedShard>& want) {
  std::vector<OwnedShard> out;
  for (const OwnedShard& s : want) out.push_back(EmptyShard(s.spec, s.box));
  State target = StateOf(out);
  auto stats = cp.Load(target, step);
  ASSERT_OK(stats);
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_TRUE(out[i].data == want[i].data) << "step " << step << " tensor " << want[i].spec.fqn;
  }
}

TEST(Delta, EveryStepOfAChainRestoresBitExactly) {
  TempDir dir;
  const std::string uri = dir.path() + "/root";
  auto cp = OpenDelta(uri, 3);
  ASSERT_NE(cp, nullptr);
  MiniState s;
  std::map<int64_t, std::vector<OwnedShard>> saved;
  std::map<int64_t, SaveStats> stats;
  for (int64_t step = 10; step <= 90; step += 10) {
    if (step > 10) s.Step();
    State state = StateOf(s.shards);
    auto h = cp->Save(step, state);
    ASSERT_OK(h);
    ASSERT_OK(h->Wait());
    saved[step] = s.shards;
    stats[step] = h->Stats();
  }
  std::map<int64_t, Manifest> m = ManifestsOf(uri, 10, 90);
  ASSERT_EQ(m.size(), 9u);
  auto mem = OpenStorage(uri);
  ASSERT_OK(mem);
  // Step 10 is whole; 20, 30 and 40 are deltas against it (chain 3); 50 is
  // whole again and the base of 60 to 80; 90 starts the next chain.
  EXPECT_TRUE(m[10].bases.empty());
  for (int64_t step : {20, 30, 40}) EXPECT_EQ(BaseStepOf(m[step], "frozen"), 10) << step;
  EXPECT_EQ(BaseStepOf(m[50], "frozen"), -1);
  for (int64_t step : {60, 70, 80}) EXPECT_EQ(BaseStepOf(m[step], "frozen"), 50) << step;
  EXPECT_EQ(BaseStepOf(m[90], "frozen"), -1);
  // The noise tensor's first delta does not pay: it is saved whole, keeping
  // no base, for the next `chain` saves.
  EXPECT_EQ(BaseStepOf(m[20], "noise"), 10);
  for (int64_t step : {30, 40, 50}) EXPECT_EQ(BaseStepOf(m[step], "noise"), -1) << step;
  EXPECT_EQ(BaseStepOf(m[20], "drift"), 10);
  // A frozen tensor's delta costs next to nothing.
  EXPECT_LT(stats[20].bytes_stored, stats[10].bytes_stored * 0.6);
  for (int64_t step = 10; step <= 90; step += 10) ExpectRestores(*cp, step, saved[step]);
  // Verify rebuilds every delta block down its chain.
  for (int64_t step = 10; step <= 90; step += 10) {
    auto report = VerifyStep(**mem, step);
    ASSERT_OK(report);
    EXPECT_TRUE(report->ok()) << "step " << step << ": " << report->problems.size() << " problem(s)";
  }
  std::vector<OwnedShard> out;
  for (const OwnedShard& sh : saved[30]) out.push_back(EmptyShard(sh.spec, sh.box));
  State target = StateOf(out);
  auto loaded = cp->Load(target, 30);
  ASSERT_OK(loaded);
  EXPECT_GT(loaded->delta_blocks, 0);
  EXPECT_GT(loaded->bytes_read_from_bases, 0);
}

// A tensor drawn afresh at every save (as Adam's first moment nearly is):
// its delta against an unrelated base stores more than 90 % of the base,
// compressed. The base, and the saves whole that follow, are compressed
// even where auto stores whole blocks raw: never more than the delta.
TEST(Delta, ABaseAndAChunkWhoseDeltaDidNotPayAreCompressedWhole) {
  // In memory, codec auto stores whole blocks raw (the storage is never
  // the bottleneck), but not a chain's base or a chunk saved whole because
  // its delta did not pay.
  const std::string uri = StrCat("mem://delta-fresh-", getpid());
  auto cp = OpenDelta(uri, 4);
  ASSERT_NE(cp, nullptr);
  const TensorSpec fresh{"fresh", DType::kBF16, {256, 512}};
  std::vector<OwnedShard> shards = {MakeShard(TensorSpec{"frozen", DType::kF32, {256, 512}}, Box::Whole({256, 512}), 1),
                                    MakeShard(fresh, Box::Whole(fresh.shape), 10)};
  std::map<int64_t, std::vector<OwnedShard>> saved;
  std::map<int64_t, SaveStats> stats;
  for (int64_t step = 10; step <= 60; step += 10) {
    FillSynthetic(fresh, Box::Whole(fresh.shape), static_cast<uint64_t>(step), shards[1].data.data());
    State state = StateOf(shards);
    auto h = cp->Save(step, state);
    ASSERT_OK(h);
    ASSERT_OK(h->Wait());
    saved[step] = shards;
    stats[step] = h->Stats();
  }
  std::map<int64_t, Manifest> m = ManifestsOf(uri, 10, 60);
  ASSERT_EQ(m.size(), 6u);
  // The base step is compressed, though auto stores whole blocks raw here:
  // every load of the chain reads it.
  const int64_t raw = fresh.NumElements() * 2;
  EXPECT_LT(static_cast<double>(stats[10].bytes_stored), 0.9 * (raw + 256 * 512 * 4));
  EXPECT_EQ(BaseStepOf(m[20], "fresh"), 10);
  for (int64_t step : {30, 40, 50, 60}) EXPECT_EQ(BaseStepOf(m[step], "fresh"), -1) << step;
  // Saved whole, it is compressed, though auto stores whole blocks raw
  // here: never more than its delta stored.
  for (int64_t step : {30, 40, 50}) {
    EXPECT_LE(stats[step].bytes_stored, stats[20].bytes_stored) << step;
    EXPECT_LT(static_cast<double>(stats[step].bytes_stored), 0.8 * raw) << step;
  }
  // The frozen tensor beside it keeps its deltas.
  for (int64_t step : {20, 30, 40, 50}) EXPECT_EQ(BaseStepOf(m[step], "frozen"), 10) << step;
  for (int64_t step = 10; step <= 60; step += 10) ExpectRestores(*cp, step, saved[step]);
}

// The steps the checkpointer's root holds, committed or not.
std::vector<int64_t> StepsOf(Checkpointer& cp) {
  std::vector<int64_t> out;
  auto steps = cp.ListSteps();
  EXPECT_OK(steps);
  if (steps.ok()) {
    for (const StepInfo& i : *steps) out.push_back(i.step);
  }
  return out;
}

// Saves steps first, first + 10, ... last of `s` (moved on a step before
// each but the very first); returns what each step held.
std::map<int64_t, std::vector<OwnedShard>> SaveSteps(Checkpointer& cp, int64_t first, int64_t last, MiniState& s) {
  std::map<int64_t, std::vector<OwnedShard>> saved;
  for (int64_t step = first; step <= last; step += 10) {
    if (step > 10) s.Step();
    State state = StateOf(s.shards);
    auto h = cp.Save(step, state);
    EXPECT_OK(h);
    if (!h.ok()) break;
    EXPECT_OK(h->Wait());
    saved[step] = s.shards;
  }
  return saved;
}

TEST(Delta, RetentionKeepsTheBasesOfKeptStepsAndSaysWhich) {
  TempDir dir;
  const std::string uri = dir.path() + "/root";
  RetentionPolicy keep2;
  keep2.keep_last = 2;
  auto cp = OpenDelta(uri, 3, keep2);
  ASSERT_NE(cp, nullptr);
  MiniState s;
  auto saved = SaveSteps(*cp, 10, 40, s);
  std::vector<int64_t> present = StepsOf(*cp);
  // 20 went; 10 stays as the base of 30 and 40.
  EXPECT_EQ(present, (std::vector<int64_t>{10, 30, 40}));
  GcOptions gc;
  gc.retention = keep2;
  gc.dry_run = true;
  auto storage = OpenStorage(uri);
  ASSERT_OK(storage);
  auto report = CollectGarbage(**storage, gc);
  ASSERT_OK(report);
  EXPECT_EQ(report->kept_bases, (std::vector<int64_t>{10}));
  bool said = false;
  for (const std::string& r : report->reasons)
    said = said || r.find("base of delta step(s) 30, 40") != std::string::npos;
  EXPECT_TRUE(said);
  for (int64_t step : {10, 30, 40}) ExpectRestores(*cp, step, saved[step]);
  // Once a whole save takes over (chain 3: step 50), the old base goes.
  saved = SaveSteps(*cp, 50, 60, s);
  present = StepsOf(*cp);
  EXPECT_EQ(present, (std::vector<int64_t>{50, 60}));
}

TEST(Delta, ADamagedOrMissingBaseIsNamedByLoadAndVerify) {
  TempDir dir;
  const std::string uri = dir.path() + "/root";
  auto cp = OpenDelta(uri, 3);
  ASSERT_NE(cp, nullptr);
  MiniState s;
  auto saved = SaveSteps(*cp, 10, 30, s);
  // A flipped bit in the base's first frame.
  FlipBit(uri + "/step-0000000010/rank-000000.ckd", 4096 + 100, 3);
  std::vector<OwnedShard> out;
  for (const OwnedShard& sh : saved[20]) out.push_back(EmptyShard(sh.spec, sh.box));
  State target = StateOf(out);
  auto loaded = cp->Load(target, 20);
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kDataLoss) << loaded.status();
  EXPECT_NE(loaded.status().message().find("delta base step 10"), std::string::npos) << loaded.status();
  auto storage = OpenStorage(uri);
  ASSERT_OK(storage);
  auto report = VerifyStep(**storage, 20);
  ASSERT_OK(report);
  EXPECT_FALSE(report->ok());
  // Gone altogether: the message says the base is not committed.
  ASSERT_OK((*storage)->RemoveAll("step-0000000010"));
  loaded = cp->Load(target, 20);
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().message().find("delta base step 10 is not committed"), std::string::npos)
      << loaded.status();
}

// The values crash_saver saves at `step` in its delta mode.
std::vector<std::byte> DeltaCrashValues(const TensorSpec& spec, int64_t step) {
  std::vector<std::byte> data(static_cast<size_t>(spec.NumElements()) * 4);
  FillSynthetic(spec, Box::Whole(spec.shape), 0, data.data());
  const int64_t row = step % spec.shape[0];
  FillSynthetic(spec, Box({row, 0}, {1, spec.shape[1]}), static_cast<uint64_t>(step),
                data.data() + row * spec.shape[1] * 4);
  return data;
}

// A saver of delta chains killed (SIGKILL, or power loss: unsynced writes
// dropped) at random storage operations, whole saves and deltas alike:
// after every kill each committed step loads its own values exactly and
// verifies down its chain, the only damage is a manifest copy not yet
// written, and retention never took a base a kept step needs.
TEST(DeltaCrash, KillsAtEveryStageOfDeltaSavesLoseNothing) {
  const int rounds = std::getenv("CKPT_CRASH_ROUNDS") ? std::atoi(std::getenv("CKPT_CRASH_ROUNDS")) : 40;
  TempDir dir;
  const std::string root = dir.Join("root");
  const TensorSpec spec{"model.w", DType::kF32, {256, 1024}};
  std::mt19937 rng(5);
  int64_t last_seen = 0, deltas_seen = 0;
  for (int round = 0; round < rounds; ++round) {
    const int op = 1 + static_cast<int>(rng() % 150);
    const bool power_loss = round % 2 == 1;
    const std::string uri = StrCat("faulty://", root, "?fault.kill_at_op=", op, power_loss ? "&fault.crash=1" : "");
    const pid_t pid = Spawn({CRASH_SAVER_PATH, uri, "1", "delta"}, dir.Join("saver.out"));
    ASSERT_GT(pid, 0);
    ASSERT_EQ(WaitExit(pid), 128 + SIGKILL)
        << "round " << round << " op " << op << ": " << ReadFile(dir.Join("saver.out"));
    auto storage = OpenStorage(root);
    ASSERT_OK(storage);
    ASSERT_OK(HealManifestCopies(**storage));
    auto steps = ListCheckpointSteps(**storage);
    ASSERT_OK(steps);
    if (std::getenv("CKPT_DELTA_DEBUG")) {
      std::printf("round %d op %d%s:", round, op, power_loss ? " (power loss)" : "");
      for (const StepInfo& st : *steps) {
        std::printf(" %lld%s%s", static_cast<long long>(st.step), st.committed ? "" : "(partial)",
                    st.delta_bases.empty() ? "" : StrCat("<", st.delta_bases[0]).c_str());
      }
      std::printf("\n%s\n", ReadFile(dir.Join("saver.out")).c_str());
    }
    for (const StepInfo& st : *steps) {
      if (!st.committed) continue;
      EXPECT_EQ(st.state, StepState::kCommitted) << "round " << round << " step " << st.step << ": " << st.damage;
      deltas_seen += st.delta_bases.empty() ? 0 : 1;
      for (int64_t b : st.delta_bases) {
        bool kept = false;
        for (const StepInfo& o : *steps) kept = kept || (o.step == b && o.committed);
        EXPECT_TRUE(kept) << "round " << round << ": step " << st.step << " lost its base " << b;
      }
      auto v = VerifyStep(**storage, st.step);
      ASSERT_OK(v);
      EXPECT_TRUE(v->ok()) << "round " << round << " step " << st.step << ": " << v->problems.front().message;
      std::vector<OwnedShard> out = {EmptyShard(spec, Box::Whole(spec.shape))};
      State t = StateOf(out);
      ASSERT_OK(LoadCheckpoint(**storage, t, st.step));
      EXPECT_TRUE(out[0].data == DeltaCrashValues(spec, st.step)) << "round " << round << " step " << st.step;
      last_seen = std::max(last_seen, st.step);
    }
  }
  EXPECT_GT(last_seen, 5);
  if (rounds >= 20) {
    EXPECT_GT(deltas_seen, 0) << "no kill landed after a delta save";
  }
  std::printf("%d kills, newest step %lld, delta steps seen %lld\n", rounds, static_cast<long long>(last_seen),
              static_cast<long long>(deltas_seen));
}

// A window of recent steps (keep_within), saved as deltas: every step of
// the window stays and restores bit-exactly, with the bases they need;
// older steps go.
TEST(Delta, ARecentStepsWindowKeepsEveryStepAndItsBases) {
  TempDir dir;
  const std::string uri = dir.path() + "/root";
  RetentionPolicy window;
  window.keep_last = 1;
  window.keep_within = 40;  // steps newer than newest - 40
  auto cp = OpenDelta(uri, 8, window);
  ASSERT_NE(cp, nullptr);
  MiniState s;
  auto saved = SaveSteps(*cp, 10, 120, s);
  std::vector<int64_t> present = StepsOf(*cp);
  // The window is 90 to 120; they are deltas of 100 (a whole save after
  // 8 deltas of 10), except 100 itself and 90, a delta of 10.
  EXPECT_EQ(present, (std::vector<int64_t>{10, 90, 100, 110, 120}));
  for (int64_t step : present) ExpectRestores(*cp, step, saved[step]);
}

// The memory level saves deltas too, against bases it keeps in memory:
// committing a newer memory step drops older ones but never a base the
// newest needs, and every memory step restores bit-exactly from memory.
TEST(Delta, TheMemoryLevelKeepsItsBasesAndRestoresItsDeltas) {
  TempDir dir;
  CheckpointerOptions o;
  o.uri = dir.path() + "/root";
  o.codec = Codec::kAuto;
  o.engine_options.block_size = kBlock;
  o.engine_options.staging_bytes = 2 << 20;
  o.delta.chain = 3;
  o.memory_storage = *OpenStorage(StrCat("mem://delta-memory-", getpid()));
  auto cp = Checkpointer::Open(o);
  ASSERT_OK(cp);
  MiniState s;
  std::map<int64_t, std::vector<OwnedShard>> saved;
  SaveOptions memory;
  memory.level = SaveLevel::kMemory;
  for (int64_t step = 1; step <= 3; ++step) {
    if (step > 1) s.Step();
    State state = StateOf(s.shards);
    auto h = (*cp)->Save(step, state, memory);
    ASSERT_OK(h);
    ASSERT_OK(h->Wait());
    saved[step] = s.shards;
  }
  // Step 3 is a delta of 1: the memory level holds 1 and 3 (2 went).
  auto held = ListCheckpointSteps(*o.memory_storage);
  ASSERT_OK(held);
  std::vector<int64_t> steps;
  for (const StepInfo& i : *held) steps.push_back(i.step);
  EXPECT_EQ(steps, (std::vector<int64_t>{1, 3}));
  ASSERT_EQ(held->back().delta_bases, (std::vector<int64_t>{1}));
  std::vector<OwnedShard> out;
  for (const OwnedShard& sh : saved[3]) out.push_back(EmptyShard(sh.spec, sh.box));
  State target = StateOf(out);
  LoadOptions from_memory;
  from_memory.level = SaveLevel::kMemory;
  auto loaded = (*cp)->Load(target, 3, from_memory);
  ASSERT_OK(loaded);
  EXPECT_GT(loaded->delta_blocks, 0);
  for (size_t i = 0; i < out.size(); ++i) EXPECT_TRUE(out[i].data == saved[3][i].data) << out[i].spec.fqn;
}

// A base damaged in one copy of a root is repaired from a replica when its
// delta step is repaired: along the chain, base first.
TEST(Delta, RepairingADeltaStepRepairsItsDamagedBaseFromAReplica) {
  TempDir dir;
  const std::string uri = dir.path() + "/root";
  auto cp = OpenDelta(uri, 3);
  ASSERT_NE(cp, nullptr);
  MiniState s;
  auto saved = SaveSteps(*cp, 10, 30, s);
  ASSERT_OK(cp->WaitAll());
  cp.reset();
  std::filesystem::copy(uri, dir.path() + "/replica", std::filesystem::copy_options::recursive);
  FlipBit(uri + "/step-0000000010/rank-000000.ckd", 4096 + 100, 3);
  auto damaged = OpenStorage(uri);
  auto replica = OpenStorage(dir.path() + "/replica");
  ASSERT_OK(damaged);
  ASSERT_OK(replica);
  // Step 20 is a delta of 10 in every tensor: each block of 10 is a base.
  auto before = VerifyStep(**damaged, 20);
  ASSERT_OK(before);
  EXPECT_FALSE(before->ok());
  auto repaired = RepairStep(**damaged, **replica, 20);
  ASSERT_OK(repaired);
  EXPECT_TRUE(repaired->ok()) << repaired->lost.front();
  ASSERT_FALSE(repaired->repaired.empty());
  EXPECT_NE(repaired->repaired.front().find("delta base step 10: "), std::string::npos) << repaired->repaired.front();
  for (int64_t step : {10, 20, 30}) {
    auto v = VerifyStep(**damaged, step);
    ASSERT_OK(v);
    EXPECT_TRUE(v->ok()) << step;
  }
  auto again = OpenDelta(uri, 3);
  ASSERT_NE(again, nullptr);
  for (int64_t step : {10, 20, 30}) ExpectRestores(*again, step, saved[step]);
}

// The loader reads the bases' frames ahead in the order it will rebuild
// the deltas. Rebuilt in that order, against it (each block then needed
// before its read began, so read by its caller), or half and half, with a
// window of one frame or of many, every block comes out as without read-
// ahead, and each base frame is counted once.
TEST(Delta, BaseFramesReadAheadRebuildTheSameBlocksInAnyOrder) {
  TempDir dir;
  const std::string uri = dir.path() + "/root";
  auto cp = OpenDelta(uri, 4);
  ASSERT_NE(cp, nullptr);
  MiniState s;
  for (int64_t step : {10, 20}) {
    if (step > 10) s.Step();
    State state = StateOf(s.shards);
    auto h = cp->Save(step, state);
    ASSERT_OK(h);
    ASSERT_OK(h->Wait());
  }
  auto storage = OpenStorage(uri);
  ASSERT_OK(storage);
  auto m = ReadManifest(**storage, 20);
  ASSERT_OK(m);
  RootBaseManifests bases(**storage);
  const ManifestTensor* frozen = m->FindTensor("frozen");
  const ManifestTensor* drift = m->FindTensor("drift");
  ASSERT_NE(frozen, nullptr);
  ASSERT_NE(drift, nullptr);
  std::vector<DeltaChain::Need> needs;
  for (const ManifestTensor* t : {frozen, drift}) {
    for (const ManifestChunk& c : t->chunks) {
      ASSERT_NE(m->BaseOf(c), nullptr) << t->spec.fqn;
      for (uint64_t b = 0; b < c.block_count; ++b) needs.push_back(DeltaChain::Need{t, &c, b});
    }
  }
  ASSERT_GE(needs.size(), 16u);
  // Each block as a chain without a plan rebuilds it (a base frame read
  // when needed), which the loads of every other test check against the
  // values saved.
  std::vector<std::vector<std::byte>> want;
  {
    StepFiles files(**storage, *m);
    DeltaChain chain(**storage, &bases);
    files.set_chain(&chain);
    BlockFetcher fetch(files);
    for (const DeltaChain::Need& n : needs) {
      auto raw = fetch.Fetch(*n.tensor, *n.chunk, n.block);
      ASSERT_OK(raw);
      want.emplace_back(raw->begin(), raw->end());
    }
  }
  // Read from the root itself (reads as fast as memory: the plan stops
  // after its first reads) and through 1 ms a read (every run read ahead).
  auto slow = OpenStorage(StrCat("faulty://", uri, "?fault.latency=1ms"));
  ASSERT_OK(slow);
  RootBaseManifests slow_bases(**slow);
  uint64_t first_base_bytes = 0;
  for (const int slow_reads : {0, 1})
    for (const uint64_t window : {uint64_t{1}, uint64_t{4} * kBlock, uint64_t{64} << 20}) {
      // Plan order, reversed, the second half first, and plan order with
      // each block rebuilt twice (by two fetchers: the second reads its
      // base frame itself).
      for (const int order : {0, 1, 2, 3}) {
        Storage& from = slow_reads ? **slow : **storage;
        StepFiles files(from, *m);
        DeltaChain chain(from, slow_reads ? &slow_bases : &bases);
        files.set_chain(&chain);
        chain.Plan(*m, needs, window);
        std::vector<size_t> seq(needs.size());
        for (size_t i = 0; i < seq.size(); ++i) seq[i] = i;
        if (order == 1) std::reverse(seq.begin(), seq.end());
        if (order == 2) std::rotate(seq.begin(), seq.begin() + static_cast<std::ptrdiff_t>(seq.size() / 2), seq.end());
        BlockFetcher fetch(files), again(files);
        uint64_t base_bytes = 0;
        for (size_t i : seq) {
          const DeltaChain::Need& n = needs[i];
          for (BlockFetcher* f : {&fetch, &again}) {
            if (f == &again && order != 3) continue;
            auto raw = f->Fetch(*n.tensor, *n.chunk, n.block);
            ASSERT_TRUE(raw.ok()) << raw.status() << " window " << window << " order " << order << " slow "
                                  << slow_reads;
            EXPECT_TRUE(std::vector<std::byte>(raw->begin(), raw->end()) == want[i])
                << n.tensor->spec.fqn << " block " << n.block << " window " << window << " order " << order << " slow "
                << slow_reads;
          }
        }
        // Every base frame counted once for each block rebuilt: the same
        // total whichever way it came.
        base_bytes = static_cast<uint64_t>(chain.bytes_read());
        if (first_base_bytes == 0) first_base_bytes = base_bytes;
        EXPECT_EQ(base_bytes, (order == 3 ? 2 : 1) * first_base_bytes)
            << "window " << window << " order " << order << " slow " << slow_reads;
      }
    }
}

// The transform docs/format.md gives, byte for byte, and its inverse.
TEST(Delta, TheTransformIsZigZagDifferencesAndInvertsExactly) {
  // One f32 element moved up by one unit in the last place, one down by
  // two: deltas 2 and 3 (zig-zag), high bytes zero.
  const uint32_t base[2] = {0x3f800000u, 0xbf000005u};
  uint32_t now[2] = {0x3f800001u, 0xbf000003u};
  std::vector<std::byte> b(8), x(8);
  std::memcpy(b.data(), base, 8);
  std::memcpy(x.data(), now, 8);
  MakeDelta(absl::MakeSpan(x), b, 4);
  uint32_t d[2];
  std::memcpy(d, x.data(), 8);
  EXPECT_EQ(d[0], 2u);
  EXPECT_EQ(d[1], 3u);
  UndoDelta(absl::MakeSpan(x), b, 4);
  EXPECT_EQ(std::memcmp(x.data(), now, 8), 0);
  std::mt19937_64 rng(3);
  for (size_t width : {1, 2, 4, 8}) {
    std::vector<std::byte> base_bytes(4096), bytes(4096);
    for (auto& v : base_bytes) v = static_cast<std::byte>(rng());
    for (auto& v : bytes) v = static_cast<std::byte>(rng());
    const std::vector<std::byte> original = bytes;
    MakeDelta(absl::MakeSpan(bytes), base_bytes, width);
    EXPECT_NE(bytes, original) << width;
    UndoDelta(absl::MakeSpan(bytes), base_bytes, width);
    EXPECT_EQ(bytes, original) << width;
  }
  // The vector path (when this CPU has one) gives the portable path's bytes,
  // over a length that leaves a tail for the loop after it.
  for (size_t width : {2, 4, 8}) {
    std::vector<std::byte> base_bytes(4096 + 24), bytes(4096 + 24);
    for (auto& v : base_bytes) v = static_cast<std::byte>(rng());
    for (auto& v : bytes) v = static_cast<std::byte>(rng() % 4 == 0 ? rng() : 0);
    std::vector<std::byte> vector_made = bytes, portable_made = bytes;
    MakeDelta(absl::MakeSpan(vector_made), base_bytes, width);
    const CpuFeatures was = internal::SetCpuForTest(CpuFeatures{});
    MakeDelta(absl::MakeSpan(portable_made), base_bytes, width);
    std::vector<std::byte> portable_undone = portable_made;
    UndoDelta(absl::MakeSpan(portable_undone), base_bytes, width);
    internal::SetCpuForTest(was);
    EXPECT_EQ(vector_made, portable_made) << width;
    EXPECT_EQ(portable_undone, bytes) << width;
    UndoDelta(absl::MakeSpan(vector_made), base_bytes, width);
    EXPECT_EQ(vector_made, bytes) << width;
  }
}

TEST(Delta, ARunWithoutDeltasWritesNoBases) {
  TempDir dir;
  const std::string uri = dir.path() + "/root";
  auto cp = OpenDelta(uri, 0);
  ASSERT_NE(cp, nullptr);
  MiniState s;
  auto saved = SaveSteps(*cp, 10, 30, s);
  auto storage = OpenStorage(uri);
  ASSERT_OK(storage);
  for (int64_t step : {10, 20, 30}) {
    auto m = ReadManifest(**storage, step);
    ASSERT_OK(m);
    EXPECT_TRUE(m->bases.empty());
    EXPECT_EQ(BaseStepOf(*m, "frozen"), -1);
  }
}

}  // namespace
}  // namespace ckpt::testing
