// Interval models against published values, estimators against known
// parameters, the simulator against the formulas, and the policy.
#include "ckpt/interval.h"

#include <cmath>
#include <random>
#include <utility>
#include <vector>

#include "policy/failure_fit.h"
#include "testutil/test_util.h"
#include "util/strings.h"

namespace ckpt::testing {
namespace {

constexpr double kMin = 60, kHour = 3600;

// Daly, FGCS 2006, with Ts = 500 h, R = 10 min, delta = 5 min.
TEST(Daly, PublishedExamples) {
  EXPECT_NEAR(DalyInterval(5 * kMin, 24 * kHour) / kMin, 117, 1.0);
  EXPECT_NEAR(DalyInterval(5 * kMin, 6 * kHour) / kMin, 57, 1.0);
  EXPECT_NEAR(DalyInterval(5 * kMin, 15 * kMin) / kMin, 9.1, 0.1);
  // The exact optimum of the model agrees closely with the estimate.
  for (double m : {24 * kHour, 6 * kHour, 15 * kMin}) {
    EXPECT_NEAR(ExactDalyInterval(5 * kMin, m), DalyInterval(5 * kMin, m), 0.02 * DalyInterval(5 * kMin, m));
  }
}

TEST(Daly, LargeCheckpointCostBranch) {
  EXPECT_DOUBLE_EQ(DalyInterval(3 * kHour, 1 * kHour), 1 * kHour);  // delta >= 2M
  EXPECT_DOUBLE_EQ(DalyInterval(2 * kHour, 1 * kHour), 1 * kHour);
  EXPECT_LT(DalyInterval(1.9 * kHour, 1 * kHour), 1.1 * kHour);
}

TEST(Young, Value) { EXPECT_DOUBLE_EQ(YoungInterval(5 * kMin, 24 * kHour), 2 * kHour); }

TEST(Daly, ExactOptimumMinimisesWallTime) {
  for (double m : {15 * kMin, 6 * kHour, 24 * kHour, 200 * kHour}) {
    for (double delta : {10.0, 5 * kMin, 30 * kMin}) {
      const double tau = ExactDalyInterval(delta, m);
      const double w = DalyWallTime(500 * kHour, tau, delta, 10 * kMin, m);
      EXPECT_LT(w, DalyWallTime(500 * kHour, tau * 1.02, delta, 10 * kMin, m));
      EXPECT_LT(w, DalyWallTime(500 * kHour, tau * 0.98, delta, 10 * kMin, m));
      EXPECT_NEAR(DalyGoodput(tau, delta, 10 * kMin, m), 500 * kHour / w, 1e-12);
    }
  }
}

TEST(Async, OptimumAndConstraint) {
  const double p = AsyncInterval(2, 60, 3.1 * kHour);
  EXPECT_GT(AsyncGoodput(p, 2, 60, 600, 3.1 * kHour), AsyncGoodput(p * 1.1, 2, 60, 600, 3.1 * kHour));
  EXPECT_GT(AsyncGoodput(p, 2, 60, 600, 3.1 * kHour), AsyncGoodput(p * 0.9, 2, 60, 600, 3.1 * kHour));
  EXPECT_NEAR(p, std::sqrt(2 * 2 * 3.1 * kHour), 0.15 * p);
  // A save starts only after the previous one is durable.
  EXPECT_GE(AsyncInterval(1, 3600, 24 * kHour), 3601);
  // With rare failures the loss per failure is about period / 2 + write +
  // restart, and the goodput about (1 - stall / period)(1 - loss / M).
  EXPECT_NEAR(AsyncLossPerFailure(600, 1, 60, 600, 1000 * kHour), 300 + 60 + 600, 1);
  const double m = 1000 * kHour;
  EXPECT_NEAR(AsyncGoodput(600, 1, 60, 600, m), (1 - 1 / 600.0) * (1 - 960 / m), 1e-6);
  // The write does not move the optimum, only scales the goodput.
  EXPECT_DOUBLE_EQ(AsyncInterval(2, 1, 3.1 * kHour), AsyncInterval(2, 100, 3.1 * kHour));
  EXPECT_NEAR(AsyncGoodput(900, 2, 100, 600, 3.1 * kHour) / AsyncGoodput(900, 2, 1, 600, 3.1 * kHour),
              std::exp(-99 / (3.1 * kHour)), 1e-12);
}

TEST(Failures, ChiSquareQuantiles) {
  EXPECT_NEAR(ChiSquareQuantile(0.975, 10), 20.483, 1e-3);
  EXPECT_NEAR(ChiSquareQuantile(0.025, 10), 3.247, 1e-3);
  EXPECT_NEAR(ChiSquareQuantile(0.5, 2), 1.386, 1e-3);
}

TEST(Failures, MtbfEstimateCoversTheTruth) {
  std::mt19937_64 rng(11);
  std::exponential_distribution<double> exp(1.0 / 3600);
  int covered = 0;
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<double> gaps(50);
    for (double& g : gaps) g = exp(rng);
    MtbfEstimate e = EstimateMtbf(gaps);
    EXPECT_EQ(e.failures, 50);
    EXPECT_LT(e.lower95, e.mtbf);
    EXPECT_GT(e.upper95, e.mtbf);
    covered += e.lower95 <= 3600 && 3600 <= e.upper95;
  }
  // A 95% interval covers the true MTBF in about 95% of trials.
  EXPECT_GE(covered, 180);
  EXPECT_LE(covered, 199);
}

TEST(Failures, WeibullFitRecoversParameters) {
  std::mt19937_64 rng(5);
  std::weibull_distribution<double> w(0.7, 5000);
  std::vector<double> gaps(4000);
  for (double& g : gaps) g = w(rng);
  auto fit = FitWeibull(gaps);
  ASSERT_OK(fit);
  EXPECT_NEAR(fit->shape, 0.7, 0.03);
  EXPECT_NEAR(fit->scale, 5000, 250);
  EXPECT_NEAR(fit->Mean(), 5000 * std::tgamma(1 + 1 / 0.7), 400);
  EXPECT_FALSE(FitWeibull({5, 5, 5}).ok());
}

TEST(Failures, ParsesLogsAndDurations) {
  auto csv = ParseFailureLog(
      "time,node\n2024-05-01T00:00:00Z,n1\n2024-05-01T03:00:00Z,n7\n"
      "2024-05-01T04:30:00+01:00,n2\n",
      false);
  ASSERT_OK(csv);
  // The third is 03:30 UTC: gaps 3 h and 30 min, sorted by time.
  ASSERT_EQ(csv->size(), 2u);
  EXPECT_DOUBLE_EQ((*csv)[0], 3 * kHour);
  EXPECT_DOUBLE_EQ((*csv)[1], 30 * kMin);
  auto json = ParseFailureLog("[1714521600, 1714525200, \"1714528800\"]", false);
  ASSERT_OK(json);
  EXPECT_EQ(json->size(), 2u);
  auto intervals = ParseFailureLog("3h\n45m\n1800\n", true);
  ASSERT_OK(intervals);
  EXPECT_EQ(*intervals, (std::vector<double>{3 * kHour, 45 * kMin, 1800}));
  EXPECT_FALSE(ParseFailureLog("2024-05-01T00:00:00Z\n", false).ok());
  EXPECT_FALSE(ParseFailureLog("yesterday\ntoday\n", false).ok());
  auto bad = ParseFailureLog("3h\nsoon\n", true);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("line 2: bad duration 'soon'"), std::string::npos) << bad.status();
}

