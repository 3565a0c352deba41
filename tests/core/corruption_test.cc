// Every damaged byte is caught, by load or by verify, and located.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>

#include "ckpt/checkpointer.h"
#include "ckpt/verify.h"
#include "core/root.h"
#include "format/frame_check.h"
#include "format/root_files.h"
#include "testutil/test_util.h"

namespace ckpt::testing {
namespace {

bool Has(absl::string_view text, absl::string_view what) { return text.find(what) != absl::string_view::npos; }

class CorruptionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = dir_.Join("root");
    SaveEngineOptions eo;
    eo.block_size = 64 << 10;
    auto engine = CreateSaveEngine(eo);
    ASSERT_OK(engine);
    std::vector<std::unique_ptr<Checkpointer>> ranks;
    for (int r = 0; r < 2; ++r) {
      CheckpointerOptions o;
      o.uri = root_;
      o.rank = r;
      o.world_size = 2;
      o.codec = Codec::kZstd;
      o.engine = *engine;
      auto cp = Checkpointer::Open(o);
      ASSERT_OK(cp);
      ranks.push_back(std::move(cp).value());
    }
    // "w" split by rows across the two ranks; "b" on rank 1 only.
    shards_[0].push_back(MakeShard(w_, Box({0, 0}, {100, 300}), 1));
    shards_[1].push_back(MakeShard(w_, Box({100, 0}, {100, 300}), 1));
    shards_[1].push_back(MakeShard(b_, Box::Whole(b_.shape), 1));
    std::vector<SaveHandle> handles;
    for (int r = 0; r < 2; ++r) {
      State s = StateOf(shards_[r]);
      if (r == 0) ASSERT_OK(s.AddBlob("cfg", blob_.data(), blob_.size(), BlobScope::kGlobal));
      auto h = ranks[r]->Save(5, s);
      ASSERT_OK(h);
      handles.push_back(*h);
    }
    for (auto& h : handles) ASSERT_OK(h.Wait());
    auto st = OpenStorage(root_);
    ASSERT_OK(st);
    storage_ = *st;
    auto m = ReadManifest(*storage_, 5);
    ASSERT_OK(m);
    manifest_ = *m;
    for (size_t f = 0; f < manifest_.files.size(); ++f) {
      const std::string path = StepDir(5) + "/" + manifest_.files[f].name;
      auto rf = storage_->OpenReadable(path);
      ASSERT_OK(rf);
      auto idx = ReadFileIndex(**rf, manifest_.files[f], path);
      ASSERT_OK(idx);
      index_.push_back(*idx);
    }
    ASSERT_OK(Verify().status());
    ASSERT_TRUE(Verify()->ok());
  }

  std::string DataPath(int rank) const { return root_ + "/" + StepDir(5) + "/" + DataFileName(rank); }

  absl::StatusOr<VerifyReport> Verify() { return VerifyStep(*storage_, 5); }

  // Loads "w" whole into a fresh buffer.
  absl::Status LoadW() {
    std::vector<OwnedShard> out = {EmptyShard(w_, Box::Whole(w_.shape))};
    State t = StateOf(out);
    return LoadCheckpoint(*storage_, t).status();
  }

  // Index entry of the first block of the chunk of "w" held by `rank`.
  const IndexEntry& FirstBlockOfW(int rank) {
    const ManifestTensor* t = manifest_.FindTensor("w");
    for (const ManifestChunk& c : t->chunks) {
      if (manifest_.files[c.file].rank == rank) return index_[c.file][c.first_block];
    }
    ADD_FAILURE() << "no chunk";
    return index_[0][0];
  }

  TempDir dir_;
  std::string root_;
  TensorSpec w_{"w", DType::kF32, {200, 300}};
  TensorSpec b_{"b", DType::kBF16, {77}};
  std::string blob_ = std::string(5000, 'c');
  std::vector<OwnedShard> shards_[2];
  std::shared_ptr<Storage> storage_;
  Manifest manifest_;
  std::vector<std::vector<IndexEntry>> index_;
};

