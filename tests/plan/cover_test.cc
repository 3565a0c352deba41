// Exact-cover checking and the chunk overlap index.
#include "plan/cover.h"

#include <random>
#include <set>

#include "plan/block_ranges.h"
#include "plan/tiles.h"
#include "testutil/test_util.h"

namespace ckpt::testing {
namespace {

// Random guillotine partition of `box` into up to `pieces` boxes.
void Partition(const Box& box, int pieces, std::mt19937& rng, std::vector<Box>* out) {
  if (pieces <= 1 || box.Empty()) {
    out->push_back(box);
    return;
  }
  std::vector<int> dims;
  for (int d = 0; d < box.ndim(); ++d) {
    if (box.sizes[d] > 1) dims.push_back(d);
  }
  if (dims.empty()) {
    out->push_back(box);
    return;
  }
  const int d = dims[rng() % dims.size()];
  const int64_t cut = 1 + static_cast<int64_t>(rng() % (box.sizes[d] - 1));
  Box a = box, b = box;
  a.sizes[d] = cut;
  b.offsets[d] += cut;
  b.sizes[d] -= cut;
  const int left = 1 + static_cast<int>(rng() % (pieces - 1));
  Partition(a, left, rng, out);
  Partition(b, pieces - left, rng, out);
}

TEST(ExactCover, GridIsCovered) {
  TensorSpec spec{"w", DType::kF32, {10, 6}};
  std::vector<Box> boxes = {Box({0, 0}, {5, 3}), Box({0, 3}, {5, 3}), Box({5, 0}, {5, 3}), Box({5, 3}, {5, 3})};
  EXPECT_OK(CheckExactCover(spec, boxes));
}

TEST(ExactCover, GapAndOverlapAreLocated) {
  TensorSpec spec{"w", DType::kF32, {10, 6}};
  std::vector<Box> gap = {Box({0, 0}, {5, 6}), Box({6, 0}, {4, 6})};
  absl::Status s = CheckExactCover(spec, gap);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("[5:6, 0:6] are not covered"), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("'w'"), absl::string_view::npos) << s;
  std::vector<Box> overlap = {Box({0, 0}, {6, 6}), Box({5, 0}, {5, 6})};
  s = CheckExactCover(spec, overlap);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("covered twice"), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("[5:6, 0:6]"), absl::string_view::npos) << s;
  std::vector<Box> outside = {Box({0, 0}, {11, 6})};
  EXPECT_FALSE(CheckExactCover(spec, outside).ok());
}

TEST(ExactCover, ScalarsAndEmptyTensors) {
  EXPECT_OK(CheckExactCover(TensorSpec{"s", DType::kI64, {}}, {Box({}, {})}));
  EXPECT_FALSE(CheckExactCover(TensorSpec{"s", DType::kI64, {}}, {}).ok());
  EXPECT_FALSE(CheckExactCover(TensorSpec{"s", DType::kI64, {}}, {Box({}, {}), Box({}, {})}).ok());
  EXPECT_OK(CheckExactCover(TensorSpec{"e", DType::kF32, {0, 4}}, {}));
  EXPECT_OK(CheckExactCover(TensorSpec{"e", DType::kF32, {3}}, {Box({0}, {3}), Box({1}, {0})}));
}

TEST(ExactCover, RandomPartitionsAndDamage) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    const int nd = 1 + static_cast<int>(rng() % 3);
    Shape shape;
    for (int d = 0; d < nd; ++d) shape.push_back(1 + static_cast<int64_t>(rng() % 20));
    TensorSpec spec{"t", DType::kF32, shape};
    std::vector<Box> boxes;
    Partition(Box::Whole(shape), 1 + static_cast<int>(rng() % 12), rng, &boxes);
    ASSERT_OK(CheckExactCover(spec, boxes));
    if (boxes.size() > 1) {
      auto missing = boxes;
      missing.erase(missing.begin() + rng() % missing.size());
      EXPECT_FALSE(CheckExactCover(spec, missing).ok());
      auto doubled = boxes;
      doubled.push_back(boxes[rng() % boxes.size()]);
      EXPECT_FALSE(CheckExactCover(spec, doubled).ok());
    }
  }
}

TEST(ChunkIndex, MatchesBruteForce) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 50; ++trial) {
    const int nd = 1 + static_cast<int>(rng() % 3);
    Shape shape;
    for (int d = 0; d < nd; ++d) shape.push_back(1 + static_cast<int64_t>(rng() % 30));
    std::vector<Box> boxes;
    Partition(Box::Whole(shape), 1 + static_cast<int>(rng() % 20), rng, &boxes);
    ChunkIndex index(boxes);
    for (int q = 0; q < 50; ++q) {
      Box query;
      for (int d = 0; d < nd; ++d) {
        int64_t o = static_cast<int64_t>(rng() % shape[d]);
        int64_t s = static_cast<int64_t>(rng() % (shape[d] - o + 1));
        query.offsets.push_back(o);
        query.sizes.push_back(s);
      }
      std::vector<int64_t> expect;
      for (size_t i = 0; i < boxes.size(); ++i) {
        if (!Intersect(boxes[i], query).Empty()) expect.push_back(static_cast<int64_t>(i));
      }
      EXPECT_EQ(index.Query(query), expect) << query.ToString();
    }
  }
}

