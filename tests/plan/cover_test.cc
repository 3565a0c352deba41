// Exact-cover checking and the chunk overlap index.
#include "plan/cover.h"

#include <algorithm>
#include <random>
#include <set>

#include "ckpt/mesh.h"
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

// Boundaries of the tiles of `box`, in columns.
std::vector<int64_t> Cuts(const std::vector<Box>& tiles) {
  std::vector<int64_t> out;
  for (const Box& b : tiles) out.push_back(b.offsets.back());
  out.push_back(tiles.back().offsets.back() + tiles.back().sizes.back());
  return out;
}

// Whether a tile boundary lies within `tol` columns of column `b`.
bool HasCutNear(const std::vector<int64_t>& cuts, int64_t b, int64_t tol) {
  for (int64_t c : cuts) {
    if (c >= b - tol && c <= b + tol) return true;
  }
  return false;
}

TEST(ColumnTiles, ExpectedSplitsAreTheMovesUsersMake) {
  EXPECT_EQ(ExpectedColumnSplits(1), (std::vector<int64_t>{2, 3, 4, 6, 8}));
  EXPECT_EQ(ExpectedColumnSplits(8), (std::vector<int64_t>{4, 2, 16, 12, 6}));
  EXPECT_EQ(ExpectedColumnSplits(4), (std::vector<int64_t>{2, 8, 6, 3}));
  EXPECT_EQ(ExpectedColumnSplits(16), (std::vector<int64_t>{8, 4, 2, 32, 24, 12}));
  EXPECT_EQ(ExpectedColumnSplits(3), (std::vector<int64_t>{6}));
}

// A tp=8 shard of a row-parallel weight is cut where tp=16, 12 and 6 cut,
// so a load onto any of them reads exactly its columns.
TEST(ColumnTiles, ColumnShardsAreCutWhereOtherTensorParallelSizesCut) {
  const Shape shape{8464, 8464};
  const std::vector<int64_t> b8 = ChunkBoundaries(8464, 8);
  for (int64_t i = 0; i < 8; ++i) {
    const Box box({0, b8[i]}, {8464, b8[i + 1] - b8[i]});
    const std::vector<Box> tiles = ColumnTiles(box, shape, 2, 8);
    const std::vector<int64_t> cuts = Cuts(tiles);
    for (int64_t k : {16, 12, 6}) {
      for (int64_t b : ChunkBoundaries(8464, k)) {
        if (b > b8[i] && b < b8[i + 1]) {
          EXPECT_TRUE(HasCutNear(cuts, b, 0)) << "tp=" << k << " cut " << b << " in shard " << i;
        }
      }
    }
    for (const Box& t : tiles) EXPECT_EQ(t.sizes[0], 8464);
  }
  // Shard 0 of 8 (columns [0, 1058)): tp=16 cuts at 529, tp=12 at 706.
  EXPECT_EQ(Cuts(ColumnTiles(Box({0, 0}, {8464, 1058}), shape, 2, 8)), (std::vector<int64_t>{0, 529, 706, 1058}));
}

TEST(ColumnTiles, RowShardsSmallBoxesAndOneDimensionAreNotCut) {
  // Cut along rows: a load onto another mesh cuts rows, contiguous already.
  EXPECT_EQ(ColumnTiles(Box({0, 0}, {1058, 8464}), {8464, 8464}, 2, 8).size(), 1u);
  EXPECT_EQ(ColumnTiles(Box({0}, {1 << 24}), {1 << 24}, 4, 8).size(), 1u);       // 1-d
  EXPECT_EQ(ColumnTiles(Box({0, 0}, {100, 100}), {100, 100}, 4, 8).size(), 1u);  // under kMinTileBytes a tile
  EXPECT_EQ(ColumnTiles(Box({0, 0}, {8192, 16384}), {8192, 16384}, 4, 1).size(), 1u);
  // Nested splits (tp x dp on one dimension) leave rows of a few bytes.
  EXPECT_EQ(ColumnTiles(Box({0, 8}, {8464, 8}), {8464, 8464}, 4, 8).size(), 1u);
}

TEST(ColumnTiles, EveryRowBandOfAColumnShardIsCutAlike) {
  // ZeRO's data-parallel split of a tp=8 piece in rows, torch.chunk-style:
  // 126 bands of 67 rows and a last one of 22. The short band is cut where
  // the others are, so the save stays one grid.
  const Shape shape = {8464, 8464};
  const std::vector<int64_t> full = Cuts(ColumnTiles(Box({67, 1058}, {67, 1058}), shape, 4, 8));
  EXPECT_GT(full.size(), 2u);
  EXPECT_EQ(Cuts(ColumnTiles(Box({8442, 1058}, {22, 1058}), shape, 4, 8)), full);
  // A band of two rows would be mostly frame padding: left whole.
  EXPECT_EQ(ColumnTiles(Box({0, 1058}, {2, 1058}), shape, 4, 8).size(), 1u);
  // Columns that hold little over all the tensor's rows are left whole in
  // every band.
  EXPECT_EQ(ColumnTiles(Box({0, 128}, {16, 128}), {32, 1024}, 4, 8).size(), 1u);
}

