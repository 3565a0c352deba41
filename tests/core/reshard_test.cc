// Resharding matrix: states saved on one mesh restore exactly onto others,
// and a state re-saved from the new mesh restores back onto the old one.
#include <filesystem>
#include <map>
#include <numeric>
#include <optional>
#include <string_view>
#include <thread>

#include "ckpt/plan.h"
#include "ckpt/plan_costs.h"
#include "ckpt/synthetic.h"
#include "ckpt/verify.h"
#include "ckpt/version.h"
#include "common/synth_job.h"
#include "core/root.h"
#include "format/data_file.h"
#include "format/root_files.h"
#include "plan/load_plan.h"
#include "plan/rule_manifest.h"
#include "plan/tiles.h"
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

// Row shards of a few MiB are saved as row slabs, each staged as a run of
// the shard's rows, with the element values intact; loads onto the other
// tensor-parallel sizes read only the rows they need.
TEST(RowSlabs, RowShardsAreSavedAsSlabsAndLoadOntoOtherSizesExactly) {
  TempDir dir;
  const std::string root = dir.Join("slabs");
  for (Codec codec : {Codec::kNone, Codec::kShuffleZstd}) {
    SCOPED_TRACE(CodecName(codec));
    std::filesystem::remove_all(root);
    tools::SynthJobOptions o;
    o.uri = root;
    o.mesh = *Mesh::Parse("tp=2");
    o.model.params = 40000000;
    o.model.layers = 2;
    o.codec = codec;
    o.engine.block_size = 256 << 10;
    o.engine.staging_bytes = 8 << 20;
    auto job = tools::SyntheticJob::Create(o);
    ASSERT_OK(job);
    ASSERT_OK((*job)->SaveAsync(1, 7));
    ASSERT_OK((*job)->Finish());
    auto storage = OpenStorage(root);
    ASSERT_OK(storage);
    auto manifest = ReadManifest(**storage, 1);
    ASSERT_OK(manifest);
    const ManifestTensor* qkv = manifest->FindTensor("model.layers.0.self_attn.qkv_proj.weight");
    ASSERT_NE(qkv, nullptr);
    EXPECT_GT(qkv->ChunkCount(), 2u);  // two shards, cut into slabs
    auto v = VerifyStep(**storage, 1);
    ASSERT_OK(v);
    ASSERT_TRUE(v->ok()) << v->problems.front().message;
    std::optional<tools::RestoreCheckResult> once;  // tp=3, each rank loaded once
    for (const char* onto : {"tp=2", "tp=4", "tp=3", "tp=1"}) {
      auto rc = tools::RestoreCheck(**storage, 1, *Mesh::Parse(onto));
      ASSERT_OK(rc);
      EXPECT_EQ(rc->mismatches, 0) << onto << ": " << rc->first_mismatch;
      EXPECT_GT(rc->elements, 40000000) << onto;
      EXPECT_LE(static_cast<double>(rc->bytes_decoded), 1.001 * static_cast<double>(rc->bytes_needed)) << onto;
      if (std::string_view(onto) == "tp=3") once = *rc;
    }
    // Loaded three times per rank (a benchmark's median): the same bytes
    // once counted, every element still checked.
    auto thrice = tools::RestoreCheck(**storage, 1, *Mesh::Parse("tp=3"), {}, 3);
    ASSERT_OK(thrice);
    ASSERT_TRUE(once.has_value());
    EXPECT_EQ(once->loads, 3);  // one per rank
    EXPECT_EQ(thrice->loads, 9);
    EXPECT_EQ(thrice->mismatches, 0) << thrice->first_mismatch;
    EXPECT_EQ(thrice->elements, once->elements);
    EXPECT_EQ(thrice->bytes_read, once->bytes_read);
    EXPECT_EQ(thrice->bytes_needed, once->bytes_needed);
    EXPECT_GT(thrice->load_seconds, 0);
  }
}

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