TEST_F(CorruptionTest, FlipInBlockDataNamesTensorChunkFileAndOffset) {
  const IndexEntry& e = FirstBlockOfW(1);
  FlipBit(DataPath(1), e.offset + 10, 3);
  absl::Status s = LoadW();
  ASSERT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_TRUE(Has(s.message(), "tensor 'w'")) << s;
  EXPECT_TRUE(Has(s.message(), "[100:200, 0:300]")) << s;
  EXPECT_TRUE(Has(s.message(), DataFileName(1))) << s;
  EXPECT_TRUE(Has(s.message(), "byte offset " + std::to_string(e.offset))) << s;
  EXPECT_TRUE(Has(s.message(), "checksum mismatch")) << s;
  auto v = Verify();
  ASSERT_OK(v);
  ASSERT_EQ(v->problems.size(), 1u);
  EXPECT_EQ(v->problems[0].tensor, "w");
  EXPECT_EQ(v->problems[0].chunk, "[100:200, 0:300]");
  EXPECT_TRUE(Has(v->problems[0].file, DataFileName(1)));
  EXPECT_EQ(v->problems[0].offset, static_cast<int64_t>(e.offset));
  // A target that does not need the damaged block still loads.
  std::vector<OwnedShard> top = {EmptyShard(w_, Box({0, 0}, {100, 300}))};
  State t = StateOf(top);
  EXPECT_OK(LoadCheckpoint(*storage_, t));
  EXPECT_EQ(Mismatches(top[0], 1), 0);
}

TEST_F(CorruptionTest, FlipInTrailerAndPaddingAreLocated) {
  const IndexEntry& e = FirstBlockOfW(0);
  FlipBit(DataPath(0), e.offset + e.stored_len + 5, 0);
  absl::Status s = LoadW();
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Has(s.message(), "trailer")) << s;
  FlipBit(DataPath(0), e.offset + e.stored_len + 5, 0);  // undo
  ASSERT_OK(LoadW());
  const uint64_t pad = e.offset + e.stored_len + kTrailerSize + 1;
  ASSERT_LT(pad, e.offset + e.frame_len);
  FlipBit(DataPath(0), pad, 7);
  s = LoadW();
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Has(s.message(), "padding")) << s;
  EXPECT_TRUE(Has(s.message(), "byte offset " + std::to_string(pad))) << s;
  auto v = Verify();
  ASSERT_OK(v);
  ASSERT_FALSE(v->ok());
  EXPECT_EQ(v->problems[0].offset, static_cast<int64_t>(pad));
}

TEST_F(CorruptionTest, FlipInIndexFooterAndHeader) {
  const ManifestFile& mf = manifest_.files[1];
  FlipBit(DataPath(1), mf.index_offset + 20, 1);
  absl::Status s = LoadW();
  ASSERT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_TRUE(Has(s.message(), "block index checksum mismatch")) << s;
  EXPECT_TRUE(Has(s.message(), "byte offset " + std::to_string(mf.index_offset))) << s;
  FlipBit(DataPath(1), mf.index_offset + 20, 1);
  // The footer and header are not needed by load; verify reads them.
  FlipBit(DataPath(1), mf.size - 10, 2);
  auto v = Verify();
  ASSERT_OK(v);
  ASSERT_FALSE(v->ok());
  EXPECT_TRUE(Has(v->problems[0].message, "footer")) << v->problems[0].message;
  FlipBit(DataPath(1), mf.size - 10, 2);
  FlipBit(DataPath(1), 3000, 2);  // header padding
  v = Verify();
  ASSERT_OK(v);
  ASSERT_FALSE(v->ok());
  EXPECT_TRUE(Has(v->problems[0].message, "header")) << v->problems[0].message;
  EXPECT_EQ(v->problems[0].offset, 3000);
}

