// Data model: dtypes, boxes, meshes, placements, save plans, the generator.
#include <cstring>
#include <map>
#include <set>

#include "ckpt/data_position.h"
#include "ckpt/mesh.h"
#include "ckpt/plan.h"
#include "ckpt/synthetic.h"
#include "layout/box_copy.h"
#include "testutil/test_util.h"
#include "util/aligned_buffer.h"
#include "util/cpu.h"
#include "util/hash.h"
#include "util/status_wire.h"
#include "util/stream_copy.h"

namespace ckpt::testing {
namespace {

TEST(DType, NamesSizesAndAliases) {
  EXPECT_EQ(DTypeSize(DType::kBF16), 2u);
  EXPECT_EQ(DTypeSize(DType::kF8E5M2), 1u);
  EXPECT_EQ(DTypeSize(DType::kI64), 8u);
  EXPECT_EQ(DTypeName(DType::kF8E4M3), "f8e4m3");
  EXPECT_EQ(ParseDType("bfloat16"), DType::kBF16);
  EXPECT_EQ(ParseDType("F32"), DType::kF32);
  EXPECT_EQ(ParseDType("float8_e5m2"), DType::kF8E5M2);
  EXPECT_FALSE(ParseDType("complex64").has_value());
  EXPECT_FALSE(IsValidDType(0));
  EXPECT_FALSE(IsValidDType(200));
  EXPECT_TRUE(IsFloatingPoint(DType::kF16));
  EXPECT_FALSE(IsFloatingPoint(DType::kBool));
}

TEST(Box, VolumeIntersectAndBounds) {
  Box a({0, 0}, {4, 6});
  Box b({2, 3}, {4, 6});
  EXPECT_EQ(a.Volume(), 24);
  EXPECT_EQ(Intersect(a, b), Box({2, 3}, {2, 3}));
  EXPECT_TRUE(Intersect(a, Box({4, 0}, {1, 1})).Empty());
  EXPECT_EQ(Box({}, {}).Volume(), 1);
  EXPECT_EQ(a.ToString(), "[0:4, 0:6]");
  EXPECT_TRUE(BoxWithin(a, {4, 6}));
  EXPECT_FALSE(BoxWithin(b, {4, 6}));
  EXPECT_FALSE(BoxWithin(Box({-1, 0}, {1, 1}), {4, 6}));
  EXPECT_FALSE(BoxWithin(a, {4, 6, 1}));
  EXPECT_FALSE(BoxWithin(Box({0}, {int64_t{1} << 62}), {4}));
}

TEST(State, RejectsBadShards) {
  State s;
  float x[16];
  TensorSpec spec{"t", DType::kF32, {4, 4}};
  EXPECT_OK(s.AddShard(spec, Box({0, 0}, {2, 4}), x));
  EXPECT_FALSE(s.AddShard(spec, Box({1, 0}, {2, 4}), x).ok());  // overlaps
  EXPECT_FALSE(s.AddShard(spec, Box({3, 0}, {2, 4}), x).ok());  // outside
  EXPECT_FALSE(s.AddShard(TensorSpec{"t", DType::kBF16, {4, 4}}, Box({2, 0}, {2, 4}), x).ok());
  EXPECT_FALSE(s.AddShard(spec, Box({2, 0}, {2, 4}), nullptr).ok());
  EXPECT_FALSE(s.AddShard(spec, Box({2, 0}, {2, 4}), x, {1}).ok());
  EXPECT_OK(s.AddShard(spec, Box({2, 0}, {2, 4}), x));
  EXPECT_FALSE(s.AddBlob("b", nullptr, 3).ok());
  EXPECT_OK(s.AddBlob("b", x, 3));
  EXPECT_FALSE(s.AddBlob("b", x, 3).ok());
}

TEST(BoxCopy, GatherAndScatterStrided) {
  // A 3x4 box inside a 5x8 array (row pitch 8).
  std::vector<int32_t> mem(5 * 8);
  for (size_t i = 0; i < mem.size(); ++i) mem[i] = static_cast<int32_t>(i);
  Shard sh{TensorSpec{"t", DType::kI32, {3, 4}}, Box({0, 0}, {3, 4}), mem.data() + 9, {8, 1}};
  std::vector<int32_t> packed(12);
  GatherPacked(sh, 0, 12, reinterpret_cast<std::byte*>(packed.data()));
  EXPECT_EQ(packed[0], 9);
  EXPECT_EQ(packed[4], 17);
  EXPECT_EQ(packed[11], 9 + 2 * 8 + 3);
  std::vector<int32_t> part(5);
  GatherPacked(sh, 3, 5, reinterpret_cast<std::byte*>(part.data()));
  EXPECT_EQ(part[0], 12);
  EXPECT_EQ(part[1], 17);
  std::vector<int32_t> ones(5, -1);
  ScatterPacked(sh, 3, 5, reinterpret_cast<const std::byte*>(ones.data()));
  EXPECT_EQ(mem[12], -1);
  EXPECT_EQ(mem[17], -1);
  EXPECT_EQ(mem[20], -1);
  EXPECT_EQ(mem[21], 21);  // outside the box's row
  EXPECT_EQ(mem[11], 11);
}

// Rows [first, last) of a strided 3-d box: each range visits exactly the
// rows the whole walk visits there, in the same order.
TEST(BoxCopy, RowRangesOfAStridedBoxMatchTheWholeWalk) {
  // A 2x3x4 box inside a 3x5x8 array (pitches 40 and 8), starting at [1][1][2].
  std::vector<int32_t> mem(3 * 5 * 8);
  for (size_t i = 0; i < mem.size(); ++i) mem[i] = static_cast<int32_t>(i);
  Shard sh{TensorSpec{"t", DType::kI32, {2, 3, 4}}, Box({0, 0, 0}, {2, 3, 4}), mem.data() + 40 + 8 + 2, {40, 8, 1}};
  ASSERT_EQ(RowCount(sh), 6);
  std::vector<int32_t> all;
  ForEachRow(sh, [&](const std::byte* row) {
    all.push_back(*reinterpret_cast<const int32_t*>(row));
    return true;
  });
  ASSERT_EQ(all, (std::vector<int32_t>{50, 58, 66, 90, 98, 106}));
  for (int64_t first = 0; first <= 6; ++first) {
    for (int64_t last = first; last <= 6; ++last) {
      std::vector<int32_t> got;
      ForEachRowIn(sh, first, last, [&](const std::byte* row) {
        got.push_back(*reinterpret_cast<const int32_t*>(row));
        return true;
      });
      EXPECT_EQ(got, std::vector<int32_t>(all.begin() + first, all.begin() + last)) << first << ".." << last;
    }
  }
  // A 1-d box is one row.
  Shard one{TensorSpec{"r", DType::kI32, {4}}, Box({0}, {4}), mem.data() + 3, {}};
  EXPECT_EQ(RowCount(one), 1);
  int calls = 0;
  ForEachRowIn(one, 0, 1, [&](const std::byte* row) {
    EXPECT_EQ(*reinterpret_cast<const int32_t*>(row), 3);
    return ++calls > 0;
  });
  EXPECT_EQ(calls, 1);
}

// The replica hash depends on the values only: a strided view and a packed
// copy of the same box hash alike, a changed element does not.
TEST(BoxCopy, HashPackedIgnoresStrides) {
  std::vector<int32_t> mem(5 * 8);
  for (size_t i = 0; i < mem.size(); ++i) mem[i] = static_cast<int32_t>(i * 7);
  const TensorSpec spec{"t", DType::kI32, {3, 4}};
  Shard strided{spec, Box({0, 0}, {3, 4}), mem.data() + 9, {8, 1}};
  std::vector<int32_t> packed(12);
  GatherPacked(strided, 0, 12, reinterpret_cast<std::byte*>(packed.data()));
  Shard dense{spec, Box({0, 0}, {3, 4}), packed.data(), {}};
  EXPECT_EQ(HashPacked(strided), HashPacked(dense));
  // Columns strided too (rows not contiguous): packed row by row.
  std::vector<int32_t> wide(3 * 8);
  for (int r = 0; r < 3; ++r) {
    for (int c = 0; c < 4; ++c) wide[r * 8 + c * 2] = packed[r * 4 + c];
  }
  Shard gapped{spec, Box({0, 0}, {3, 4}), wide.data(), {8, 2}};
  EXPECT_EQ(HashPacked(gapped), HashPacked(dense));
  packed[5] += 1;
  EXPECT_NE(HashPacked(strided), HashPacked(dense));
  // One row hashes as the row's bytes.
  Shard row{TensorSpec{"r", DType::kI32, {4}}, Box({0}, {4}), packed.data(), {}};
  EXPECT_EQ(HashPacked(row), Xxh3Seeded(packed.data(), 16, 0));
}

// A Status crosses a collective or the coordinator's wire with its code.
TEST(StatusWire, CodesAndMessagesSurviveTheTrip) {
  for (int c = 1; c <= 16; ++c) {
    const absl::Status s(static_cast<absl::StatusCode>(c), "step 7: rank-000001.ckd at byte offset 4096");
    auto back = DecodeOutcome(EncodeOutcome(s), "test");
    ASSERT_FALSE(back.ok());
    EXPECT_EQ(back.status(), s);
    ByteWriter w;
    WriteStatus(w, s);
    const std::string bytes = w.Take();
    ByteReader r(bytes, "test");
    EXPECT_EQ(ReadStatus(r), s);
    EXPECT_TRUE(r.ok());
  }
  auto value = DecodeOutcome(EncodeOutcome(std::string("e\0v!")), "test");
  ASSERT_TRUE(value.ok());
  EXPECT_EQ(*value, std::string("e\0v!"));
  EXPECT_EQ(*DecodeOutcome(EncodeOutcome(std::string()), "test"), "");
  for (std::string bad :
       {std::string(), std::string("x"), std::string("e"), std::string("e\x00", 2), std::string("e\x05\xff")}) {
    auto d = DecodeOutcome(bad, "the mask");
    EXPECT_TRUE(absl::IsDataLoss(d.status())) << d.status();
  }
  ByteWriter w;
  w.Var(999);
  w.Str("odd");
  const std::string odd = w.Take();
  ByteReader r(odd, "test");
  EXPECT_TRUE(absl::IsUnknown(ReadStatus(r)));
}

// With every set of CPU features this machine has, down to none (the
// portable paths).
TEST(StreamCopy, MatchesMemcpyAtEverySizeAndAlignment) {
  std::vector<uint8_t> src(3 << 20);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 131 + 7);
  const CpuFeatures machine = Cpu();
  std::vector<CpuFeatures> sets = {machine, CpuFeatures{machine.avx2, false}, CpuFeatures{}};
  for (const CpuFeatures& features : sets) {
    internal::SetCpuForTest(features);
    SCOPED_TRACE(absl::StrCat("avx2 ", features.avx2, " avx512f ", features.avx512f));
    for (size_t n :
         {size_t{0}, size_t{1}, size_t{255}, size_t{256} << 10, (size_t{1} << 20) + 77, (size_t{3} << 20) - 64}) {
      for (size_t dalign : {0, 1, 17, 32}) {
        for (size_t salign : {0, 3}) {
          if (n + std::max(dalign, salign) > src.size()) continue;
          std::vector<uint8_t> dst(n + 64, 0xee);
          StreamCopy(dst.data() + dalign, src.data() + salign, n);
          ASSERT_EQ(std::memcmp(dst.data() + dalign, src.data() + salign, n), 0) << n << " " << dalign << " " << salign;
          if (dalign > 0) {
            EXPECT_EQ(dst[dalign - 1], 0xee);
          }
          EXPECT_EQ(dst[dalign + n], 0xee);
        }
      }
    }
  }
  internal::SetCpuForTest(machine);
}

TEST(StreamAppender, RunsOfAnyLengthLandContiguously) {
  std::vector<uint8_t> src(1 << 20);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 131 + 7);
  // Run lengths that leave every offset within a cache line, short runs
  // that never finish one, and runs of several lines.
  for (const std::vector<size_t>& runs : std::vector<std::vector<size_t>>{{1072, 1072, 1072, 1072, 1072},
                                                                          {1, 2, 3, 5, 7, 11, 13, 63, 64, 65, 127, 129},
                                                                          {64, 128, 4096},
                                                                          {17},
                                                                          {0, 0, 31},
                                                                          {5000, 3, 70000, 61}}) {
    size_t total = 0;
    for (size_t n : runs) total += n;
    auto dst = AlignedBuffer::Allocate(total + 128, true);
    ASSERT_OK(dst);
    std::memset(dst->data(), 0xee, total + 128);
    StreamAppender a;
    a.Reset(dst->data());
    size_t at = 0;
    for (size_t n : runs) {
      a.Append(reinterpret_cast<const std::byte*>(src.data()) + at * 3 % 1000, n);
      at += n;
    }
    a.Finish();
    StreamFence();
    EXPECT_EQ(a.size(), total);
    size_t off = 0;
    at = 0;
    for (size_t n : runs) {
      ASSERT_EQ(std::memcmp(dst->data() + off, src.data() + at * 3 % 1000, n), 0) << "run at " << off;
      off += n;
      at += n;
    }
    EXPECT_EQ(static_cast<uint8_t>(dst->data()[total]), 0xee);  // nothing past the end
  }
}

