// On-disk structures: round trips, and every corruption caught and named.
#include <algorithm>
#include <cstring>
#include <random>

#include "ckpt/mesh.h"
#include "core/collective_plan.h"
#include "format/chunk_grid.h"
#include "format/data_file.h"
#include "format/manifest.h"
#include "format/manifest_part.h"
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

// ---- Version 4: grids and sections ----

TEST(IntRuns, CodesEverySequenceOnceAndReadsItBack) {
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 200; ++trial) {
    const size_t n = 1 + rng() % 300;
    std::vector<uint64_t> v(n);
    v[0] = rng() % 1000;
    const int64_t step = static_cast<int64_t>(rng() % 7) - 3;
    for (size_t i = 1; i < n; ++i) {
      v[i] = rng() % 10 == 0 || v[i - 1] < 3 ? rng() % 5000 : v[i - 1] + static_cast<uint64_t>(step);
    }
    IntRuns runs = IntRuns::Of(v);
    ASSERT_EQ(runs.size(), n);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(runs.At(i), v[i]) << trial << " " << i;
    const std::vector<IntRuns::Run> flat = runs.Expanded();
    for (size_t k = 1; k < flat.size(); ++k) ASSERT_NE(flat[k].step, flat[k - 1].step);
    std::vector<uint64_t> seen;
    EXPECT_TRUE(runs.ForEach([&](uint64_t x) {
      seen.push_back(x);
      return true;
    }));
    EXPECT_EQ(seen, v);
    for (bool groups : {true, false}) {
      ByteWriter w;
      runs.Encode(w, groups);
      ByteReader r(w.str(), "runs");
      IntRuns back = IntRuns::Decode(r, n, "runs", groups);
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_TRUE(r.AtEnd());
      EXPECT_TRUE(back.Expanded() == flat);
      if (groups) {
        EXPECT_TRUE(back == runs);
      }
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(back.At(i), v[i]) << trial << " " << i;
    }
  }
}

// The values of a grid's cells as a save writes them: rows of boxes, each
// box cut into tiles, box after box; the file number changes from box to
// box and the first block runs on within a box.
std::vector<uint64_t> TiledGridSequence(int rows, int boxes, int tiles, bool files, uint64_t jitter_row) {
  std::vector<uint64_t> v;
  for (int r = 0; r < rows; ++r) {
    for (int b = 0; b < boxes; ++b) {
      for (int t = 0; t < tiles; ++t) {
        if (files) {
          v.push_back(static_cast<uint64_t>(1000 + r * 100 + b * 8));
        } else {
          v.push_back(static_cast<uint64_t>(500 + t * (3 + t)) + (static_cast<uint64_t>(r) == jitter_row ? 7 : 0));
        }
      }
    }
  }
  return v;
}

TEST(IntRuns, KeepsARepeatedPatternOfRunsOnce) {
  for (bool files : {true, false}) {
    for (int tiles : {1, 2, 3}) {
      const std::vector<uint64_t> v = TiledGridSequence(1024, 8, tiles, files, 1000);
      IntRuns runs = IntRuns::Of(v);
      ASSERT_EQ(runs.size(), v.size());
      // One level of runs needs about one run per box (or per tile); the
      // groups keep the pattern of a row once (the odd row of first blocks
      // breaks it in three).
      EXPECT_LE(runs.groups().size(), files ? 3u : 12u) << files << " " << tiles;
      EXPECT_LE(runs.runs().size(), 20u) << files << " " << tiles;
      std::vector<uint64_t> seen;
      EXPECT_TRUE(runs.ForEach([&](uint64_t x) {
        seen.push_back(x);
        return true;
      }));
      EXPECT_EQ(seen, v);
      IntRuns::Reader reader(runs);
      seen.clear();
      for (uint64_t x; reader.Next(&x);) seen.push_back(x);
      EXPECT_EQ(seen, v);
      for (size_t i = 0; i < v.size(); i += 37) ASSERT_EQ(runs.At(i), v[i]) << i;
      ASSERT_EQ(runs.At(v.size() - 1), v.back());
      ByteWriter grouped, flat;
      runs.Encode(grouped, true);
      runs.Encode(flat, false);
      EXPECT_LT(grouped.size(), 300u);
      if (tiles > 1) {
        EXPECT_GT(flat.size(), 20 * grouped.size());
      }
      ByteReader r(grouped.str(), "runs");
      IntRuns back = IntRuns::Decode(r, v.size(), "runs", true);
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_TRUE(back == runs);
    }
  }
}