// One duration syntax for flags, URI parameters and failure logs.
TEST(Parsers, Durations) {
  EXPECT_DOUBLE_EQ(*ParseDuration("1.5h"), 5400);
  EXPECT_DOUBLE_EQ(*ParseDuration("2d"), 172800);
  EXPECT_DOUBLE_EQ(*ParseDuration("90"), 90);
  EXPECT_DOUBLE_EQ(*ParseDuration(" 15m "), 900);
  EXPECT_DOUBLE_EQ(*ParseDuration("500ms"), 0.5);
  EXPECT_DOUBLE_EQ(*ParseDuration("250us"), 250e-6);
  EXPECT_DOUBLE_EQ(*ParseDuration("2.5s"), 2.5);
  for (const char* bad : {"soon", "-5m", "", "s", "1x", "inf", "nan", "1e400", "5 m s"}) {
    EXPECT_FALSE(ParseDuration(bad).has_value()) << bad;
  }
}

// One byte-count syntax for flags and URI parameters.
TEST(Parsers, ByteCounts) {
  EXPECT_EQ(*ParseByteCount("4096"), 4096);
  EXPECT_EQ(*ParseByteCount("64M"), int64_t{64} << 20);
  EXPECT_EQ(*ParseByteCount("64MiB"), int64_t{64} << 20);
  EXPECT_EQ(*ParseByteCount("1.5G"), int64_t{3} << 29);
  EXPECT_EQ(*ParseByteCount("2k"), 2048);
  EXPECT_EQ(*ParseByteCount("1T"), int64_t{1} << 40);
  EXPECT_EQ(*ParseByteCount("125M", /*binary=*/false), 125000000);
  EXPECT_EQ(*ParseByteCount("1KB", /*binary=*/false), 1000);
  EXPECT_EQ(*ParseByteCount("4096B"), 4096);
  EXPECT_EQ(*ParseByteCount("0"), 0);
  for (const char* bad : {"", "M", "-1M", "lots", "1Q", "1e30", "5000000T", "inf", "1 M B"}) {
    EXPECT_FALSE(ParseByteCount(bad).has_value()) << bad;
  }
}

