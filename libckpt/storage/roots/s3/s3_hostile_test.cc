// The s3:// backend and the ckpt command line against an S3 server that
// misbehaves on purpose (tests/support/hostile_s3.py, next to the real RADOS
// Gateway of s3_test): listings that name keys outside the prefix asked for,
// 404s that contradict listings, silence, trickles and listings that never
// end. Honest, the same server passes the storage conformance suite, so what
// the tests below see is the fault they switched on.
#include <sys/wait.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "ckpt/checkpointer.h"
#include "core/root.h"
#include "format/root_files.h"
#include "storage/conformance.h"
#include "support/hostile_s3.h"
#include "testutil/test_util.h"
#include "util/bytes.h"
#include "util/strings.h"

#ifndef CKPT_BIN
#error "CKPT_BIN must name the ckpt executable"
#endif

namespace ckpt::testing {
namespace {

// One server for the conformance cases, which build their URIs lazily.
HostileS3& SharedServer() {
  static TempDir dir;
  static HostileS3 server(dir.path());
  return server;
}

INSTANTIATE_TEST_SUITE_P(HostileS3Honest, StorageConformance,
                         ::testing::Values(BackendCase{
                             "hostile_s3", "", "",
                             [](int n) { return SharedServer().Uri(StrCat("conformance/", getpid(), "-", n)); }}),
                         [](const ::testing::TestParamInfo<BackendCase>& info) { return info.param.name; });

CommandResult Ckpt(const std::string& args) { return RunCommand(StrCat(CKPT_BIN, " ", args)); }

std::string Q(const std::string& s) { return StrCat("'", s, "'"); }

bool Has(const std::vector<std::string>& keys, const std::string& key) {
  return std::find(keys.begin(), keys.end(), key) != keys.end();
}

// A root with committed steps 1 and 2 and a partial step 3 under
// bkt/team/job, and another team's object beside it.
struct Bucket {
  explicit Bucket(HostileS3& s) : server(s), root(s.Uri("bkt/team/job")) {
    for (int step : {1, 2}) {
      CommandResult r = Ckpt(StrCat("synth --out ", Q(root), " --params 100K --step ", step));
      EXPECT_EQ(r.code, 0) << r.out;
    }
    auto other = OpenStorage(s.Uri("bkt/other-team"));
    EXPECT_TRUE(other.ok()) << other.status();
    if (other.ok()) EXPECT_OK((*other)->PutAtomic("model.bin", AsBytesView(std::string("their weights"))));
    auto mine = OpenStorage(root);
    EXPECT_TRUE(mine.ok()) << mine.status();
    if (mine.ok()) {
      EXPECT_OK((*mine)->PutAtomic(StrCat(StepDir(3), "/rank-000000.ckd"), AsBytesView(std::string("partial"))));
    }
    before = s.Keys("bkt");
  }
  HostileS3& server;
  std::string root;
  std::vector<std::string> before;
};

// Finding: gc of a partial step on a server that ignores prefix= in
// listings without a delimiter deleted every object of the bucket (another
// team's keys, LATEST, the committed steps) and said "freed 4 B".
TEST(HostileS3, AListingOfForeignKeysIsRefusedAndNothingOutsideTheRootIsDeleted) {
  TempDir dir;
  HostileS3 server(dir.path());
  ASSERT_TRUE(server.up());
  Bucket b(server);
  ASSERT_TRUE(Has(b.before, "other-team/model.bin"));
  ASSERT_TRUE(Has(b.before, StrCat("team/job/", StepDir(3), "/rank-000000.ckd")));
  for (const char* mode : {"ignore_prefix=undelimited", "ignore_prefix=1"}) {
    ASSERT_TRUE(server.Set(mode));
    CommandResult gc = Ckpt(StrCat("gc ", Q(b.root), " --newer-partial --yes"));
    EXPECT_NE(gc.code, 0) << mode << "\n" << gc.out;
    EXPECT_NE(gc.out.find("not under the prefix asked for"), std::string::npos) << mode << "\n" << gc.out;
    EXPECT_NE(gc.out.find(StrCat("from ", server.endpoint())), std::string::npos) << "the server is named\n" << gc.out;
    EXPECT_EQ(server.Keys("bkt"), b.before) << mode << ": gc deleted keys\n" << gc.out;
    ASSERT_TRUE(server.Set("ignore_prefix="));
  }
  // Foreign keys slipped into every listing: refused the same way.
  ASSERT_TRUE(server.Set(StrCat("foreign=team/jobX/", StepDir(3), "/x,other-team/model.bin")));
  CommandResult list = Ckpt(StrCat("list ", Q(b.root)));
  EXPECT_EQ(list.code, 2) << list.out;
  EXPECT_NE(list.out.find("other-team/model.bin"), std::string::npos) << list.out;
  CommandResult gc = Ckpt(StrCat("gc ", Q(b.root), " --newer-partial --yes"));
  EXPECT_NE(gc.code, 0) << gc.out;
  EXPECT_EQ(server.Keys("bkt"), b.before) << gc.out;
  // Honest again: gc removes the partial step, and only it.
  ASSERT_TRUE(server.Set("foreign="));
  gc = Ckpt(StrCat("gc ", Q(b.root), " --newer-partial --yes"));
  EXPECT_EQ(gc.code, 0) << gc.out;
  std::vector<std::string> expected = b.before;
  std::erase(expected, StrCat("team/job/", StepDir(3), "/rank-000000.ckd"));
  EXPECT_EQ(server.Keys("bkt"), expected) << gc.out;
  EXPECT_EQ(Ckpt(StrCat("verify ", Q(b.root), " --all")).code, 0);
}

// Finding: a step whose MANIFEST and MANIFEST.copy GETs answer 404 while the
// listing names both (a lagging replica, a caching proxy) was listed as
// partial, and deleted by gc and by a job's open-time cleanup. Missing needs
// every account to agree: the step is unreadable, reported, kept.
TEST(HostileS3, ANotFoundTheListingContradictsKeepsTheStep) {
  TempDir dir;
  HostileS3 server(dir.path());
  ASSERT_TRUE(server.up());
  Bucket b(server);
  std::vector<std::string> step2;
  for (const std::string& k : b.before) {
    if (k.find(StepDir(2)) != std::string::npos) step2.push_back(k);
  }
  ASSERT_EQ(step2.size(), 4u);  // CLAIM, MANIFEST, MANIFEST.copy, the data file
  ASSERT_TRUE(server.Set(StrCat("missing=", StepDir(2), "/MANIFEST")));
  CommandResult list = Ckpt(StrCat("list ", Q(b.root)));
  EXPECT_EQ(list.code, 1) << list.out;
  EXPECT_NE(list.out.find("unreadable"), std::string::npos) << list.out;
  EXPECT_NE(list.out.find("the listing names it but reading it answers NotFound"), std::string::npos) << list.out;
  EXPECT_EQ(list.out.find("partial"), list.out.rfind("partial")) << "only step 3 is partial\n" << list.out;
  CommandResult gc = Ckpt(StrCat("gc ", Q(b.root), " --newer-partial --damaged --yes"));
  EXPECT_EQ(gc.code, 1) << gc.out;
  EXPECT_NE(gc.out.find("kept unreadable step 2"), std::string::npos) << gc.out;
  // A job's cleanup when it opens the root keeps it too.
  auto storage = OpenStorage(b.root);
  ASSERT_OK(storage);
  EXPECT_OK(CleanRootAtJobStart(**storage, RetentionPolicy{}));
  const std::vector<std::string> after = server.Keys("bkt");
  for (const std::string& k : step2) EXPECT_TRUE(Has(after, k)) << k << " was deleted";
  EXPECT_TRUE(Has(after, "other-team/model.bin"));
  ASSERT_TRUE(server.Set("missing="));
  CommandResult verify = Ckpt(StrCat("verify ", Q(b.root), " --step 2"));
  EXPECT_EQ(verify.code, 0) << verify.out;
}

// Finding: no request had a total time limit, so deadline=6 against a
// silent server took 120 s for `ckpt list`, and a listing that always says
// "truncated" looped forever. Each command now ends within the deadline
// plus one connection's time, and says how many attempts over how long.
TEST(HostileS3, DeadlinesBoundWholeOperations) {
  TempDir dir;
  HostileS3 server(dir.path());
  ASSERT_TRUE(server.up());
  Bucket b(server);
  const std::string root = server.Uri("bkt/team/job", "&deadline=3");
  struct Case {
    const char* fault;
    std::string args;
  };
  const std::vector<Case> cases = {
      {"silent=1", StrCat("list ", Q(root))},
      {"silent=1", StrCat("verify ", Q(root))},
      {"trickle=1", StrCat("verify ", Q(root))},
      {"endless_pages=1", StrCat("list ", Q(root))},
      {"endless_pages=1", StrCat("gc ", Q(root), " --newer-partial --yes")},
      {"fail=MANIFEST", StrCat("verify ", Q(root), " --step 2")},
  };
  for (const Case& c : cases) {
    ASSERT_TRUE(server.Set(c.fault));
    const auto t0 = std::chrono::steady_clock::now();
    CommandResult r = Ckpt(c.args);
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_NE(r.code, 0) << c.fault << " " << c.args << "\n" << r.out;
    EXPECT_LT(took, 3 + 2.5) << c.fault << " " << c.args << "\n" << r.out;
    EXPECT_NE(r.out.find("the deadline of 3 s ran out"), std::string::npos) << c.fault << " " << c.args << "\n"
                                                                            << r.out;
    ASSERT_TRUE(server.Set(StrCat(std::string(c.fault).substr(0, std::string(c.fault).find('=')), "=")));
  }
  EXPECT_EQ(server.Keys("bkt"), b.before);
}

}  // namespace
}  // namespace ckpt::testing