TEST(Mesh, ParseAndCoordinates) {
  auto m = Mesh::Parse("dp=2, tp=3,pp=2");
  ASSERT_OK(m);
  EXPECT_EQ(m->NumRanks(), 12);
  EXPECT_EQ(m->ToString(), "dp=2,tp=3,pp=2");
  EXPECT_EQ(m->SizeOf("tp"), 3);
  EXPECT_EQ(m->SizeOf("ep"), 1);
  for (int64_t r = 0; r < 12; ++r) EXPECT_EQ(m->RankOf(m->Coords(r)), r);
  EXPECT_EQ(m->Coords(5), (std::vector<int64_t>{0, 2, 1}));
  EXPECT_FALSE(Mesh::Parse("").ok());
  EXPECT_FALSE(Mesh::Parse("dp=0").ok());
  EXPECT_FALSE(Mesh::Parse("dp=2,dp=2").ok());
  EXPECT_FALSE(Mesh::Parse("dp").ok());
  EXPECT_FALSE(Mesh::Parse("dp=x").ok());
}

TEST(Placement, ChunkBoundariesAreTorchChunk) {
  EXPECT_EQ(ChunkBoundaries(10, 4), (std::vector<int64_t>{0, 3, 6, 9, 10}));
  EXPECT_EQ(ChunkBoundaries(4, 3), (std::vector<int64_t>{0, 2, 4, 4}));
  EXPECT_EQ(ChunkBoundaries(0, 2), (std::vector<int64_t>{0, 0, 0}));
  EXPECT_EQ(ChunkBoundaries(7, 1), (std::vector<int64_t>{0, 7}));
}

