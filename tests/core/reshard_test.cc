// Resharding matrix: states saved on one mesh restore exactly onto others,
// and a state re-saved from the new mesh restores back onto the old one.
#include <filesystem>
#include <map>
#include <thread>

#include "ckpt/plan.h"
#include "ckpt/verify.h"
#include "common/synth_job.h"
#include "core/root.h"
#include "format/root_files.h"
#include "testutil/test_util.h"

namespace ckpt::testing {
namespace {

struct SaveCase {
  std::string name;
  std::string mesh;
  bool adam = false;
  bool zero = false;
  int experts = 0;
};

const SaveCase kSaves[] = {
    {"dp2tp2pp2_adam_zero", "dp=2,tp=2,pp=2", true, true, 0},
    {"dp4_adam", "dp=4", true, false, 0},
    {"tp4pp2", "tp=4,pp=2", false, false, 0},
    {"ep4_moe", "ep=4", true, false, 8},
};
const char* kLoads[] = {"dp=1,tp=1", "dp=3", "tp=3", "pp=4", "dp=2,tp=2,pp=2"};

void SaveSynthetic(const std::string& root, const SaveCase& c) {
  tools::SynthJobOptions o;
  o.uri = root;
  o.mesh = *Mesh::Parse(c.mesh);
  o.model.params = 200000;
  o.model.layers = 4;
  o.model.adam = c.adam;
  o.model.zero = c.zero;
  o.model.experts = c.experts;
  o.codec = Codec::kZstd;
  o.engine.block_size = 64 << 10;
  o.engine.staging_bytes = 4 << 20;
  auto job = tools::SyntheticJob::Create(o);
  ASSERT_OK(job);
  ASSERT_OK((*job)->SaveAsync(1, 7));
  ASSERT_OK((*job)->Finish());
}

// Loads every rank of `mesh` from `from`, then saves what was loaded (each
// box once, by the plan's writer) to `to`: the new mesh's own checkpoint.
void ResaveOnto(const std::string& from, const std::string& to, const Mesh& mesh) {
  auto src = OpenStorage(from);
  ASSERT_OK(src);
  auto manifest = ReadManifest(**src, 1);
  ASSERT_OK(manifest);
  uint64_t seed = 0;
  auto opts = tools::SyntheticOptionsOf(manifest->metadata, 1, &seed);
  ASSERT_OK(opts);
  auto model = BuildSyntheticModel(*opts, mesh);
  ASSERT_OK(model);
  auto plan = PlanSave(model->tensors, mesh);
  ASSERT_OK(plan);
  SaveEngineOptions eo;
  eo.block_size = 64 << 10;
  eo.staging_bytes = 4 << 20;
  auto engine = CreateSaveEngine(eo);
  ASSERT_OK(engine);
  const int world = static_cast<int>(mesh.NumRanks());
  std::vector<std::unique_ptr<Checkpointer>> ranks;
  for (int r = 0; r < world; ++r) {
    CheckpointerOptions o;
    o.uri = to;
    o.rank = r;
    o.world_size = world;
    o.engine = *engine;
    o.mesh = mesh;
    auto cp = Checkpointer::Open(o);
    ASSERT_OK(cp);
    ranks.push_back(std::move(cp).value());
  }
  SaveOptions so;
  so.metadata = manifest->metadata;
  so.metadata["synth.mesh"] = mesh.ToString();
  std::vector<SaveHandle> handles;
  for (int r = 0; r < world; ++r) {
    // Load this rank's boxes.
    std::vector<OwnedShard> held;
    std::map<std::pair<int32_t, std::string>, size_t> index;
    for (size_t t = 0; t < model->tensors.size(); ++t) {
      auto box = RankBox(model->tensors[t], mesh, r);
      ASSERT_OK(box);
      if (!box->has_value() || (*box)->Empty()) continue;
      index[{static_cast<int32_t>(t), (*box)->ToString()}] = held.size();
      held.push_back(EmptyShard(model->tensors[t].spec, **box));
    }
    State loaded = StateOf(held);
    ASSERT_OK(LoadCheckpoint(**src, loaded, 1, r));
    // Save the boxes this rank writes.
    State out;
    for (int64_t ci : plan->by_rank[r]) {
      const ChunkAssignment& c = plan->chunks[ci];
      const OwnedShard& s = held[index.at({c.tensor, c.box.ToString()})];
      ASSERT_OK(out.AddShard(s.spec, s.box, const_cast<std::byte*>(s.data.data())));
    }
    auto h = ranks[r]->Save(1, out, so);
    ASSERT_OK(h);
    handles.push_back(*h);
  }
  for (auto& h : handles) ASSERT_OK(h.Wait());
}

class ReshardTest : public ::testing::TestWithParam<SaveCase> {};

TEST_P(ReshardTest, RestoresOntoEveryMeshAndBack) {
  const SaveCase& c = GetParam();
  TempDir dir;
  const std::string root = dir.Join("orig");
  SaveSynthetic(root, c);
  auto storage = OpenStorage(root);
  ASSERT_OK(storage);
  auto v = VerifyStep(**storage, 1);
  ASSERT_OK(v);
  ASSERT_TRUE(v->ok()) << v->problems.front().message;
  const Mesh saved = *Mesh::Parse(c.mesh);
  for (const char* load_text : kLoads) {
    SCOPED_TRACE(std::string(c.mesh) + " -> " + load_text);
    const Mesh target = *Mesh::Parse(load_text);
    auto rc = tools::RestoreCheck(**storage, 1, target);
    ASSERT_OK(rc);
    EXPECT_GT(rc->elements, 100000);
    EXPECT_EQ(rc->mismatches, 0) << rc->first_mismatch;
    // And back: the state as held on the new mesh, saved from there,
    // restores onto the original mesh.
    const std::string back = dir.Join(std::string("back-") + load_text);
    ResaveOnto(root, back, target);
    auto back_storage = OpenStorage(back);
    ASSERT_OK(back_storage);
    auto rc_back = tools::RestoreCheck(**back_storage, 1, saved);
    ASSERT_OK(rc_back);
    EXPECT_EQ(rc_back->mismatches, 0) << rc_back->first_mismatch;
    EXPECT_EQ(rc_back->elements, [&] {
      auto again = tools::RestoreCheck(**storage, 1, saved);
      return again.ok() ? again->elements : -1;
    }());
  }
}

INSTANTIATE_TEST_SUITE_P(Matrix, ReshardTest, ::testing::ValuesIn(kSaves),
                         [](const ::testing::TestParamInfo<SaveCase>& i) { return i.param.name; });

TEST(ReplicaDedup, ReplicatedChunksAreWrittenOnceAndBalanced) {
  TempDir dir;
  const std::string root = dir.Join("r");
  SaveSynthetic(root, SaveCase{"dp4", "dp=4", false, false, 0});
  auto storage = OpenStorage(root);
  ASSERT_OK(storage);
  auto m = ReadManifest(**storage, 1);
  ASSERT_OK(m);
  // Every tensor is replicated 4 ways, yet each has exactly one chunk.
  for (const ManifestTensor& t : m->tensors) EXPECT_EQ(t.chunks.size(), 1u) << t.spec.fqn;
  // And the bytes spread over the replicas instead of all on rank 0.
  std::vector<int64_t> bytes(4, 0);
  for (const ManifestTensor& t : m->tensors) {
    for (const ManifestChunk& ch : t.chunks) {
      bytes[m->files[ch.file].rank] += ch.box.Volume() * DTypeSize(t.spec.dtype);
    }
  }
  const auto [lo, hi] = std::minmax_element(bytes.begin(), bytes.end());
  EXPECT_GT(*lo, 0);
  EXPECT_LT(static_cast<double>(*hi) / static_cast<double>(*lo), 1.5);
}

TEST(ReplicaDedup, CommunicatorAgreesOnWritersForArbitraryStates) {
  // Four ranks each hold the same replicated tensor and their own shard of
  // another; with a communicator the replicated one is written once.
  TempDir dir;
  auto comms = CreateLocalCommunicators(4);
  const TensorSpec rep{"bias", DType::kF32, {1000}};
  const TensorSpec sh{"w", DType::kF32, {400, 50}};
  std::vector<std::thread> threads;
  std::vector<absl::Status> results(4);
  std::vector<std::vector<OwnedShard>> data(4);
  for (int r = 0; r < 4; ++r) {
    data[r].push_back(MakeShard(rep, Box::Whole(rep.shape), 3));
    data[r].push_back(MakeShard(sh, Box({r * 100, 0}, {100, 50}), 3));
  }
  for (int r = 0; r < 4; ++r) {
    threads.emplace_back([&, r] {
      CheckpointerOptions o;
      o.uri = dir.Join("root");
      o.rank = r;
      o.world_size = 4;
      o.communicator = comms[r];
      o.collective_timeout_s = 30;
      auto cp = Checkpointer::Open(o);
      if (!cp.ok()) {
        results[r] = cp.status();
        return;
      }
      State st = StateOf(data[r]);
      for (int step = 1; step <= 2; ++step) {  // the second uses the cache
        auto h = (*cp)->Save(step, st);
        results[r] = h.ok() ? h->Wait() : h.status();
        if (!results[r].ok()) return;
      }
      // Load a different cut through the leader's plan hand-out.
      std::vector<OwnedShard> want = {EmptyShard(sh, Box({0, r * 10}, {400, 10}))};
      State t = StateOf(want);
      auto ls = (*cp)->Load(t);
      if (!ls.ok()) {
        results[r] = ls.status();
        return;
      }
      if (Mismatches(want[0], 3) != 0) results[r] = absl::InternalError("mismatch");
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 4; ++r) {
    ASSERT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r];
  }
  auto storage = OpenStorage(dir.Join("root"));
  ASSERT_OK(storage);
  auto m = ReadManifest(**storage, 2);
  ASSERT_OK(m);
  ASSERT_NE(m->FindTensor("bias"), nullptr);
  EXPECT_EQ(m->FindTensor("bias")->chunks.size(), 1u);
  EXPECT_EQ(m->FindTensor("w")->chunks.size(), 4u);
}

TEST(CollectiveLoad, EachRankReadsOnlyItsPartOfTheManifest) {
  // 4 ranks save 3000 row-split tensors; each then loads one tensor's column
  // cut. The leader checks the step and reads the manifest whole; the others
  // read the head, the directory and their records, not the whole manifest.
  // With MANIFEST damaged, they read their parts from MANIFEST.copy.
  TempDir dir;
  constexpr int kRanks = 4, kTensors = 3000;
  std::vector<TensorSpec> specs;
  for (int i = 0; i < kTensors; ++i) specs.push_back(TensorSpec{StrCat("layer.", 1000 + i), DType::kF32, {64, 8}});
  std::vector<std::vector<OwnedShard>> data(kRanks);
  for (int r = 0; r < kRanks; ++r) {
    for (const TensorSpec& spec : specs) data[r].push_back(MakeShard(spec, Box({r * 16, 0}, {16, 8}), 5));
  }
  auto run = [&](int pass, std::vector<LoadStats>* stats) {
    auto comms = CreateLocalCommunicators(kRanks);
    std::vector<std::thread> threads;
    std::vector<absl::Status> results(kRanks);
    stats->assign(kRanks, LoadStats{});
    for (int r = 0; r < kRanks; ++r) {
      threads.emplace_back([&, r] {
        CheckpointerOptions o;
        o.uri = dir.Join("root");
        o.rank = r;
        o.world_size = kRanks;
        o.communicator = comms[r];
        o.collective_timeout_s = 30;
        auto cp = Checkpointer::Open(o);
        if (!cp.ok()) {
          results[r] = cp.status();
          return;
        }
        if (pass == 0) {
          State st = StateOf(data[r]);
          auto h = (*cp)->Save(1, st);
          results[r] = h.ok() ? h->Wait() : h.status();
          if (!results[r].ok()) return;
        }
        std::vector<OwnedShard> want = {EmptyShard(specs[r * 700], Box({0, r * 2}, {64, 2}))};
        State t = StateOf(want);
        auto ls = (*cp)->Load(t);
        if (!ls.ok()) {
          results[r] = ls.status();
          return;
        }
        (*stats)[r] = *ls;
        if (Mismatches(want[0], 5) != 0) results[r] = absl::InternalError("mismatch");
      });
    }
    for (auto& t : threads) t.join();
    for (int r = 0; r < kRanks; ++r)
      ASSERT_TRUE(results[r].ok()) << "pass " << pass << " rank " << r << ": " << results[r];
  };
  std::vector<LoadStats> stats;
  run(0, &stats);
  const std::string manifest = StrCat(dir.Join("root"), "/", StepDir(1), "/MANIFEST");
  const int64_t size = static_cast<int64_t>(std::filesystem::file_size(manifest));
  EXPECT_GT(size, 96 << 10);
  EXPECT_EQ(stats[0].manifest_bytes, size);
  for (int r = 1; r < kRanks; ++r) {
    EXPECT_GT(stats[r].manifest_bytes, 0) << r;
    EXPECT_LT(stats[r].manifest_bytes, size * 3 / 4) << r;
  }
  std::string bytes = ReadFile(manifest);
  bytes[bytes.size() / 2] = static_cast<char>(bytes[bytes.size() / 2] ^ 1);
  WriteFile(manifest, bytes);
  run(1, &stats);
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_NE(stats[r].damage_note.find("MANIFEST.copy"), std::string::npos) << r << ": " << stats[r].damage_note;
    EXPECT_GT(stats[r].manifest_bytes, 0) << r;
  }
}

}  // namespace
}  // namespace ckpt::testing