// The reference: the manifest of a save of `plan` built chunk by chunk, each
// writer's boxes cut into tiles (SaveTiles) and blocks, appended to its file in
// plan order, then described by rules where DetectGrid finds a grid.
Manifest ManifestChunkByChunk(const SyntheticModel& model, const SavePlan& plan, uint64_t block_size, int max_tiles) {
  Manifest m;
  m.step = 1;
  m.world_size = static_cast<int32_t>(plan.mesh.NumRanks());
  m.library_version = LibraryVersion();
  m.mesh = plan.mesh;
  std::vector<ManifestTensor> tensors(model.tensors.size());
  for (size_t t = 0; t < tensors.size(); ++t) tensors[t].spec = model.tensors[t].spec;
  const int64_t nranks = plan.mesh.NumRanks();
  std::vector<uint64_t> next_block(nranks, 0), file_bytes(nranks, kDataHeaderSize);
  {
    std::vector<size_t> count(tensors.size(), 0);
    for (const ChunkAssignment& c : plan.chunks) ++count[c.tensor];
    for (size_t t = 0; t < tensors.size(); ++t) tensors[t].chunks.reserve(count[t]);
  }
  // Chunks in plan order (sequential memory), each appended to its writer's
  // file; the block numbering per file is what that rank would produce.
  for (const ChunkAssignment& c : plan.chunks) {
    const uint64_t es = DTypeSize(model.tensors[c.tensor].spec.dtype);
    for (Box& tile : SaveTiles(c.box, model.tensors[c.tensor].spec.shape, es, max_tiles)) {
      const uint64_t raw = static_cast<uint64_t>(tile.Volume()) * es;
      const uint64_t blocks = (raw + block_size - 1) / block_size;
      tensors[c.tensor].chunks.push_back(
          ManifestChunk{static_cast<uint32_t>(c.writer), next_block[c.writer], blocks, std::move(tile)});
      next_block[c.writer] += blocks;
      file_bytes[c.writer] +=
          raw / block_size * FrameLength(block_size) + (raw % block_size ? FrameLength(raw % block_size) : 0);
    }
  }
  m.files.resize(nranks);
  for (int64_t r = 0; r < nranks; ++r) {
    ManifestFile& f = m.files[r];
    f.name = DataFileName(static_cast<int>(r));
    f.rank = static_cast<int32_t>(r);
    f.block_size = block_size;
    f.block_count = next_block[r];
    f.index_offset = file_bytes[r];
    f.index_len = kIndexHeaderSize + next_block[r] * kIndexEntrySize;
    f.size = f.index_offset + f.index_len + kFooterSize;
  }
  std::sort(tensors.begin(), tensors.end(),
            [](const ManifestTensor& a, const ManifestTensor& b) { return a.spec.fqn < b.spec.fqn; });
  m.tensors = std::move(tensors);
  DescribeByRules(m);
  return m;
}

