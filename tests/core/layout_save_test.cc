// Saves of laid-out states (State::AddLayout): each rank plans alone, files a
// summary, and the leader builds the manifest from the rules. The committed
// manifest must be the one a save of the same boxes given one by one commits
// (through every rank's chunk list), with plan/'s writers.
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "ckpt/checkpointer.h"
#include "ckpt/communicator.h"
#include "ckpt/plan.h"
#include "core/root.h"
#include "core/rule_commit.h"
#include "format/manifest.h"
#include "format/rank_summary.h"
#include "format/root_files.h"
#include "gtest/gtest.h"
#include "testutil/test_util.h"
#include "util/errors.h"
#include "util/strings.h"

namespace ckpt::testing {
namespace {

constexpr uint64_t kSeed = 11;

TensorLayout Layout(std::string fqn, Shape shape, std::vector<Placement> placements, int owner_dim = -1,
                    int64_t owner_index = 0) {
  TensorLayout l;
  l.spec = TensorSpec{std::move(fqn), DType::kF32, std::move(shape)};
  l.placements = std::move(placements);
  l.owner_dim = owner_dim;
  l.owner_index = owner_index;
  return l;
}

// dp=2, tp=2, pp=2: tensor-parallel weights beside replicated biases and
// norms (equal sizes: ties go by name), stage-owned layers, a ZeRO-style
// band, explicit cuts, a large replicated tensor (column tiles), a
// zero-size tensor.
std::vector<TensorLayout> Model() {
  const Placement R = Placement::Replicate();
  std::vector<TensorLayout> out;
  for (int layer = 0; layer < 2; ++layer) {
    const std::string p = StrCat("layers.", layer, ".");
    out.push_back(Layout(p + "attn.w", {64, 48}, {R, Placement::Shard(0), R}, 2, layer));
    out.push_back(Layout(p + "attn.b", {48}, {R, R, R}, 2, layer));
    out.push_back(Layout(p + "norm", {48}, {R, R, R}, 2, layer));
    out.push_back(Layout(p + "mlp.w", {40, 96}, {R, Placement::Shard(1), R}, 2, layer));
  }
  out.push_back(Layout("embed", {100, 32}, {Placement::Shard(0), Placement::Shard(1), R}));
  Placement cuts = Placement::Shard(0);
  cuts.boundaries = {0, 7, 30};
  out.push_back(Layout("uneven", {30, 5}, {cuts, R, R}));
  out.push_back(Layout("big", {512, 512}, {R, R, R}));
  out.push_back(Layout("empty", {0, 4}, {R, Placement::Shard(1), R}));
  return out;
}

struct RankData {
  std::vector<OwnedShard> shards;
  std::string rng;
  std::string config = "lr=3e-4";
};

// Every rank's boxes of the model, filled from the generator.
std::vector<RankData> Data(const std::vector<TensorLayout>& model, const Mesh& mesh) {
  std::vector<RankData> out(mesh.NumRanks());
  for (int64_t r = 0; r < mesh.NumRanks(); ++r) {
    for (const TensorLayout& l : model) {
      auto box = RankBox(l, mesh, r);
      EXPECT_TRUE(box.ok());
      if (box->has_value()) out[r].shards.push_back(MakeShard(l.spec, **box, kSeed));
    }
    out[r].rng = StrCat("rng-state-of-rank-", r);
  }
  return out;
}

enum class Given { kLayouts, kBoxes };

absl::Status BuildState(Given given, const std::vector<TensorLayout>& model, const Mesh& mesh, int rank, RankData& data,
                        State* st) {
  if (given == Given::kLayouts) {
    CKPT_RETURN_IF_ERROR(st->SetMesh(mesh, rank));
    size_t next = 0;
    for (const TensorLayout& l : model) {
      void* ptr = nullptr;
      if (next < data.shards.size() && data.shards[next].spec.fqn == l.spec.fqn) {
        ptr = data.shards[next++].data.data();
      }
      CKPT_RETURN_IF_ERROR(st->AddLayout(l, ptr));
    }
  } else {
    for (OwnedShard& s : data.shards) CKPT_RETURN_IF_ERROR(st->AddShard(s.spec, s.box, s.data.data()));
  }
  CKPT_RETURN_IF_ERROR(st->AddBlob("rng", data.rng.data(), data.rng.size()));
  if (rank == 0)
    CKPT_RETURN_IF_ERROR(st->AddBlob("config", data.config.data(), data.config.size(), BlobScope::kGlobal));
  return absl::OkStatus();
}

// Every rank saves steps 1 and 2 on its own thread, with a communicator or
// without; returns each rank's outcome.
std::vector<absl::Status> SaveAll(const std::string& root, Given given, const std::vector<TensorLayout>& model,
                                  const Mesh& mesh, bool communicator,
                                  const std::function<void(int, State&)>& tamper = nullptr) {
  const int n = static_cast<int>(mesh.NumRanks());
  std::vector<RankData> data = Data(model, mesh);
  auto comms = CreateLocalCommunicators(n);
  std::vector<absl::Status> results(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      CheckpointerOptions o;
      o.uri = root;
      o.rank = r;
      o.world_size = n;
      o.codec = Codec::kZstd;
      o.mesh = mesh;
      o.engine_options.block_size = 64 << 10;
      o.commit_timeout_s = 60;
      o.collective_timeout_s = 60;
      if (communicator) o.communicator = comms[r];
      auto cp = Checkpointer::Open(o);
      if (!cp.ok()) {
        results[r] = cp.status();
        return;
      }
      State st;
      results[r] = BuildState(given, model, mesh, r, data[r], &st);
      if (tamper) tamper(r, st);
      for (int step = 1; step <= 2 && results[r].ok(); ++step) {
        auto h = (*cp)->Save(step, st);
        results[r] = h.ok() ? h->Wait() : h.status();
      }
    });
  }
  for (auto& t : threads) t.join();
  return results;
}