TEST(Placement, RankBoxes) {
  auto mesh = *Mesh::Parse("dp=2,tp=3,pp=2");
  TensorLayout t;
  t.spec = TensorSpec{"w", DType::kF32, {10, 7}};
  t.placements = {Placement::Replicate(), Placement::Shard(0)};
  // Replicated over dp, split over tp; pp not listed: replicated.
  auto b = RankBox(t, mesh, mesh.RankOf({1, 2, 1}));
  ASSERT_OK(b);
  ASSERT_TRUE(b->has_value());
  EXPECT_EQ(**b, Box({8, 0}, {2, 7}));
  // Pipeline ownership.
  t.owner_dim = 2;
  t.owner_index = 0;
  auto none = RankBox(t, mesh, mesh.RankOf({0, 0, 1}));
  ASSERT_OK(none);
  EXPECT_FALSE(none->has_value());
  // Two mesh dims on one tensor dim: tp first, then dp within.
  TensorLayout z;
  z.spec = TensorSpec{"m", DType::kF32, {12, 2}};
  z.placements = {Placement::Shard(0), Placement::Shard(0)};
  z.split_order = {1, 0};
  auto zb = RankBox(z, mesh, mesh.RankOf({1, 1, 0}));
  ASSERT_OK(zb);
  EXPECT_EQ(**zb, Box({6, 0}, {2, 2}));  // tp part [4,8), dp half [6,8)
  // Explicit boundaries must be consistent.
  TensorLayout e;
  e.spec = TensorSpec{"e", DType::kF32, {10}};
  e.placements = {Placement::Replicate(), Placement{Placement::Kind::kShard, 0, {0, 1, 9, 10}}};
  auto eb = RankBox(e, mesh, mesh.RankOf({0, 1, 0}));
  ASSERT_OK(eb);
  EXPECT_EQ(**eb, Box({1}, {8}));
  e.placements[1].boundaries = {0, 5, 4, 10};
  EXPECT_FALSE(RankBox(e, mesh, 0).ok());
  TensorLayout bad;
  bad.spec = TensorSpec{"b", DType::kF32, {4}};
  bad.placements = {Placement::Shard(1)};
  EXPECT_FALSE(RankBox(bad, mesh, 0).ok());
}