// The manifest built from the layouts' rules (grids, no chunk objects) is
// byte for byte the one built chunk by chunk from PlanSave, for synthetic
// models over many meshes and for hand-made layouts that are not grids.
void ExpectRulesMatchChunkByChunk(const std::vector<TensorLayout>& layouts, const Mesh& mesh, uint64_t block, int tiles,
                                  const std::string& what) {
  SCOPED_TRACE(what);
  auto plan = PlanSave(layouts, mesh);
  ASSERT_OK(plan);
  SyntheticModel model;
  model.tensors = layouts;
  const std::string reference = EncodeManifest(ManifestChunkByChunk(model, *plan, block, tiles));
  RuleManifestStats stats;
  auto by_rules = SaveManifestByRules(layouts, mesh, block, tiles, &stats);
  ASSERT_OK(by_rules);
  EXPECT_EQ(stats.chunks,
            static_cast<int64_t>(std::accumulate(
                plan->chunks.begin(), plan->chunks.end(), int64_t{0}, [&](int64_t n, const ChunkAssignment& c) {
                  const uint64_t es = DTypeSize(layouts[c.tensor].spec.dtype);
                  return n + static_cast<int64_t>(SaveTiles(c.box, layouts[c.tensor].spec.shape, es, tiles).size());
                })));
  EXPECT_EQ(stats.bytes_by_rank, plan->bytes_by_rank);
  const std::string encoded = EncodeManifest(*by_rules);
  ASSERT_EQ(encoded.size(), reference.size());
  EXPECT_TRUE(encoded == reference);
  EXPECT_EQ(by_rules->LogicalBytes(), DecodeManifest(reference, "reference")->LogicalBytes());

  // Decoded without expanding its grids, it re-encodes to the same bytes,
  // and a whole-mesh load plans the same on the grids as on the chunks.
  auto grids = DecodeManifest(encoded, "by rules", kMaxManifestChunks, GridChunks::kGridsOnly);
  ASSERT_OK(grids);
  EXPECT_TRUE(EncodeManifest(*grids) == encoded);
  auto expanded = DecodeManifest(encoded, "by rules");
  ASSERT_OK(expanded);
  uint64_t cells = 0;
  for (const ManifestTensor& t : grids->tensors) cells += t.ChunkCount();
  EXPECT_EQ(static_cast<int64_t>(cells), stats.chunks);
  for (const char* onto : {"dp=1", "dp=3,tp=2", "tp=4,pp=2"}) {
    const Mesh target = *Mesh::Parse(onto);
    std::vector<TensorLayout> target_layouts = layouts;
    for (TensorLayout& l : target_layouts) {
      // The same tensors, each split along its first dimension over every rank.
      l.placements.assign(target.ndim(), Placement::Replicate());
      if (!l.spec.shape.empty()) l.placements[0] = Placement::Shard(0);
      l.split_order.clear();
      l.owner_dim = -1;
    }
    auto a = PlanMeshLoad(*grids, target_layouts, target);
    auto b = PlanMeshLoad(*expanded, target_layouts, target);
    ASSERT_OK(a);
    ASSERT_OK(b);
    EXPECT_EQ(a->overlaps, b->overlaps) << onto;
    EXPECT_EQ(a->block_ranges, b->block_ranges) << onto;
    EXPECT_EQ(a->bytes_read, b->bytes_read) << onto;
    EXPECT_EQ(a->bytes_needed, b->bytes_needed) << onto;
  }
}