// A manifest with what differs between two saves of the same bytes (save
// ids, times, the claim, and the index hash: frames are placed in the file
// as their encoding finishes, so the offsets the index lists vary from run
// to run) cleared.
std::string Comparable(Manifest m) {
  m.created_unix_ns = 0;
  m.stall_s = m.write_s = 0;
  m.claim.clear();
  for (ManifestFile& f : m.files) f.save_id = f.index_hash = 0;
  return EncodeManifest(m);
}

Manifest Committed(const std::string& root, int64_t step) {
  auto storage = OpenStorage(root);
  EXPECT_TRUE(storage.ok());
  auto m = ReadManifest(**storage, step);
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? *m : Manifest{};
}

TEST(LayoutSave, CommitsTheManifestASaveOfBoxesCommits) {
  TempDir dir;
  const Mesh mesh = *Mesh::Parse("dp=2,tp=2,pp=2");
  const std::vector<TensorLayout> model = Model();
  for (const absl::Status& s : SaveAll(dir.Join("layouts"), Given::kLayouts, model, mesh, false)) ASSERT_OK(s);
  for (const absl::Status& s : SaveAll(dir.Join("boxes"), Given::kBoxes, model, mesh, true)) ASSERT_OK(s);
  const Manifest by_rules = Committed(dir.Join("layouts"), 2);
  const Manifest by_reports = Committed(dir.Join("boxes"), 2);
  ASSERT_EQ(by_rules.files.size(), 8u);
  EXPECT_TRUE(Comparable(by_rules) == Comparable(by_reports));

  // Every box is written once, by the writer plan/ names.
  auto plan = PlanSave(model, mesh);
  ASSERT_OK(plan);
  std::map<std::string, int64_t> writer;  // fqn + box -> rank
  for (const ChunkAssignment& c : plan->chunks) writer[model[c.tensor].spec.fqn + c.box.ToString()] = c.writer;
  for (const ManifestTensor& t : by_reports.tensors) {
    for (const ManifestChunk& c : t.chunks) {
      // Tiles are cut from one box: find the plan's box holding the chunk.
      int64_t want = -1;
      for (const ChunkAssignment& a : plan->chunks) {
        if (model[a.tensor].spec.fqn == t.spec.fqn && Intersect(a.box, c.box) == c.box) want = a.writer;
      }
      EXPECT_EQ(by_reports.files[c.file].rank, want) << t.spec.fqn << " " << c.box.ToString();
    }
  }
  // Replicated tensors of equal size, one per stage: the bias (first by
  // name) goes to the group's first rank, the norm to the next.
  const ManifestTensor* bias = by_reports.FindTensor("layers.0.attn.b");
  const ManifestTensor* norm = by_reports.FindTensor("layers.0.norm");
  ASSERT_TRUE(bias && norm);
  ASSERT_EQ(bias->chunks.size(), 1u);
  ASSERT_EQ(norm->chunks.size(), 1u);
  EXPECT_NE(bias->chunks[0].file, norm->chunks[0].file);

  // Every rank loads its boxes back from the save by layouts.
  std::vector<RankData> want = Data(model, mesh);
  auto storage = OpenStorage(dir.Join("layouts"));
  ASSERT_OK(storage);
  for (int r = 0; r < 8; ++r) {
    std::vector<OwnedShard> targets;
    for (const OwnedShard& s : want[r].shards) targets.push_back(EmptyShard(s.spec, s.box));
    State t = StateOf(targets);
    std::string rng;
    ASSERT_OK(t.AddBlobOut("rng", &rng));
    ASSERT_OK(LoadCheckpoint(**storage, t, 2, r));
    for (const OwnedShard& s : targets) EXPECT_EQ(Mismatches(s, kSeed), 0) << r << " " << s.spec.fqn;
    EXPECT_EQ(rng, want[r].rng);
  }
}