TEST(SavePlan, EachBoxOnceAndReplicasBalanced) {
  auto mesh = *Mesh::Parse("dp=4,tp=2");
  std::vector<TensorLayout> layouts;
  for (int i = 0; i < 8; ++i) {
    TensorLayout t;
    t.spec = TensorSpec{"t" + std::to_string(i), DType::kF32, {64, 64}};
    t.placements = {Placement::Replicate(), Placement::Shard(0)};
    layouts.push_back(t);
  }
  auto plan = PlanSave(layouts, mesh);
  ASSERT_OK(plan);
  EXPECT_EQ(plan->chunks.size(), 16u);                  // 8 tensors x 2 tp parts
  std::set<std::pair<int, std::vector<int64_t>>> seen;  // tensor, offsets
  for (const ChunkAssignment& c : plan->chunks) {
    EXPECT_EQ(c.replicas, 4);
    EXPECT_TRUE(seen.insert({c.tensor, std::vector<int64_t>(c.box.offsets.begin(), c.box.offsets.end())}).second);
    // The writer holds the box.
    auto held = RankBox(layouts[c.tensor], mesh, c.writer);
    ASSERT_OK(held);
    EXPECT_EQ(**held, c.box);
  }
  // 16 equal chunks over 8 ranks: two each, not all on dp rank 0.
  for (int64_t r = 0; r < 8; ++r) {
    EXPECT_EQ(plan->by_rank[r].size(), 2u) << "rank " << r;
  }
}