TEST(IntRuns, RandomRepeatsReadBackTheSameWhicheverWay) {
  std::mt19937_64 rng(23);
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<uint64_t> v = {rng() % 100};
    while (v.size() < 2000) {
      // A pattern of a few steps, repeated, then some noise.
      const size_t len = 1 + rng() % 9;
      std::vector<int64_t> steps(len);
      for (int64_t& st : steps) st = static_cast<int64_t>(rng() % 5) - 2;
      const size_t times = 1 + rng() % 20;
      for (size_t t = 0; t < times; ++t) {
        for (int64_t st : steps) v.push_back(v.back() + static_cast<uint64_t>(st) + (v.back() < 10 ? 10 : 0));
      }
      if (rng() % 3 == 0) v.push_back(v.back() + 1000);
    }
    IntRuns runs = IntRuns::Of(v);
    const std::vector<IntRuns::Run> flat = runs.Expanded();
    for (size_t k = 1; k < flat.size(); ++k) ASSERT_NE(flat[k].step, flat[k - 1].step) << trial;
    for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(runs.At(i), v[i]) << trial << " " << i;
    IntRuns::Reader reader(runs);
    for (size_t i = 0; i < v.size(); ++i) {
      uint64_t x = 0;
      ASSERT_TRUE(reader.Next(&x));
      ASSERT_EQ(x, v[i]);
    }
    uint64_t x;
    EXPECT_FALSE(reader.Next(&x));
    for (bool groups : {true, false}) {
      ByteWriter w;
      runs.Encode(w, groups);
      ByteReader r(w.str(), "runs");
      IntRuns back = IntRuns::Decode(r, v.size(), "runs", groups);
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_TRUE(back.Expanded() == flat);
    }
  }
}

TEST(IntRuns, RefusesGroupsThatAreNotCanonicalOrDoNotAddUp) {
  struct G {
    uint64_t len, times;
    std::vector<std::pair<int64_t, uint64_t>> runs;
  };
  auto decode = [](const std::vector<G>& groups, uint64_t n, bool allow = true) {
    ByteWriter w;
    w.Var(3);
    w.Var(groups.size());
    for (const G& g : groups) {
      w.Var(g.len);
      if (g.len > 1) w.Var(g.times);
      for (auto [step, count] : g.runs) {
        w.SVar(step);
        w.Var(count);
      }
    }
    ByteReader r(w.str(), "runs");
    IntRuns::Decode(r, n, "files", allow);
    return r.status();
  };
  // (+1 x2, +5 x1) three times, then -3 once: 1 + 9 + 1 values.
  EXPECT_OK(decode({{2, 3, {{1, 2}, {5, 1}}}, {1, 1, {{-3, 1}}}}, 11));
  EXPECT_TRUE(Contains(decode({{2, 3, {{1, 2}, {5, 1}}}, {1, 1, {{-3, 1}}}}, 12), "runs give 11 values"));
  EXPECT_TRUE(Contains(decode({{2, 1, {{1, 2}, {5, 1}}}}, 4), "repeated 1 times"));
  EXPECT_TRUE(Contains(decode({{0, 2, {}}}, 4), "no runs"));
  EXPECT_TRUE(Contains(decode({{65, 2, {}}}, 400), "pattern length"));
  EXPECT_TRUE(Contains(decode({{2, 2, {{1, 2}, {1, 1}}}}, 7), "not canonical"));
  EXPECT_TRUE(Contains(decode({{3, 2, {{1, 2}, {5, 1}, {1, 1}}}}, 9), "ends with the step it starts with"));
  EXPECT_TRUE(Contains(decode({{2, 2, {{1, 2}, {5, 1}}}, {1, 1, {{5, 1}}}}, 8), "not canonical"));
  EXPECT_TRUE(Contains(decode({{2, 2, {{1, 0}, {5, 1}}}}, 4), "length 0"));
  EXPECT_FALSE(decode({{2, uint64_t{1} << 62, {{1, 2}, {5, 1}}}}, 11).ok());
  // A manifest before version 5 has no groups: the same bytes read as runs
  // do not add up.
  EXPECT_FALSE(decode({{2, 3, {{1, 2}, {5, 1}}}, {1, 1, {{-3, 1}}}}, 11, false).ok());
}