TEST(ColumnTiles, AWholeTensorIsCutForTheCommonSplitsAsTheBudgetAllows) {
  // 2, 3 and 4 fit in 8 tiles; 6 would add three more cuts (2049 is not
  // 2048), 8 four.
  EXPECT_EQ(Cuts(ColumnTiles(Box({0, 0}, {4096, 4096}), {4096, 4096}, 4, 8)),
            (std::vector<int64_t>{0, 1024, 1366, 2048, 2732, 3072, 4096}));
  EXPECT_EQ(ColumnTiles(Box({0, 0}, {4096, 4096}), {4096, 4096}, 4, 2).size(), 2u);
  // Whole tensors keep 1 KiB rows per tile: 1088 bf16 columns allow halves
  // (1088 bytes), not thirds (726).
  EXPECT_EQ(Cuts(ColumnTiles(Box({0, 0}, {4096, 1088}), {4096, 1088}, 2, 8)), (std::vector<int64_t>{0, 544, 1088}));
  // Cuts of two splits a column apart are both kept: a load onto tp=3 reads
  // [272, 363) and one onto tp=6 [272, 364) without a whole tile more.
  EXPECT_EQ(Cuts(ColumnTiles(Box({0, 272}, {4096, 272}), {4096, 1088}, 2, 8)),
            (std::vector<int64_t>{272, 363, 364, 408, 544}));
}

// Tiles view the parent's memory: each tile's packed bytes are the
// parent's columns of that tile.
TEST(ColumnTiles, TileShardsViewTheParentsMemory) {
  const TensorSpec spec{"w", DType::kF32, {512, 1024}};
  std::vector<float> mem(512 * 1024);
  for (size_t i = 0; i < mem.size(); ++i) mem[i] = static_cast<float>(i);
  Shard whole{spec, Box::Whole(spec.shape), mem.data(), {}};
  std::vector<Shard> tiles = TileShard(whole, 2);
  ASSERT_EQ(tiles.size(), 2u);
  for (size_t i = 0; i < tiles.size(); ++i) {
    EXPECT_EQ(tiles[i].box, Box({0, static_cast<int64_t>(512 * i)}, {512, 512}));
    EXPECT_EQ(tiles[i].strides, (std::vector<int64_t>{1024, 1}));
    EXPECT_EQ(static_cast<const float*>(tiles[i].data)[0], static_cast<float>(512 * i));
    EXPECT_EQ(static_cast<const float*>(tiles[i].data)[3 * 1024 + 5], static_cast<float>(3 * 1024 + 512 * i + 5));
  }
  // Rows that are not contiguous are not cut.
  Shard gapped = whole;
  gapped.box = Box({0, 0}, {512, 512});
  gapped.strides = {1024, 2};
  EXPECT_EQ(TileShard(gapped, 4).size(), 1u);
  EXPECT_EQ(TileShard(whole, 1).size(), 1u);
}

std::vector<int64_t> RowCuts(const std::vector<Box>& slabs) {
  std::vector<int64_t> out;
  for (const Box& b : slabs) out.push_back(b.offsets[0]);
  out.push_back(slabs.back().offsets[0] + slabs.back().sizes[0]);
  return out;
}