TEST(Simulation, BlockingMatchesDalysModel) {
  for (double m : {24 * kHour, 6 * kHour}) {
    SimulationConfig c;
    c.work = 500 * kHour;
    c.delta = 5 * kMin;
    c.restart = 10 * kMin;
    c.mtbf = m;
    c.interval = ExactDalyInterval(c.delta, m);
    c.runs = 800;
    c.seed = 3;
    SimulationResult r = Simulate(c);
    const double analytic = DalyGoodput(c.interval, c.delta, c.restart, m);
    EXPECT_NEAR(r.goodput, analytic, 3 * r.goodput_ci95 + 0.002) << "M " << m;
    EXPECT_GT(r.failures_per_run, 0);
  }
}

TEST(Simulation, AsyncMatchesTheModel) {
  SimulationConfig c;
  c.async = true;
  c.work = 30 * 24 * kHour;
  c.stall = 5;
  c.write = 120;
  c.restart = 10 * kMin;
  c.mtbf = 24 * kHour;
  c.interval = AsyncInterval(c.stall, c.write, c.mtbf);
  c.runs = 600;
  SimulationResult r = Simulate(c);
  const double analytic = AsyncGoodput(c.interval, c.stall, c.write, c.restart, c.mtbf);
  EXPECT_NEAR(r.goodput, analytic, 3 * r.goodput_ci95 + 0.002);
  // Frequent failures and periods far from the optimum: the model is exact
  // for exponential failures, so it still matches.
  for (double period : {300.0, 1800.0, 7200.0}) {
    SimulationConfig f = c;
    f.mtbf = 3 * kHour;
    f.interval = period;
    f.runs = 400;
    SimulationResult fr = Simulate(f);
    EXPECT_NEAR(fr.goodput, AsyncGoodput(period, f.stall, f.write, f.restart, f.mtbf), 3 * fr.goodput_ci95 + 0.002)
        << "period " << period;
  }
  // Async beats blocking saves of the same total cost.
  const double blocking =
      DalyGoodput(ExactDalyInterval(c.stall + c.write, c.mtbf), c.stall + c.write, c.restart, c.mtbf);
  EXPECT_GT(r.goodput, blocking);
}

TEST(Simulation, WeibullFailuresRunAndAreSeeded) {
  SimulationConfig c;
  c.work = 100 * kHour;
  c.delta = 60;
  c.restart = 300;
  c.mtbf = 6 * kHour;
  c.interval = 30 * kMin;
  c.weibull_shape = 0.7;
  c.runs = 200;
  c.seed = 9;
  SimulationResult a = Simulate(c), b = Simulate(c);
  EXPECT_EQ(a.goodput, b.goodput);
  EXPECT_GT(a.goodput, 0.5);
  EXPECT_LT(a.goodput, 1.0);
  c.seed = 10;
  EXPECT_NE(Simulate(c).goodput, a.goodput);
}