TEST(IntRuns, BuilderAndReaderAgreeWithTheWholeSequence) {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 100; ++trial) {
    const size_t n = 1 + rng() % 500;
    std::vector<uint64_t> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = i == 0 || rng() % 8 == 0 ? rng() % 100000 : v[i - 1] + 4096;
    IntRuns::Builder b;
    for (uint64_t x : v) b.Add(x);
    IntRuns built = b.Finish();
    ASSERT_EQ(built.size(), n);
    for (size_t i = 0; i < n; i += 1 + n / 50) ASSERT_EQ(built.At(i), v[i]) << trial << " " << i;
    IntRuns::Reader r(built);
    std::vector<uint64_t> seen;
    for (uint64_t x; r.Next(&x);) seen.push_back(x);
    EXPECT_EQ(seen, v);
    // The builder starts over after Finish.
    b.Add(7);
    EXPECT_EQ(b.Finish().size(), 1u);
  }
}

TEST(IntRuns, RefusesCodingsThatAreNotCanonicalOrDoNotAddUp) {
  auto decode = [](const std::vector<std::pair<int64_t, uint64_t>>& runs, uint64_t n) {
    ByteWriter w;
    w.Var(3);
    w.Var(runs.size());
    for (auto [step, count] : runs) {
      w.SVar(step);
      w.Var(count);
    }
    ByteReader r(w.str(), "runs");
    IntRuns::Decode(r, n, "files", false);
    return r.status();
  };
  EXPECT_OK(decode({{1, 3}, {2, 1}}, 5));
  EXPECT_TRUE(Contains(decode({{1, 3}, {1, 1}}, 5), "not canonical"));
  EXPECT_TRUE(Contains(decode({{1, 0}, {2, 4}}, 5), "length 0"));
  EXPECT_TRUE(Contains(decode({{1, 2}}, 5), "runs give 3 values"));
  EXPECT_FALSE(decode({{1, 9}}, 5).ok());
  // Values wrapping past zero are no values.
  IntRuns down = IntRuns::Of({1, 0});
  ByteWriter w;
  w.Var(0);
  w.Var(1);
  w.SVar(-1);
  w.Var(1);
  ByteReader r(w.str(), "runs");
  IntRuns wraps = IntRuns::Decode(r, 2, "files", false);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(wraps.ForEach([](uint64_t) { return true; }));
  EXPECT_TRUE(down.ForEach([](uint64_t) { return true; }));
  // A reader stops there too, after the values before it.
  IntRuns::Reader reader(wraps), fine(down);
  uint64_t x = 7;
  EXPECT_TRUE(reader.Next(&x));
  EXPECT_EQ(x, 0u);
  EXPECT_FALSE(reader.Next(&x));
  std::vector<uint64_t> seen;
  while (fine.Next(&x)) seen.push_back(x);
  EXPECT_EQ(seen, (std::vector<uint64_t>{1, 0}));
}