// A tp=4 shard of a column-parallel weight (rows cut) is cut into row slabs
// where tp=8, 6 and 3 cut, so a load onto any of them reads exactly its
// rows; every slab keeps all columns.
TEST(RowTiles, RowShardsAreCutWhereOtherTensorParallelSizesCut) {
  const Shape shape{8464, 8464};
  const std::vector<int64_t> b4 = ChunkBoundaries(8464, 4);
  for (int64_t i = 0; i < 4; ++i) {
    const Box box({b4[i], 0}, {b4[i + 1] - b4[i], 8464});
    const std::vector<Box> slabs = RowTiles(box, shape, 2, 8);
    EXPECT_EQ(SaveTiles(box, shape, 2, 8), slabs);
    const std::vector<int64_t> cuts = RowCuts(slabs);
    for (int64_t k : {8, 6, 3}) {
      for (int64_t b : ChunkBoundaries(8464, k)) {
        if (b > b4[i] && b < b4[i + 1]) {
          EXPECT_TRUE(HasCutNear(cuts, b, 0)) << "tp=" << k << " cut " << b << " in shard " << i;
        }
      }
    }
    for (const Box& s : slabs) {
      EXPECT_EQ(s.offsets[1], 0);
      EXPECT_EQ(s.sizes[1], 8464);
    }
  }
  // Shard 0 of 4 (rows [0, 2116)): tp=8 cuts at 1058, tp=6 at 1411.
  EXPECT_EQ(RowCuts(RowTiles(Box({0, 0}, {2116, 8464}), shape, 2, 8)), (std::vector<int64_t>{0, 1058, 1411, 2116}));
  // torch.chunk's parts of 8H + 1 rows into 4 and 8 end a row apart: that
  // row is a slab of its own. Within a budget of two slabs only the first
  // split that fits is kept.
  const Shape vocab{8 * 2048 + 1, 2048};
  EXPECT_EQ(RowCuts(RowTiles(Box({4097, 0}, {4097, 2048}), vocab, 2, 8)),
            (std::vector<int64_t>{4097, 4098, 5462, 6147, 8193, 8194}));
  EXPECT_EQ(RowCuts(RowTiles(Box({0, 0}, {2116, 8464}), shape, 2, 2)), (std::vector<int64_t>{0, 1058, 2116}));
}

TEST(RowTiles, WholeTensorsColumnShardsNestedAndSmallBoxesAreNotCut) {
  const Shape shape{8464, 8464};
  EXPECT_EQ(RowTiles(Box({0, 0}, {8464, 8464}), shape, 2, 8).size(), 1u);  // whole
  EXPECT_EQ(RowTiles(Box({0, 0}, {8464, 1058}), shape, 2, 8).size(), 1u);  // columns cut
  EXPECT_EQ(RowTiles(Box({0, 0}, {1058, 4232}), shape, 2, 8).size(), 1u);  // both cut
  EXPECT_EQ(RowTiles(Box({0}, {1 << 24}), {1 << 26}, 4, 8).size(), 1u);    // 1-d
  EXPECT_EQ(RowTiles(Box({0, 0}, {2116, 8464}), shape, 2, 1).size(), 1u);  // no budget
  // A part of 2 rows of 64 KiB (128 KiB) is under 2 * kMinRowTileBytes;
  // one of 4 such rows is cut.
  EXPECT_EQ(RowTiles(Box({0, 0}, {2, 32768}), {16, 32768}, 2, 8).size(), 1u);
  EXPECT_GT(RowTiles(Box({0, 0}, {4, 32768}), {32, 32768}, 2, 8).size(), 1u);
  // One of 128 parts (a nested split: ZeRO's data-parallel bands of a
  // tensor-parallel shard) is not cut, however large.
  EXPECT_EQ(RowTiles(Box({0, 0}, {64, 8192}), {8192, 8192}, 4, 8).size(), 1u);
  EXPECT_GT(RowTiles(Box({0, 0}, {256, 8192}), {8192, 8192}, 4, 8).size(), 1u);
  // A 3-d box cut on its first dimension alone is cut like a matrix.
  EXPECT_GT(RowTiles(Box({0, 0, 0}, {4, 512, 1024}), {16, 512, 1024}, 2, 8).size(), 1u);
  // Where ColumnTiles cuts, SaveTiles keeps its tiles.
  const Box col({0, 0}, {8464, 1058});
  EXPECT_EQ(SaveTiles(col, shape, 2, 8), ColumnTiles(col, shape, 2, 8));
  EXPECT_GT(SaveTiles(col, shape, 2, 8).size(), 1u);
}

// Slabs view the parent's memory: each slab starts at its first row.
TEST(RowTiles, SlabShardsViewTheParentsRows) {
  const TensorSpec spec{"w", DType::kF32, {4096, 1024}};
  std::vector<float> mem(1024 * 1024);
  for (size_t i = 0; i < mem.size(); ++i) mem[i] = static_cast<float>(i);
  Shard part{spec, Box({1024, 0}, {1024, 1024}), mem.data(), {}};  // rows [1024, 2048): part 1 of 4
  std::vector<Shard> slabs = TileShard(part, 8);
  ASSERT_GT(slabs.size(), 1u);
  int64_t row = 1024;
  for (const Shard& s : slabs) {
    EXPECT_EQ(s.box.offsets[0], row);
    EXPECT_EQ(s.box.sizes[1], 1024);
    EXPECT_EQ(static_cast<const float*>(s.data)[0], static_cast<float>((row - 1024) * 1024));
    row += s.box.sizes[0];
  }
  EXPECT_EQ(row, 2048);
}

}  // namespace
}  // namespace ckpt::testing