// Each rank, planning alone from the layouts, writes exactly what the whole
// mesh's plan gives it: the replica-group rule needs nothing from the
// other ranks.
TEST(SavePlan, EachRankAloneWritesWhatTheWholePlanGivesIt) {
  struct Case {
    const char* mesh;
    bool zero;
    int experts;
  };
  for (const Case& c : {Case{"dp=4,tp=2,pp=2", false, 0}, Case{"dp=4,tp=2,pp=2", true, 0}, Case{"dp=3,tp=4", true, 0},
                        Case{"ep=2,dp=3,tp=2", false, 4}, Case{"pp=5", false, 0}}) {
    const Mesh mesh = *Mesh::Parse(c.mesh);
    SyntheticOptions o;
    o.params = 3000000;
    o.layers = 3;
    o.adam = true;
    o.zero = c.zero;
    o.experts = c.experts;
    auto model = BuildSyntheticModel(o, mesh);
    ASSERT_OK(model);
    auto plan = PlanSave(model->tensors, mesh);
    ASSERT_OK(plan);
    int64_t replicated = 0;
    for (int64_t r = 0; r < mesh.NumRanks(); ++r) {
      std::set<std::pair<int32_t, std::string>> whole, alone;
      for (int64_t ci : plan->by_rank[r]) {
        whole.insert({plan->chunks[ci].tensor, plan->chunks[ci].box.ToString()});
      }
      auto writes = PlanRankWrites(model->tensors, mesh, r);
      ASSERT_OK(writes);
      for (const RankWrite& w : *writes) {
        // Every box the rank holds is listed, written or not.
        auto held = RankBox(model->tensors[w.tensor], mesh, r);
        ASSERT_OK(held);
        ASSERT_TRUE(held->has_value());
        EXPECT_EQ(**held, w.box);
        if (w.writes) alone.insert({w.tensor, w.box.ToString()});
        replicated += w.writes ? 0 : 1;
      }
      EXPECT_EQ(alone, whole) << c.mesh << " rank " << r;
    }
    EXPECT_GT(replicated, 0) << c.mesh;
  }
  EXPECT_FALSE(PlanRankWrites({}, *Mesh::Parse("dp=2"), 2).ok());
}