TEST(RuleManifest, EqualsTheManifestBuiltChunkByChunk) {
  struct Case {
    const char* mesh;
    int64_t params;
    int layers;
    bool zero;
    int experts;
  };
  const Case cases[] = {
      {"dp=2,tp=2,pp=2", 2000000, 4, true, 0},
      {"dp=3,tp=4", 3000000, 3, true, 0},
      {"ep=4,tp=2", 2000000, 2, true, 8},
      {"pp=5", 500000, 3, false, 0},
      {"tp=3,dp=5", 4000000, 2, true, 0},
      {"dp=8,tp=8,pp=2", 20000000, 4, true, 0},
      // Row shards of a few MiB and more: cut into row slabs.
      {"tp=4", 512000000, 9, false, 0},
      {"dp=2,tp=3", 300000000, 2, true, 0},
  };
  for (const Case& c : cases) {
    const Mesh mesh = *Mesh::Parse(c.mesh);
    SyntheticOptions o;
    o.params = c.params;
    o.layers = c.layers;
    o.adam = true;
    o.zero = c.zero;
    o.experts = c.experts;
    auto model = BuildSyntheticModel(o, mesh);
    ASSERT_OK(model);
    for (const auto& [block, tiles] : std::vector<std::pair<uint64_t, int>>{{64 << 10, 8}, {1 << 20, 3}, {4096, 1}}) {
      ExpectRulesMatchChunkByChunk(model->tensors, mesh, block, tiles,
                                   StrCat(c.mesh, " block ", block, " tiles ", tiles));
    }
  }

  // Hand-made layouts over dp=2,tp=2: explicit boundaries with an empty
  // part, a split order that nests tp inside dp on one dimension, a scalar,
  // a tensor held by one stage, and column tiles that differ by rows (2-row
  // boxes are cut, 1-row boxes are not: their tiles would average under
  // kMinMeanTileBytes), which is listed box by box.
  const Mesh mesh = *Mesh::Parse("dp=2,tp=2");
  std::vector<TensorLayout> layouts;
  auto add = [&](std::string name, DType dt, Shape shape, std::vector<Placement> p) -> TensorLayout& {
    TensorLayout l;
    l.spec = TensorSpec{std::move(name), dt, std::move(shape)};
    l.placements = std::move(p);
    layouts.push_back(std::move(l));
    return layouts.back();
  };
  Placement explicit_rows = Placement::Shard(0);
  explicit_rows.boundaries = {0, 0, 40};
  add("explicit", DType::kF32, {40, 3000}, {explicit_rows, Placement::Shard(1)});
  add("nested", DType::kBF16, {1000, 64}, {Placement::Shard(0), Placement::Shard(0)}).split_order = {1, 0};
  add("scalar", DType::kI64, {}, {Placement::Replicate(), Placement::Replicate()});
  TensorLayout& staged = add("staged", DType::kF32, {64, 4096}, {Placement::Replicate(), Placement::Shard(1)});
  staged.owner_dim = 0;
  staged.owner_index = 1;
  add("uneven_tiles", DType::kF32, {3, 24000}, {Placement::Shard(0), Placement::Shard(1)});
  add("replicated", DType::kBF16, {512, 512}, {Placement::Replicate(), Placement::Replicate()});
  ExpectRulesMatchChunkByChunk(layouts, mesh, 64 << 10, 8, "hand-made");
  auto m = SaveManifestByRules(layouts, mesh, 64 << 10, 8);
  ASSERT_OK(m);
  EXPECT_FALSE(m->FindTensor("uneven_tiles")->grid.has_value());
  EXPECT_GT(m->FindTensor("uneven_tiles")->chunks.size(), 4u);
  EXPECT_TRUE(m->FindTensor("explicit")->GridOnly());
  EXPECT_TRUE(m->FindTensor("nested")->GridOnly());

  // A layout the box computation refuses is refused the same way.
  layouts.push_back(layouts[0]);
  layouts.back().spec.fqn = "bad";
  layouts.back().placements[1] = Placement::Shard(2);
  EXPECT_FALSE(SaveManifestByRules(layouts, mesh, 64 << 10, 8).ok());
  EXPECT_FALSE(PlanSave(layouts, mesh).ok());
}

// Row shards of a few MiB (column-parallel weights at tp=4) are cut into
// row slabs where tp=8, 6 and 3 cut: a load onto those reads its rows and
// not the block across each cut, and the tensors stay grids.
TEST(RuleManifest, RowShardsAreSlabsThatTensorParallelMovesReadExactly) {
  const Mesh from = *Mesh::Parse("tp=4");
  SyntheticOptions o;
  o.params = 512000000;
  o.layers = 9;
  auto model = BuildSyntheticModel(o, from);
  ASSERT_OK(model);
  auto m = SaveManifestByRules(model->tensors, from, 1 << 20, 8);
  ASSERT_OK(m);
  const ManifestTensor* qkv = m->FindTensor("model.layers.0.self_attn.qkv_proj.weight");
  ASSERT_NE(qkv, nullptr);
  ASSERT_TRUE(qkv->GridOnly());
  EXPECT_GT(qkv->grid->cuts[0].size(), 5u);  // four shards, cut into slabs
  EXPECT_EQ(qkv->grid->cuts[1].size(), 2u);  // every column in each slab
  for (const auto& [onto, most] :
       std::vector<std::pair<const char*, double>>{{"tp=8", 1.005}, {"tp=2", 1.005}, {"tp=3", 1.02}, {"tp=6", 1.02}}) {
    const Mesh to = *Mesh::Parse(onto);
    auto target = BuildSyntheticModel(o, to);
    ASSERT_OK(target);
    auto plan = PlanMeshLoad(*m, target->tensors, to);
    ASSERT_OK(plan);
    EXPECT_LE(plan->Amplification(), most) << onto;
    for (size_t t = 0; t < target->tensors.size(); ++t) {
      const std::string& name = target->tensors[t].spec.fqn;
      if (target->tensors[t].spec.shape.size() < 2) continue;   // 1-d: not cut
      if (target->tensors[t].placements[0].dim != 0) continue;  // column shards: ColumnTiles
      const auto [needed, read] = plan->per_tensor[t];
      EXPECT_LE(static_cast<double>(read), 1.001 * static_cast<double>(needed)) << onto << " " << name;
    }
  }
}