TEST(LayoutSave, ARankWithOtherLayoutsFailsTheCommitNamingIt) {
  TempDir dir;
  const Mesh mesh = *Mesh::Parse("dp=2,tp=2");
  std::vector<TensorLayout> model = {Layout("w", {16, 8}, {Placement::Replicate(), Placement::Shard(0)}),
                                     Layout("b", {8}, {})};
  auto results = SaveAll(dir.Join("root"), Given::kLayouts, model, mesh, false, [&](int r, State& st) {
    if (r != 3) return;
    // Rank 3 declares "b" as split over dp: a different rule.
    State other;
    ASSERT_OK(other.SetMesh(mesh, 3));
    std::vector<TensorLayout> changed = model;
    changed[1].placements = {Placement::Shard(0)};
    static std::vector<float> buf(64, 1.0f);
    for (const TensorLayout& l : changed) ASSERT_OK(other.AddLayout(l, buf.data()));
    st = std::move(other);
  });
  ASSERT_FALSE(results[0].ok());
  EXPECT_NE(results[0].message().find("rank 3 saved step 1 by other layouts"), std::string::npos) << results[0];
  auto storage = OpenStorage(dir.Join("root"));
  ASSERT_OK(storage);
  EXPECT_FALSE(LatestCommittedStep(**storage).ok());
}

TEST(LayoutSave, LaidOutAndBoxStatesDoNotMix) {
  TempDir dir;
  const Mesh mesh = *Mesh::Parse("tp=2");
  std::vector<TensorLayout> model = {Layout("w", {16, 8}, {Placement::Shard(0)})};
  auto results = SaveAll(dir.Join("root"), Given::kLayouts, model, mesh, false, [&](int r, State& st) {
    if (r != 1) return;
    static std::vector<float> buf(64, 1.0f);
    State boxes;
    ASSERT_OK(boxes.AddShard(model[0].spec, Box({8, 0}, {8, 8}), buf.data()));
    st = std::move(boxes);
  });
  ASSERT_FALSE(results[0].ok());
  EXPECT_NE(results[0].message().find("every rank's state must be laid out"), std::string::npos) << results[0];
}