// Two levels: a memory save (0.5 s stall, committed 5 s later, restored in
// a minute) beside a durable one (2 s, 60 s, 10 min), 90% of failures
// survivable by memory, MTBF 4 h.
constexpr LevelCosts kMemory{0.5, 5, 60}, kDurable{2, 60, 600};

SimulationConfig TwoLevelRun(double period, int64_t every, double survivable, int64_t runs) {
  SimulationConfig c;
  c.two_level = true;
  c.work = 20 * 24 * kHour;
  c.interval = period;
  c.durable_every = every;
  c.memory = kMemory;
  c.stall = kDurable.stall;
  c.write = kDurable.write;
  c.restart = kDurable.restart;
  c.survivable = survivable;
  c.mtbf = 4 * kHour;
  c.runs = runs;
  c.seed = 5;
  return c;
}

// The model's optimum is where the simulator finds the best goodput (moving
// the period or the durable cadence by a factor of three loses), the model
// predicts the simulated goodput, and two levels beat durable saves alone.
TEST(TwoLevel, OptimumAgreesWithTheSimulator) {
  const TwoLevelPlan plan = TwoLevelInterval(kMemory, kDurable, 0.9, 4 * kHour);
  EXPECT_GT(plan.durable_every, 1);
  EXPECT_NEAR(plan.durable_period, plan.memory_period * static_cast<double>(plan.durable_every), 1e-9);
  const SimulationResult at = Simulate(TwoLevelRun(plan.memory_period, plan.durable_every, 0.9, 300));
  EXPECT_NEAR(at.goodput, plan.goodput, 3 * at.goodput_ci95 + 0.005);
  EXPECT_GT(at.memory_restores_per_run, 5 * at.durable_restores_per_run);
  for (const auto& [period, every] :
       std::vector<std::pair<double, int64_t>>{{plan.memory_period / 3, plan.durable_every},
                                               {plan.memory_period * 3, plan.durable_every},
                                               {plan.memory_period, std::max<int64_t>(1, plan.durable_every / 3)},
                                               {plan.memory_period, plan.durable_every * 3}}) {
    const SimulationResult off = Simulate(TwoLevelRun(period, every, 0.9, 300));
    EXPECT_LT(off.goodput, at.goodput + at.goodput_ci95 + off.goodput_ci95)
        << "period " << period << ", durable every " << every;
  }
  // Durable saves alone, at their own optimum.
  const double durable_only = AsyncInterval(kDurable.stall, kDurable.write, 4 * kHour);
  EXPECT_GT(plan.goodput, AsyncGoodput(durable_only, kDurable.stall, kDurable.write, kDurable.restart, 4 * kHour));
  SimulationConfig alone = TwoLevelRun(durable_only, 1, 0.9, 300);
  alone.two_level = false;
  alone.async = true;
  EXPECT_GT(at.goodput, Simulate(alone).goodput + 0.01);
}

// Memory saves pay only for failures they survive: none survivable, or a
// memory level no cheaper than storage, leaves durable saves alone; the more
// failures memory survives, the rarer the durable saves.
TEST(TwoLevel, CadenceFollowsWhatMemorySurvives) {
  EXPECT_EQ(TwoLevelInterval(kMemory, kDurable, 0.0, 4 * kHour).durable_every, 1);
  EXPECT_EQ(TwoLevelInterval(kDurable, kDurable, 0.9, 4 * kHour).durable_every, 1);
  int64_t last = 0;
  for (double p : {0.5, 0.8, 0.95, 0.99}) {
    const TwoLevelPlan plan = TwoLevelInterval(kMemory, kDurable, p, 4 * kHour);
    EXPECT_GT(plan.durable_every, last) << p;
    last = plan.durable_every;
  }
  // The simulator restores from memory only what memory survives, and
  // from storage only what it does not, or a durable save that is the
  // newest: never, when a memory save started after it commits first (30 s
  // apart, 5.5 s to commit a memory save, 62 s a durable one), but for
  // failures before the first save.
  EXPECT_EQ(Simulate(TwoLevelRun(300, 4, 0.0, 20)).memory_restores_per_run, 0);
  const SimulationResult all = Simulate(TwoLevelRun(30, 4, 1.0, 20));
  EXPECT_GT(all.memory_restores_per_run, 100);
  EXPECT_LT(all.durable_restores_per_run, 0.2);
}