// A grid's widths are written again from its cuts, so a version 5 record
// whose widths are grouped other than as the writer groups them would not
// re-encode to its bytes: refused, while the writer's grouping is read.
TEST(IntRuns, GridWidthsMustBeGroupedAsTheWriterGroupsThem) {
  auto record = [](bool writers) {
    ByteWriter w;
    w.U8(static_cast<uint8_t>(DType::kF32));
    w.Var(1);
    w.Var(9);  // shape {9}
    w.U8(1);   // grid
    w.Var(6);  // cells of widths 1, 2, 1, 2, 1, 2
    if (writers) {
      IntRuns::Of({1, 2, 1, 2, 1, 2}).Encode(w, true);
    } else {  // the same runs, each on its own
      w.Var(1);
      w.Var(5);
      for (int i = 0; i < 5; ++i) {
        w.Var(1);
        w.SVar(i % 2 == 0 ? 1 : -1);
        w.Var(1);
      }
    }
    IntRuns::Of(std::vector<uint64_t>(6, 0)).Encode(w, true);  // files
    IntRuns::Of(std::vector<uint64_t>(6, 0)).Encode(w, true);  // first blocks
    return w.Take();
  };
  for (bool writers : {true, false}) {
    const std::string rec = record(writers);
    TensorEntry e{"t", 0, rec.size(), Xxh3(rec)};
    ManifestTensor t;
    uint64_t budget = 100;
    absl::Status s = DecodeTensorRecord(rec, e, nullptr, 1, 5, &budget, "MANIFEST", &t);
    if (writers) {
      EXPECT_OK(s);
      ASSERT_TRUE(t.grid.has_value());
      EXPECT_EQ(t.grid->cuts[0], (std::vector<int64_t>{0, 1, 3, 4, 6, 7, 9}));
    } else {
      EXPECT_TRUE(Contains(s, "not grouped as a writer groups them")) << s;
    }
  }
}

TEST(ChunkGrid, FindsExactlyTheCellsABoxMeets) {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 100; ++trial) {
    ChunkGrid g;
    const int nd = 1 + static_cast<int>(rng() % 3);
    Shape shape;
    for (int d = 0; d < nd; ++d) {
      std::vector<int64_t> cuts{0};
      const int k = 1 + static_cast<int>(rng() % 6);
      for (int i = 0; i < k; ++i) cuts.push_back(cuts.back() + 1 + static_cast<int64_t>(rng() % 5));
      shape.push_back(cuts.back());
      g.cuts.push_back(cuts);
    }
    for (int q = 0; q < 20; ++q) {
      Box query;
      for (int d = 0; d < nd; ++d) {
        const int64_t a = static_cast<int64_t>(rng() % static_cast<uint64_t>(shape[d]));
        const int64_t len = 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(shape[d] - a));
        query.offsets.push_back(a);
        query.sizes.push_back(len);
      }
      std::vector<uint64_t> want, got;
      for (uint64_t c = 0; c < g.NumCells(); ++c) {
        if (!Intersect(g.CellBox(c), query).Empty()) want.push_back(c);
      }
      g.ForEachCellMeeting(query, [&](uint64_t c) { got.push_back(c); });
      ASSERT_EQ(got, want) << query.ToString();
    }
  }
}

// A tensor of `rows` x `cols` split over `parts` files along `dim`,
// torch.chunk style, each part cut into `tiles` column tiles; file p holds
// part p from block `base`.
ManifestTensor SplitTensor(const std::string& name, int64_t rows, int64_t cols, int dim, int64_t parts, int tiles,
                           uint64_t base, uint64_t block_size) {
  ManifestTensor t;
  t.spec = TensorSpec{name, DType::kBF16, {rows, cols}};
  const std::vector<int64_t> b = ChunkBoundaries(dim == 0 ? rows : cols, parts);
  for (int64_t p = 0; p < parts; ++p) {
    if (b[p + 1] == b[p]) continue;
    uint64_t block = base;
    const int64_t r0 = dim == 0 ? b[p] : 0, nr = dim == 0 ? b[p + 1] - b[p] : rows;
    const int64_t c0 = dim == 1 ? b[p] : 0, nc = dim == 1 ? b[p + 1] - b[p] : cols;
    const std::vector<int64_t> tb = ChunkBoundaries(nc, tiles);
    for (int k = 0; k < tiles; ++k) {
      if (tb[k + 1] == tb[k]) continue;
      Box box({r0, c0 + tb[k]}, {nr, tb[k + 1] - tb[k]});
      const uint64_t blocks = BlocksOf(static_cast<uint64_t>(box.Volume()) * 2, block_size);
      t.chunks.push_back(ManifestChunk{static_cast<uint32_t>(p), block, blocks, box});
      block += blocks;
    }
  }
  return t;
}