TEST(RuleManifest, ZeroRowBandsAreOneTiledGridCodedInAFewGroups) {
  // dp=6 cuts each tensor-parallel piece of the moments into row bands, the
  // last one shorter; every band is tiled alike, so each tensor is one grid,
  // and its file numbers and first blocks repeat a pattern per row of bands.
  const Mesh mesh = *Mesh::Parse("dp=6,tp=4");
  SyntheticOptions o;
  o.params = 30000000;
  o.layers = 2;
  o.adam = true;
  o.zero = true;
  auto model = BuildSyntheticModel(o, mesh);
  ASSERT_OK(model);
  ExpectRulesMatchChunkByChunk(model->tensors, mesh, 64 << 10, 8, "dp=6,tp=4");
  auto m = SaveManifestByRules(model->tensors, mesh, 64 << 10, 8);
  ASSERT_OK(m);
  for (const ManifestTensor& t : m->tensors) {
    if (t.spec.shape.size() >= 1) {
      EXPECT_TRUE(t.GridOnly()) << t.spec.fqn;
    }
  }
  const ManifestTensor* down = m->FindTensor("optimizer.state.model.layers.0.mlp.down_proj.weight.exp_avg");
  ASSERT_NE(down, nullptr);
  ASSERT_TRUE(down->grid.has_value());
  EXPECT_EQ(down->grid->cuts[0].size(), 7u);  // six bands
  EXPECT_GT(down->grid->cuts[1].size(), 5u);  // four pieces, tiled
  size_t grouped = 0;
  for (const ManifestTensor& t : m->tensors) {
    if (!t.grid.has_value()) continue;
    for (const IntRuns* seq : {&t.grid->files, &t.grid->first_blocks}) {
      for (const IntRuns::Group& g : seq->groups()) grouped += g.len > 1 ? 1 : 0;
    }
  }
  EXPECT_GT(grouped, 0u);
  // Version 4 writes every run out: the same chunks, more bytes for the
  // banded and tiled moments, whose runs repeat a pattern per band (a lone
  // run costs version 5 a byte more, so not every grid shrinks).
  Manifest newer = *m;
  newer.format_version = 5;
  const std::string v5 = EncodeManifest(newer);
  Manifest old = *m;
  old.format_version = 4;
  const std::string v4 = EncodeManifest(old);
  for (const char* name : {"optimizer.state.model.layers.0.mlp.down_proj.weight.exp_avg",
                           "optimizer.state.model.layers.0.self_attn.o_proj.weight.exp_avg"}) {
    Manifest one = newer, one_old = old;
    one.tensors = {*m->FindTensor(name)};
    one_old.tensors = one.tensors;
    EXPECT_LT(EncodeManifest(one).size(), EncodeManifest(one_old).size()) << name;
  }
  auto a = DecodeManifest(v5, "v5");
  auto b = DecodeManifest(v4, "v4");
  ASSERT_OK(a);
  ASSERT_OK(b);
  EXPECT_EQ(a->format_version, 5u);
  EXPECT_EQ(b->format_version, 4u);
  ASSERT_EQ(a->tensors.size(), b->tensors.size());
  for (size_t i = 0; i < a->tensors.size(); ++i) {
    const auto& x = a->tensors[i].chunks;
    const auto& y = b->tensors[i].chunks;
    ASSERT_EQ(x.size(), y.size()) << a->tensors[i].spec.fqn;
    for (size_t c = 0; c < x.size(); ++c) {
      ASSERT_TRUE(x[c].file == y[c].file && x[c].first_block == y[c].first_block && x[c].box == y[c].box)
          << a->tensors[i].spec.fqn << " chunk " << c;
    }
  }
  EXPECT_TRUE(EncodeManifest(*b) == v4);
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

// The planning costs `ckpt plan` prints, through the public API: the same
// manifest as SaveManifestByRules, every sampled rank's own plan, and the
// whole mesh's load; a target that differs from the save is refused.
TEST(PlanCosts, MeasuresTheSaveTheLeadersCheckAndEveryRanksOwnPlan) {
  const Mesh from = *Mesh::Parse("dp=2,tp=4");
  const Mesh to = *Mesh::Parse("dp=1,tp=8");
  SyntheticOptions o;
  o.params = 64000000;
  o.layers = 4;
  auto saved = BuildSyntheticModel(o, from);
  auto target = BuildSyntheticModel(o, to);
  ASSERT_OK(saved);
  ASSERT_OK(target);
  PlanCostOptions options;
  options.rank_samples = 3;
  auto c = MeasurePlanCosts(saved->tensors, from, target->tensors, to, options);
  ASSERT_OK(c);
  auto rules = SaveManifestByRules(saved->tensors, from, options.block_size, options.max_tiles);
  ASSERT_OK(rules);
  EXPECT_EQ(c->manifest_bytes, static_cast<int64_t>(EncodeManifest(*rules).size()));
  EXPECT_EQ(c->save.bytes_by_rank.size(), 8u);
  EXPECT_EQ(c->sampled_ranks, (std::vector<int64_t>{0, 3, 7}));
  ASSERT_EQ(c->rank_plan_s.size(), 3u);
  for (double b : c->rank_manifest_bytes) {
    EXPECT_GT(b, 0);
    EXPECT_LE(b, static_cast<double>(c->manifest_bytes));
  }
  EXPECT_EQ(c->load.ranks, 8);
  EXPECT_GE(c->load.Amplification(), 1.0);
  EXPECT_GE(c->total_s, c->decode_s);
  EXPECT_EQ(c->coop.hosts, 0);  // not asked for

  // The cooperative load planned onto dp=4,tp=2, two ranks to a host: each
  // byte from storage once, against four times, the hosts' shares close.
  const Mesh replicated = *Mesh::Parse("dp=4,tp=2");
  auto onto = BuildSyntheticModel(o, replicated);
  ASSERT_OK(onto);
  options.ranks_per_host = 2;
  auto coop = MeasurePlanCosts(saved->tensors, from, onto->tensors, replicated, options);
  ASSERT_OK(coop);
  EXPECT_EQ(coop->coop.hosts, 4);
  EXPECT_EQ(coop->coop.bytes_every_rank, static_cast<uint64_t>(coop->load.bytes_read));
  uint64_t model_bytes = 0;
  for (const TensorLayout& l : onto->tensors) {
    model_bytes += static_cast<uint64_t>(l.spec.NumElements()) * DTypeSize(l.spec.dtype);
  }
  EXPECT_EQ(coop->coop.bytes_once, model_bytes);
  EXPECT_GE(coop->coop.bytes_every_rank, 4 * coop->coop.bytes_once);
  // 16 MiB cells on a 130 MB model: shares within a few cells of a quarter.
  EXPECT_LE(static_cast<double>(coop->coop.host_bytes_max), 0.4 * static_cast<double>(coop->coop.bytes_once));
  EXPECT_GT(coop->coop.pieces, 0);

  o.params = 32000000;  // other shapes
  auto other = BuildSyntheticModel(o, to);
  ASSERT_OK(other);
  EXPECT_FALSE(MeasurePlanCosts(saved->tensors, from, other->tensors, to, options).ok());
}

}  // namespace
}  // namespace ckpt::testing