// What the memory level survives, from the shares of failures by domains
// lost: one replica survives the failures of one domain, RS(4+2) those of
// two; and a memory level that survives more spaces durable saves further.
TEST(TwoLevel, SurvivableFractionCountsTheFailuresOfAsManyDomainsAsTolerated) {
  const std::vector<double> shares = {0.9, 0.08, 0.02};
  EXPECT_DOUBLE_EQ(*SurvivableFraction(shares, 1), 0.9);
  EXPECT_DOUBLE_EQ(*SurvivableFraction(shares, 2), 0.98);
  EXPECT_DOUBLE_EQ(*SurvivableFraction(shares, 3), 1.0);
  EXPECT_DOUBLE_EQ(*SurvivableFraction(shares, 0), 0.0);
  EXPECT_DOUBLE_EQ(*SurvivableFraction({45, 4, 1}, 2), 0.98);  // counts work as shares
  EXPECT_FALSE(SurvivableFraction({}, 1).ok());
  EXPECT_FALSE(SurvivableFraction({0.5, -0.1}, 1).ok());
  EXPECT_GT(TwoLevelInterval(kMemory, kDurable, *SurvivableFraction(shares, 2), 4 * kHour).durable_every,
            TwoLevelInterval(kMemory, kDurable, *SurvivableFraction(shares, 1), 4 * kHour).durable_every);
}

// A durable save is held in storage only: a failure memory survives still
// restores it from storage when it is the newest committed save. With every
// save durable the durable restart is paid whatever memory survives; with a
// memory save between durable ones, only in the part of the cycle where the
// durable save is the newest. The model follows the simulator there, in the
// goodput and in the share of restores from storage.
TEST(TwoLevel, ADurableSaveIsRestoredFromStorage) {
  const double M = 4 * kHour;
  for (double restart : {60.0, 600.0}) {
    const LevelCosts durable{kDurable.stall, kDurable.write, restart};
    EXPECT_NEAR(TwoLevelGoodput(300, 1, kMemory, durable, 0.9, M), TwoLevelGoodput(300, 1, kMemory, durable, 0.0, M),
                1e-12);
    EXPECT_NEAR(TwoLevelGoodput(300, 1, kMemory, durable, 0.9, M),
                1 - kDurable.stall / 300 - (150 + kDurable.stall + kDurable.write + restart) / M, 1e-12);
  }
  EXPECT_EQ(Simulate(TwoLevelRun(300, 1, 0.9, 20)).memory_restores_per_run, 0);

  struct Case {
    double period;
    int64_t every;
  };
  // 300 s, every 1: all durable. 120 s, every 4: the durable save (committed
  // 62 s after it starts) is the newest for 63.5 s of each 480. 30 s, every
  // 4: a memory save started after it commits first, so it never is.
  for (const Case& c : {Case{300, 1}, Case{120, 4}, Case{30, 4}, Case{600, 3}}) {
    const SimulationResult sim = Simulate(TwoLevelRun(c.period, c.every, 0.9, 300));
    EXPECT_NEAR(sim.goodput, TwoLevelGoodput(c.period, c.every, kMemory, kDurable, 0.9, M),
                3 * sim.goodput_ci95 + 0.003)
        << c.period << " s, durable every " << c.every;
    const double k = static_cast<double>(c.every), c1 = kMemory.stall + kMemory.write,
                 c2 = kDurable.stall + kDurable.write;
    const double f = c.every == 1 ? 1 : (c.period + c1 - std::min(c2, c.period + c1)) / (k * c.period);
    const double from_storage =
        sim.durable_restores_per_run / (sim.durable_restores_per_run + sim.memory_restores_per_run);
    EXPECT_NEAR(from_storage, 0.1 + 0.9 * f, 0.03) << c.period << " s, durable every " << c.every;
  }

  // The durable restart moves the cadence: the dearer a restore from
  // storage, the more memory saves between durable ones.
  const TwoLevelPlan quick = TwoLevelInterval(kMemory, {kDurable.stall, kDurable.write, 60}, 0.9, M);
  const TwoLevelPlan slow = TwoLevelInterval(kMemory, {kDurable.stall, kDurable.write, 2 * kHour}, 0.9, M);
  EXPECT_LT(quick.durable_every, slow.durable_every);
  EXPECT_GT(quick.goodput, slow.goodput);
}