Manifest GridManifest(int64_t ranks, int tiles) {
  Manifest m = SampleManifest();
  m.files.clear();
  m.tensors.clear();
  m.blobs.clear();
  m.world_size = static_cast<int32_t>(ranks);
  m.mesh = Mesh{{"dp"}, {ranks}};
  for (int64_t r = 0; r < ranks; ++r) {
    ManifestFile f;
    f.name = r == 3 ? "rank-000003.h5" : DataFileName(static_cast<int>(r));
    f.rank = static_cast<int32_t>(r);
    f.size = 1 << 30;
    f.index_offset = 1 << 29;
    f.index_len = 4096;
    f.index_hash = 1000 + static_cast<uint64_t>(r);
    f.block_count = 5000;
    f.block_size = 4096;
    f.save_id = 77;
    m.files.push_back(f);
  }
  m.tensors.push_back(SplitTensor("a.rows", 4099, 64, 0, ranks, 1, 0, 4096));
  m.tensors.push_back(SplitTensor("b.cols", 64, 1000, 1, ranks, tiles, 300, 4096));
  // Not a grid: an L of three boxes.
  ManifestTensor l;
  l.spec = TensorSpec{"c.ell", DType::kBF16, {4, 4}};
  l.chunks.push_back(ManifestChunk{0, 900, 1, Box({0, 0}, {2, 4})});
  l.chunks.push_back(ManifestChunk{1, 900, 1, Box({2, 0}, {2, 2})});
  l.chunks.push_back(ManifestChunk{2, 900, 1, Box({2, 2}, {2, 2})});
  m.tensors.push_back(l);
  m.blobs.push_back(ManifestBlob{"rng", 1, 16, 1, 901, 1});
  return m;
}

TEST(Manifest, GridsRoundTripInAFewBytesWhateverTheRankCount) {
  size_t small_size = 0;
  for (auto [ranks, tiles] : {std::pair<int64_t, int>{16, 1}, {512, 1}, {16, 3}, {512, 3}}) {
    Manifest m = GridManifest(ranks, tiles);
    const size_t rows_chunks = m.tensors[0].chunks.size(), cols_chunks = m.tensors[1].chunks.size();
    std::reverse(m.tensors[0].chunks.begin(), m.tensors[0].chunks.end());  // any order in, row-major out
    DescribeByRules(m);
    ASSERT_TRUE(m.tensors[0].grid.has_value());
    ASSERT_TRUE(m.tensors[1].grid.has_value());
    EXPECT_FALSE(m.tensors[2].grid.has_value());
    EXPECT_EQ(m.tensors[0].grid->NumCells(), rows_chunks);
    EXPECT_EQ(m.tensors[1].grid->NumCells(), cols_chunks);
    const std::string bytes = EncodeManifest(m);
    auto d = DecodeManifest(bytes, "MANIFEST");
    ASSERT_OK(d);
    ASSERT_EQ(d->tensors.size(), 3u);
    for (size_t t = 0; t < 3; ++t) {
      ASSERT_EQ(d->tensors[t].chunks.size(), m.tensors[t].chunks.size());
      for (size_t c = 0; c < m.tensors[t].chunks.size(); ++c) {
        const ManifestChunk& a = m.tensors[t].chunks[c];
        const ManifestChunk& b = d->tensors[t].chunks[c];
        ASSERT_TRUE(a.file == b.file && a.first_block == b.first_block && a.block_count == b.block_count &&
                    a.box == b.box)
            << t << " " << c;
      }
      EXPECT_EQ(d->tensors[t].grid.has_value(), m.tensors[t].grid.has_value());
    }
    EXPECT_EQ(d->files[3].name, "rank-000003.h5");
    EXPECT_EQ(d->files[4].name, DataFileName(4));
    EXPECT_EQ(d->blobs[0].first_block, 901u);
    EXPECT_EQ(EncodeManifest(*d), bytes);
    Manifest v3 = m;
    v3.format_version = 3;
    const size_t v3_tensor_bytes = EncodeManifest(v3).size() - 40 * static_cast<size_t>(ranks);
    // Untiled, the tensors cost the same at 16 and 512 ranks (files are 96
    // bytes each); tiled, a few bytes per cell, still less than listing them.
    const size_t tensor_bytes = bytes.size() - static_cast<size_t>(ranks) * 96 - 14;
    if (tiles == 1 && small_size == 0) {
      small_size = tensor_bytes;
    } else if (tiles == 1) {
      EXPECT_LT(tensor_bytes, small_size + 64) << small_size;
    }
    if (ranks == 512) {
      EXPECT_LT(tensor_bytes * (tiles == 1 ? 20 : 2), v3_tensor_bytes);
    }
  }
}

