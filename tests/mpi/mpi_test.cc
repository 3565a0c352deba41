// Real processes under mpirun: --procs save and restore through the MPI
// communicator, and a rank SIGKILLed mid-save publishing nothing.
#include <signal.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "ckpt/synthetic.h"
#include "ckpt/verify.h"
#include "common/synth_job.h"
#include "core/root.h"
#include "plan/rule_manifest.h"
#include "testutil/test_util.h"

#ifndef CKPT_BIN
#error "CKPT_BIN and MPI_SAVER must be defined"
#endif

namespace ckpt::testing {
namespace {

struct CmdResult {
  int code;
  std::string out;
};

CmdResult Shell(const std::string& cmd) {
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  int status = pclose(p);
  return CmdResult{WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

bool Has(const std::string& s, const std::string& w) { return s.find(w) != std::string::npos; }

TEST(Mpi, ProcsSaveAndRestoreOntoOtherMeshes) {
  TempDir dir;
  const std::string root = dir.Join("root");
  CmdResult s = Shell(std::string(CKPT_BIN) + " synth --out " + root +
                      " --params 500K --layers 4 --mesh dp=2,tp=2 --optimizer adam --zero"
                      " --codec zstd --block-size 64K --procs --json");
  ASSERT_EQ(s.code, 0) << s.out;
  EXPECT_TRUE(Has(s.out, "\"ranks\":4")) << s.out;
  for (const char* mesh : {"tp=3", "dp=1", "dp=2,tp=2"}) {
    CmdResult r = Shell(std::string(CKPT_BIN) + " restore-check " + root + " --mesh " + mesh + " --procs --json");
    EXPECT_EQ(r.code, 0) << mesh << ": " << r.out;
    EXPECT_TRUE(Has(r.out, "\"mismatches\":0")) << r.out;
  }
  // The processes' checkpoint is an ordinary one: threads restore it too.
  CmdResult t = Shell(std::string(CKPT_BIN) + " restore-check " + root + " --mesh tp=4");
  EXPECT_EQ(t.code, 0) << t.out;
}

// Four data-parallel replicas as processes restore `root` (written by ckpt
// synth from one replica): cooperatively they read the checkpoint from
// storage about once in all, each alone about four times.
void ExpectCooperativeRestoreReadsOnce(const std::string& root) {
  CmdResult s = Shell(std::string(CKPT_BIN) + " synth --out '" + root +
                      "' --params 2M --layers 2 --mesh dp=1,tp=2 --block-size 64K --json");
  ASSERT_EQ(s.code, 0) << s.out;
  auto figure = [](const std::string& out, const std::string& key) -> int64_t {
    const size_t at = out.find("\"" + key + "\":");
    return at == std::string::npos ? -1 : std::atoll(out.c_str() + at + key.size() + 3);
  };
  const std::string check = std::string(CKPT_BIN) + " restore-check '" + root + "' --mesh dp=4,tp=2 --procs --json";
  CmdResult coop = Shell(check);
  ASSERT_EQ(coop.code, 0) << coop.out;
  EXPECT_TRUE(Has(coop.out, "\"mismatches\":0")) << coop.out;
  EXPECT_TRUE(Has(coop.out, "\"cooperative\":true")) << coop.out;
  CmdResult solo = Shell(check + " --solo-reads");
  ASSERT_EQ(solo.code, 0) << solo.out;
  EXPECT_TRUE(Has(solo.out, "\"cooperative\":false")) << solo.out;
  const int64_t together = figure(coop.out, "bytes_from_storage"), alone = figure(solo.out, "bytes_from_storage");
  ASSERT_GT(together, 0) << coop.out;
  EXPECT_GE(alone, together * 7 / 2) << "cooperative " << together << ", alone " << alone;
  EXPECT_GT(figure(coop.out, "bytes_from_peers"), together) << coop.out;
  EXPECT_EQ(figure(coop.out, "peer_failovers"), 0) << coop.out;
}

TEST(Mpi, ProcsRestoreCooperativelyReadingEachStoredByteOnce) {
  TempDir dir;
  ExpectCooperativeRestoreReadsOnce(dir.Join("root"));
}

TEST(Mpi, ProcsRestoreCooperativelyFromATieredRoot) {
  TempDir dir;
  ExpectCooperativeRestoreReadsOnce("tiered://?local=" + dir.Join("local") + "&durable=" + dir.Join("durable"));
}

TEST(Mpi, RankKilledMidSaveLeavesNothingPublished) {
  TempDir dir;
  const std::string root = dir.Join("root");
  std::string mpirun = "mpirun --oversubscribe --bind-to none -np 4 ";
  if (geteuid() == 0) mpirun = "mpirun --allow-run-as-root --oversubscribe --bind-to none -np 4 ";
  FILE* p = popen((mpirun + MPI_SAVER + " " + root + " 2>/dev/null").c_str(), "r");
  ASSERT_NE(p, nullptr);
  char line[256];
  int committed = 0;
  while (committed < 3 && std::fgets(line, sizeof(line), p) != nullptr) {
    if (std::string(line).rfind("committed", 0) == 0) ++committed;
  }
  ASSERT_EQ(committed, 3) << "the job stopped early";
  // Kill rank 2 at a random point of a later save.
  std::this_thread::sleep_for(std::chrono::milliseconds(std::random_device{}() % 40));
  pid_t victim = 0;
  std::ifstream(root + "-pids/rank-2") >> victim;
  ASSERT_GT(victim, 0);
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  while (std::fgets(line, sizeof(line), p) != nullptr) {
  }
  pclose(p);  // mpirun takes the other ranks down

  auto storage = OpenStorage(root);
  ASSERT_OK(storage);
  auto latest = LatestCommittedStep(**storage);
  ASSERT_OK(latest);
  EXPECT_GE(*latest, 3);
  auto steps = ListCheckpointSteps(**storage);
  ASSERT_OK(steps);
  for (const StepInfo& s : *steps) {
    if (!s.committed) {
      EXPECT_GT(s.step, *latest) << "an uncommitted step older than the latest";
      continue;
    }
    auto v = VerifyStep(**storage, s.step);
    ASSERT_OK(v);
    EXPECT_TRUE(v->ok()) << "step " << s.step;
  }
  // The latest committed step is whole and holds that step's values.
  const TensorSpec w{"model.w", DType::kF32, {1024, 1024}};
  std::vector<OwnedShard> out = {EmptyShard(w, Box::Whole(w.shape))};
  State t = StateOf(out);
  ASSERT_OK(LoadCheckpoint(**storage, t, *latest));
  EXPECT_EQ(Mismatches(out[0], static_cast<uint64_t>(*latest)), 0);
}

TEST(Mpi, ALaidOutJobOfManyProcessesCommitsTheManifestOfItsRules) {
  // 32 processes each declare the model by its layouts: no rank sends the
  // leader its chunk list, and the committed tensors are the rules' own.
  TempDir dir;
  const std::string root = dir.Join("root");
  CmdResult s = Shell(std::string(CKPT_BIN) + " synth --out " + root +
                      " --params 1M --layers 4 --mesh dp=4,tp=4,pp=2 --optimizer adam --zero"
                      " --codec zstd --block-size 64K --staging 4M --procs --json");
  ASSERT_EQ(s.code, 0) << s.out;
  EXPECT_TRUE(Has(s.out, "\"ranks\":32")) << s.out;
  auto storage = OpenStorage(root);
  ASSERT_OK(storage);
  auto committed = ReadManifest(**storage, 0);
  ASSERT_OK(committed);
  uint64_t seed = 0;
  auto options = tools::SyntheticOptionsOf(committed->metadata, 0, &seed);
  ASSERT_OK(options);
  const Mesh mesh = *Mesh::Parse("dp=4,tp=4,pp=2");
  auto model = BuildSyntheticModel(*options, mesh);
  ASSERT_OK(model);
  auto rules = SaveManifestByRules(model->tensors, mesh, 64 << 10, 8);
  ASSERT_OK(rules);
  // The same tensors, cell for cell; each file holds the rules' blocks and
  // then its blobs'.
  auto expanded = DecodeManifest(EncodeManifest(*rules), "rules");
  ASSERT_OK(expanded);
  ASSERT_EQ(committed->tensors.size(), expanded->tensors.size());
  for (size_t t = 0; t < expanded->tensors.size(); ++t) {
    const ManifestTensor& a = committed->tensors[t];
    const ManifestTensor& b = expanded->tensors[t];
    ASSERT_EQ(a.spec.fqn, b.spec.fqn);
    ASSERT_EQ(a.chunks.size(), b.chunks.size()) << a.spec.fqn;
    for (size_t c = 0; c < a.chunks.size(); ++c) {
      ASSERT_TRUE(a.chunks[c].box == b.chunks[c].box && a.chunks[c].file == b.chunks[c].file &&
                  a.chunks[c].first_block == b.chunks[c].first_block &&
                  a.chunks[c].block_count == b.chunks[c].block_count)
          << a.spec.fqn << " chunk " << c;
    }
  }
  ASSERT_EQ(committed->files.size(), 32u);
  for (size_t f = 0; f < committed->files.size(); ++f) {
    uint64_t blob_blocks = 0;
    for (const ManifestBlob& b : committed->blobs) {
      if (b.file == f) blob_blocks += b.block_count;
    }
    EXPECT_EQ(committed->files[f].block_count, rules->files[f].block_count + blob_blocks) << f;
  }
  auto v = VerifyStep(**storage, 0);
  ASSERT_OK(v);
  EXPECT_TRUE(v->ok());
  CmdResult r = Shell(std::string(CKPT_BIN) + " restore-check " + root + " --mesh dp=2,tp=2 --json");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(Has(r.out, "\"mismatches\":0")) << r.out;
}

}  // namespace
}  // namespace ckpt::testing
