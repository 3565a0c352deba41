// On-disk structures: round trips, and every corruption caught and named.
#include <cstring>
#include <random>

#include "format/data_file.h"
#include "format/manifest.h"
#include "format/root_files.h"
#include "testutil/test_util.h"
#include "util/bytes.h"
#include "util/hash.h"

namespace ckpt::testing {
namespace {

bool Contains(const absl::Status& s, absl::string_view text) {
  return s.message().find(text) != absl::string_view::npos;
}

TEST(DataFile, HeaderRoundTripAndCorruption) {
  std::vector<std::byte> buf(kDataHeaderSize);
  DataFileHeader h;
  h.step = 1234567;
  h.rank = 42;
  h.save_id = 0xfeedbeefcafef00dULL;
  EncodeDataHeader(h, buf.data());
  auto d = DecodeDataHeader(buf.data(), "f.ckd");
  ASSERT_OK(d);
  EXPECT_EQ(d->step, h.step);
  EXPECT_EQ(d->rank, 42u);
  EXPECT_EQ(d->save_id, h.save_id);
  // Any single bit flip anywhere in the 4 KiB header is caught.
  for (size_t byte = 0; byte < kDataHeaderSize; byte += 7) {
    auto copy = buf;
    copy[byte] ^= std::byte{0x10};
    auto bad = DecodeDataHeader(copy.data(), "f.ckd");
    EXPECT_FALSE(bad.ok()) << "flip at " << byte;
    EXPECT_TRUE(Contains(bad.status(), "f.ckd")) << bad.status();
  }
}

TEST(DataFile, UnknownVersionIsNamed) {
  std::vector<std::byte> buf(kDataHeaderSize);
  DataFileHeader h;
  h.version = kDataFormatVersion + 1;
  EncodeDataHeader(h, buf.data());
  auto d = DecodeDataHeader(buf.data(), "f.ckd");
  EXPECT_TRUE(absl::IsFailedPrecondition(d.status())) << d.status();
  EXPECT_TRUE(Contains(d.status(), "unknown data file version")) << d.status();
}

TEST(DataFile, TrailerRoundTripAndEveryFlipCaught) {
  FrameTrailer t;
  t.codec = 2;
  t.elem_width = 2;
  t.flags = 1;
  t.raw_len = 4 << 20;
  t.stored_len = 12345;
  t.block_id = 77;
  t.raw_hash = 0x1111;
  t.stored_hash = 0x2222;
  std::byte buf[kTrailerSize];
  EncodeTrailer(t, buf);
  auto d = DecodeTrailer(buf, "f", 100);
  ASSERT_OK(d);
  EXPECT_EQ(d->block_id, 77u);
  EXPECT_EQ(d->stored_len, 12345u);
  for (size_t bit = 0; bit < kTrailerSize * 8; ++bit) {
    std::byte copy[kTrailerSize];
    std::memcpy(copy, buf, kTrailerSize);
    copy[bit / 8] ^= std::byte(1 << (bit % 8));
    EXPECT_FALSE(DecodeTrailer(copy, "f", 100).ok()) << "bit " << bit;
  }
}

TEST(DataFile, IndexAndFooterRoundTrip) {
  std::vector<IndexEntry> entries(3);
  for (size_t i = 0; i < entries.size(); ++i) {
    entries[i].offset = 4096 * (i + 1);
    entries[i].raw_len = 100 + i;
    entries[i].stored_len = 90 + i;
    entries[i].raw_hash = i * 3;
    entries[i].stored_hash = i * 5;
    entries[i].codec = 1;
    entries[i].frame_len = 4096;
  }
  std::string idx = EncodeIndex(entries);
  EXPECT_EQ(idx.size(), kIndexHeaderSize + 3 * kIndexEntrySize);
  auto d = DecodeIndex(idx, "f", 0);
  ASSERT_OK(d);
  EXPECT_EQ((*d)[2].offset, 4096u * 3);
  EXPECT_EQ((*d)[1].stored_hash, 5u);
  auto truncated = DecodeIndex(idx.substr(0, idx.size() - 1), "f", 0);
  EXPECT_FALSE(truncated.ok());

  DataFileFooter f;
  f.index_offset = 8192;
  f.index_len = idx.size();
  f.block_count = 3;
  f.index_hash = 99;
  f.save_id = 7;
  std::byte fb[kFooterSize];
  EncodeFooter(f, fb);
  auto fd = DecodeFooter(fb, "f", 1000);
  ASSERT_OK(fd);
  EXPECT_EQ(fd->index_offset, 8192u);
  for (size_t bit = 0; bit < kFooterSize * 8; bit += 3) {
    std::byte copy[kFooterSize];
    std::memcpy(copy, fb, kFooterSize);
    copy[bit / 8] ^= std::byte(1 << (bit % 8));
    auto bad = DecodeFooter(copy, "f", 1000);
    EXPECT_FALSE(bad.ok()) << "bit " << bit;
  }
}

Manifest SampleManifest() {
  Manifest m;
  m.step = 42;
  m.world_size = 2;
  m.created_unix_ns = 1700000000000000000;
  m.library_version = "0.1.0";
  m.codec = Codec::kShuffleZstd;
  m.mesh = Mesh{{"dp", "tp"}, {1, 2}};
  m.metadata["k"] = "v";
  for (int r = 0; r < 2; ++r) {
    ManifestFile f;
    f.name = DataFileName(r);
    f.rank = r;
    f.size = 100000;
    f.index_offset = 90000;
    f.index_len = 96;
    f.index_hash = 123 + r;
    f.block_count = 2;
    f.block_size = 65536;
    f.save_id = 9 + r;
    m.files.push_back(f);
  }
  ManifestTensor t;
  t.spec = TensorSpec{"a.weight", DType::kBF16, {4, 6}};
  t.chunks.push_back(ManifestChunk{0, 0, 1, Box({0, 0}, {4, 3})});
  t.chunks.push_back(ManifestChunk{1, 0, 1, Box({0, 3}, {4, 3})});
  m.tensors.push_back(t);
  ManifestTensor s;
  s.spec = TensorSpec{"b.step", DType::kI64, {}};
  s.chunks.push_back(ManifestChunk{0, 1, 1, Box({}, {})});
  m.tensors.push_back(s);
  m.blobs.push_back(ManifestBlob{"rng", 1, 16, 1, 1, 1});
  return m;
}

TEST(Manifest, RoundTrip) {
  Manifest m = SampleManifest();
  std::string bytes = EncodeManifest(m);
  auto d = DecodeManifest(bytes, "MANIFEST");
  ASSERT_OK(d);
  EXPECT_EQ(d->step, 42);
  EXPECT_EQ(d->world_size, 2);
  EXPECT_EQ(d->codec, Codec::kShuffleZstd);
  ASSERT_TRUE(d->mesh.has_value());
  EXPECT_EQ(d->mesh->ToString(), "dp=1,tp=2");
  EXPECT_EQ(d->metadata.at("k"), "v");
  ASSERT_EQ(d->tensors.size(), 2u);
  EXPECT_EQ(d->tensors[0].chunks[1].box, Box({0, 3}, {4, 3}));
  EXPECT_EQ(d->tensors[1].spec.shape.size(), 0u);
  ASSERT_EQ(d->blobs.size(), 1u);
  EXPECT_EQ(d->blobs[0].rank, 1);
  EXPECT_EQ(d->files[1].save_id, 10u);
  ASSERT_NE(d->FindTensor("b.step"), nullptr);
  EXPECT_EQ(d->FindTensor("zzz"), nullptr);
  EXPECT_EQ(EncodeManifest(*d), bytes);
}

TEST(Manifest, EveryBitFlipIsDetected) {
  const std::string bytes = EncodeManifest(SampleManifest());
  for (size_t bit = 0; bit < bytes.size() * 8; ++bit) {
    std::string copy = bytes;
    copy[bit / 8] = static_cast<char>(copy[bit / 8] ^ (1 << (bit % 8)));
    auto d = DecodeManifest(copy, "MANIFEST");
    EXPECT_FALSE(d.ok()) << "bit " << bit;
  }
}

TEST(Manifest, TruncationAndVersionSaySo) {
  const std::string bytes = EncodeManifest(SampleManifest());
  for (size_t len : {size_t{0}, size_t{10}, kManifestHeaderSize, bytes.size() - 1}) {
    auto d = DecodeManifest(bytes.substr(0, len), "MANIFEST");
    ASSERT_FALSE(d.ok());
    EXPECT_TRUE(Contains(d.status(), "truncated")) << len << ": " << d.status();
  }
  // A newer version with a valid header checksum is "unknown version".
  std::string newer = bytes;
  StoreLE32(newer.data() + 8, kManifestVersion + 1);
  StoreLE64(newer.data() + 40, Xxh3(newer.data(), 40));
  auto d = DecodeManifest(newer, "MANIFEST");
  EXPECT_TRUE(absl::IsFailedPrecondition(d.status())) << d.status();
  EXPECT_TRUE(Contains(d.status(), "unknown manifest version")) << d.status();
}

TEST(Manifest, RejectsReferencesOutsideTheFile) {
  Manifest m = SampleManifest();
  m.tensors[0].chunks[0].first_block = 5;  // file 0 has 2 blocks
  auto d = DecodeManifest(EncodeManifest(m), "MANIFEST");
  ASSERT_FALSE(d.ok());
  EXPECT_TRUE(Contains(d.status(), "a.weight")) << d.status();
  Manifest m2 = SampleManifest();
  m2.tensors[0].chunks[0].box = Box({2, 0}, {4, 3});  // past the shape
  auto d2 = DecodeManifest(EncodeManifest(m2), "MANIFEST");
  ASSERT_FALSE(d2.ok());
  EXPECT_TRUE(Contains(d2.status(), "outside shape")) << d2.status();
}

TEST(Layout, Names) {
  EXPECT_EQ(StepDir(42), "step-0000000042");
  EXPECT_EQ(ParseStepDir("step-0000000042"), 42);
  EXPECT_EQ(ParseStepDir("step-12345678901"), 12345678901);
  EXPECT_FALSE(ParseStepDir("step-").has_value());
  EXPECT_FALSE(ParseStepDir("step-12a").has_value());
  EXPECT_FALSE(ParseStepDir("LATEST").has_value());
  EXPECT_EQ(ParseRankFile(DataFileName(17), "ckd"), 17);
  EXPECT_EQ(ParseRankFile(ReportName(3), "report"), 3);
  EXPECT_FALSE(ParseRankFile(ReportName(3), "ckd").has_value());
  EXPECT_FALSE(ParseRankFile("rank-.ckd", "ckd").has_value());
}

TEST(Layout, LatestRoundTripAndEveryFlipCaught) {
  const std::string text = EncodeLatest(123);
  auto d = DecodeLatest(text);
  ASSERT_OK(d);
  EXPECT_EQ(*d, 123);
  for (size_t bit = 0; bit < text.size() * 8; ++bit) {
    std::string copy = text;
    copy[bit / 8] = static_cast<char>(copy[bit / 8] ^ (1 << (bit % 8)));
    EXPECT_FALSE(DecodeLatest(copy).ok()) << "bit " << bit << ": " << copy;
  }
  EXPECT_FALSE(DecodeLatest(text.substr(0, text.size() - 1)).ok());
  EXPECT_FALSE(DecodeLatest(text + "x").ok());
}

}  // namespace
}  // namespace ckpt::testing