TEST(Manifest, GridCorruptionAndHostileGridsAreRefused) {
  Manifest m = GridManifest(8, 3);
  DescribeByRules(m);
  const std::string bytes = EncodeManifest(m);
  for (size_t bit = 0; bit < bytes.size() * 8; bit += 5) {
    std::string copy = bytes;
    copy[bit / 8] = static_cast<char>(copy[bit / 8] ^ (1 << (bit % 8)));
    EXPECT_FALSE(DecodeManifest(copy, "MANIFEST").ok()) << "bit " << bit;
  }
  // A grid of a million one-element cells in a few bytes: refused past the
  // chunk limit the reader gives, accepted within it.
  Manifest big = GridManifest(8, 1);
  big.tensors.resize(1);
  big.tensors[0].spec.shape = {1 << 20};
  big.tensors[0].chunks.clear();
  ChunkGrid g;
  std::vector<int64_t> cuts(1 + (1 << 20));
  for (size_t i = 0; i < cuts.size(); ++i) cuts[i] = static_cast<int64_t>(i);
  g.cuts.push_back(cuts);
  g.files = IntRuns::Of(std::vector<uint64_t>(1 << 20, 0));
  std::vector<uint64_t> first(1 << 20);
  for (size_t i = 0; i < first.size(); ++i) first[i] = i % 4000;
  g.first_blocks = IntRuns::Of(first);
  big.tensors[0].grid = g;
  // The chunks the grid stands for (the encoder writes a grid only for them).
  auto fill = [](ManifestTensor& t) {
    t.chunks.resize(t.grid->NumCells());
    for (uint64_t i = 0; i < t.chunks.size(); ++i) t.chunks[i] = GridChunk(t, i, 4096);
  };
  fill(big.tensors[0]);
  const std::string hostile = EncodeManifest(big);
  EXPECT_LT(hostile.size(), 12000u);
  auto d = DecodeManifest(hostile, "MANIFEST", 1000);
  ASSERT_FALSE(d.ok());
  EXPECT_TRUE(Contains(d.status(), "passes the limit of 1000 chunks")) << d.status();
  auto ok = DecodeManifest(hostile, "MANIFEST");
  ASSERT_OK(ok);
  EXPECT_EQ(ok->tensors[0].chunks.size(), size_t{1} << 20);
  // Kept as a grid: the same limit, no chunk objects, the same bytes again,
  // also once the encoder is given the grid alone.
  EXPECT_FALSE(DecodeManifest(hostile, "MANIFEST", 1000, GridChunks::kGridsOnly).ok());
  auto grid_only = DecodeManifest(hostile, "MANIFEST", kMaxManifestChunks, GridChunks::kGridsOnly);
  ASSERT_OK(grid_only);
  EXPECT_TRUE(grid_only->tensors[0].GridOnly());
  EXPECT_EQ(grid_only->tensors[0].ChunkCount(), uint64_t{1} << 20);
  EXPECT_EQ(grid_only->LogicalBytes(), ok->LogicalBytes());
  EXPECT_TRUE(EncodeManifest(*grid_only) == hostile);
  // Blocks past the end of a file are named with the tensor.
  big.tensors[0].grid->first_blocks = IntRuns::Of(std::vector<uint64_t>(1 << 20, 4999));
  big.tensors[0].grid->files = IntRuns::Of(std::vector<uint64_t>(1 << 20, 2));
  std::vector<uint64_t> spill(1 << 20, 4999);
  spill.back() = 5000;
  big.tensors[0].grid->first_blocks = IntRuns::Of(spill);
  fill(big.tensors[0]);
  for (GridChunks mode : {GridChunks::kExpandGrids, GridChunks::kGridsOnly}) {
    auto past = DecodeManifest(EncodeManifest(big), "MANIFEST", kMaxManifestChunks, mode);
    ASSERT_FALSE(past.ok());
    EXPECT_TRUE(Contains(past.status(), "a.rows")) << past.status();
    EXPECT_TRUE(Contains(past.status(), "beyond rank-000002.ckd")) << past.status();
  }
  // Every 5th bit of a grid manifest flipped: refused in both forms.
  for (size_t bit = 0; bit < bytes.size() * 8; bit += 5) {
    std::string copy = bytes;
    copy[bit / 8] = static_cast<char>(copy[bit / 8] ^ (1 << (bit % 8)));
    EXPECT_FALSE(DecodeManifest(copy, "MANIFEST", kMaxManifestChunks, GridChunks::kGridsOnly).ok()) << "bit " << bit;
  }
}

