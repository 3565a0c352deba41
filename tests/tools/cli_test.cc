// The ckpt command line: help, exit codes, JSON output, end to end.
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>

#include "format/layout.h"
#include "testutil/test_util.h"

#ifndef CKPT_BIN
#error "CKPT_BIN must name the ckpt executable"
#endif

namespace ckpt::testing {
namespace {

struct CliRun {
  int code;
  std::string out;
};

CliRun Ckpt(const std::string& args) {
  std::string cmd = std::string(CKPT_BIN) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  int status = pclose(p);
  return CliRun{WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

bool Has(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

TEST(Cli, HelpOnEverySubcommand) {
  for (const char* sub : {"demo", "synth", "restore-check", "verify", "inspect", "plan"}) {
    CliRun r = Ckpt(std::string(sub) + " --help");
    EXPECT_EQ(r.code, 0) << sub;
    EXPECT_TRUE(Has(r.out, std::string("usage: ckpt ") + sub)) << r.out;
    EXPECT_TRUE(Has(r.out, "exit status")) << r.out;
  }
  CliRun top = Ckpt("--help");
  EXPECT_EQ(top.code, 0);
  EXPECT_TRUE(Has(top.out, "restore-check"));
  EXPECT_EQ(Ckpt("").code, 2);
  EXPECT_EQ(Ckpt("frobnicate").code, 2);
  EXPECT_EQ(Ckpt("--version").code, 0);
}

TEST(Cli, UsageErrorsExitTwo) {
  EXPECT_EQ(Ckpt("synth").code, 2);                        // --out missing
  EXPECT_EQ(Ckpt("synth --out /tmp/x --mesh dp=0").code, 2);
  EXPECT_EQ(Ckpt("synth --out /tmp/x --codec lz4").code, 2);
  EXPECT_EQ(Ckpt("verify").code, 2);                       // DIR missing
  EXPECT_EQ(Ckpt("verify /nonexistent/ckpt-root").code, 2);  // unreadable
  EXPECT_EQ(Ckpt("inspect /nonexistent/ckpt-root").code, 2);
  EXPECT_EQ(Ckpt("restore-check /nonexistent --mesh tp=2").code, 2);
  EXPECT_EQ(Ckpt("verify --bogus x").code, 2);
}

TEST(Cli, SynthRestoreVerifyInspect) {
  TempDir dir;
  const std::string root = dir.Join("root");
  CliRun s = Ckpt("synth --out " + root +
               " --params 300K --dtype bf16 --mesh dp=2,tp=2,pp=2 --step 12 --codec shuffle-zstd"
               " --optimizer adam --zero --block-size 64K --json");
  ASSERT_EQ(s.code, 0) << s.out;
  for (const char* key : {"\"step\":12", "\"bytes_logical\"", "\"bytes_stored\"", "\"stall_s\"",
                          "\"write_s\""}) {
    EXPECT_TRUE(Has(s.out, key)) << key << " in " << s.out;
  }
  // Onto an uneven mesh: tp=3 over dimensions not divisible by 3.
  CliRun rc = Ckpt("restore-check " + root + " --mesh dp=3,tp=3,pp=1 --json");
  EXPECT_EQ(rc.code, 0) << rc.out;
  EXPECT_TRUE(Has(rc.out, "\"mismatches\":0")) << rc.out;
  EXPECT_TRUE(Has(rc.out, "\"bytes_read\"")) << rc.out;
  EXPECT_TRUE(Has(rc.out, "\"bytes_needed\"")) << rc.out;
  CliRun v = Ckpt("verify " + root + " --json");
  EXPECT_EQ(v.code, 0) << v.out;
  EXPECT_TRUE(Has(v.out, "\"ok\":true")) << v.out;
  CliRun fast = Ckpt("verify " + root + " --all --fast");
  EXPECT_EQ(fast.code, 0) << fast.out;
  CliRun i = Ckpt("inspect " + root + " --json");
  EXPECT_EQ(i.code, 0) << i.out;
  EXPECT_TRUE(Has(i.out, "\"mesh\":\"dp=2,tp=2,pp=2\"")) << i.out;
  EXPECT_TRUE(Has(i.out, "optimizer.state.lm_head.weight.exp_avg_sq")) << i.out;
  CliRun it = Ckpt("inspect " + root);
  EXPECT_EQ(it.code, 0);
  EXPECT_TRUE(Has(it.out, "committed")) << it.out;

  // Damage one byte of one data file: verify exits 1 and locates it.
  const std::string data = root + "/" + StepDir(12) + "/" + DataFileName(3);
  FlipBit(data, 5000, 0);
  CliRun bad = Ckpt("verify " + root + " --json");
  EXPECT_EQ(bad.code, 1) << bad.out;
  EXPECT_TRUE(Has(bad.out, "\"ok\":false")) << bad.out;
  EXPECT_TRUE(Has(bad.out, "\"file\":\"" + StepDir(12) + "/" + DataFileName(3) + "\"")) << bad.out;
  EXPECT_TRUE(Has(bad.out, "\"offset\":")) << bad.out;
  EXPECT_TRUE(Has(bad.out, "\"tensor\":")) << bad.out;
  CliRun rc_bad = Ckpt("restore-check " + root + " --mesh dp=1");
  EXPECT_EQ(rc_bad.code, 1) << rc_bad.out;
  EXPECT_TRUE(Has(rc_bad.out, "checksum mismatch")) << rc_bad.out;
}

// 16,384 ranks and about 850k chunks: a pairwise overlap or cover check
// would run for hours; the planner must finish well inside the test timeout.
TEST(Cli, PlanAtSixteenThousandRanks) {
  CliRun r = Ckpt("plan --ranks-from dp=128,tp=8,pp=16 --ranks-to dp=64,tp=8,pp=32 --params 70G"
                  " --layers 80 --optimizer adam --zero --json");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(Has(r.out, "\"ranks_from\":16384")) << r.out;
  const size_t at = r.out.find("\"read_amplification\":");
  ASSERT_NE(at, std::string::npos);
  EXPECT_LT(std::stod(r.out.substr(at + 21)), 1.05) << r.out;
  const size_t mb = r.out.find("\"manifest_bytes\":");
  EXPECT_LT(std::stod(r.out.substr(mb + 17)), 64.0 * (1 << 20)) << r.out;
}

TEST(Cli, DemoRunsEndToEnd) {
  TempDir dir;
  CliRun r = Ckpt("demo --dir " + dir.Join("demo") + " --params 2M --steps 6 --every 2 --step-ms 5");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(Has(r.out, "all identical")) << r.out;
  EXPECT_TRUE(Has(r.out, "verify step 6: ok")) << r.out;
  // It refuses a directory that is not its own.
  std::filesystem::create_directories(dir.Join("mine"));
  WriteFile(dir.Join("mine/precious.txt"), "x");
  CliRun refused = Ckpt("demo --dir " + dir.Join("mine"));
  EXPECT_EQ(refused.code, 2) << refused.out;
  EXPECT_TRUE(std::filesystem::exists(dir.Join("mine/precious.txt")));
}

}  // namespace
}  // namespace ckpt::testing