TEST(Policy, TwoLevelsAlternateMemoryAndDurableSaves) {
  IntervalPolicyOptions o;
  o.two_level = true;
  o.mtbf_s = 4 * kHour;
  o.stall_s = kDurable.stall;
  o.write_s = kDurable.write;
  o.restart_s = kDurable.restart;
  o.memory_stall_s = kMemory.stall;
  o.memory_write_s = kMemory.write;
  o.memory_restart_s = kMemory.restart;
  o.survivable = 0.9;
  o.min_interval_s = 1;
  IntervalPolicy p(o);
  const TwoLevelPlan plan = TwoLevelInterval(kMemory, kDurable, 0.9, 4 * kHour);
  EXPECT_NEAR(p.interval_s(), plan.memory_period, 1e-9);
  EXPECT_EQ(p.durable_every(), plan.durable_every);
  EXPECT_EQ(p.NextLevel(0), std::nullopt);
  double now = 0;
  int memory = 0, durable = 0;
  for (int64_t i = 0; i < 3 * p.durable_every(); ++i) {
    now += p.interval_s() + 0.001;
    EXPECT_EQ(p.NextLevel(now, /*previous_committed=*/false), std::nullopt);
    const std::optional<SaveLevel> level = p.NextLevel(now);
    ASSERT_NE(level, std::nullopt);
    (*level == SaveLevel::kDurable ? durable : memory)++;
    EXPECT_EQ(*level == SaveLevel::kDurable, (i + 1) % p.durable_every() == 0) << i;
    p.SaveStarted(now, *level);
    EXPECT_EQ(p.NextLevel(now + 0.5), std::nullopt);
  }
  EXPECT_EQ(durable, 3);
  EXPECT_EQ(memory, 3 * (p.durable_every() - 1));
  // Slower memory saves than estimated move the period out.
  SaveStats slow;
  slow.stall_s = 5;
  slow.commit_s = 30;
  const double before = p.interval_s();
  for (int i = 0; i < 10; ++i) p.RecordSave(slow, SaveLevel::kMemory);
  EXPECT_GT(p.interval_s(), before);
}

TEST(Policy, WaitsForTheIntervalAndForDurability) {
  IntervalPolicyOptions o;
  o.mtbf_s = 24 * kHour;
  o.stall_s = 2;
  o.write_s = 60;
  o.min_interval_s = 1;
  IntervalPolicy p(o);
  const double interval = p.interval_s();
  EXPECT_NEAR(interval, AsyncInterval(2, 60, 24 * kHour), 1e-6);
  EXPECT_FALSE(p.ShouldCheckpoint(0));
  EXPECT_FALSE(p.ShouldCheckpoint(interval - 1));
  EXPECT_TRUE(p.ShouldCheckpoint(interval + 1));
  EXPECT_FALSE(p.ShouldCheckpoint(interval + 1, /*previous_durable=*/false));
  p.SaveStarted(interval + 1);
  EXPECT_FALSE(p.ShouldCheckpoint(interval + 2));
  // Measured saves that stall longer move the interval out.
  SaveStats slow;
  slow.stall_s = 20;
  slow.commit_s = 80;
  for (int i = 0; i < 20; ++i) p.RecordSave(slow);
  EXPECT_NEAR(p.stall_s(), 20, 0.1);
  EXPECT_NEAR(p.write_s(), 60, 0.1);
  EXPECT_GT(p.interval_s(), 2 * interval);
  p.SetMtbf(1 * kHour);
  EXPECT_LT(p.interval_s(), interval * 2);
}

}  // namespace
}  // namespace ckpt::testing