TEST(Synthetic, DeterministicAndSensitive) {
  TensorSpec spec{"layers.0.w", DType::kBF16, {33, 17}};
  auto a = MakeShard(spec, Box::Whole(spec.shape), 5);
  auto b = MakeShard(spec, Box::Whole(spec.shape), 5);
  EXPECT_EQ(a.data, b.data);
  EXPECT_EQ(Mismatches(a, 5), 0);
  EXPECT_GT(Mismatches(a, 6), 500);  // another seed differs almost everywhere
  // A sub-box generates the same values as the whole at the same indices.
  auto part = MakeShard(spec, Box({10, 3}, {5, 4}), 5);
  EXPECT_EQ(Mismatches(part, 5), 0);
  const uint16_t* whole = reinterpret_cast<const uint16_t*>(a.data.data());
  const uint16_t* sub = reinterpret_cast<const uint16_t*>(part.data.data());
  EXPECT_EQ(sub[0], whole[10 * 17 + 3]);
  a.data[100] ^= std::byte{1};
  int64_t first = -2;
  EXPECT_EQ(CheckSynthetic(spec, a.box, 5, a.data.data(), &first), 1);
  EXPECT_EQ(first, 50);
}

TEST(Synthetic, FloatConversions) {
  EXPECT_EQ(FloatToBF16(1.0f), 0x3f80);
  EXPECT_EQ(FloatToBF16(-2.0f), 0xc000);
  EXPECT_EQ(FloatToF16(1.0f), 0x3c00);
  EXPECT_EQ(FloatToF16(65504.0f), 0x7bff);
  EXPECT_EQ(FloatToF16(1e6f), 0x7c00);                    // overflow to inf
  EXPECT_EQ(FloatToF16(5.960464477539063e-08f), 0x0001);  // smallest subnormal
  EXPECT_EQ(FloatToF8E4M3(448.0f), 0x7e);
  EXPECT_EQ(FloatToF8E4M3(1e6f), 0x7e);  // saturates
  EXPECT_EQ(FloatToF8E4M3(1.0f), 0x38);
  EXPECT_EQ(FloatToF8E5M2(57344.0f), 0x7b);
  EXPECT_EQ(FloatToF8E5M2(1.0f), 0x3c);
  for (float f : {0.5f, -1.25f, 3.0f, 0.0078125f}) {
    EXPECT_EQ(F16ToFloat(FloatToF16(f)), f);
    EXPECT_EQ(BF16ToFloat(FloatToBF16(f)), f);
    EXPECT_EQ(F8E4M3ToFloat(FloatToF8E4M3(f)), f);
  }
  // Round to nearest even: 1 + 2^-8 lies halfway between two bf16 values.
  EXPECT_EQ(FloatToBF16(1.00390625f), 0x3f80);
  EXPECT_EQ(FloatToBF16(1.01171875f), 0x3f82);
}