// A damaged MANIFEST is named by verify while the step still loads from
// its copy; with the copy damaged too the load fails naming both files.
TEST_F(CorruptionTest, FlipInManifestIsNamedAndTheCopyStandsIn) {
  const std::string path = root_ + "/" + StepDir(5) + "/MANIFEST";
  FlipBit(path, 100, 4);
  EXPECT_OK(LoadW());
  auto v = Verify();
  ASSERT_OK(v);
  ASSERT_EQ(v->problems.size(), 1u);
  EXPECT_EQ(v->problems[0].file, StepDir(5) + "/MANIFEST");
  FlipBit(path + ".copy", 100, 4);
  absl::Status s = LoadW();
  ASSERT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_TRUE(Has(s.message(), "MANIFEST at byte offset")) << s;
  EXPECT_TRUE(Has(s.message(), "MANIFEST.copy at byte offset")) << s;
  v = Verify();
  ASSERT_OK(v);
  ASSERT_EQ(v->problems.size(), 2u);
  EXPECT_EQ(v->problems[1].file, StepDir(5) + "/MANIFEST.copy");
}

TEST_F(CorruptionTest, DamagedLatestFallsBackAndIsReported) {
  FlipBit(root_ + "/LATEST", 3, 1);
  EXPECT_OK(LoadW());  // the latest committed step is found by scanning
  auto p = CheckLatestPointer(*storage_);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->file, "LATEST");
}

TEST_F(CorruptionTest, TruncatedAndMissingFiles) {
  std::filesystem::resize_file(DataPath(1), manifest_.files[1].size - 100);
  absl::Status s = LoadW();
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Has(s.message(), "truncated")) << s;
  EXPECT_TRUE(Has(s.message(), DataFileName(1))) << s;
  auto v = Verify();
  ASSERT_OK(v);
  ASSERT_FALSE(v->ok());
  EXPECT_TRUE(Has(v->problems[0].message, "truncated")) << v->problems[0].message;
  std::filesystem::remove(DataPath(1));
  s = LoadW();
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Has(s.message(), DataFileName(1))) << s;
  v = Verify();
  ASSERT_OK(v);
  ASSERT_FALSE(v->ok());
  EXPECT_TRUE(Has(v->problems[0].message, "missing")) << v->problems[0].message;
}

TEST_F(CorruptionTest, RandomBitFlipsAnywhereAreAllDetected) {
  // Every file of the root: data files, manifest, LATEST.
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::recursive_directory_iterator(root_)) {
    if (e.is_regular_file()) files.push_back(e.path().string());
  }
  ASSERT_GE(files.size(), 4u);
  std::mt19937_64 rng(2024);
  int detected = 0;
  // CKPT_FLIPS raises the count for long campaigns (scripts/reliability-campaign.sh).
  const int kFlips = std::getenv("CKPT_FLIPS") ? std::atoi(std::getenv("CKPT_FLIPS")) : 256;
  int located = 0;
  for (int i = 0; i < kFlips; ++i) {
    const std::string& f = files[rng() % files.size()];
    const std::string name = std::filesystem::path(f).filename().string();
    const uint64_t size = std::filesystem::file_size(f);
    const uint64_t off = rng() % size;
    const int bit = static_cast<int>(rng() % 8);
    FlipBit(f, off, bit);
    auto v = Verify();
    const auto latest = CheckLatestPointer(*storage_);
    const bool found = (v.ok() && !v->ok()) || !v.ok() || latest.has_value();
    EXPECT_TRUE(found) << f << " offset " << off << " bit " << bit;
    detected += found;
    // The report names the damaged file.
    std::string where = v.ok() ? "" : std::string(v.status().message());
    if (v.ok()) {
      for (const VerifyProblem& p : v->problems) where += p.file + " " + p.message + "\n";
    }
    if (latest) where += latest->file + " " + latest->message;
    const bool named = Has(where, name);
    EXPECT_TRUE(named) << f << " offset " << off << ": " << where;
    located += named;
    FlipBit(f, off, bit);  // restore
  }
  EXPECT_EQ(detected, kFlips);
  EXPECT_EQ(located, kFlips);
  std::printf("bit flips: %d injected, %d detected, %d located in their file\n", kFlips, detected, located);
  auto clean = Verify();
  ASSERT_OK(clean);
  EXPECT_TRUE(clean->ok());
}

}  // namespace
}  // namespace ckpt::testing