TEST(NeededBlocks, MatchesElementByElementEnumeration) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 300; ++trial) {
    const int nd = 1 + static_cast<int>(rng() % 3);
    Box chunk;
    for (int d = 0; d < nd; ++d) {
      chunk.offsets.push_back(static_cast<int64_t>(rng() % 5));
      chunk.sizes.push_back(1 + static_cast<int64_t>(rng() % 12));
    }
    Box inter;
    for (int d = 0; d < nd; ++d) {
      const int64_t o = static_cast<int64_t>(rng() % chunk.sizes[d]);
      const int64_t s = 1 + static_cast<int64_t>(rng() % (chunk.sizes[d] - o));
      inter.offsets.push_back(chunk.offsets[d] + o);
      inter.sizes.push_back(s);
    }
    const uint64_t es = 1u << (rng() % 3);
    const uint64_t bs = es * (1 + rng() % 17);
    std::vector<std::pair<uint64_t, uint64_t>> ranges;
    NeededBlocks(chunk, inter, es, bs, &ranges);
    std::set<uint64_t> got;
    for (auto [a, b] : ranges) {
      for (uint64_t x = a; x <= b; ++x) got.insert(x);
    }
    // Brute force: every element of inter, its byte range in the chunk.
    std::set<uint64_t> want;
    std::vector<int64_t> idx(nd, 0);
    while (true) {
      uint64_t lin = 0;
      for (int d = 0; d < nd; ++d) lin = lin * chunk.sizes[d] + (inter.offsets[d] - chunk.offsets[d] + idx[d]);
      want.insert(lin * es / bs);
      want.insert((lin * es + es - 1) / bs);
      int d = nd - 1;
      for (; d >= 0; --d) {
        if (++idx[d] < inter.sizes[d]) break;
        idx[d] = 0;
      }
      if (d < 0) break;
    }
    ASSERT_EQ(got, want) << chunk.ToString() << " " << inter.ToString() << " es " << es << " bs " << bs;
    for (size_t i = 1; i < ranges.size(); ++i) EXPECT_GT(ranges[i].first, ranges[i - 1].second + 1);
  }
}

TEST(ColumnTiles, SplitsLargeShardsEvenly) {
  auto tiles = ColumnTiles(Box({0, 0}, {8192, 1024}), 2, 4 << 20, 8);
  ASSERT_EQ(tiles.size(), 2u);  // 2 KiB rows: two tiles of 512 columns (1 KiB rows)
  EXPECT_EQ(tiles[1], Box({0, 512}, {8192, 512}));
  EXPECT_EQ(ColumnTiles(Box({0, 0}, {8192, 16384}), 4, 4 << 20, 8).size(), 8u);
  EXPECT_EQ(ColumnTiles(Box({0, 0}, {100, 100}), 4, 4 << 20, 8).size(), 1u);   // small
  EXPECT_EQ(ColumnTiles(Box({0, 0}, {4, 100000}), 4, 1 << 20, 8).size(), 1u);  // < 1 block each
  EXPECT_EQ(ColumnTiles(Box({0, 0}, {8, 100000}), 4, 1 << 20, 8).size(), 2u);
  EXPECT_EQ(ColumnTiles(Box({0}, {1 << 24}), 4, 4 << 20, 8).size(), 1u);  // 1-d
  EXPECT_EQ(ColumnTiles(Box({0, 0}, {8192, 16384}), 4, 4 << 20, 1).size(), 1u);
}

// Tiles view the parent's memory: each tile's packed bytes are the
// parent's columns of that tile.
TEST(ColumnTiles, TileShardsViewTheParentsMemory) {
  const TensorSpec spec{"w", DType::kF32, {512, 1024}};
  std::vector<float> mem(512 * 1024);
  for (size_t i = 0; i < mem.size(); ++i) mem[i] = static_cast<float>(i);
  Shard whole{spec, Box::Whole(spec.shape), mem.data(), {}};
  std::vector<Shard> tiles = TileShard(whole, 64 << 10, 4);
  ASSERT_EQ(tiles.size(), 4u);
  for (size_t i = 0; i < tiles.size(); ++i) {
    EXPECT_EQ(tiles[i].box, Box({0, static_cast<int64_t>(256 * i)}, {512, 256}));
    EXPECT_EQ(tiles[i].strides, (std::vector<int64_t>{1024, 1}));
    EXPECT_EQ(static_cast<const float*>(tiles[i].data)[0], static_cast<float>(256 * i));
    EXPECT_EQ(static_cast<const float*>(tiles[i].data)[3 * 1024 + 5], static_cast<float>(3 * 1024 + 256 * i + 5));
  }
  // Rows that are not contiguous are not cut.
  Shard gapped = whole;
  gapped.box = Box({0, 0}, {512, 512});
  gapped.strides = {1024, 2};
  EXPECT_EQ(TileShard(gapped, 64 << 10, 4).size(), 1u);
  EXPECT_EQ(TileShard(whole, 64 << 10, 1).size(), 1u);
}

}  // namespace
}  // namespace ckpt::testing