TEST(Synthetic, ModelSizeAndLayout) {
  auto mesh = *Mesh::Parse("dp=2,tp=2,pp=2");
  SyntheticOptions o;
  o.params = 10000000;
  o.adam = true;
  o.zero = true;
  auto m = BuildSyntheticModel(o, mesh);
  ASSERT_OK(m);
  EXPECT_GT(m->params, o.params * 0.8);
  EXPECT_LT(m->params, o.params * 1.2);
  std::map<std::string, const TensorLayout*> by_name;
  for (const auto& t : m->tensors) by_name[t.spec.fqn] = &t;
  ASSERT_TRUE(by_name.count("optimizer.step"));
  ASSERT_TRUE(by_name.count("lm_head.weight"));
  EXPECT_EQ(by_name["lm_head.weight"]->owner_index, 1);  // last stage
  // Every rank's boxes of every tensor tile each tensor exactly (dp replicas
  // aside): check total volume over a dp slice.
  auto plan = PlanSave(m->tensors, mesh);
  ASSERT_OK(plan);
  std::map<int, int64_t> volume;
  for (const auto& c : plan->chunks) volume[c.tensor] += c.box.Volume();
  for (size_t t = 0; t < m->tensors.size(); ++t) {
    EXPECT_EQ(volume[t], m->tensors[t].spec.NumElements()) << m->tensors[t].spec.fqn;
  }
  EXPECT_FALSE(BuildSyntheticModel(SyntheticOptions{10, DType::kBF16}, mesh).ok());
}

// A data position's epochs are permutations, the same at any number of
// ranks: a run resized mid-epoch (4, 3, 3, 2, 5 ranks) consumes the order
// of one that never was; a restored record continues it; every epoch
// covers each index once; a record of another dataset is refused.
TEST(DataPosition, EpochsArePermutationsConsumedTheSameAtAnySize) {
  for (int64_t size : {1, 2, 7, 1000, 4097}) {
    DataPosition p(size, 3, 11);
    std::set<int64_t> seen;
    for (int64_t i = 0; i < size; ++i) seen.insert(p.IndexAt(0, i));
    EXPECT_EQ(static_cast<int64_t>(seen.size()), size);
    EXPECT_EQ(*seen.begin(), 0);
    EXPECT_EQ(*seen.rbegin(), size - 1);
  }
  DataPosition a(1003, 4, 1);
  std::vector<int64_t> consumed;
  for (int world : {4, 3, 3, 2, 5}) {
    for (int step = 0; step < 3; ++step) {
      for (int r = 0; r < world; ++r) {
        for (int64_t i : a.Batch(r, world)) consumed.push_back(i);
      }
      a.Advance(world);
    }
  }
  EXPECT_EQ(consumed, DataPosition(1003, 4, 1).Slice(0, static_cast<int64_t>(consumed.size())));
  DataPosition b(1003, 4, 1);
  ASSERT_OK(b.Restore(a.Encode()));
  EXPECT_EQ(b.consumed(), a.consumed());
  std::set<int64_t> epoch(consumed.begin(), consumed.end());
  while (b.epoch() == 0) {
    for (int r = 0; r < 3; ++r) {
      for (int64_t i : b.Batch(r, 3)) EXPECT_TRUE(epoch.insert(i).second) << i << " twice";
    }
    b.Advance(3);
  }
  EXPECT_EQ(epoch.size(), 1003u);
  EXPECT_NE(b.Slice(0, 20), DataPosition(1003, 4, 1).Slice(0, 20));  // a new order in epoch 1
  EXPECT_EQ(DataPosition(10, 2, 0, false).Slice(0, 10), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_TRUE(absl::IsInvalidArgument(DataPosition(1004, 4, 1).Restore(a.Encode())));
  EXPECT_TRUE(
      absl::IsDataLoss(b.Restore("ckpt-data-position 1 size 1003 batch 4 seed 1 shuffle 1 epoch 0 consumed 1003")));
  EXPECT_TRUE(absl::IsDataLoss(b.Restore("garbage")));
}

}  // namespace
}  // namespace ckpt::testing