TEST(ManifestPart, ReadsByRangesWhatRestrictManifestCutsFromTheWhole) {
  Manifest m = GridManifest(64, 3);
  m.files[5].name = "custom-5.ckd";
  m.blobs.push_back(ManifestBlob{"cfg", -1, 8, 9, 902, 1});
  DescribeByRules(m);
  const std::string bytes = EncodeManifest(m);
  auto whole = DecodeManifest(bytes, "MANIFEST");
  ASSERT_OK(whole);
  auto grid_only = DecodeManifest(bytes, "MANIFEST", kMaxManifestChunks, GridChunks::kGridsOnly);
  ASSERT_OK(grid_only);
  std::mt19937_64 rng(3);
  std::vector<char> dummy(1);
  std::string blob_out;
  for (int trial = 0; trial < 60; ++trial) {
    State state;
    ManifestWants wants;
    for (const ManifestTensor& t : m.tensors) {
      if (rng() % 4 == 0) continue;
      Box box;
      for (int64_t extent : t.spec.shape) {
        const int64_t a = static_cast<int64_t>(rng() % static_cast<uint64_t>(extent));
        const int64_t len = trial % 7 == 0 ? 0 : 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(extent - a));
        box.offsets.push_back(a);
        box.sizes.push_back(len);
      }
      ASSERT_OK(state.AddShard(t.spec, box, dummy.data()));
      wants.boxes.push_back({t.spec.fqn, box});
    }
    if (trial % 2 == 0) {
      ASSERT_OK(state.AddBlobOut("rng", &blob_out, BlobScope::kRank, 1));
      wants.blobs.push_back({"rng", 1});
    }
    ASSERT_OK(state.AddBlobOut("cfg", &blob_out, BlobScope::kGlobal));
    wants.blobs.push_back({"cfg", -1});
    wants.boxes.push_back({"not.saved", Box({0}, {1})});
    const Manifest want = RestrictManifest(*whole, state, 0);
    // Cut from the grids themselves, the part is the same.
    EXPECT_TRUE(EncodeManifest(RestrictManifest(*grid_only, state, 0)) == EncodeManifest(want)) << trial;
    ManifestPartStats stats;
    auto got = ReadManifestPart(
        [&](uint64_t off, uint64_t len) -> absl::StatusOr<std::string> { return bytes.substr(off, len); }, bytes.size(),
        wants, "MANIFEST", &stats);
    ASSERT_OK(got);
    ASSERT_EQ(got->files.size(), want.files.size()) << trial;
    for (size_t f = 0; f < want.files.size(); ++f) {
      EXPECT_EQ(got->files[f].name, want.files[f].name);
      EXPECT_EQ(got->files[f].index_hash, want.files[f].index_hash);
    }
    ASSERT_EQ(got->tensors.size(), want.tensors.size()) << trial;
    for (size_t t = 0; t < want.tensors.size(); ++t) {
      ASSERT_EQ(got->tensors[t].spec, want.tensors[t].spec);
      ASSERT_EQ(got->tensors[t].chunks.size(), want.tensors[t].chunks.size()) << want.tensors[t].spec.fqn;
      for (size_t c = 0; c < want.tensors[t].chunks.size(); ++c) {
        const ManifestChunk& a = got->tensors[t].chunks[c];
        const ManifestChunk& b = want.tensors[t].chunks[c];
        EXPECT_TRUE(a.file == b.file && a.first_block == b.first_block && a.block_count == b.block_count &&
                    a.box == b.box);
      }
    }
    ASSERT_EQ(got->blobs.size(), want.blobs.size());
    for (size_t b = 0; b < want.blobs.size(); ++b) EXPECT_EQ(got->blobs[b].file, want.blobs[b].file);
    EXPECT_EQ(stats.bytes_read, bytes.size());  // a small manifest: one read of it all
    EXPECT_EQ(stats.reads, 1u);
  }
  // At 4,096 ranks a rank loading a few rows reads the head and directory,
  // two tensor records and a few file records: not the 400 KB of records.
  Manifest big = GridManifest(4096, 1);
  DescribeByRules(big);
  const std::string big_bytes = EncodeManifest(big);
  ManifestWants rows;
  rows.boxes.push_back({"a.rows", Box({100, 0}, {3, 64})});
  rows.boxes.push_back({"b.cols", Box({0, 500}, {64, 1})});
  ManifestPartStats stats;
  auto part = ReadManifestPart(
      [&](uint64_t off, uint64_t len) -> absl::StatusOr<std::string> { return big_bytes.substr(off, len); },
      big_bytes.size(), rows, "MANIFEST", &stats);
  ASSERT_OK(part);
  EXPECT_EQ(part->tensors[0].chunks.size(), 2u);  // rows 100-102: parts of 2 rows
  EXPECT_EQ(part->files.size(), 3u);
  EXPECT_GT(big_bytes.size(), 390000u);
  EXPECT_LT(stats.bytes_read, (64u << 10) + 4096u);
  // A flipped byte in a part the rank reads is caught; versions 1-3 say to read them whole.
  ManifestWants one;
  one.boxes.push_back({"a.rows", Box({0, 0}, {4099, 64})});
  one.boxes.push_back({"c.ell", Box({0, 0}, {1, 1})});  // the last record
  for (size_t at : {size_t{60}, bytes.size() - 3}) {
    std::string bad = bytes;
    bad[at] = static_cast<char>(bad[at] ^ 0x10);
    auto got = ReadManifestPart(
        [&](uint64_t off, uint64_t len) -> absl::StatusOr<std::string> { return bad.substr(off, len); }, bad.size(),
        one, "MANIFEST");
    EXPECT_TRUE(absl::IsDataLoss(got.status())) << at << ": " << got.status();
  }
  Manifest v3 = m;
  v3.format_version = 3;
  const std::string old = EncodeManifest(v3);
  auto got =
      ReadManifestPart([&](uint64_t off, uint64_t len) -> absl::StatusOr<std::string> { return old.substr(off, len); },
                       old.size(), one, "MANIFEST");
  EXPECT_TRUE(absl::IsFailedPrecondition(got.status())) << got.status();
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
