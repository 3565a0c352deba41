// What a rank's save hands the engine and files in its report, without I/O.
#include "core/save_pieces.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "testutil/test_util.h"

namespace ckpt::testing {
namespace {

struct Fixture {
  std::vector<float> small = std::vector<float>(4 * 8, 1.0f);
  std::vector<float> wide = std::vector<float>(64 * 4096, 2.0f);
  std::vector<float> replica = std::vector<float>(16, 3.0f);
  std::string rank_rng = "rng-of-rank-3";
  std::string global = "global-blob";
  std::string target;
  State state;
  Fixture() {
    const TensorSpec s{"a.small", DType::kF32, {8, 8}};
    const TensorSpec w{"b.wide", DType::kF32, {64, 4096}};
    const TensorSpec r{"c.replica", DType::kF32, {16}};
    const TensorSpec zero{"d.zero", DType::kF32, {0, 8}};
    const TensorSpec elsewhere{"e.elsewhere", DType::kF32, {8}};
    EXPECT_OK(state.AddShard(s, Box({4, 0}, {4, 8}), small.data()));
    EXPECT_OK(state.AddShard(w, Box::Whole(w.shape), wide.data()));
    EXPECT_OK(state.AddShard(r, Box::Whole(r.shape), replica.data()));
    EXPECT_OK(state.AddShard(zero, Box({0, 0}, {0, 8}), nullptr));
    EXPECT_OK(state.AddShard(elsewhere, Box({0}, {0}), nullptr));
    EXPECT_OK(state.AddBlob("rng", rank_rng.data(), rank_rng.size(), BlobScope::kRank));
    EXPECT_OK(state.AddBlob("config", global.data(), global.size(), BlobScope::kGlobal));
    EXPECT_OK(state.AddBlobOut("loaded_only", &target));
  }
};

TEST(SavePieces, TilesWideShardsSkipsOtherReplicasAndLoadTargets) {
  Fixture f;
  // The replica of c.replica is written by another rank.
  const std::vector<bool> writes = {true, true, false, true, true};
  SavePieces p = BuildSavePieces(f.state, writes, /*max_column_tiles=*/2, /*rank=*/3);
  // a.small whole, b.wide as two column tiles of 2048 columns, then two blobs.
  ASSERT_EQ(p.tiles.size(), 3u);
  ASSERT_EQ(p.pieces.size(), 5u);
  EXPECT_EQ(p.tiles[0].box, Box({4, 0}, {4, 8}));
  EXPECT_EQ(p.parents[0], nullptr);
  for (int t = 0; t < 2; ++t) {
    EXPECT_EQ(p.tiles[1 + t].box, Box({0, 2048 * t}, {64, 2048})) << t;
    EXPECT_EQ(p.parents[1 + t], &f.state.shards()[1]) << t;
    EXPECT_EQ(p.pieces[1 + t].parent, &f.state.shards()[1]);
    EXPECT_EQ(p.pieces[1 + t].bytes, 64u * 2048 * 4);
  }
  EXPECT_EQ(p.pieces[0].bytes, 4u * 8 * 4);
  EXPECT_EQ(p.pieces[0].shard, &p.tiles[0]);
  EXPECT_EQ(p.pieces[3].blob_name, "rng");
  EXPECT_EQ(p.pieces[3].blob_rank, 3);
  EXPECT_EQ(p.pieces[3].bytes, f.rank_rng.size());
  EXPECT_EQ(p.pieces[4].blob_name, "config");
  EXPECT_EQ(p.pieces[4].blob_rank, -1);
  ASSERT_EQ(p.blobs.size(), 2u);

  // Without tiles (an HDF5 container), the wide shard is one piece.
  SavePieces untiled = BuildSavePieces(f.state, writes, 1, 3);
  EXPECT_EQ(untiled.tiles.size(), 2u);
  EXPECT_EQ(untiled.parents[1], nullptr);
}

TEST(SavePieces, TheReportNamesEveryChunkAndBlobWithItsBlocks) {
  Fixture f;
  const std::vector<bool> writes = {true, true, false, true, true};
  SavePieces p = BuildSavePieces(f.state, writes, 2, 3);
  uint64_t next = 0;
  for (SavePiece& piece : p.pieces) {  // as the engine numbers them
    piece.first_block = next;
    piece.block_count = piece.bytes > 4096 ? 4 : 1;
    next += piece.block_count;
  }
  Manifest report;
  FillReport(p, f.state, 3, &report);
  // Sorted by name; the zero-size tensor is recorded, the tensor this rank
  // holds nothing of is not, nor is the replica another rank writes.
  ASSERT_EQ(report.tensors.size(), 3u);
  EXPECT_EQ(report.tensors[0].spec.fqn, "a.small");
  EXPECT_EQ(report.tensors[1].spec.fqn, "b.wide");
  EXPECT_EQ(report.tensors[2].spec.fqn, "d.zero");
  ASSERT_EQ(report.tensors[0].chunks.size(), 1u);
  EXPECT_EQ(report.tensors[0].chunks[0].first_block, 0u);
  EXPECT_EQ(report.tensors[0].chunks[0].box, Box({4, 0}, {4, 8}));
  ASSERT_EQ(report.tensors[1].chunks.size(), 2u);
  for (int t = 0; t < 2; ++t) {
    EXPECT_EQ(report.tensors[1].chunks[t].first_block, 1u + 4u * t);
    EXPECT_EQ(report.tensors[1].chunks[t].block_count, 4u);
    EXPECT_EQ(report.tensors[1].chunks[t].box, Box({0, 2048 * t}, {64, 2048}));
  }
  EXPECT_TRUE(report.tensors[2].chunks.empty());
  ASSERT_EQ(report.blobs.size(), 2u);
  EXPECT_EQ(report.blobs[0].name, "rng");
  EXPECT_EQ(report.blobs[0].rank, 3);
  EXPECT_EQ(report.blobs[0].first_block, 9u);
  EXPECT_EQ(report.blobs[0].size, f.rank_rng.size());
  EXPECT_EQ(report.blobs[1].name, "config");
  EXPECT_EQ(report.blobs[1].rank, -1);
  EXPECT_EQ(report.blobs[1].first_block, 10u);
}

TEST(SavePieces, TheDataFileEntryDescribesWhatTheJobWrote) {
  SaveJob j;
  j.rank = 12;
  j.data_path = "step-0000000007/rank-000012.ckd";
  j.save_id = 0x5eed;
  j.file_size = 1 << 20;
  j.index_offset = 900000;
  j.index_len = 4096;
  j.index_hash = 77;
  j.index.resize(3);
  j.block_size = 4 << 20;
  ManifestFile f = DataFileEntry(j);
  EXPECT_EQ(f.name, "rank-000012.ckd");
  EXPECT_EQ(f.rank, 12);
  EXPECT_EQ(f.size, 1u << 20);
  EXPECT_EQ(f.index_offset, 900000u);
  EXPECT_EQ(f.index_len, 4096u);
  EXPECT_EQ(f.index_hash, 77u);
  EXPECT_EQ(f.block_count, 3u);
  EXPECT_EQ(f.block_size, 4u << 20);
  EXPECT_EQ(f.save_id, 0x5eedu);
  j.data_path = "step-0000000007/rank-000012.h5";
  j.container_hash = 99;
  f = DataFileEntry(j);
  EXPECT_EQ(f.name, "rank-000012.h5");
  EXPECT_EQ(f.container_hash, 99u);
}

TEST(SavePieces, ReplicaHashesFollowTheValuesAndSayWhoWrote) {
  Fixture f;
  const std::vector<bool> writes = {true, true, false, true, true};
  std::vector<ReplicaHash> h = HashReplicas(f.state, writes);
  ASSERT_EQ(h.size(), 3u);  // the empty boxes have nothing to compare
  EXPECT_EQ(h[0].key, "a.small[4:8, 0:8]");
  EXPECT_TRUE(h[1].written);
  EXPECT_FALSE(h[2].written);
  const uint64_t before = h[2].hash;
  f.replica[7] = 3.5f;
  EXPECT_NE(HashReplicas(f.state, writes)[2].hash, before);
  f.replica[7] = 3.0f;
  EXPECT_EQ(HashReplicas(f.state, writes)[2].hash, before);
}

}  // namespace
}  // namespace ckpt::testing
