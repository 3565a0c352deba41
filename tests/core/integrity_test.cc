// Nothing committed is lost, nothing wrong is loaded: damage to any file of
// a root of committed steps is found and named by `ckpt verify --all`, no
// following save or cleanup removes a committed or damaged step that
// retention keeps, and damaged metadata is rebuilt by `ckpt repair`. Each
// test is named after the way a committed checkpoint used to be lost.
//
// CKPT_INTEGRITY_ROUNDS scales the damage campaign
// (scripts/reliability-campaign.sh runs it long).
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "ckpt/checkpointer.h"
#include "ckpt/verify.h"
#include "core/root.h"
#include "format/manifest.h"
#include "format/root_files.h"
#include "testutil/test_util.h"
#include "util/clock.h"
#include "util/errors.h"
#include "util/strings.h"

namespace ckpt::testing {
namespace {

namespace fs = std::filesystem;

const TensorSpec kWeight{"model.w", DType::kF32, {128, 256}};
const TensorSpec kBias{"model.b", DType::kBF16, {256}};

std::string Ckpt(const std::string& args) { return StrCat(CKPT_BIN, " ", args, " 2>&1"); }

// Saves `step` with values seeded by it, through a fresh Checkpointer (as a
// restarted job would).
absl::Status SaveOne(const std::string& uri, int64_t step, int keep_last = 0, bool allow_older = false) {
  CheckpointerOptions o;
  o.uri = uri;
  o.codec = Codec::kZstd;
  o.engine_options.block_size = 64 << 10;
  o.engine_options.staging_bytes = 4 << 20;
  o.retention.keep_last = keep_last;
  CKPT_ASSIGN_OR_RETURN(auto cp, Checkpointer::Open(o));
  std::vector<OwnedShard> shards = {MakeShard(kWeight, Box::Whole(kWeight.shape), static_cast<uint64_t>(step)),
                                    MakeShard(kBias, Box::Whole(kBias.shape), static_cast<uint64_t>(step))};
  State state = StateOf(shards);
  const std::string pos = std::to_string(step);
  CKPT_RETURN_IF_ERROR(state.AddBlob("position", pos.data(), pos.size(), BlobScope::kGlobal));
  SaveOptions so;
  so.allow_older_step = allow_older;
  so.metadata["run"] = "integrity";
  CKPT_ASSIGN_OR_RETURN(SaveHandle h, cp->Save(step, state, so));
  return h.Wait();
}

// Step -> state of every step directory of a root. With `as_opened`, a
// step whose only damage is a missing MANIFEST.copy counts as committed:
// opening a Checkpointer writes the copy (HealManifestCopies) before its
// cleanup runs.
std::map<int64_t, StepState> States(const std::string& uri, bool as_opened = false) {
  std::map<int64_t, StepState> out;
  auto storage = OpenStorage(uri);
  if (!storage.ok()) return out;
  auto steps = ListCheckpointSteps(**storage);
  if (!steps.ok()) return out;
  for (const StepInfo& s : *steps) {
    const bool healable = s.state == StepState::kDamaged &&
                          // MANIFEST's own problem would come first
                          s.damage.rfind(StrCat(StepDir(s.step), "/MANIFEST.copy is missing"), 0) == 0;
    out[s.step] = as_opened && healable ? StepState::kCommitted : s.state;
  }
  return out;
}

// A root of committed steps 10, 20, ..., 120 plus the leftovers of two
// killed saves (an older and a newer partial step).
void MakeRoot(const std::string& uri, const std::string& dir) {
  for (int64_t step = 10; step <= 120; step += 10) ASSERT_OK(SaveOne(uri, step));
  for (int64_t partial : {55, 130}) {
    const std::string sd = StrCat(dir, "/", StepDir(partial));
    fs::create_directories(sd);
    WriteFile(StrCat(sd, "/", DataFileName(0)), std::string(20000, 'p'));
    WriteFile(StrCat(sd, "/", ReportName(0)), "half a report");
  }
}

// Every regular file of committed steps, and LATEST.
std::vector<std::string> CommittedFiles(const std::string& dir) {
  std::vector<std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    const std::string parent = e.path().parent_path().filename().string();
    const auto step = ParseStepDir(parent);
    if (step && (*step == 55 || *step == 130)) continue;  // partial: not a checkpoint
    files.push_back(e.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

bool IsMetadata(const std::string& name) {
  return name == "MANIFEST" || name == "MANIFEST.copy" || name == "LATEST" || name == "CLAIM";
}

void CopyTree(const std::string& from, const std::string& to) {
  fs::remove_all(to);
  fs::copy(from, to, fs::copy_options::recursive);
}

struct CampaignFigures {
  int flips = 0, truncations = 0, deletions = 0;
  int found = 0, named = 0, repaired = 0, data_left_reported = 0;
};

// One root layout per backend: where its files live on disk (`dir`, the
// tier that is damaged) and the URI that opens it.
struct Backend {
  std::string name;
  std::string uri;     // what jobs and the CLI open
  std::string dir;     // the directory whose files are damaged
  std::string verify;  // what `ckpt verify`/`repair` are given
};

Backend MakeBackend(const std::string& kind, const TempDir& tmp) {
  if (kind == "hdf5") return {kind, "hdf5://" + tmp.Join("root"), tmp.Join("root"), "hdf5://" + tmp.Join("root")};
  if (kind == "tiered") {
    const std::string uri = "tiered://?local=" + tmp.Join("root") + "&durable=" + tmp.Join("durable");
    return {kind, uri, tmp.Join("root"), uri};
  }
  return {kind, tmp.Join("root"), tmp.Join("root"), tmp.Join("root")};
}

class DamageCampaign : public ::testing::TestWithParam<std::string> {};

// Random single-bit flips, truncations and deletions of every file of every
// committed step and of LATEST, each on a fresh copy of the root: verify
// --all exits 1 and names the file; a following save (keep the newest 4)
// and its cleanup remove no damaged step and none that retention keeps;
// metadata damage is repaired by `ckpt repair` and verify --all exits 0.
TEST_P(DamageCampaign, EveryDamageIsFoundNamedKeptAndMetadataRepaired) {
  const std::string kind = GetParam();
  TempDir tmp;
  Backend b = MakeBackend(kind, tmp);
  MakeRoot(b.uri, b.dir);
  if (kind == "tiered") {
    auto s = OpenStorage(b.uri);
    ASSERT_OK(s);
    ASSERT_OK(WaitReplicated(**s));
  }
  const std::string pristine = tmp.Join("pristine"), pristine_durable = tmp.Join("pristine-durable");
  CopyTree(b.dir, pristine);
  if (kind == "tiered") CopyTree(tmp.Join("durable"), pristine_durable);
  const std::map<int64_t, StepState> before = States(b.uri);
  ASSERT_EQ(before.size(), 14u);
  const std::vector<std::string> files = CommittedFiles(b.dir);
  ASSERT_GE(files.size(), 12u * 3 + 1);

  // CI runs a short campaign; scripts/reliability-campaign.sh a long one.
  // Under a sanitizer every round costs several times more (each starts
  // three instrumented `ckpt` processes) and what it looks for, memory and
  // thread errors on each path, the first rounds already walk.
  const int default_rounds = kSanitized ? (kind == "file" ? 50 : 15) : (kind == "file" ? 220 : 40);
  const int rounds =
      std::getenv("CKPT_INTEGRITY_ROUNDS") ? std::atoi(std::getenv("CKPT_INTEGRITY_ROUNDS")) : default_rounds;
  std::mt19937_64 rng(kind == "file" ? 16 : kind == "hdf5" ? 17 : 18);
  CampaignFigures fig;
  for (int round = 0; round < rounds; ++round) {
    CopyTree(pristine, b.dir);
    if (kind == "tiered") CopyTree(pristine_durable, tmp.Join("durable"));
    const std::string& f = files[rng() % files.size()];
    const std::string name = fs::path(f).filename().string();
    const std::string rel = fs::relative(f, b.dir).string();
    const uint64_t size = fs::file_size(f);
    // Ten flips for every truncation or deletion.
    const int what = static_cast<int>(rng() % 11);
    std::string damage;
    if (what < 9 || size == 0) {
      const uint64_t off = rng() % std::max<uint64_t>(size, 1);
      const int bit = static_cast<int>(rng() % 8);
      FlipBit(f, off, bit);
      damage = StrCat("bit ", bit, " of byte ", off);
      ++fig.flips;
    } else if (what == 9) {
      const uint64_t keep = rng() % size;
      fs::resize_file(f, keep);
      damage = StrCat("truncated to ", keep, " bytes");
      ++fig.truncations;
    } else {
      fs::remove(f);
      damage = "deleted";
      ++fig.deletions;
    }
    const std::string where = StrCat("round ", round, ": ", rel, " ", damage);

    // 1. verify --all finds it and names the file (metadata damage is
    //    found without reading the blocks).
    auto v = RunCommand(Ckpt(StrCat("verify '", b.verify, "' --all", IsMetadata(name) ? " --fast" : "")));
    EXPECT_EQ(v.code, 1) << where << "\n" << v.out;
    fig.found += v.code == 1;
    // The path of the damaged file itself, step directory included: the
    // bare name ("MANIFEST", "rank-000000.ckd") is in every step.
    const bool named = v.out.find(rel) != std::string::npos;
    EXPECT_TRUE(named) << where << "\n" << v.out;
    fig.named += named;

    // 2. A following save and its cleanup keep every damaged step and the
    //    newest intact ones.
    const std::map<int64_t, StepState> damaged_view = States(b.uri, /*as_opened=*/true);
    ASSERT_OK(SaveOne(b.uri, 200, /*keep_last=*/4));
    const std::map<int64_t, StepState> after = States(b.uri);
    std::vector<int64_t> intact;
    for (const auto& [step, state] : damaged_view) {
      if (state == StepState::kDamaged) {
        EXPECT_TRUE(after.count(step)) << where << ": damaged step " << step << " was removed";
      }
      if (state == StepState::kCommitted) intact.push_back(step);
    }
    // Step 200 is one of the four kept.
    for (size_t i = intact.size() >= 3 ? intact.size() - 3 : 0; i < intact.size(); ++i) {
      EXPECT_TRUE(after.count(intact[i])) << where << ": kept step " << intact[i] << " was removed";
    }
    EXPECT_FALSE(after.count(55)) << where << ": the older leftover was not collected";
    EXPECT_EQ(after.count(200), 1u) << where;

    // 3. Metadata is rebuilt from itself (a tiered root rebuilds data from
    //    its other tier too); other data damage stays reported, unless
    //    retention removed the step that held it.
    auto r = RunCommand(Ckpt(StrCat("repair '", b.verify, "' --json")));
    auto again = RunCommand(Ckpt(StrCat("verify '", b.verify, "' --all")));
    const auto damaged_step = ParseStepDir(fs::path(f).parent_path().filename().string());
    const bool gone = damaged_step && !after.count(*damaged_step);
    if (IsMetadata(name) || kind == "tiered" || gone) {
      EXPECT_EQ(again.code, 0) << where << "\nrepair: " << r.out << "\nverify: " << again.out;
      fig.repaired += again.code == 0;
    } else {
      EXPECT_EQ(again.code, 1) << where << "\n" << again.out;
      fig.data_left_reported += again.code == 1;
    }
  }
  std::printf(
      "%s campaign: %d flips, %d truncations, %d deletions: %d found (exit 1), %d named their file, "
      "%d metadata repairs verified, %d data damages still reported after repair\n",
      kind.c_str(), fig.flips, fig.truncations, fig.deletions, fig.found, fig.named, fig.repaired,
      fig.data_left_reported);
  EXPECT_EQ(fig.found, rounds);
  EXPECT_EQ(fig.named, rounds);
}

INSTANTIATE_TEST_SUITE_P(Backends, DamageCampaign, ::testing::Values("file", "hdf5", "tiered"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

// Regression: one flipped bit in an older step's MANIFEST made `verify
// --all` leave that step out and exit 0.
TEST(Integrity, VerifyAllReportsADamagedOlderStep) {
  TempDir tmp;
  const std::string root = tmp.Join("root");
  for (int64_t step = 1; step <= 11; ++step) ASSERT_OK(SaveOne(root, step));
  FlipBit(StrCat(root, "/", StepDir(7), "/MANIFEST"), 70, 3);
  auto v = RunCommand(Ckpt(StrCat("verify ", root, " --all --json")));
  EXPECT_EQ(v.code, 1) << v.out;
  EXPECT_NE(v.out.find("\"step\":7,\"state\":\"damaged\""), std::string::npos) << v.out;
  EXPECT_NE(v.out.find(StrCat(StepDir(7), "/MANIFEST")), std::string::npos) << v.out;
  auto list = RunCommand(Ckpt(StrCat("list ", root)));
  EXPECT_EQ(list.code, 1) << list.out;
  EXPECT_NE(list.out.find("damaged"), std::string::npos) << list.out;
}

// Regression: one flipped bit in the MANIFEST of the step LATEST names made
// `verify` check the step before and exit 0, `list` call the step partial,
// and the next save delete it. Both manifests damaged now: verify exits 1,
// a restore refuses to go back silently, and nothing removes the step.
TEST(Integrity, DamagedLatestStepIsLoudAndNeverCollected) {
  TempDir tmp;
  const std::string root = tmp.Join("root");
  for (int64_t step = 1; step <= 11; ++step) ASSERT_OK(SaveOne(root, step));
  const std::string sd = StrCat(root, "/", StepDir(11));
  FlipBit(sd + "/MANIFEST", 70, 3);
  auto v = RunCommand(Ckpt(StrCat("verify ", root)));
  EXPECT_EQ(v.code, 1) << v.out;
  EXPECT_NE(v.out.find("step 11: DAMAGED"), std::string::npos) << v.out;
  // Every command that reads the step says so.
  for (const char* cmd : {"inspect", "stats"}) {
    auto r = RunCommand(Ckpt(StrCat(cmd, " ", root)));
    EXPECT_NE(r.out.find(StrCat("ckpt ", cmd, ": step 11 is damaged")), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("read from MANIFEST.copy"), std::string::npos) << r.out;
  }
  // The copy stands in: the step loads, and says what it met.
  std::vector<OwnedShard> out = {EmptyShard(kWeight, Box::Whole(kWeight.shape))};
  State target = StateOf(out);
  auto storage = OpenStorage(root);
  ASSERT_OK(storage);
  auto loaded = LoadCheckpoint(**storage, target);
  ASSERT_OK(loaded);
  EXPECT_EQ(loaded->step, 11);
  EXPECT_NE(loaded->damage_note.find("read from MANIFEST.copy"), std::string::npos) << loaded->damage_note;
  EXPECT_EQ(Mismatches(out[0], 11), 0);
  FlipBit(sd + "/MANIFEST.copy", 70, 3);
  auto refused = LoadCheckpoint(**storage, target);
  ASSERT_TRUE(absl::IsDataLoss(refused.status())) << refused.status();
  EXPECT_NE(refused.status().message().find("step 11 is committed but damaged"), std::string::npos);
  LoadOptions fallback;
  fallback.allow_fallback = true;
  auto older = LoadCheckpoint(**storage, target, kLatestStep, 0, fallback);
  ASSERT_OK(older);
  EXPECT_EQ(older->step, 10);
  EXPECT_EQ(older->fell_back_from, 11);
  // The next save (with retention) and an explicit gc keep it.
  ASSERT_OK(SaveOne(root, 12, /*keep_last=*/2));
  EXPECT_TRUE(fs::exists(sd + "/" + DataFileName(0)));
  auto gc = RunCommand(Ckpt(StrCat("gc ", root, " --keep-last 1 --yes")));
  EXPECT_EQ(gc.code, 0) << gc.out;
  EXPECT_NE(gc.out.find("kept damaged step 11"), std::string::npos) << gc.out;
  EXPECT_TRUE(fs::exists(sd + "/" + DataFileName(0)));
  // Removed only when asked for.
  gc = RunCommand(Ckpt(StrCat("gc ", root, " --damaged --yes")));
  EXPECT_EQ(gc.code, 0) << gc.out;
  EXPECT_NE(gc.out.find("removed damaged step 11 as asked"), std::string::npos) << gc.out;
  EXPECT_FALSE(fs::exists(sd));
}

// Metadata survives its own damage: a deleted MANIFEST and a deleted LATEST
// are rebuilt bit-identically from what the root holds.
TEST(Integrity, RepairRebuildsManifestAndLatestBitIdentically) {
  TempDir tmp;
  const std::string root = tmp.Join("root");
  for (int64_t step = 1; step <= 3; ++step) ASSERT_OK(SaveOne(root, step));
  const std::string m = StrCat(root, "/", StepDir(2), "/MANIFEST");
  const std::string manifest = ReadFile(m), latest = ReadFile(root + "/LATEST");
  fs::remove(m);
  fs::remove(root + "/LATEST");
  EXPECT_EQ(States(root)[2], StepState::kDamaged);  // still committed: the copy proves it
  auto v = RunCommand(Ckpt(StrCat("verify ", root, " --all")));
  EXPECT_EQ(v.code, 1) << v.out;
  EXPECT_NE(v.out.find("LATEST is missing"), std::string::npos) << v.out;
  auto dry = RunCommand(Ckpt(StrCat("repair ", root, " --dry-run")));
  EXPECT_EQ(dry.code, 0) << dry.out;
  EXPECT_FALSE(fs::exists(m));
  auto r = RunCommand(Ckpt(StrCat("repair ", root)));
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(ReadFile(m), manifest);
  EXPECT_EQ(ReadFile(root + "/LATEST"), latest);
  EXPECT_EQ(RunCommand(Ckpt(StrCat("verify ", root, " --all"))).code, 0);
}

// The same repair through the public API: one step, then the whole root.
TEST(Integrity, RepairMetadataAndRepairLatestPointerAreTheLibrarysToo) {
  TempDir tmp;
  const std::string root = tmp.Join("root");
  for (int64_t step = 1; step <= 3; ++step) ASSERT_OK(SaveOne(root, step));
  const std::string m1 = StrCat(root, "/", StepDir(1), "/MANIFEST"), m2 = StrCat(root, "/", StepDir(2), "/MANIFEST");
  const std::string manifest1 = ReadFile(m1), manifest2 = ReadFile(m2), latest = ReadFile(root + "/LATEST");
  fs::remove(m1);
  fs::remove(m2);
  fs::remove(root + "/LATEST");
  auto storage = OpenStorage(root);
  ASSERT_OK(storage);

  auto dry = RepairMetadata(**storage, 2, /*dry_run=*/true);
  ASSERT_OK(dry);
  EXPECT_TRUE(dry->ok());
  EXPECT_EQ(dry->step, 2);
  EXPECT_FALSE(fs::exists(m2)) << "a dry run wrote";
  EXPECT_FALSE(fs::exists(root + "/LATEST")) << "a dry run wrote";

  auto one = RepairMetadata(**storage, 2);
  ASSERT_OK(one);
  EXPECT_TRUE(one->ok());
  EXPECT_EQ(ReadFile(m2), manifest2);
  EXPECT_FALSE(fs::exists(m1)) << "only the step asked for";
  EXPECT_EQ(ReadFile(root + "/LATEST"), latest) << "LATEST is the root's, rebuilt with any step";
  auto again = RepairLatestPointer(**storage);
  ASSERT_OK(again);
  EXPECT_TRUE(again->empty()) << "an intact LATEST is left alone";

  auto all = RepairMetadata(**storage);
  ASSERT_OK(all);
  EXPECT_TRUE(all->ok());
  EXPECT_EQ(ReadFile(m1), manifest1);
  EXPECT_EQ(*ReadLatestPointer(**storage), 3);
  WriteFile(root + "/LATEST", "garbage");
  EXPECT_TRUE(absl::IsDataLoss(ReadLatestPointer(**storage).status()));
  auto pointer = RepairLatestPointer(**storage);
  ASSERT_OK(pointer);
  ASSERT_EQ(pointer->size(), 1u);
  EXPECT_NE((*pointer)[0].find("step 3"), std::string::npos) << (*pointer)[0];
  EXPECT_EQ(ReadFile(root + "/LATEST"), latest);
  fs::remove(root + "/LATEST");
  EXPECT_TRUE(absl::IsNotFound(ReadLatestPointer(**storage).status()));
}

// A step opened once loads piece by piece: one tensor, then a box of the
// other, then the blob, each bit-exact, as LoadCheckpoint would.
TEST(Integrity, AStepReaderLoadsPieceByPieceFromOneOpen) {
  TempDir tmp;
  const std::string root = tmp.Join("root");
  ASSERT_OK(SaveOne(root, 4));
  ASSERT_OK(SaveOne(root, 7));
  auto storage = OpenStorage(root);
  ASSERT_OK(storage);
  auto reader = StepReader::Open(*storage, 4);
  ASSERT_OK(reader);
  EXPECT_EQ((*reader)->step(), 4);
  EXPECT_EQ((*reader)->metadata().at("run"), "integrity");
  EXPECT_TRUE((*reader)->damage_note().empty());
  ASSERT_EQ((*reader)->tensors().size(), 2u);  // ascending by name, global shapes
  EXPECT_EQ((*reader)->tensors()[0].fqn, std::min(kBias.fqn, kWeight.fqn));
  for (const TensorSpec& t : (*reader)->tensors()) {
    EXPECT_EQ(t.shape, t.fqn == kBias.fqn ? kBias.shape : kWeight.shape) << t.fqn;
  }
  std::vector<OwnedShard> bias = {EmptyShard(kBias, Box::Whole(kBias.shape))};
  auto loaded = (*reader)->Load(StateOf(bias));
  ASSERT_OK(loaded);
  EXPECT_EQ(Mismatches(bias[0], 4), 0);
  std::vector<OwnedShard> rows = {EmptyShard(kWeight, Box{{32, 0}, {64, 256}})};
  ASSERT_OK((*reader)->Load(StateOf(rows)));
  EXPECT_EQ(Mismatches(rows[0], 4), 0);
  std::string position;
  State blob;
  ASSERT_OK(blob.AddBlobOut("position", &position, BlobScope::kGlobal));
  ASSERT_OK((*reader)->Load(blob));
  EXPECT_EQ(position, "4");

  auto latest = StepReader::Open(*storage);
  ASSERT_OK(latest);
  EXPECT_EQ((*latest)->step(), 7);
  EXPECT_TRUE(absl::IsNotFound(StepReader::Open(*storage, 5).status()));
  // Opened from the copy when MANIFEST is damaged, and says so.
  FlipBit(StrCat(root, "/", StepDir(7), "/MANIFEST"), 40, 1);
  auto from_copy = StepReader::Open(*storage, 7);
  ASSERT_OK(from_copy);
  EXPECT_FALSE((*from_copy)->damage_note().empty());
  auto info = DescribeCheckpointStep(**storage, 7);
  ASSERT_OK(info);
  EXPECT_EQ(info->state, StepState::kDamaged);
  EXPECT_TRUE(info->committed && info->manifest_from_copy);
  EXPECT_FALSE(DescribeCheckpointStep(**storage, 4)->manifest_from_copy);
  EXPECT_EQ(DescribeCheckpointStep(**storage, 4)->state, StepState::kCommitted);
  EXPECT_TRUE(absl::IsNotFound(DescribeCheckpointStep(**storage, 5).status()));
  // Both manifests of step 7 damaged: refused, unless a fallback is allowed,
  // which opens step 4 and says why.
  FlipBit(StrCat(root, "/", StepDir(7), "/MANIFEST.copy"), 40, 1);
  EXPECT_FALSE(StepReader::Open(*storage, 7).ok());
  auto fell_back = StepReader::Open(*storage, kLatestStep, /*allow_fallback=*/true);
  ASSERT_OK(fell_back);
  EXPECT_EQ((*fell_back)->step(), 4);
  EXPECT_FALSE((*fell_back)->damage_note().empty());
}

// Regression: saving step 150 after 200 with keep-last 1 printed
// "committed" and the step was gone, removed by its own retention.
TEST(Integrity, AnOlderStepIsRefusedUnlessAskedAndThenKept) {
  TempDir tmp;
  const std::string root = tmp.Join("root");
  ASSERT_OK(SaveOne(root, 100));
  ASSERT_OK(SaveOne(root, 200));
  absl::Status refused = SaveOne(root, 150, /*keep_last=*/1);
  ASSERT_TRUE(absl::IsFailedPrecondition(refused)) << refused;
  EXPECT_NE(refused.message().find("not newer than the latest committed step 200"), std::string::npos);
  EXPECT_FALSE(fs::exists(StrCat(root, "/", StepDir(150))));
  ASSERT_OK(SaveOne(root, 150, /*keep_last=*/1, /*allow_older=*/true));
  EXPECT_EQ(States(root)[150], StepState::kCommitted);
  EXPECT_EQ(States(root)[200], StepState::kCommitted);  // the latest is always kept
  auto synth = RunCommand(Ckpt(StrCat("synth --out ", root, " --params 1M --step 120 --keep-last 1")));
  EXPECT_EQ(synth.code, 2) << synth.out;
  EXPECT_NE(synth.out.find("--allow-older"), std::string::npos) << synth.out;
}

// Regression: "step-200" and "step-0000000200" both parsed as step 200.
TEST(Integrity, OnlyCanonicalStepDirectoriesAreSteps) {
  EXPECT_EQ(ParseStepDir("step-0000000200"), std::optional<int64_t>(200));
  EXPECT_EQ(ParseStepDir("step-200"), std::nullopt);
  EXPECT_EQ(ParseStepDir("step-00000000200"), std::nullopt);
  EXPECT_EQ(ParseStepDir(StepDir(12345678901)), std::optional<int64_t>(12345678901));
  // What tools take for a root's own entries (IsCheckpointRootEntry): the same steps.
  EXPECT_TRUE(IsCheckpointRootEntry("step-0000000200"));
  EXPECT_TRUE(IsCheckpointRootEntry("LATEST"));
  EXPECT_FALSE(IsCheckpointRootEntry("step-200"));
  EXPECT_FALSE(IsCheckpointRootEntry("notes"));
  EXPECT_FALSE(IsCheckpointRootEntry("MANIFEST"));
  TempDir tmp;
  const std::string root = tmp.Join("root");
  ASSERT_OK(SaveOne(root, 200));
  fs::create_directories(root + "/step-200");
  WriteFile(root + "/step-200/notes", "not a step");
  EXPECT_EQ(States(root).size(), 1u);
  ASSERT_OK(SaveOne(root, 300, /*keep_last=*/1));
  EXPECT_TRUE(fs::exists(root + "/step-200/notes"));  // not ours: never touched
}

// Regression: a shard of rank 40 was accepted and the save failed at commit
// ("tensor rank = 40 exceeds the limit 32"); sizes that overflow int64 made
// Box::Volume undefined behaviour. Limits are checked where a shard enters.
TEST(Integrity, ShardLimitsAreCheckedWhereTheShardEnters) {
  std::vector<float> x(1);
  State state;
  TensorSpec deep{"deep", DType::kF32, Shape(40, 1)};
  absl::Status s = state.AddShard(deep, Box::Whole(deep.shape), x.data());
  ASSERT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_NE(s.message().find("tensor 'deep': rank 40 exceeds the limit of 32"), std::string::npos) << s;
  TensorSpec huge{"huge", DType::kF32, {int64_t{1} << 31, int64_t{1} << 31, 4}};
  s = state.AddShard(huge, Box({0, 0, 0}, {1, 1, 1}), x.data());
  ASSERT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_NE(s.message().find("more than"), std::string::npos) << s;
  TensorSpec ok{"ok", DType::kF32, {4}};
  s = state.AddShard(ok, Box({2}, {4}), x.data());
  ASSERT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_NE(s.message().find("does not fit shape"), std::string::npos) << s;
  EXPECT_EQ(Box({0, 0}, {int64_t{1} << 40, int64_t{1} << 40}).Volume(), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(Box({0, 0}, {int64_t{1} << 62, 0}).Volume(), 0);
}

// Regression: a 70,000-byte tensor name, blob name or metadata value was
// accepted and the save failed at commit ("string length = 70000 exceeds the
// limit 65536" in a rank's report); a mesh of 33 dimensions, or whose sizes
// overflow int64, was accepted by Parse. Every limit of ckpt/limits.h that a
// caller can reach is checked where the item enters, and the largest allowed
// item round-trips.
TEST(Integrity, NameMetadataAndMeshLimitsAreCheckedWhereTheyEnter) {
  std::vector<float> x(4, 1.5f);
  State state;
  TensorSpec long_name{std::string(kMaxNameBytes + 1, 'w'), DType::kF32, {4}};
  absl::Status s = state.AddShard(long_name, Box::Whole(long_name.shape), x.data());
  ASSERT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_NE(s.message().find(StrCat("its name is ", kMaxNameBytes + 1, " bytes; the limit is ", kMaxNameBytes)),
            std::string::npos)
      << s.message().substr(0, 200);
  s = state.AddBlob(std::string(kMaxNameBytes + 1, 'b'), x.data(), 4);
  ASSERT_TRUE(absl::IsInvalidArgument(s)) << s;
  std::string out;
  EXPECT_TRUE(absl::IsInvalidArgument(state.AddBlobOut(std::string(kMaxNameBytes + 1, 'b'), &out)));

  // The longest names allowed save, commit and load.
  TempDir tmp;
  const std::string root = tmp.Join("root");
  TensorSpec longest{std::string(kMaxNameBytes, 'w'), DType::kF32, {4}};
  ASSERT_OK(state.AddShard(longest, Box::Whole(longest.shape), x.data()));
  const std::string blob_name(kMaxNameBytes, 'b');
  ASSERT_OK(state.AddBlob(blob_name, "abc", 3));
  CheckpointerOptions o;
  o.uri = root;
  auto cp = Checkpointer::Open(o);
  ASSERT_OK(cp);
  SaveOptions big;
  big.metadata["note"] = std::string(kMaxMetadataBytes + 1, 'm');
  auto refused = (*cp)->Save(1, state, big);
  ASSERT_TRUE(absl::IsInvalidArgument(refused.status())) << refused.status();
  EXPECT_NE(refused.status().message().find("metadata 'note'"), std::string::npos) << refused.status();
  EXPECT_FALSE(fs::exists(StrCat(root, "/", StepDir(1)))) << "nothing is written for a refused save";
  SaveOptions largest;
  largest.metadata["note"] = std::string(kMaxMetadataBytes, 'm');
  auto h = (*cp)->Save(1, state, largest);
  ASSERT_OK(h);
  ASSERT_OK(h->Wait());
  std::vector<float> back(4);
  std::string blob_back;
  State target;
  ASSERT_OK(target.AddTensor(longest, back.data()));
  ASSERT_OK(target.AddBlobOut(blob_name, &blob_back));
  ASSERT_OK((*cp)->Load(target, 1));
  EXPECT_EQ(back, x);
  EXPECT_EQ(blob_back, "abc");
  EXPECT_EQ(RunCommand(Ckpt(StrCat("verify ", root))).code, 0);

  // Meshes.
  std::string deep;
  for (int i = 0; i <= kMaxTensorRank; ++i) StrAppend(&deep, i ? "," : "", "d", i, "=1");
  auto m = Mesh::Parse(deep);
  ASSERT_TRUE(absl::IsInvalidArgument(m.status())) << m.status();
  EXPECT_NE(m.status().message().find("33 dimensions; the limit is 32"), std::string::npos) << m.status();
  m = Mesh::Parse("dp=4294967296,tp=4294967296");
  ASSERT_TRUE(absl::IsInvalidArgument(m.status())) << m.status();
  EXPECT_NE(m.status().message().find("more than 16M ranks"), std::string::npos) << m.status();
  m = Mesh::Parse(StrCat(std::string(kMaxMeshDimNameBytes + 1, 'n'), "=2"));
  EXPECT_TRUE(absl::IsInvalidArgument(m.status())) << m.status();
  EXPECT_TRUE(absl::IsInvalidArgument(CheckMesh(Mesh{{"dp", "tp"}, {2}})));
  EXPECT_TRUE(absl::IsInvalidArgument(CheckMesh(Mesh{{"dp"}, {0}})));
  CheckpointerOptions bad_mesh;
  bad_mesh.uri = tmp.Join("other");
  bad_mesh.mesh = Mesh{{"dp", "dp"}, {2, 2}};
  auto refused_open = Checkpointer::Open(bad_mesh);
  ASSERT_TRUE(absl::IsInvalidArgument(refused_open.status())) << refused_open.status();
  EXPECT_NE(refused_open.status().message().find("'dp' appears twice"), std::string::npos) << refused_open.status();
  EXPECT_OK(CheckMesh(*Mesh::Parse("dp=2,tp=4,pp=2")));
}

// Regression: a well-formed manifest whose chunk 1 lay on chunk 0 (some rows
// covered twice, others never) loaded wrong values: the load counted
// elements instead of checking boxes. Load, stats and export refuse it,
// naming the tensor and the boxes.
TEST(Integrity, OverlappingChunksAreRefusedBeforeAnyByteIsPlaced) {
  TempDir tmp;
  const std::string root = tmp.Join("root");
  {
    CheckpointerOptions o;
    o.uri = root;
    auto cp = Checkpointer::Open(o);
    ASSERT_OK(cp);
    std::vector<OwnedShard> halves = {MakeShard(kWeight, Box({0, 0}, {64, 256}), 1),
                                      MakeShard(kWeight, Box({64, 0}, {64, 256}), 1)};
    State st = StateOf(halves);
    auto h = (*cp)->Save(1, st);
    ASSERT_OK(h);
    ASSERT_OK(h->Wait());
  }
  auto storage = OpenStorage(root);
  ASSERT_OK(storage);
  auto m = ReadManifest(**storage, 1);
  ASSERT_OK(m);
  ASSERT_EQ(m->tensors[0].chunks.size(), 2u);
  m->tensors[0].chunks[1].box = Box({32, 0}, {64, 256});  // rows 32..96: 32..64 twice, 96..128 never
  const std::string bytes = EncodeManifest(*m);
  for (const char* name : {"MANIFEST", "MANIFEST.copy"}) WriteFile(StrCat(root, "/", StepDir(1), "/", name), bytes);
  std::vector<OwnedShard> out = {EmptyShard(kWeight, Box::Whole(kWeight.shape))};
  State target = StateOf(out);
  auto loaded = LoadCheckpoint(**storage, target);
  ASSERT_TRUE(absl::IsDataLoss(loaded.status())) << loaded.status();
  EXPECT_NE(loaded.status().message().find("tensor 'model.w'"), std::string::npos) << loaded.status();
  EXPECT_NE(loaded.status().message().find("covered twice"), std::string::npos) << loaded.status();
  // A box that only the intact part covers still loads.
  std::vector<OwnedShard> top = {EmptyShard(kWeight, Box({0, 0}, {32, 256}))};
  State top_target = StateOf(top);
  EXPECT_OK(LoadCheckpoint(**storage, top_target));
  EXPECT_EQ(Mismatches(top[0], 1), 0);
  auto stats = RunCommand(Ckpt(StrCat("stats ", root)));
  EXPECT_NE(stats.code, 0) << stats.out;
  EXPECT_NE(stats.out.find("covered twice"), std::string::npos) << stats.out;
  auto exported = RunCommand(Ckpt(StrCat("export ", root, " --to ", tmp.Join("x.h5"))));
  EXPECT_NE(exported.code, 0) << exported.out;
  EXPECT_NE(exported.out.find("covered twice"), std::string::npos) << exported.out;
  EXPECT_EQ(RunCommand(Ckpt(StrCat("verify ", root))).code, 1);
}

// Regression: hostile sizes aborted the CLI (std::bad_alloc, exit 134) or
// wrapped to zero and were accepted; a u8 dataset tagged bf16 was
// reinterpreted. Each is now exit 2 with a message.
TEST(Integrity, HostileSizesAndTagsGetExitTwoAndAMessage) {
  TempDir tmp;
  const std::string make = tmp.Join("make.py");
  WriteFile(make, R"(import sys, h5py, numpy as np
d = sys.argv[1]
with h5py.File(d + '/huge.h5', 'w') as f:
    f.create_dataset('x', shape=(2**40,), dtype='u1')
with h5py.File(d + '/wrap.h5', 'w') as f:
    f.create_dataset('x', shape=(2**31, 2**31, 4), dtype='f4', chunks=(1, 1, 4))
with h5py.File(d + '/tagged.h5', 'w') as f:
    ds = f.create_dataset('x', data=np.arange(8, dtype='u1'))
    ds.attrs['ckpt_dtype'] = np.bytes_('bf16')
with h5py.File(d + '/blob.h5', 'w') as f:
    f.create_dataset('_ckpt_blobs/b', shape=(2**42,), dtype='u1')
)");
  auto made = RunCommand(StrCat("/usr/bin/python3 ", make, " ", tmp.path(), " 2>&1"));
  ASSERT_EQ(made.code, 0) << made.out;
  EXPECT_LT(fs::file_size(tmp.Join("huge.h5")), 100000u);
  struct Case {
    const char* file;
    const char* expect;
  };
  for (const Case& c : {Case{"huge.h5", "more than this machine's memory"}, Case{"wrap.h5", "elements"},
                        Case{"tagged.h5", "tagged ckpt_dtype=bf16 but stored as 1-byte"},
                        Case{"blob.h5", "must be 1-d bytes, at most"}}) {
    auto r = RunCommand(Ckpt(StrCat("import ", tmp.Join(c.file), " --out ", tmp.Join(StrCat("root-", c.file)))));
    EXPECT_EQ(r.code, 2) << c.file << ": " << r.out;
    EXPECT_NE(r.out.find(c.expect), std::string::npos) << c.file << ": " << r.out;
  }
  // A manifest with a 2^47-element dimension or a 2^62-byte blob (valid
  // checksums): refused with a message, never an abort.
  const std::string root = tmp.Join("root");
  ASSERT_OK(SaveOne(root, 1));
  auto storage = OpenStorage(root);
  ASSERT_OK(storage);
  auto m = ReadManifest(**storage, 1);
  ASSERT_OK(m);
  Manifest wide = *m;
  wide.tensors[0].spec.shape = {kBias.shape[0], int64_t{1} << 47};  // model.b gets a second dimension
  for (ManifestChunk& c : wide.tensors[0].chunks) {
    c.box = Box({c.box.offsets[0], 0}, {c.box.sizes[0], 1});
  }
  for (const char* name : {"MANIFEST", "MANIFEST.copy"}) {
    WriteFile(StrCat(root, "/", StepDir(1), "/", name), EncodeManifest(wide));
  }
  auto r = RunCommand(Ckpt(StrCat("export ", root, " --to ", tmp.Join("w.h5"))));
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("model.b"), std::string::npos) << r.out;
  Manifest big_blob = *m;
  ASSERT_FALSE(big_blob.blobs.empty());
  big_blob.blobs[0].size = uint64_t{1} << 62;
  const std::string encoded = EncodeManifest(big_blob);
  auto decoded = DecodeManifest(encoded, "MANIFEST");
  ASSERT_FALSE(decoded.ok());
  EXPECT_NE(decoded.status().message().find("blob size"), std::string::npos) << decoded.status();
}

// Regression: export then import of a dp=2,tp=2 step gave back the tensors
// but only rank 0's blobs and no metadata, and diff said "identical": it
// compared tensors only. Now the round trip keeps every blob with its rank
// and the metadata, and diff compares all three.
TEST(Integrity, ExportImportKeepsBlobsPerRankAndMetadataAndDiffSeesThem) {
  TempDir tmp;
  const std::string a = tmp.Join("a"), b = tmp.Join("b"), h5 = tmp.Join("x.h5");
  auto synth = RunCommand(Ckpt(StrCat("synth --out ", a, " --params 2M --mesh dp=2,tp=2 --step 7")));
  ASSERT_EQ(synth.code, 0) << synth.out;
  auto ex = RunCommand(Ckpt(StrCat("export ", a, " --to ", h5)));
  ASSERT_EQ(ex.code, 0) << ex.out;
  auto im = RunCommand(Ckpt(StrCat("import ", h5, " --out ", b)));
  ASSERT_EQ(im.code, 0) << im.out;
  EXPECT_NE(im.out.find("4 rank(s)"), std::string::npos) << im.out;
  auto diff = RunCommand(Ckpt(StrCat("diff ", a, " ", b, " --json --all")));
  EXPECT_EQ(diff.code, 0) << diff.out;
  EXPECT_NE(diff.out.find("\"blobs_and_metadata_different\":0"), std::string::npos) << diff.out;
  for (int r = 0; r < 4; ++r) {
    EXPECT_NE(diff.out.find(StrCat("(rank ", r, ")\",\"kind\":\"identical\"")), std::string::npos) << r << diff.out;
  }
  EXPECT_NE(diff.out.find("metadata 'synth.seed'\",\"kind\":\"identical\""), std::string::npos) << diff.out;
  // Another seed: tensors, the rng blobs and the seed entry differ.
  const std::string c = tmp.Join("c");
  ASSERT_EQ(RunCommand(Ckpt(StrCat("synth --out ", c, " --params 2M --mesh dp=2,tp=2 --step 7 --seed 3"))).code, 0);
  diff = RunCommand(Ckpt(StrCat("diff ", a, " ", c)));
  EXPECT_EQ(diff.code, 1) << diff.out;
  EXPECT_NE(diff.out.find("changed    metadata 'synth.seed': '0' in A, '3' in B"), std::string::npos) << diff.out;
  // A metadata entry only one side has: exit 1 even with identical tensors.
  auto storage = OpenStorage(b);
  ASSERT_OK(storage);
  auto m = ReadManifest(**storage, 7);
  ASSERT_OK(m);
  m->metadata["note"] = "added";
  const std::string bytes = EncodeManifest(*m);
  for (const char* name : {"MANIFEST", "MANIFEST.copy"}) WriteFile(StrCat(b, "/", StepDir(7), "/", name), bytes);
  diff = RunCommand(Ckpt(StrCat("diff ", a, " ", b)));
  EXPECT_EQ(diff.code, 1) << diff.out;
  EXPECT_NE(diff.out.find("only in B  metadata 'note'"), std::string::npos) << diff.out;
}

// Regression: with several ranks, saving an older step with keep-last 1 made
// the leader's retention remove the step just committed, and the other
// ranks waited 630 s for a MANIFEST that was gone. Now every rank refuses at
// once without the option, and with it every rank learns the commit.
TEST(Integrity, EveryRankLearnsTheOutcomeOfAnOlderStepAtOnce) {
  TempDir tmp;
  const std::string root = tmp.Join("root");
  auto save_all = [&](int64_t step, bool allow_older) -> std::vector<absl::Status> {
    std::vector<absl::Status> out(2);
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r) {
      threads.emplace_back([&, r] {
        CheckpointerOptions o;
        o.uri = root;
        o.rank = r;
        o.world_size = 2;
        o.commit_timeout_s = 20;
        o.retention.keep_last = 1;
        o.gc_on_open = false;  // two ranks open concurrently, without a communicator
        auto cp = Checkpointer::Open(o);
        if (!cp.ok()) {
          out[r] = cp.status();
          return;
        }
        std::vector<OwnedShard> half = {MakeShard(kWeight, Box({64 * r, 0}, {64, 256}), static_cast<uint64_t>(step))};
        State st = StateOf(half);
        SaveOptions so;
        so.allow_older_step = allow_older;
        auto h = (*cp)->Save(step, st, so);
        out[r] = h.ok() ? h->Wait() : h.status();
      });
    }
    for (auto& t : threads) t.join();
    return out;
  };
  for (int64_t step : {100, 200}) {
    for (const absl::Status& s : save_all(step, false)) ASSERT_OK(s);
  }
  const double t0 = NowSeconds();
  for (const absl::Status& s : save_all(150, false)) {
    EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  }
  for (const absl::Status& s : save_all(150, true)) EXPECT_OK(s);
  EXPECT_LT(NowSeconds() - t0, 10) << "a rank waited for an outcome";
  EXPECT_EQ(States(root)[150], StepState::kCommitted);
  EXPECT_EQ(States(root)[200], StepState::kCommitted);
}

// A restart picks the newest step whose data verifies: a step that only
// lost one of its two manifest files (its leader died between them) is not
// passed over for an older one; a step with damaged data is.
TEST(Integrity, RestartsRestoreAStepWithOneIntactManifest) {
  TempDir tmp;
  const std::string root = tmp.Join("root");
  for (int64_t step : {5, 10}) ASSERT_OK(SaveOne(root, step));
  fs::remove(StrCat(root, "/", StepDir(10), "/MANIFEST.copy"));
  auto storage = OpenStorage(root);
  ASSERT_OK(storage);
  std::vector<std::string> log;
  auto keep = [&](const std::string& l) { log.push_back(l); };
  EXPECT_EQ(NewestRestorableStep(**storage, -1, keep), 10);
  ASSERT_EQ(log.size(), 1u);
  EXPECT_NE(log[0].find("restoring step 10 from its intact manifest"), std::string::npos) << log[0];
  fs::resize_file(StrCat(root, "/", StepDir(10), "/", DataFileName(0)), 100);
  log.clear();
  EXPECT_EQ(NewestRestorableStep(**storage, -1, keep), 5);
  EXPECT_NE(log[0].find("step 10 fails verification"), std::string::npos) << log[0];
  EXPECT_EQ(NewestRestorableStep(**storage, 4, keep), -1);
}

// Finding: when MANIFEST and MANIFEST.copy both decode but differ (here
// MANIFEST is another save's commit of the same step), `ckpt repair`
// rewrote the copy and CLAIM from MANIFEST, said "fixed", exited 0, and the
// step could never load again. Repair and loads now take the one whose save
// id CLAIM and the data files' footers agree with; when nothing decides,
// repair exits 1 and changes nothing, and a load refuses rather than guess.
TEST(Integrity, RepairKeepsTheManifestTheStepsOwnFilesAgreeWith) {
  TempDir tmp;
  const std::string other = tmp.Join("other");
  ASSERT_OK(SaveOne(other, 1));  // the same step, another save (another save id)
  const std::string foreign = ReadFile(StrCat(other, "/", StepDir(1), "/MANIFEST"));
  const std::string foreign_claim = ReadFile(StrCat(other, "/", StepDir(1), "/CLAIM"));
  for (const char* wrong : {"MANIFEST", "MANIFEST.copy"}) {
    SCOPED_TRACE(wrong);
    const std::string root = tmp.Join(StrCat("root-", wrong));
    ASSERT_OK(SaveOne(root, 1));
    const std::string sd = StrCat(root, "/", StepDir(1));
    const std::string own = ReadFile(sd + "/MANIFEST");
    ASSERT_NE(own, foreign);
    WriteFile(StrCat(sd, "/", wrong), foreign);
    EXPECT_EQ(States(root)[1], StepState::kDamaged);
    // A load takes the manifest of the step's own files.
    auto storage = OpenStorage(root);
    ASSERT_OK(storage);
    std::vector<OwnedShard> out = {EmptyShard(kWeight, Box::Whole(kWeight.shape))};
    State target = StateOf(out);
    ASSERT_OK(LoadCheckpoint(**storage, target, 1));
    EXPECT_EQ(Mismatches(out[0], 1), 0);
    auto r = RunCommand(Ckpt(StrCat("repair ", root)));
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find(StrCat(StepDir(1), "/", wrong, ": rewritten")), std::string::npos) << r.out;
    EXPECT_EQ(ReadFile(sd + "/MANIFEST"), own);
    EXPECT_EQ(ReadFile(sd + "/MANIFEST.copy"), own);
    auto v = RunCommand(Ckpt(StrCat("verify ", root, " --all")));
    EXPECT_EQ(v.code, 0) << v.out;
  }
  // Nothing decides: MANIFEST is the other save's and so is CLAIM, while the
  // data files are this save's. Repair changes nothing and exits 1; a load
  // refuses.
  const std::string root = tmp.Join("root-undecided");
  ASSERT_OK(SaveOne(root, 1));
  const std::string sd = StrCat(root, "/", StepDir(1));
  WriteFile(sd + "/MANIFEST", foreign);
  WriteFile(sd + "/CLAIM", foreign_claim);
  const std::string copy_before = ReadFile(sd + "/MANIFEST.copy");
  auto r = RunCommand(Ckpt(StrCat("repair ", root)));
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("the evidence does not decide"), std::string::npos) << r.out;
  EXPECT_EQ(ReadFile(sd + "/MANIFEST"), foreign);
  EXPECT_EQ(ReadFile(sd + "/MANIFEST.copy"), copy_before);
  EXPECT_EQ(ReadFile(sd + "/CLAIM"), foreign_claim);
  auto storage = OpenStorage(root);
  ASSERT_OK(storage);
  std::vector<OwnedShard> out = {EmptyShard(kWeight, Box::Whole(kWeight.shape))};
  State target = StateOf(out);
  auto refused = LoadCheckpoint(**storage, target, 1);
  EXPECT_TRUE(absl::IsDataLoss(refused.status())) << refused.status();
}

// Finding: ExamineStep counted any read error other than NotFound as
// damage, so during a storage outage `list` showed a healthy step as
// damaged and `gc --damaged --yes` would have deleted it. Such a step is
// now "unreadable": listed with the storage's error (exit 1), verified as
// unreadable (exit 2), never collected, and a repair changes nothing.
TEST(Integrity, AReadErrorMakesAStepUnreadableNeverDamagedAndNothingCollectsIt) {
  TempDir tmp;
  const std::string root = tmp.Join("root");
  for (int64_t step = 1; step <= 3; ++step) ASSERT_OK(SaveOne(root, step));
  const std::string faulty = StrCat("'faulty://", root, "?fault.fail_on=read&fault.match=", StepDir(2), "/MANIFEST'");
  auto list = RunCommand(Ckpt(StrCat("list ", faulty)));
  EXPECT_EQ(list.code, 1) << list.out;
  EXPECT_NE(list.out.find("unreadable"), std::string::npos) << list.out;
  EXPECT_EQ(list.out.find("damaged"), std::string::npos) << list.out;
  EXPECT_NE(list.out.find("(injected)"), std::string::npos) << list.out;
  auto verify = RunCommand(Ckpt(StrCat("verify ", faulty, " --step 2")));
  EXPECT_EQ(verify.code, 2) << verify.out;
  EXPECT_NE(verify.out.find("step 2 is unreadable"), std::string::npos) << verify.out;
  auto gc = RunCommand(Ckpt(StrCat("gc ", faulty, " --damaged --keep-last 1 --yes")));
  EXPECT_EQ(gc.code, 1) << gc.out;
  EXPECT_NE(gc.out.find("kept unreadable step 2"), std::string::npos) << gc.out;
  EXPECT_TRUE(fs::exists(StrCat(root, "/", StepDir(2), "/MANIFEST")));
  const std::string manifest = ReadFile(StrCat(root, "/", StepDir(2), "/MANIFEST"));
  auto repair = RunCommand(Ckpt(StrCat("repair ", faulty, " --step 2")));
  EXPECT_EQ(repair.code, 1) << repair.out;
  EXPECT_EQ(ReadFile(StrCat(root, "/", StepDir(2), "/MANIFEST")), manifest);
  // Healthy again, the step is what it always was.
  EXPECT_EQ(States(root)[2], StepState::kCommitted);
  EXPECT_EQ(RunCommand(Ckpt(StrCat("verify ", root, " --step 2"))).code, 0);
}

// Finding: a FIFO in place of a data file blocked every reader in open(2),
// for good. It is refused, by name, before anything can wait on it.
TEST(Integrity, AFifoInPlaceOfADataFileIsRefusedNotWaitedOn) {
  TempDir tmp;
  const std::string root = tmp.Join("root");
  ASSERT_OK(SaveOne(root, 1));
  const std::string data = StrCat(root, "/", StepDir(1), "/", DataFileName(0));
  fs::remove(data);
  ASSERT_EQ(mkfifo(data.c_str(), 0644), 0);
  auto r = RunCommand(StrCat("timeout 30 ", Ckpt(StrCat("verify ", root))));
  EXPECT_NE(r.code, 124) << "verify waited on the FIFO\n" << r.out;
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("is a FIFO, not a regular file"), std::string::npos) << r.out;
  std::vector<OwnedShard> out = {EmptyShard(kWeight, Box::Whole(kWeight.shape))};
  State target = StateOf(out);
  auto storage = OpenStorage(root);
  ASSERT_OK(storage);
  auto loaded = LoadCheckpoint(**storage, target, 1);
  EXPECT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().message().find("FIFO"), absl::string_view::npos) << loaded.status();
}

// Finding: a gc killed between removing MANIFEST.copy and MANIFEST left a
// step that the next plain gc kept as "damaged", for good. Killed at each
// operation that changes the storage, in turn, the next plain gc finishes
// the removal: no step is left damaged and the kept step verifies.
TEST(Integrity, AGcKilledAtAnyOperationIsFinishedByTheNextGc) {
  TempDir tmp;
  const std::string base = tmp.Join("base");
  for (int64_t step = 1; step <= 3; ++step) ASSERT_OK(SaveOne(base, step));
  bool finished = false;
  int runs = 0;
  for (int op = 1; op <= 40 && !finished; ++op) {
    SCOPED_TRACE(StrCat("killed at operation ", op));
    const std::string root = tmp.Join(StrCat("root", op));
    fs::copy(base, root, fs::copy_options::recursive);
    auto killed = RunCommand(Ckpt(StrCat("gc 'faulty://", root, "?fault.kill_at_op=", op, "' --keep-last 1 --yes")));
    finished = killed.code == 0;
    ++runs;
    auto gc = RunCommand(Ckpt(StrCat("gc ", root, " --keep-last 1 --yes")));
    EXPECT_EQ(gc.code, 0) << gc.out;
    EXPECT_EQ(gc.out.find("damaged"), std::string::npos) << gc.out;
    const auto states = States(root);
    EXPECT_EQ(states.size(), 1u) << gc.out;
    for (const auto& [step, state] : states) {
      EXPECT_EQ(step, 3);
      EXPECT_EQ(state, StepState::kCommitted) << step;
    }
    EXPECT_EQ(RunCommand(Ckpt(StrCat("verify ", root, " --all"))).code, 0);
  }
  EXPECT_TRUE(finished) << "gc was killed at each of its first 40 operations";
  EXPECT_GE(runs, 10) << "fewer operations than two step removals take";
}

}  // namespace
}  // namespace ckpt::testing
