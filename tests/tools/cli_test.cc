// The ckpt command line: help, exit codes, JSON output, end to end.
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>

#include "ckpt/checkpointer.h"
#include "format/root_files.h"
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

CliRun Ckpt(const std::string& args, const std::string& env = "") {
  CommandResult r = RunCommand(env + std::string(CKPT_BIN) + " " + args);
  return CliRun{r.code, r.out};
}

bool Has(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

TEST(Cli, HelpOnEverySubcommand) {
  for (const char* sub : {"demo",
                          "synth",
                          "restore-check",
                          "verify",
                          "inspect",
                          "plan",
                          "interval",
                          "plugins",
                          "export",
                          "import",
                          "stats",
                          "diff",
                          "list",
                          "gc",
                          "repair",
                          "coordinator",
                          "coordinator status",
                          "coordinator history",
                          "worker",
                          "bench"}) {
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
  EXPECT_EQ(Ckpt("synth").code, 2);                                     // --out missing
  EXPECT_EQ(Ckpt("coordinator").code, 2);                               // --state-dir, --token-file missing
  EXPECT_EQ(Ckpt("worker --connect 127.0.0.1:1").code, 2);              // --token-file, --root missing
  EXPECT_EQ(Ckpt("coordinator status --connect 127.0.0.1:1").code, 2);  // nobody there
  EXPECT_EQ(Ckpt("synth --out /tmp/x --mesh dp=0").code, 2);
  // A codec the build does not have: the error lists the ones it has.
  for (const char* cmd : {"synth --out /tmp/x", "demo", "bench --out /tmp/x"}) {
    CliRun bad = Ckpt(std::string(cmd) + " --codec lz4 2>&1");
    EXPECT_EQ(bad.code, 2) << cmd;
    EXPECT_TRUE(Has(bad.out, "bad value 'lz4' for --codec (none, zstd, shuffle-zstd or auto)")) << cmd << bad.out;
  }
  EXPECT_EQ(Ckpt("verify").code, 2);                         // DIR missing
  EXPECT_EQ(Ckpt("verify /nonexistent/ckpt-root").code, 2);  // unreadable
  EXPECT_EQ(Ckpt("inspect /nonexistent/ckpt-root").code, 2);
  EXPECT_EQ(Ckpt("restore-check /nonexistent --mesh tp=2").code, 2);
  EXPECT_EQ(Ckpt("verify --bogus x").code, 2);
}

// Finding: verify and restore-check gave different exit codes for the
// same root that the storage could not read (2 and 1). Every command that
// reads a root says 2 for it.
TEST(Cli, AnUnreadableRootIsExitTwoForEveryCommand) {
  TempDir dir;
  const std::string root = dir.Join("root");
  ASSERT_EQ(Ckpt("synth --out " + root + " --params 100K").code, 0);
  const std::string unreadable = " 'faulty://" + root + "?fault.fail_on=list,read'";
  for (const std::string cmd : {"verify", "restore-check", "list", "inspect", "stats", "gc"}) {
    CliRun r = Ckpt(cmd + unreadable + (cmd == "restore-check" ? " --mesh tp=1" : ""));
    EXPECT_EQ(r.code, 2) << cmd << ": " << r.out;
    EXPECT_TRUE(Has(r.out, "(injected)")) << cmd << ": " << r.out;
  }
}

// A delta chain through the CLI: synth saves it, list and stats show what
// each step stores and against what, restore-check (onto another mesh),
// verify and export read the delta steps whole, and gc keeps the base.
TEST(Cli, ADeltaChainIsListedRestoredVerifiedAndExported) {
  TempDir dir;
  const std::string root = dir.Join("root");
  CliRun s = Ckpt("synth --out " + root +
                  " --params 300K --mesh dp=2,tp=2 --step 10 --codec auto --optimizer adam --block-size 64K"
                  " --delta-chain 3 --json");
  ASSERT_EQ(s.code, 0) << s.out;
  EXPECT_TRUE(Has(s.out, "\"chain\":[{\"step\":10,")) << s.out;
  EXPECT_TRUE(Has(s.out, "{\"step\":13,")) << s.out;
  CliRun l = Ckpt("list " + root + " --json");
  EXPECT_EQ(l.code, 0) << l.out;
  EXPECT_TRUE(Has(l.out, "\"step\":10,") && Has(l.out, "\"delta_bases\":[]")) << l.out;
  EXPECT_TRUE(Has(l.out, "\"delta_bases\":[10]")) << l.out;
  CliRun lt = Ckpt("list " + root);
  EXPECT_TRUE(Has(lt.out, "deltas of 10")) << lt.out;
  CliRun st = Ckpt("stats " + root + " --step 12 --json");
  EXPECT_EQ(st.code, 0) << st.out;
  EXPECT_TRUE(Has(st.out, "\"delta_bases\":[10]")) << st.out;
  EXPECT_TRUE(Has(st.out, "\"bytes_stored\":")) << st.out;
  for (int step = 11; step <= 13; ++step) {
    CliRun rc = Ckpt("restore-check " + root + " --step " + std::to_string(step) + " --mesh dp=3,tp=1 --json");
    EXPECT_EQ(rc.code, 0) << rc.out;
    EXPECT_TRUE(Has(rc.out, "\"mismatches\":0")) << rc.out;
  }
  CliRun v = Ckpt("verify " + root + " --all --json");
  EXPECT_EQ(v.code, 0) << v.out;
  CliRun e = Ckpt("export " + root + " --step 13 --to " + dir.Join("out.h5"));
  EXPECT_EQ(e.code, 0) << e.out;
  CliRun gc = Ckpt("gc " + root + " --keep-last 1");  // a dry run
  EXPECT_EQ(gc.code, 0) << gc.out;
  EXPECT_TRUE(Has(gc.out, "kept committed step 10: the base of delta step(s) 13")) << gc.out;
  CliRun gcj = Ckpt("gc " + root + " --keep-last 1 --json");
  EXPECT_TRUE(Has(gcj.out, "\"kept_bases\":[10]")) << gcj.out;
  // A damaged base: verify of a delta step finds it and names the base.
  FlipBit(root + "/" + StepDir(10) + "/" + DataFileName(0), 4096 + 64, 1);
  CliRun bad = Ckpt("verify " + root + " --step 12 --json");
  EXPECT_EQ(bad.code, 1) << bad.out;
  EXPECT_TRUE(Has(bad.out, "delta base step 10")) << bad.out;
}

TEST(Cli, SynthRestoreVerifyInspect) {
  TempDir dir;
  const std::string root = dir.Join("root");
  CliRun s = Ckpt("synth --out " + root +
                  " --params 300K --dtype bf16 --mesh dp=2,tp=2,pp=2 --step 12 --codec shuffle-zstd"
                  " --optimizer adam --zero --block-size 64K --json");
  ASSERT_EQ(s.code, 0) << s.out;
  for (const char* key : {"\"step\":12", "\"bytes_logical\"", "\"bytes_stored\"", "\"stall_s\"", "\"write_s\""}) {
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
  // The byte lands in a frame's payload or in its padding, depending on the
  // order the rank's blocks finished encoding: either is named.
  EXPECT_TRUE(Has(rc_bad.out, "checksum mismatch") || Has(rc_bad.out, "frame padding is not zero")) << rc_bad.out;
  EXPECT_TRUE(Has(rc_bad.out, StepDir(12) + "/" + DataFileName(3) + " at byte offset")) << rc_bad.out;
}

// 16,384 ranks and about 850k chunks: a pairwise overlap or cover check
// would run for hours; the planner must finish well inside the test timeout.
TEST(Cli, PlanAtSixteenThousandRanks) {
  CliRun r = Ckpt(
      "plan --ranks-from dp=128,tp=8,pp=16 --ranks-to dp=64,tp=8,pp=32 --params 70G"
      " --layers 80 --optimizer adam --zero --json");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(Has(r.out, "\"ranks_from\":16384")) << r.out;
  const size_t at = r.out.find("\"read_amplification\":");
  ASSERT_NE(at, std::string::npos);
  EXPECT_LT(std::stod(r.out.substr(at + 21)), 1.05) << r.out;
  const size_t mb = r.out.find("\"manifest_bytes\":");
  EXPECT_LT(std::stod(r.out.substr(mb + 17)), 64.0 * (1 << 20)) << r.out;
  // Planned from the layouts' rules: every tensor but the scalar step is a
  // grid, so the one listed chunk is the step's.
  EXPECT_TRUE(Has(r.out, "\"tensors\":1690,")) << r.out;
  EXPECT_TRUE(Has(r.out, "\"grid_tensors\":1689,")) << r.out;
  EXPECT_TRUE(Has(r.out, "\"listed_chunks\":1,")) << r.out;
  EXPECT_FALSE(Has(r.out, "cooperative_plan")) << r.out;  // not asked for

  // The cooperative load planned for the restart, 8 ranks to a host: dp=64
  // replicas, so 1/64 of what every rank reading its own reads, from 2,048
  // hosts.
  CliRun coop = Ckpt(
      "plan --ranks-from dp=128,tp=8,pp=16 --ranks-to dp=64,tp=8,pp=32 --params 70G"
      " --layers 80 --ranks-per-host 8 --json");
  ASSERT_EQ(coop.code, 0) << coop.out;
  EXPECT_TRUE(Has(coop.out, "\"cooperative_plan\":{\"hosts\":2048,")) << coop.out;
  const size_t ratio = coop.out.find("\"storage_bytes_ratio\":");
  ASSERT_NE(ratio, std::string::npos) << coop.out;
  EXPECT_NEAR(std::stod(coop.out.substr(ratio + 22)), 1.0 / 64, 1e-4) << coop.out;
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

// --json: the story on stderr, one JSON object on stdout with every restore
// of the elastic parts; the memory level's smaller generation restored
// memory step 14 reading nothing from storage, some of it from peers.
TEST(Cli, DemoJsonReportsEveryRestoreAndItsSources) {
  TempDir dir;
  // (RunCommand adds 2>&1: the subshell sends the story elsewhere first.)
  const CommandResult r =
      RunCommand("(" + std::string(CKPT_BIN) + " demo --dir " + dir.Join("demo") +
                 " --params 1M --steps 4 --every 2 --step-ms 5 --json 2>" + dir.Join("story.txt") + ")");
  ASSERT_EQ(r.code, 0) << r.out;
  ASSERT_EQ(r.out.front(), '{') << r.out;
  EXPECT_TRUE(Has(r.out, "\"ok\":true")) << r.out;
  EXPECT_TRUE(Has(r.out, "\"story\":\"elastic\",\"generation\":2,\"rank\":0,\"world\":3")) << r.out;
  int memory_restores = 0;
  for (size_t at = r.out.find("\"story\":\"memory\",\"generation\":2"); at != std::string::npos;
       at = r.out.find("\"story\":\"memory\",\"generation\":2", at + 1)) {
    const std::string one = r.out.substr(at, r.out.find('}', at) - at);
    EXPECT_TRUE(Has(one, "\"step\":14,\"level\":\"memory\"")) << one;
    EXPECT_TRUE(Has(one, "\"bytes_from_storage\":0")) << one;
    ++memory_restores;
  }
  EXPECT_EQ(memory_restores, 4) << r.out;
  // Erasure coded RS(4+2), two of six nodes lost: every survivor restores
  // from memory, and the lost data pieces are rebuilt from parity.
  int coded_restores = 0;
  int64_t rebuilt = 0;
  for (size_t at = r.out.find("\"story\":\"memory-erasure\",\"generation\":2"); at != std::string::npos;
       at = r.out.find("\"story\":\"memory-erasure\",\"generation\":2", at + 1)) {
    const std::string one = r.out.substr(at, r.out.find('}', at) - at);
    EXPECT_TRUE(Has(one, "\"step\":14,\"level\":\"memory\"")) << one;
    EXPECT_TRUE(Has(one, "\"bytes_from_storage\":0")) << one;
    const size_t p = one.find("\"bytes_rebuilt_from_parity\":");
    ASSERT_NE(p, std::string::npos) << one;
    rebuilt += std::stoll(one.substr(p + 28));
    ++coded_restores;
  }
  EXPECT_EQ(coded_restores, 4) << r.out;
  EXPECT_GT(rebuilt, 0) << r.out;
  EXPECT_FALSE(Has(r.out, "\"bytes_from_peers\":0,\"bytes_from_storage\":0}]")) << r.out;
}

}  // namespace
}  // namespace ckpt::testing

namespace ckpt::testing {
namespace {

double JsonField(const std::string& json, const std::string& key, size_t from = 0) {
  const size_t at = json.find("\"" + key + "\":", from);
  if (at == std::string::npos) return NAN;
  return std::stod(json.substr(at + key.size() + 3));
}

// Two levels: the memory period and the durable cadence come from the
// model, the simulator agrees, and the plan beats durable saves alone.
TEST(Cli, IntervalTwoLevels) {
  CliRun r = Ckpt(
      "interval --mtbf 4h --stall 2s --write 60s --restart 10m --memory-stall 0.5s --memory-write 5s"
      " --memory-restart 1m --survivable 0.9 --step-time 2s --simulate 200 --json");
  ASSERT_EQ(r.code, 0) << r.out;
  const size_t at = r.out.find("\"two_level\":");
  ASSERT_NE(at, std::string::npos) << r.out;
  const double period = JsonField(r.out, "memory_period_s", at);
  const double every = JsonField(r.out, "durable_every", at);
  const double goodput = JsonField(r.out, "goodput", at);
  EXPECT_GT(every, 1);
  EXPECT_NEAR(JsonField(r.out, "durable_period_s", at), period * every, 0.01);  // JSON keeps 6 digits
  EXPECT_EQ(JsonField(r.out, "memory_period_steps", at), std::round(period / 2));
  EXPECT_GT(goodput, JsonField(r.out, "goodput", r.out.find("\"async\":")));
  EXPECT_NEAR(JsonField(r.out, "simulated_goodput", at), goodput, 0.005);
  EXPECT_GT(JsonField(r.out, "simulated_memory_restores_per_run", at),
            JsonField(r.out, "simulated_durable_restores_per_run", at));
  // Half the options, or a survivable fraction out of range: usage errors.
  EXPECT_EQ(Ckpt("interval --mtbf 4h --stall 2s --write 60s --survivable 0.9").code, 2);
  EXPECT_EQ(Ckpt("interval --mtbf 4h --stall 2s --write 60s --memory-stall 1s --survivable 1").code, 2);
  // The survivable fraction from what failures take out and what the
  // memory level tolerates: RS(4+2) (2 domains) against one replica.
  const std::string base = "interval --mtbf 4h --stall 2s --write 60s --memory-stall 0.5s --memory-write 5s --json";
  CliRun one = Ckpt(base + " --domain-losses 0.9,0.08,0.02 --memory-tolerates 1");
  CliRun two = Ckpt(base + " --domain-losses 0.9,0.08,0.02 --memory-tolerates 2");
  ASSERT_EQ(one.code, 0) << one.out;
  ASSERT_EQ(two.code, 0) << two.out;
  EXPECT_DOUBLE_EQ(JsonField(one.out, "survivable", one.out.find("\"two_level\":")), 0.9);
  EXPECT_DOUBLE_EQ(JsonField(two.out, "survivable", two.out.find("\"two_level\":")), 0.98);
  EXPECT_GT(JsonField(two.out, "durable_every", two.out.find("\"two_level\":")),
            JsonField(one.out, "durable_every", one.out.find("\"two_level\":")));
  EXPECT_EQ(Ckpt(base + " --domain-losses 0.9,0.1 --survivable 0.9").code, 2);
  EXPECT_EQ(Ckpt(base + " --domain-losses 1 --memory-tolerates 1").code, 2);
  EXPECT_EQ(Ckpt(base + " --domain-losses 0.9,x").code, 2);
}

TEST(Cli, IntervalFromAGivenMtbf) {
  TempDir dir;
  const std::string svg = dir.Join("goodput.svg");
  CliRun r = Ckpt(
      "interval --mtbf 3.1h --stall 5s --write 60s --restart 10m --step-time 8s"
      " --simulate 300 --plot " +
      svg + " --json");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NEAR(JsonField(r.out, "mtbf_s"), 3.1 * 3600, 1e-6);
  EXPECT_NEAR(JsonField(r.out, "checkpoint_cost_s"), 65, 1e-9);
  // Young: sqrt(2 * 65 * 11160) = 1204.5 s.
  EXPECT_NEAR(JsonField(r.out, "young_s"), 1204.5, 0.5);
  const size_t async_at = r.out.find("\"async\":");
  ASSERT_NE(async_at, std::string::npos) << r.out;
  const double period = JsonField(r.out, "period_s", async_at);
  const double async_goodput = JsonField(r.out, "goodput", async_at);
  const double block_goodput = JsonField(r.out, "goodput");
  EXPECT_GT(period, 65);
  EXPECT_LT(period, JsonField(r.out, "optimum_s"));  // saving often is cheap when async
  EXPECT_GT(async_goodput, block_goodput);
  EXPECT_NEAR(JsonField(r.out, "simulated_goodput", async_at), async_goodput, 0.01);
  EXPECT_NEAR(JsonField(r.out, "simulated_goodput"), block_goodput, 0.01);
  EXPECT_EQ(JsonField(r.out, "period_steps", async_at), std::round(period / 8));
  const std::string plot = ReadFile(svg);
  EXPECT_EQ(plot.rfind("<svg", 0), 0u) << plot.substr(0, 100);
  EXPECT_TRUE(Has(plot, "</svg>"));
  EXPECT_TRUE(Has(plot, "async optimum"));
  EXPECT_TRUE(Has(plot, "<path d=\"M"));
  EXPECT_TRUE(Has(plot, "<circle"));  // simulated points

  CliRun text = Ckpt("interval --mtbf 24h --checkpoint-cost 2m --current-interval 6h");
  ASSERT_EQ(text.code, 0) << text.out;
  EXPECT_TRUE(Has(text.out, "exact optimum")) << text.out;
  EXPECT_TRUE(Has(text.out, "current interval 6.00 h")) << text.out;
  EXPECT_FALSE(Has(text.out, "asynchronous")) << text.out;
}

TEST(Cli, IntervalFromRatesLogsAndMeasuredCosts) {
  TempDir dir;
  CliRun rate = Ckpt("interval --node-failure-rate 0.001/day --nodes 1000 --checkpoint-cost 60 --json");
  ASSERT_EQ(rate.code, 0) << rate.out;
  EXPECT_NEAR(JsonField(rate.out, "mtbf_s"), 86400, 1e-6);

  // 41 failures 2 hours apart, as ISO timestamps with a header line.
  std::string log = "time,host\n";
  for (int i = 0; i <= 40; ++i) {
    char line[64];
    std::snprintf(line, sizeof(line), "2026-03-%02dT%02d:00:00Z,node%d\n", 1 + i * 2 / 24, i * 2 % 24, i);
    log += line;
  }
  WriteFile(dir.Join("failures.csv"), log);
  CliRun fit = Ckpt("interval --failure-log " + dir.Join("failures.csv") + " --checkpoint-cost 30 --json");
  ASSERT_EQ(fit.code, 0) << fit.out;
  EXPECT_NEAR(JsonField(fit.out, "mtbf_s"), 7200, 1);
  EXPECT_LT(JsonField(fit.out, "mtbf_lower95_s"), 7200);
  EXPECT_GT(JsonField(fit.out, "mtbf_upper95_s"), 7200);
  EXPECT_TRUE(Has(fit.out, "40 failures")) << fit.out;

  // Costs measured by a real save.
  CliRun synth = Ckpt("synth --out " + dir.Join("root") + " --params 1M --json");
  ASSERT_EQ(synth.code, 0) << synth.out;
  WriteFile(dir.Join("costs.json"), synth.out);
  CliRun costs = Ckpt("interval --mtbf 12h --costs " + dir.Join("costs.json") + " --json");
  ASSERT_EQ(costs.code, 0) << costs.out;
  EXPECT_NEAR(JsonField(costs.out, "stall_s"), JsonField(synth.out, "stall_s"), 1e-9);
  EXPECT_NEAR(JsonField(costs.out, "checkpoint_cost_s"), JsonField(synth.out, "commit_s"), 1e-9);
}

// ckpt bench measures a root and its costs file feeds ckpt interval.
TEST(Cli, BenchWritesCostsThatIntervalReads) {
  TempDir dir;
  const std::string root = dir.Join("root"), costs = dir.Join("costs.json");
  CliRun b = Ckpt("bench --out " + root + " --size 4M --runs 2 --costs " + costs);
  ASSERT_EQ(b.code, 0) << b.out;
  EXPECT_TRUE(Has(b.out, "stall (training blocked)")) << b.out;
  const std::string json = ReadFile(costs);
  for (const char* key : {"\"stall_s\":", "\"write_s\":", "\"commit_s\":", "\"load_s\":", "\"verify_s\":"}) {
    EXPECT_TRUE(Has(json, key)) << json;
  }
  CliRun i = Ckpt("interval --costs " + costs + " --mtbf 24h --json");
  EXPECT_EQ(i.code, 0) << i.out;
  EXPECT_TRUE(Has(i.out, "\"optimum_s\":") && Has(i.out, "\"async\":")) << i.out;
  // The measured steps are gone; a root holding checkpoints is refused.
  auto storage = OpenStorage(root);
  ASSERT_OK(storage);
  auto steps = ListCheckpointSteps(**storage);
  ASSERT_OK(steps);
  EXPECT_TRUE(steps->empty());
  EXPECT_TRUE(std::filesystem::is_empty(root)) << "LATEST or a step is left";
  ASSERT_EQ(Ckpt("synth --out " + root + " --params 100K --step 1").code, 0);
  EXPECT_EQ(Ckpt("bench --out " + root + " --size 4M").code, 2);
}

TEST(Cli, IntervalRejectsBadInput) {
  TempDir dir;
  EXPECT_EQ(Ckpt("interval --checkpoint-cost 60").code, 2);  // no failure rate
  EXPECT_EQ(Ckpt("interval --mtbf 1h --nodes 3 --node-failure-rate 1 --checkpoint-cost 60").code, 2);
  EXPECT_EQ(Ckpt("interval --mtbf -1h --checkpoint-cost 60").code, 2);
  EXPECT_EQ(Ckpt("interval --mtbf 1x --checkpoint-cost 60").code, 2);
  EXPECT_EQ(Ckpt("interval --mtbf 24h").code, 2);  // no cost
  EXPECT_EQ(Ckpt("interval --node-failure-rate 0.1/fortnight --nodes 4 --checkpoint-cost 1").code, 2);
  EXPECT_EQ(Ckpt("interval --failure-log /nonexistent/log --checkpoint-cost 60").code, 2);
  WriteFile(dir.Join("garbage"), "yesterday\nsoon\n");
  CliRun g = Ckpt("interval --failure-log " + dir.Join("garbage") + " --checkpoint-cost 60");
  EXPECT_EQ(g.code, 2);
  EXPECT_TRUE(Has(g.out, dir.Join("garbage") + ": line 2:")) << g.out;
  WriteFile(dir.Join("nocosts.json"), "{\"step\":3}");
  EXPECT_EQ(Ckpt("interval --mtbf 1h --costs " + dir.Join("nocosts.json")).code, 2);
}

}  // namespace
}  // namespace ckpt::testing

namespace ckpt::testing {
namespace {

// `ckpt plugins check` runs the conformance suite against a plugin: the
// bundled localfs passes every case; a plugin whose put_if_absent
// overwrites fails, naming the case and what went wrong; one that does not
// load is exit 2.
TEST(Cli, PluginsCheckRunsTheConformanceSuiteAgainstAPlugin) {
  const std::string localfs = std::string(CKPT_TEST_PLUGIN_DIR) + "/libckpt-localfs.so";
  CliRun ok = Ckpt("plugins check " + localfs);
  EXPECT_EQ(ok.code, 0) << ok.out;
  EXPECT_TRUE(Has(ok.out, "8 of 8 cases passed")) << ok.out;
  EXPECT_TRUE(Has(ok.out, "ok   PutIfAbsentCreatesOnceAcrossRacingCallers")) << ok.out;
  // Under a root of its own: the cases' roots are made there, and only there.
  TempDir dir;
  CliRun under = Ckpt("plugins check " + localfs + " --case RejectsEscapingPaths --root localfs://" +
                      dir.Join("roots") + " --json");
  EXPECT_EQ(under.code, 0) << under.out;
  EXPECT_TRUE(Has(under.out, "\"passed\":1,\"failed\":0")) << under.out;

  const std::string broken = std::string(CKPT_TEST_BAD_PLUGIN_DIR) + "/libckpt-brokenfs.so";
  CliRun bad = Ckpt("plugins check " + broken + " 2>&1");
  EXPECT_EQ(bad.code, 1) << bad.out;
  EXPECT_TRUE(Has(bad.out, "FAIL PutIfAbsentCreatesOnceAcrossRacingCallers (")) << bad.out;
  EXPECT_TRUE(Has(bad.out, "PutIfAbsent on an existing file must fail with kAlreadyExists; it returned OK")) << bad.out;
  EXPECT_TRUE(Has(bad.out, "7 of 8 cases passed")) << bad.out;
  CliRun json = Ckpt("plugins check " + broken + " --json");
  EXPECT_EQ(json.code, 1) << json.out;
  EXPECT_TRUE(Has(json.out, "\"name\":\"PutIfAbsentCreatesOnceAcrossRacingCallers\"")) << json.out;
  EXPECT_TRUE(Has(json.out, "\"failed\":1")) << json.out;

  CliRun unloadable = Ckpt("plugins check " + std::string(CKPT_TEST_BAD_PLUGIN_DIR) + "/libckpt-bad-wrong_abi.so 2>&1");
  EXPECT_EQ(unloadable.code, 2) << unloadable.out;
  EXPECT_TRUE(Has(unloadable.out, "ABI version 42")) << unloadable.out;
  EXPECT_EQ(Ckpt("plugins check " + localfs + " --case NoSuchCase 2>&1").code, 2);
}

TEST(Cli, PluginsListsBackendsAndRefusedPlugins) {
  const std::string good = std::string("CKPT_PLUGIN_PATH=") + CKPT_TEST_PLUGIN_DIR + " ";
  CliRun r = Ckpt("plugins --json", good);
  ASSERT_EQ(r.code, 0) << r.out;
  for (const char* scheme : {"file", "posix", "mem", "tiered", "faulty", "hdf5", "localfs"}) {
    EXPECT_TRUE(Has(r.out, std::string("\"scheme\":\"") + scheme + "\"")) << scheme << " in " << r.out;
  }
  EXPECT_TRUE(Has(r.out, "\"abi_version\":1")) << r.out;
  EXPECT_TRUE(Has(r.out, "libckpt-localfs.so")) << r.out;

  // A plugin of another ABI version on the path: listed with the reason, exit 1.
  const std::string bad =
      std::string("CKPT_PLUGIN_PATH=") + CKPT_TEST_BAD_PLUGIN_DIR + ":" + CKPT_TEST_PLUGIN_DIR + " ";
  CliRun b = Ckpt("plugins", bad);
  EXPECT_EQ(b.code, 1) << b.out;
  EXPECT_TRUE(Has(b.out, "libckpt-bad-wrong_abi.so was built for plugin ABI version 42")) << b.out;
  EXPECT_TRUE(Has(b.out, "localfs")) << b.out;

  // A whole save, resharded restore and verify through the plugin.
  TempDir dir;
  const std::string uri = "localfs://" + dir.Join("root");
  ASSERT_EQ(Ckpt("synth --out " + uri + " --params 1M --mesh tp=2", good).code, 0);
  CliRun rc = Ckpt("restore-check " + uri + " --mesh tp=3", good);
  EXPECT_EQ(rc.code, 0) << rc.out;
  EXPECT_EQ(Ckpt("verify " + uri, good).code, 0);
  // Without the plugin path the scheme is unknown: exit 2 with the reason.
  CliRun missing = Ckpt("verify nosuchscheme://" + dir.Join("root"));
  EXPECT_EQ(missing.code, 2) << missing.out;
  EXPECT_TRUE(Has(missing.out, "no storage backend for scheme 'nosuchscheme'")) << missing.out;
}

}  // namespace
}  // namespace ckpt::testing

namespace ckpt::testing {
namespace {

TEST(Cli, DiffStatsListAndGc) {
  TempDir dir;
  const std::string a = dir.Join("a"), b = dir.Join("b");
  for (int step : {10, 20, 30}) {
    ASSERT_EQ(Ckpt("synth --out " + a + " --params 1M --mesh tp=2 --step " + std::to_string(step)).code, 0);
  }
  ASSERT_EQ(Ckpt("synth --out " + b + " --params 1M --mesh tp=4 --step 30 --codec zstd").code, 0);

  // The same synthetic state saved on another mesh with another codec: the
  // tensors are identical; the per-rank blobs and the mesh entry are not.
  CliRun same = Ckpt("diff " + a + " " + b + " --json --tensors-only");
  EXPECT_EQ(same.code, 0) << same.out;
  EXPECT_TRUE(Has(same.out, "\"different\":0")) << same.out;
  CliRun whole = Ckpt("diff " + a + " " + b);
  EXPECT_EQ(whole.code, 1) << whole.out;
  EXPECT_TRUE(Has(whole.out, "only in B  blob 'rng' (rank 3)")) << whole.out;
  EXPECT_TRUE(Has(whole.out, "changed    metadata 'synth.mesh': 'tp=2' in A, 'tp=4' in B")) << whole.out;
  // Steps of one root: the generator's values do not depend on the step.
  CliRun steps = Ckpt("diff " + a + " " + a + " --step-a 10 --step-b 30 --tensors-only");
  EXPECT_EQ(steps.code, 0) << steps.out;
  EXPECT_TRUE(Has(steps.out, "by checksum")) << steps.out;
  // A different seed changes everything.
  ASSERT_EQ(Ckpt("synth --out " + dir.Join("c") + " --params 1M --step 1 --seed 7").code, 0);
  CliRun other = Ckpt("diff " + a + " " + dir.Join("c") + " --tensor '*.mlp.*'");
  EXPECT_EQ(other.code, 1) << other.out;
  EXPECT_TRUE(Has(other.out, "changed")) << other.out;
  EXPECT_FALSE(Has(other.out, "self_attn")) << other.out;
  EXPECT_EQ(Ckpt("diff " + a + " /nonexistent/root").code, 2);

  CliRun stats = Ckpt("stats " + a + " --gate --json");
  EXPECT_EQ(stats.code, 0) << stats.out;
  EXPECT_TRUE(Has(stats.out, "\"previous_step\":20")) << stats.out;
  EXPECT_TRUE(Has(stats.out, "\"ok\":true")) << stats.out;

  CliRun list = Ckpt("list " + a + " --json");
  EXPECT_EQ(list.code, 0) << list.out;
  EXPECT_TRUE(Has(list.out, "\"latest\":30")) << list.out;
  EXPECT_TRUE(Has(list.out, "\"step\":10")) << list.out;
  EXPECT_FALSE(Has(list.out, "\"age_s\":-")) << "a step just saved has an age: " << list.out;
  CliRun table = Ckpt("list " + a);
  EXPECT_FALSE(Has(table.out, "MiB          - ")) << table.out;

  // gc is a dry run unless --yes.
  CliRun dry = Ckpt("gc " + a + " --keep-last 1");
  EXPECT_EQ(dry.code, 0) << dry.out;
  EXPECT_TRUE(Has(dry.out, "would remove committed step 10")) << dry.out;
  EXPECT_TRUE(std::filesystem::exists(a + "/step-0000000010"));
  CliRun real = Ckpt("gc " + a + " --keep-last 1 --yes --json");
  EXPECT_EQ(real.code, 0) << real.out;
  EXPECT_TRUE(Has(real.out, "\"removed_steps\":[10,20]")) << real.out;
  EXPECT_FALSE(std::filesystem::exists(a + "/step-0000000010"));
  EXPECT_EQ(Ckpt("verify " + a).code, 0);
  EXPECT_EQ(Ckpt("gc /nonexistent/root").code, 2);
}

}  // namespace
}  // namespace ckpt::testing
