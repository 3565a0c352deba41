// Checkpoints written by earlier versions still load, bit for bit.
#include <filesystem>

#include "ckpt/verify.h"
#include "common/synth_job.h"
#include "core/root.h"
#include "format/root_files.h"
#include "testutil/test_util.h"

#ifndef GOLDEN_DIR
#error "GOLDEN_DIR must name tests/golden"
#endif

namespace ckpt::testing {
namespace {

struct Golden {
  std::string dir;
  int64_t step;
  std::string codec;
  std::string saved_mesh;
  std::vector<std::string> restore_meshes;
  uint32_t manifest_version;
};

class GoldenTest : public ::testing::TestWithParam<Golden> {};

TEST_P(GoldenTest, VerifiesAndRestoresOntoOtherMeshes) {
  const Golden& g = GetParam();
  // Work on a copy so nothing can touch the committed files.
  TempDir tmp;
  std::filesystem::copy(std::string(GOLDEN_DIR) + "/" + g.dir, tmp.Join("root"),
                        std::filesystem::copy_options::recursive);
  auto storage = OpenStorage(tmp.Join("root"));
  ASSERT_OK(storage);
  auto latest = LatestCommittedStep(**storage);
  ASSERT_OK(latest);
  EXPECT_EQ(*latest, g.step);
  auto v = VerifyStep(**storage, g.step);
  ASSERT_OK(v);
  EXPECT_TRUE(v->ok()) << v->problems.front().message;
  EXPECT_FALSE(CheckLatestPointer(**storage).has_value());
  auto sum = SummarizeStep(**storage, g.step);
  ASSERT_OK(sum);
  EXPECT_EQ(sum->codec, g.codec);
  EXPECT_EQ(sum->library_version, "0.1.0");
  ASSERT_TRUE(sum->mesh.has_value());
  EXPECT_EQ(sum->mesh->ToString(), g.saved_mesh);
  for (const std::string& mesh_text : g.restore_meshes) {
    auto mesh = Mesh::Parse(mesh_text);
    ASSERT_OK(mesh);
    auto rc = tools::RestoreCheck(**storage, kLatestStep, *mesh);
    ASSERT_OK(rc);
    EXPECT_GT(rc->elements, 10000);
    EXPECT_EQ(rc->mismatches, 0) << mesh_text << ": " << rc->first_mismatch;
  }
  // The manifest re-encodes to the same bytes: the encoding is stable.
  const std::string path = StepDir(g.step) + "/MANIFEST";
  auto bytes = (*storage)->GetAll(path);
  ASSERT_OK(bytes);
  auto m = DecodeManifest(*bytes, path);
  ASSERT_OK(m);
  EXPECT_EQ(m->format_version, g.manifest_version);
  if (!m->bases.empty()) {
    // A delta step (version 6): its deltas name its one base, and a tensor
    // with deltas is listed; they verified and restored above, rebuilt
    // through the chain.
    ASSERT_EQ(m->bases.size(), 1u);
    EXPECT_LT(m->bases[0].step, g.step);
    int deltas = 0;
    for (const ManifestTensor& t : m->tensors) {
      for (const ManifestChunk& c : t.chunks) {
        EXPECT_LE(c.base, 1u) << t.spec.fqn;
        if (c.base == 0) continue;
        ++deltas;
        EXPECT_FALSE(t.grid.has_value()) << t.spec.fqn;
      }
    }
    EXPECT_GT(deltas, 10);
  } else if (g.manifest_version >= 4) {
    // Sharded tensors are stored as grids, the rest listed.
    int grids = 0, listed = 0;
    for (const ManifestTensor& t : m->tensors) ++(t.grid.has_value() ? grids : listed);
    EXPECT_GT(grids, 10);
    EXPECT_GT(listed, 0);
  }
  EXPECT_EQ(EncodeManifest(*m), *bytes);
}

INSTANTIATE_TEST_SUITE_P(
    Versions, GoldenTest,
    ::testing::Values(Golden{"v1-shuffle", 7, "shuffle-zstd", "dp=1,tp=2", {"tp=3", "dp=2,tp=1"}, 1},
                      Golden{"v1-zstd", 3, "zstd", "tp=1,pp=2", {"tp=2,pp=2", "pp=1"}, 1},
                      Golden{"v1-none", 1, "none", "dp=2", {"tp=5"}, 1},
                      Golden{"v3-zero", 11, "shuffle-zstd", "dp=2,tp=2", {"dp=3,tp=1", "dp=1,tp=3", "dp=2,tp=2"}, 3},
                      Golden{"v4-grid", 13, "auto", "dp=2,tp=2,pp=2", {"dp=1,tp=3,pp=1", "dp=3,tp=2,pp=2"}, 4},
                      Golden{"v6-delta", 22, "auto", "dp=2,tp=2", {"dp=3,tp=1", "dp=1,tp=3"}, 6}),
    [](const ::testing::TestParamInfo<Golden>& info) {
      std::string n = info.param.dir;
      for (char& c : n) {
        if (c == '-') c = '_';
      }
      return n;
    });

}  // namespace
}  // namespace ckpt::testing