TEST(LayoutSave, StateChecksItsLayouts) {
  State st;
  const TensorLayout w = Layout("w", {16, 8}, {Placement::Shard(0)});
  float buf[128] = {};
  EXPECT_EQ(st.AddLayout(w, buf).code(), absl::StatusCode::kFailedPrecondition);  // no mesh yet
  EXPECT_FALSE(st.SetMesh(*Mesh::Parse("tp=2"), 2).ok());
  ASSERT_OK(st.SetMesh(*Mesh::Parse("tp=2"), 1));
  ASSERT_OK(st.AddLayout(w, buf));
  ASSERT_EQ(st.shards().size(), 1u);
  EXPECT_EQ(st.shards()[0].box, Box({8, 0}, {8, 8}));
  EXPECT_TRUE(st.LaidOut());
  EXPECT_FALSE(st.AddLayout(w, buf).ok());  // twice
  // Held by another stage: declared, no shard.
  ASSERT_OK(st.AddLayout(Layout("stage1", {4}, {Placement::Replicate()}, 0, 0), nullptr));
  EXPECT_EQ(st.layouts().size(), 2u);
  EXPECT_EQ(st.shards().size(), 1u);
  ASSERT_OK(st.AddShard(TensorSpec{"x", DType::kF32, {2}}, Box({0}, {2}), buf));
  EXPECT_FALSE(st.LaidOut());
}

TEST(RankSummary, RoundTripsAndRefusesDamage) {
  RankSummary s;
  s.rank = 131071;
  s.binding = RuleBinding(100, 0x1234567890abcdefULL, 42);
  s.size = 3u << 30;
  s.index_offset = (3u << 30) - 4096;
  s.index_hash = 0xfeedfacecafebeefULL;
  s.block_count = 3072;
  s.stall_s = 0.25f;
  s.write_s = 3.5f;
  s.bytes_stored = 1u << 30;
  const std::string plain = EncodeRankSummary(s);
  // What the leader receives per rank in a steady state (no blobs).
  EXPECT_LE(plain.size(), 64u);
  s.blobs.push_back(SummaryBlob{"rng", false, 5008});
  const std::string bytes = EncodeRankSummary(s);
  ASSERT_TRUE(LooksLikeRankSummary(bytes));
  auto back = DecodeRankSummary(bytes, "summary");
  ASSERT_OK(back);
  EXPECT_EQ(back->rank, s.rank);
  EXPECT_EQ(back->binding, s.binding);
  EXPECT_EQ(back->size, s.size);
  EXPECT_EQ(back->index_hash, s.index_hash);
  EXPECT_EQ(back->stall_s, s.stall_s);
  ASSERT_EQ(back->blobs.size(), 1u);
  EXPECT_EQ(back->blobs[0].size, 5008u);
  EXPECT_EQ(EncodeRankSummary(*back), bytes);
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string bad = bytes;
    bad[i] = static_cast<char>(bad[i] ^ 0x10);
    EXPECT_FALSE(DecodeRankSummary(bad, "summary").ok()) << i;
  }
  for (size_t n = 0; n < bytes.size(); ++n) EXPECT_FALSE(DecodeRankSummary(bytes.substr(0, n), "summary").ok()) << n;
  EXPECT_NE(RuleBinding(100, 1, 42), RuleBinding(101, 1, 42));
  EXPECT_NE(RuleBinding(100, 1, 42), RuleBinding(100, 2, 42));
  EXPECT_NE(RuleBinding(100, 1, 42), RuleBinding(100, 1, 43));
}

}  // namespace
}  // namespace ckpt::testing
