// ckpt interval: how often to checkpoint, from a failure rate and save costs.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "ckpt/interval.h"
#include "commands.h"
#include "common/cli.h"
#include "common/svg_plot.h"
#include "common/synth_job.h"
#include "util/json.h"
#include "util/strings.h"

namespace ckpt::tools {
namespace {

std::string Dur(double s) {
  char b[64];
  if (!std::isfinite(s)) return "inf";
  if (s < 120) {
    std::snprintf(b, sizeof(b), "%.1f s", s);
  } else if (s < 7200) {
    std::snprintf(b, sizeof(b), "%.1f min", s / 60);
  } else if (s < 3 * 86400) {
    std::snprintf(b, sizeof(b), "%.2f h", s / 3600);
  } else {
    std::snprintf(b, sizeof(b), "%.1f d", s / 86400);
  }
  return b;
}

std::string TickDur(double s) { return Dur(s); }

// A numeric field of a flat JSON object ("key": number), or NaN.
double JsonNumber(const std::string& text, const std::string& key) {
  const size_t at = text.find("\"" + key + "\"");
  if (at == std::string::npos) return NAN;
  const size_t colon = text.find(':', at);
  if (colon == std::string::npos) return NAN;
  return std::strtod(text.c_str() + colon + 1, nullptr);
}

absl::StatusOr<std::string> ReadText(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(StrCat("cannot read ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

int IntervalMain(int argc, char** argv, int first) {
  std::string mtbf_text, node_rate_text, log_path, stall_text, write_text, cost_text,
      restart_text = "10m", work_text, step_text, current_text, costs_path, plot_path, memory_stall_text,
      memory_write_text, memory_restart_text = "1m";
  double survivable = -1;
  int64_t nodes = 0, gpus = 0, simulate = 0, seed = 1;
  double gpu_hour_cost = 0, weibull_shape = 0;
  bool json = false, log_intervals = false;
  Args args("interval", "(--mtbf T | --node-failure-rate X/day --nodes N | --failure-log F) [options]",
            "Computes how often to checkpoint. Blocking saves (the job stops for the whole\n"
            "checkpoint cost): Young's and Daly's estimates and the exact optimum of Daly's\n"
            "model with its expected goodput. Asynchronous saves (the job stalls for the\n"
            "copy, the write finishes in the background, a failure before it is durable\n"
            "falls back to the previous checkpoint): the optimum period and its goodput.\n"
            "--simulate checks the numbers by Monte Carlo; --plot draws goodput against the\n"
            "interval. With --memory-stall and --survivable, two levels: memory saves\n"
            "(replicated into peers' memory; they survive the fraction --survivable of\n"
            "failures, those of one failure domain) and durable saves: the memory period\n"
            "and how many saves apart the durable ones go. Durations take s, m, h, d\n"
            "suffixes.");
  args.String("mtbf", &mtbf_text, "mean time between failures of the whole job, e.g. 24h");
  args.String("node-failure-rate", &node_rate_text, "failures per node per day, e.g. 0.001/day");
  args.Int("nodes", &nodes, "node count (with --node-failure-rate)");
  args.String("failure-log", &log_path, "failure timestamps (CSV or JSON array) to fit");
  args.Switch("log-intervals", &log_intervals, "the log holds inter-failure durations, not times");
  args.String("stall", &stall_text, "async: how long a save blocks training");
  args.String("write", &write_text, "async: from the end of the stall until durable");
  args.String("checkpoint-cost", &cost_text, "blocking: the whole save (default stall + write)");
  args.String("costs", &costs_path, "JSON with stall_s and write_s/commit_s (ckpt synth --json)");
  args.String("restart", &restart_text, "time to restart after a failure (default 10m)");
  args.String("work", &work_text, "total compute of the run, for the expected wall time");
  args.String("step-time", &step_text, "one training step, to express intervals in steps");
  args.Int("gpus", &gpus, "GPUs in the job, to price the lost time");
  args.Double("gpu-hour-cost", &gpu_hour_cost, "price of one GPU-hour");
  args.String("current-interval", &current_text, "the interval in use today, for comparison");
  args.Int("simulate", &simulate, "Monte Carlo runs beside the formulas (e.g. 2000)");
  args.Int("seed", &seed, "simulation seed (default 1)");
  args.Double("weibull-shape", &weibull_shape, "simulate Weibull failures of this shape");
  args.String("plot", &plot_path, "write goodput against interval as SVG");
  args.String("memory-stall", &memory_stall_text, "two levels: how long a memory save blocks training");
  args.String("memory-write", &memory_write_text, "two levels: from the stall until replicated (default 0)");
  args.String("memory-restart", &memory_restart_text, "two levels: restart from peers' memory (default 1m)");
  args.Double("survivable", &survivable, "two levels: fraction of failures a memory save survives, in [0, 1)");
  args.Switch("json", &json, "print JSON");
  int exit = 0;
  if (!args.Parse(argc, argv, first, &exit)) return exit;
  auto usage = [&](const std::string& msg) {
    std::fprintf(stderr, "ckpt interval: %s\n", msg.c_str());
    return kExitUsage;
  };
  auto dur = [&](const std::string& text, const char* what) -> absl::StatusOr<double> {
    auto d = ParseDuration(text);
    if (!d) {
      return absl::InvalidArgumentError(
          StrCat(what, ": bad duration '", text, "' (a number with s, m, h or d, e.g. 24h)"));
    }
    return *d;
  };

  // Failure rate.
  double mtbf = 0;
  std::string mtbf_source;
  MtbfEstimate estimate;
  std::optional<WeibullFit> weibull;
  const int sources = !mtbf_text.empty() + !node_rate_text.empty() + !log_path.empty();
  if (sources != 1) return usage("give exactly one of --mtbf, --node-failure-rate, --failure-log");
  if (!mtbf_text.empty()) {
    auto d = dur(mtbf_text, "--mtbf");
    if (!d.ok() || *d <= 0) return usage("--mtbf must be a positive duration");
    mtbf = *d;
    mtbf_source = "given";
  } else if (!node_rate_text.empty()) {
    std::string t = node_rate_text;
    double per = 86400;  // a bare number is per day
    if (size_t slash = t.find('/'); slash != std::string::npos) {
      const std::string unit = t.substr(slash + 1);
      if (unit == "day" || unit == "d") {
        per = 86400;
      } else if (unit == "hour" || unit == "h") {
        per = 3600;
      } else if (auto d = ParseDuration(unit); d && *d > 0) {
        per = *d;  // e.g. 0.3/30d
      } else {
        return usage("--node-failure-rate unit must be /day, /hour or a duration such as /30d");
      }
      t = t.substr(0, slash);
    }
    double rate;
    if (!ParseDouble(t, &rate) || rate <= 0 || nodes <= 0) {
      return usage("--node-failure-rate needs a positive rate and --nodes");
    }
    mtbf = per / (rate * static_cast<double>(nodes));
    mtbf_source = StrCat(node_rate_text, " x ", nodes, " nodes");
  } else {
    auto text = ReadText(log_path);
    if (!text.ok()) return usage(std::string(text.status().message()));
    auto gaps = ParseFailureLog(*text, log_intervals);
    if (!gaps.ok()) return usage(StrCat(log_path, ": ", gaps.status().message()));
    estimate = EstimateMtbf(*gaps);
    mtbf = estimate.mtbf;
    auto fit = FitWeibull(*gaps);
    if (fit.ok()) weibull = *fit;
    mtbf_source = StrCat(estimate.failures, " failures over ", Dur(estimate.observed_s));
  }

  // Costs.
  double stall = NAN, write = NAN, cost = NAN;
  if (!costs_path.empty()) {
    auto text = ReadText(costs_path);
    if (!text.ok()) return usage(std::string(text.status().message()));
    stall = JsonNumber(*text, "stall_s");
    const double commit = JsonNumber(*text, "commit_s");
    const double w = JsonNumber(*text, "write_s");
    const double done = std::isfinite(commit) ? commit : w;
    if (!std::isfinite(stall) || !std::isfinite(done)) {
      return usage(StrCat(costs_path, " has no stall_s and write_s/commit_s"));
    }
    write = std::max(0.0, done - stall);
  }
  if (!stall_text.empty()) {
    auto d = dur(stall_text, "--stall");
    if (!d.ok()) return usage(std::string(d.status().message()));
    stall = *d;
  }
  if (!write_text.empty()) {
    auto d = dur(write_text, "--write");
    if (!d.ok()) return usage(std::string(d.status().message()));
    write = *d;
  }
  if (!cost_text.empty()) {
    auto d = dur(cost_text, "--checkpoint-cost");
    if (!d.ok()) return usage(std::string(d.status().message()));
    cost = *d;
  }
  if (!std::isfinite(cost) && std::isfinite(stall)) cost = stall + (std::isfinite(write) ? write : 0);
  if (!std::isfinite(cost) || cost <= 0) {
    return usage("give --checkpoint-cost, or --stall (and --write), or --costs");
  }
  const bool async = std::isfinite(stall) && std::isfinite(write) && stall > 0;
  auto restart = dur(restart_text, "--restart");
  if (!restart.ok()) return usage(std::string(restart.status().message()));
  double work = NAN, step = NAN, current = NAN;
  if (!work_text.empty()) {
    auto d = dur(work_text, "--work");
    if (!d.ok()) return usage(std::string(d.status().message()));
    work = *d;
  }
  if (!step_text.empty()) {
    auto d = dur(step_text, "--step-time");
    if (!d.ok() || *d <= 0) return usage("--step-time must be a positive duration");
    step = *d;
  }
  if (!current_text.empty()) {
    auto d = dur(current_text, "--current-interval");
    if (!d.ok() || *d <= 0) return usage("--current-interval must be a positive duration");
    current = *d;
  }

  // Two levels.
  const bool two_level = !memory_stall_text.empty() || survivable >= 0;
  LevelCosts memory_costs, durable_costs;
  TwoLevelPlan plan2;
  if (two_level) {
    if (memory_stall_text.empty() || survivable < 0 || survivable >= 1 || !async) {
      return usage("two levels need --memory-stall, --survivable in [0, 1), and the durable --stall and --write");
    }
    auto ms = dur(memory_stall_text, "--memory-stall");
    auto mw = dur(memory_write_text.empty() ? "0s" : memory_write_text, "--memory-write");
    auto mr = dur(memory_restart_text, "--memory-restart");
    if (!ms.ok() || !mw.ok() || !mr.ok()) return usage("--memory-stall, --memory-write, --memory-restart: durations");
    memory_costs = {*ms, *mw, *mr};
    durable_costs = {stall, write, *restart};
    plan2 = TwoLevelInterval(memory_costs, durable_costs, survivable, mtbf);
  }

  // Blocking models (compute time between checkpoints).
  const double young = YoungInterval(cost, mtbf);
  const double daly = DalyInterval(cost, mtbf);
  const double exact = ExactDalyInterval(cost, mtbf);
  const double block_goodput = DalyGoodput(exact, cost, *restart, mtbf);
  // Async model (period from save start to save start).
  const double period = async ? AsyncInterval(stall, write, mtbf) : NAN;
  const double async_goodput = async ? AsyncGoodput(period, stall, write, *restart, mtbf) : NAN;
  const double best_goodput =
      std::max(async ? std::max(async_goodput, block_goodput) : block_goodput, two_level ? plan2.goodput : 0.0);
  const double lost_per_day = (1 - best_goodput) * 24;  // hours
  const double dollars_per_day =
      gpus > 0 && gpu_hour_cost > 0 ? lost_per_day * static_cast<double>(gpus) * gpu_hour_cost : NAN;

  double current_goodput = NAN;
  if (std::isfinite(current)) {
    current_goodput = async ? AsyncGoodput(std::max(current, stall + write), stall, write, *restart, mtbf)
                            : DalyGoodput(std::max(current - cost, 1e-9), cost, *restart, mtbf);
  }

  SimulationResult sim_block, sim_async, sim_two;
  const double sim_work = std::isfinite(work) ? work : std::max(30 * 86400.0, 50 * mtbf);
  const double shape = weibull_shape > 0 ? weibull_shape : 1.0;
  if (simulate > 0) {
    SimulationConfig c;
    c.work = sim_work;
    c.restart = *restart;
    c.mtbf = mtbf;
    c.weibull_shape = shape;
    c.runs = simulate;
    c.seed = static_cast<uint64_t>(seed);
    c.interval = exact;
    c.delta = cost;
    sim_block = Simulate(c);
    if (async) {
      c.async = true;
      c.interval = period;
      c.stall = stall;
      c.write = write;
      sim_async = Simulate(c);
    }
    if (two_level) {
      c.async = false;
      c.two_level = true;
      c.interval = plan2.memory_period;
      c.durable_every = plan2.durable_every;
      c.memory = memory_costs;
      c.survivable = survivable;
      sim_two = Simulate(c);
    }
  }

  if (!plot_path.empty()) {
    Plot plot;
    plot.title = StrCat("Goodput against checkpoint interval (MTBF ", Dur(mtbf), ")");
    plot.x_label = "interval between checkpoint starts";
    plot.y_label = "goodput";
    plot.log_x = true;
    plot.x_format = TickDur;
    const double shortest = async ? std::min(period, exact + cost) : exact + cost;
    const double longest = async ? std::max(period, exact + cost) : exact + cost;
    const double lo = shortest / 6, hi = longest * 6;
    const double top = std::max(DalyGoodput(exact, cost, *restart, mtbf),
                                async ? AsyncGoodput(period, stall, write, *restart, mtbf) : 0.0);
    plot.y_floor = std::max(0.0, top - 0.3);
    PlotSeries block{"blocking (Daly model)", "#1f77b4", {}};
    PlotSeries asy{"asynchronous", "#d62728", {}};
    for (int i = 0; i <= 120; ++i) {
      const double x = lo * std::pow(hi / lo, i / 120.0);
      if (x > cost) block.points.push_back({x, DalyGoodput(x - cost, cost, *restart, mtbf)});
      if (async && x >= stall + write) asy.points.push_back({x, AsyncGoodput(x, stall, write, *restart, mtbf)});
    }
    plot.series.push_back(block);
    if (async) plot.series.push_back(asy);
    if (simulate > 0) {
      PlotSeries sb{"simulated, blocking", "#1f77b4", {}, false, true};
      PlotSeries sa{"simulated, async", "#d62728", {}, false, true};
      for (double f : {0.25, 0.5, 1.0, 2.0, 4.0}) {
        SimulationConfig c;
        c.work = sim_work;
        c.restart = *restart;
        c.mtbf = mtbf;
        c.weibull_shape = shape;
        c.runs = std::max<int64_t>(100, simulate / 4);
        c.seed = static_cast<uint64_t>(seed) + 17;
        c.interval = exact * f;
        c.delta = cost;
        SimulationResult r = Simulate(c);
        sb.points.push_back({c.interval + cost, r.goodput});
        sb.error.push_back(r.goodput_ci95);
        if (async) {
          c.async = true;
          c.interval = std::max(period * f, stall + write);
          c.stall = stall;
          c.write = write;
          r = Simulate(c);
          sa.points.push_back({c.interval, r.goodput});
          sa.error.push_back(r.goodput_ci95);
        }
      }
      plot.series.push_back(sb);
      if (async) plot.series.push_back(sa);
    }
    plot.markers.push_back({exact + cost, "blocking optimum", "#1f77b4"});
    if (async) plot.markers.push_back({period, "async optimum", "#d62728"});
    if (std::isfinite(current)) plot.markers.push_back({current, "current interval", "#555"});
    std::ofstream out(plot_path);
    out << RenderSvg(plot);
    if (!out) return usage("cannot write " + plot_path);
  }

  auto steps = [&](double s) { return std::isfinite(step) ? std::llround(s / step) : -1LL; };
  if (json) {
    JsonWriter w;
    w.BeginObject().Field("mtbf_s", mtbf).Field("mtbf_source", mtbf_source);
    if (estimate.failures > 0) {
      w.Field("mtbf_lower95_s", estimate.lower95).Field("mtbf_upper95_s", estimate.upper95);
    }
    if (weibull) w.Field("weibull_shape", weibull->shape).Field("weibull_scale_s", weibull->scale);
    w.Field("checkpoint_cost_s", cost).Field("restart_s", *restart);
    w.Key("blocking")
        .BeginObject()
        .Field("young_s", young)
        .Field("daly_s", daly)
        .Field("optimum_s", exact)
        .Field("goodput", block_goodput);
    if (std::isfinite(step)) w.Field("optimum_steps", steps(exact));
    if (std::isfinite(work)) w.Field("expected_wall_s", DalyWallTime(work, exact, cost, *restart, mtbf));
    if (simulate > 0) w.Field("simulated_goodput", sim_block.goodput).Field("simulated_ci95", sim_block.goodput_ci95);
    w.EndObject();
    if (async) {
      w.Key("async")
          .BeginObject()
          .Field("stall_s", stall)
          .Field("write_s", write)
          .Field("period_s", period)
          .Field("loss_per_failure_s", AsyncLossPerFailure(period, stall, write, *restart, mtbf))
          .Field("goodput", async_goodput);
      if (std::isfinite(step)) w.Field("period_steps", steps(period));
      if (simulate > 0) w.Field("simulated_goodput", sim_async.goodput).Field("simulated_ci95", sim_async.goodput_ci95);
      w.EndObject();
    }
    if (two_level) {
      w.Key("two_level")
          .BeginObject()
          .Field("memory_stall_s", memory_costs.stall)
          .Field("memory_write_s", memory_costs.write)
          .Field("memory_restart_s", memory_costs.restart)
          .Field("survivable", survivable)
          .Field("memory_period_s", plan2.memory_period)
          .Field("durable_every", plan2.durable_every)
          .Field("durable_period_s", plan2.durable_period)
          .Field("goodput", plan2.goodput);
      if (std::isfinite(step)) {
        w.Field("memory_period_steps", steps(plan2.memory_period))
            .Field("durable_period_steps", steps(plan2.durable_period));
      }
      if (simulate > 0) {
        w.Field("simulated_goodput", sim_two.goodput)
            .Field("simulated_ci95", sim_two.goodput_ci95)
            .Field("simulated_memory_restores_per_run", sim_two.memory_restores_per_run)
            .Field("simulated_durable_restores_per_run", sim_two.durable_restores_per_run);
      }
      w.EndObject();
    }
    w.Field("hours_lost_per_day", lost_per_day);
    if (std::isfinite(dollars_per_day)) w.Field("cost_lost_per_day", dollars_per_day);
    if (std::isfinite(current)) w.Field("current_interval_s", current).Field("current_goodput", current_goodput);
    w.EndObject();
    std::printf("%s\n", w.str().c_str());
    return kExitOk;
  }
  std::printf("failures: MTBF %s (%s)", Dur(mtbf).c_str(), mtbf_source.c_str());
  if (estimate.failures > 0) {
    std::printf(", 95%% interval %s to %s", Dur(estimate.lower95).c_str(), Dur(estimate.upper95).c_str());
  }
  std::printf("\n");
  if (weibull) {
    std::printf("  Weibull fit: shape %.2f (%s), scale %s\n", weibull->shape,
                weibull->shape < 0.9   ? "failures cluster early"
                : weibull->shape > 1.1 ? "wear-out"
                                       : "close to exponential",
                Dur(weibull->scale).c_str());
  }
  std::printf("costs: checkpoint %s", Dur(cost).c_str());
  if (async) std::printf(" (stall %s, then durable after %s)", Dur(stall).c_str(), Dur(write).c_str());
  std::printf(", restart %s\n\n", Dur(*restart).c_str());
  auto in_steps = [&](double s) { return std::isfinite(step) ? StrCat(" = ", steps(s), " steps") : std::string(); };
  std::printf("blocking saves (the job stops %s each time):\n", Dur(cost).c_str());
  std::printf("  Young              %s%s\n", Dur(young).c_str(), in_steps(young).c_str());
  std::printf("  Daly (eq. 37)      %s%s\n", Dur(daly).c_str(), in_steps(daly).c_str());
  std::printf("  exact optimum      %s%s   goodput %.4f", Dur(exact).c_str(), in_steps(exact).c_str(), block_goodput);
  if (simulate > 0) std::printf("   simulated %.4f +- %.4f", sim_block.goodput, sim_block.goodput_ci95);
  std::printf("\n");
  if (std::isfinite(work)) {
    std::printf("  expected wall time for %s of work: %s\n", Dur(work).c_str(),
                Dur(DalyWallTime(work, exact, cost, *restart, mtbf)).c_str());
  }
  if (async) {
    std::printf("asynchronous saves:\n");
    std::printf("  optimum period     %s%s   goodput %.4f", Dur(period).c_str(), in_steps(period).c_str(),
                async_goodput);
    if (simulate > 0) std::printf("   simulated %.4f +- %.4f", sim_async.goodput, sim_async.goodput_ci95);
    std::printf("\n  expected loss per failure %s\n",
                Dur(AsyncLossPerFailure(period, stall, write, *restart, mtbf)).c_str());
  }
  if (two_level) {
    std::printf(
        "two levels (memory saves: stall %s, replicated after %s, restart %s; %.0f%% of failures "
        "survivable):\n",
        Dur(memory_costs.stall).c_str(), Dur(memory_costs.write).c_str(), Dur(memory_costs.restart).c_str(),
        100 * survivable);
    std::printf("  a save every %s%s, one in %lld durable (every %s%s), the others memory   goodput %.4f",
                Dur(plan2.memory_period).c_str(), in_steps(plan2.memory_period).c_str(),
                static_cast<long long>(plan2.durable_every), Dur(plan2.durable_period).c_str(),
                in_steps(plan2.durable_period).c_str(), plan2.goodput);
    if (simulate > 0) std::printf("   simulated %.4f +- %.4f", sim_two.goodput, sim_two.goodput_ci95);
    std::printf("\n  against durable saves alone: %+.2f h of every 24 h\n", (plan2.goodput - async_goodput) * 24);
    if (simulate > 0) {
      std::printf("  simulated restores per run: %.1f from memory, %.1f from storage\n",
                  sim_two.memory_restores_per_run, sim_two.durable_restores_per_run);
    }
  }
  if (std::isfinite(current)) {
    std::printf("current interval %s: goodput %.4f (%.2f h/day more lost than at the optimum)\n", Dur(current).c_str(),
                current_goodput, (best_goodput - current_goodput) * 24);
  }
  std::printf("\nat the optimum: %.2f h of every 24 h lost", lost_per_day);
  if (std::isfinite(dollars_per_day)) {
    std::printf(", %.0f GPU-hours a day, %.0f a day at %.2f per GPU-hour", lost_per_day * gpus, dollars_per_day,
                gpu_hour_cost);
  }
  std::printf("\n");
  if (simulate > 0) {
    std::printf("simulation: %lld runs of %s, %s failures (mean %.1f per run)\n", static_cast<long long>(simulate),
                Dur(sim_work).c_str(), shape == 1.0 ? "exponential" : StrCat("Weibull(", shape, ")").c_str(),
                sim_block.failures_per_run);
  }
  if (!plot_path.empty()) std::printf("plot: %s\n", plot_path.c_str());
  return kExitOk;
}

}  // namespace ckpt::tools
