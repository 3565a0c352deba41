// ckpt interval: how often to checkpoint, from a failure rate and save costs.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>

#include "absl/strings/str_split.h"
#include "ckpt/interval.h"
#include "commands.h"
#include "common/cli.h"
#include "common/svg_plot.h"
#include "common/synth_job.h"
#include "util/errors.h"
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

// What `ckpt interval` was given, parsed.
struct IntervalInputs {
  double mtbf = 0;
  std::string mtbf_source;
  MtbfEstimate estimate;
  std::optional<WeibullFit> weibull;
  double stall = NAN, write = NAN, cost = NAN, restart = 0;
  bool async = false;
  double work = NAN, step = NAN, current = NAN;
  bool two_level = false;
  LevelCosts memory_costs, durable_costs;
  double survivable = -1;
  int64_t gpus = 0, simulate = 0, seed = 1;
  double gpu_hour_cost = 0, shape = 1.0;
  std::string plot_path;
};

// What the models and the simulation make of it.
struct IntervalResults {
  double young = 0, daly = 0, exact = 0, block_goodput = 0;
  double period = NAN, async_goodput = NAN, best_goodput = 0;
  double lost_per_day = 0, dollars_per_day = NAN, current_goodput = NAN;
  TwoLevelPlan plan2;
  SimulationResult sim_block, sim_async, sim_two;
  double sim_work = 0;
};

// The options as given on the command line.
struct IntervalFlags {
  std::string mtbf, node_rate, log_path, stall, write, cost, restart = "10m", work, step, current, costs_path,
                                                             memory_stall, memory_write, memory_restart = "1m",
                                                             domain_losses;
  int64_t memory_tolerates = 1;
  bool log_intervals = false;
};

absl::StatusOr<double> Duration(const std::string& text, const char* what) {
  auto d = ParseDuration(text);
  if (!d) {
    return absl::InvalidArgumentError(
        StrCat(what, ": bad duration '", text, "' (a number with s, m, h or d, e.g. 24h)"));
  }
  return *d;
}

// A positive duration, when given; NaN when not.
absl::Status OptionalDuration(const std::string& text, const char* what, bool positive, double* out) {
  if (text.empty()) return absl::OkStatus();
  auto d = Duration(text, what);
  if (!d.ok()) return d.status();
  if (positive && *d <= 0) return absl::InvalidArgumentError(StrCat(what, " must be a positive duration"));
  *out = *d;
  return absl::OkStatus();
}

// The failure rate: given, from a per-node rate, or fitted to a log.
absl::Status ReadFailureRate(const IntervalFlags& f, int64_t nodes, IntervalInputs& in) {
  const int sources = !f.mtbf.empty() + !f.node_rate.empty() + !f.log_path.empty();
  if (sources != 1) return absl::InvalidArgumentError("give exactly one of --mtbf, --node-failure-rate, --failure-log");
  if (!f.mtbf.empty()) {
    auto d = Duration(f.mtbf, "--mtbf");
    if (!d.ok() || *d <= 0) return absl::InvalidArgumentError("--mtbf must be a positive duration");
    in.mtbf = *d;
    in.mtbf_source = "given";
    return absl::OkStatus();
  }
  if (!f.node_rate.empty()) {
    std::string t = f.node_rate;
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
        return absl::InvalidArgumentError("--node-failure-rate unit must be /day, /hour or a duration such as /30d");
      }
      t = t.substr(0, slash);
    }
    double rate;
    if (!ParseDouble(t, &rate) || rate <= 0 || nodes <= 0) {
      return absl::InvalidArgumentError("--node-failure-rate needs a positive rate and --nodes");
    }
    in.mtbf = per / (rate * static_cast<double>(nodes));
    in.mtbf_source = StrCat(f.node_rate, " x ", nodes, " nodes");
    return absl::OkStatus();
  }
  CKPT_ASSIGN_OR_RETURN(const std::string text, ReadText(f.log_path));
  auto gaps = ParseFailureLog(text, f.log_intervals);
  if (!gaps.ok()) return absl::InvalidArgumentError(StrCat(f.log_path, ": ", gaps.status().message()));
  in.estimate = EstimateMtbf(*gaps);
  in.mtbf = in.estimate.mtbf;
  auto fit = FitWeibull(*gaps);
  if (fit.ok()) in.weibull = *fit;
  in.mtbf_source = StrCat(in.estimate.failures, " failures over ", Dur(in.estimate.observed_s));
  return absl::OkStatus();
}

// The costs of a save and of a restart, and the job's other durations.
absl::Status ReadCosts(const IntervalFlags& f, IntervalInputs& in) {
  if (!f.costs_path.empty()) {
    CKPT_ASSIGN_OR_RETURN(const std::string text, ReadText(f.costs_path));
    in.stall = JsonNumber(text, "stall_s");
    const double commit = JsonNumber(text, "commit_s");
    const double w = JsonNumber(text, "write_s");
    const double done = std::isfinite(commit) ? commit : w;
    if (!std::isfinite(in.stall) || !std::isfinite(done)) {
      return absl::InvalidArgumentError(StrCat(f.costs_path, " has no stall_s and write_s/commit_s"));
    }
    in.write = std::max(0.0, done - in.stall);
  }
  CKPT_RETURN_IF_ERROR(OptionalDuration(f.stall, "--stall", false, &in.stall));
  CKPT_RETURN_IF_ERROR(OptionalDuration(f.write, "--write", false, &in.write));
  CKPT_RETURN_IF_ERROR(OptionalDuration(f.cost, "--checkpoint-cost", false, &in.cost));
  if (!std::isfinite(in.cost) && std::isfinite(in.stall)) in.cost = in.stall + (std::isfinite(in.write) ? in.write : 0);
  if (!std::isfinite(in.cost) || in.cost <= 0) {
    return absl::InvalidArgumentError("give --checkpoint-cost, or --stall (and --write), or --costs");
  }
  in.async = std::isfinite(in.stall) && std::isfinite(in.write) && in.stall > 0;
  CKPT_ASSIGN_OR_RETURN(in.restart, Duration(f.restart, "--restart"));
  CKPT_RETURN_IF_ERROR(OptionalDuration(f.work, "--work", false, &in.work));
  CKPT_RETURN_IF_ERROR(OptionalDuration(f.step, "--step-time", true, &in.step));
  CKPT_RETURN_IF_ERROR(OptionalDuration(f.current, "--current-interval", true, &in.current));
  // Two levels. The survivable fraction given, or from the shares of
  // failures by domains lost and how many the memory level tolerates.
  if (!f.domain_losses.empty()) {
    if (in.survivable >= 0) return absl::InvalidArgumentError("give --survivable or --domain-losses, not both");
    std::vector<double> shares;
    for (const std::string& part : std::vector<std::string>(absl::StrSplit(f.domain_losses, ','))) {
      double x = 0;
      if (!ParseDouble(part, &x)) {
        return absl::InvalidArgumentError(
            StrCat("--domain-losses wants shares of failures by domains lost, e.g. 0.9,0.08,0.02; not '",
                   f.domain_losses, "'"));
      }
      shares.push_back(x);
    }
    CKPT_ASSIGN_OR_RETURN(in.survivable, SurvivableFraction(shares, static_cast<int>(f.memory_tolerates)));
    if (in.survivable >= 1) {
      return absl::InvalidArgumentError(
          StrCat("every failure in --domain-losses takes out at most ", f.memory_tolerates,
                 " domain(s), all survivable by the memory level: list the share of larger ones (or of failures "
                 "the memory level never survives, such as a whole-job loss) too"));
    }
  }
  in.two_level = !f.memory_stall.empty() || in.survivable >= 0;
  if (in.two_level) {
    if (f.memory_stall.empty() || in.survivable < 0 || in.survivable >= 1 || !in.async) {
      return absl::InvalidArgumentError(
          "two levels need --memory-stall, --survivable in [0, 1), and the durable --stall and --write");
    }
    auto ms = Duration(f.memory_stall, "--memory-stall");
    auto mw = Duration(f.memory_write.empty() ? "0s" : f.memory_write, "--memory-write");
    auto mr = Duration(f.memory_restart, "--memory-restart");
    if (!ms.ok() || !mw.ok() || !mr.ok()) {
      return absl::InvalidArgumentError("--memory-stall, --memory-write, --memory-restart: durations");
    }
    in.memory_costs = {*ms, *mw, *mr};
    in.durable_costs = {in.stall, in.write, in.restart};
  }
  return absl::OkStatus();
}

SimulationConfig SimulationOf(const IntervalInputs& in, double work) {
  SimulationConfig c;
  c.work = work;
  c.restart = in.restart;
  c.mtbf = in.mtbf;
  c.weibull_shape = in.shape;
  c.runs = in.simulate;
  c.seed = static_cast<uint64_t>(in.seed);
  return c;
}

IntervalResults Compute(const IntervalInputs& in) {
  IntervalResults r;
  const double mtbf = in.mtbf, cost = in.cost, restart = in.restart;
  if (in.two_level) r.plan2 = TwoLevelInterval(in.memory_costs, in.durable_costs, in.survivable, mtbf);
  // Blocking models (compute time between checkpoints).
  r.young = YoungInterval(cost, mtbf);
  r.daly = DalyInterval(cost, mtbf);
  r.exact = ExactDalyInterval(cost, mtbf);
  r.block_goodput = DalyGoodput(r.exact, cost, restart, mtbf);
  // Async model (period from save start to save start).
  if (in.async) {
    r.period = AsyncInterval(in.stall, in.write, mtbf);
    r.async_goodput = AsyncGoodput(r.period, in.stall, in.write, restart, mtbf);
  }
  r.best_goodput = std::max(in.async ? std::max(r.async_goodput, r.block_goodput) : r.block_goodput,
                            in.two_level ? r.plan2.goodput : 0.0);
  r.lost_per_day = (1 - r.best_goodput) * 24;  // hours
  if (in.gpus > 0 && in.gpu_hour_cost > 0) {
    r.dollars_per_day = r.lost_per_day * static_cast<double>(in.gpus) * in.gpu_hour_cost;
  }
  if (std::isfinite(in.current)) {
    r.current_goodput = in.async
                            ? AsyncGoodput(std::max(in.current, in.stall + in.write), in.stall, in.write, restart, mtbf)
                            : DalyGoodput(std::max(in.current - cost, 1e-9), cost, restart, mtbf);
  }
  r.sim_work = std::isfinite(in.work) ? in.work : std::max(30 * 86400.0, 50 * mtbf);
  if (in.simulate > 0) {
    SimulationConfig c = SimulationOf(in, r.sim_work);
    c.interval = r.exact;
    c.delta = cost;
    r.sim_block = Simulate(c);
    if (in.async) {
      c.async = true;
      c.interval = r.period;
      c.stall = in.stall;
      c.write = in.write;
      r.sim_async = Simulate(c);
    }
    if (in.two_level) {
      c.async = false;
      c.two_level = true;
      c.interval = r.plan2.memory_period;
      c.durable_every = r.plan2.durable_every;
      c.memory = in.memory_costs;
      c.survivable = in.survivable;
      r.sim_two = Simulate(c);
    }
  }
  return r;
}

// Goodput against the interval, as SVG: the models' curves, simulated
// points when simulating, and the optima and the current interval marked.
absl::Status WritePlot(const IntervalInputs& in, const IntervalResults& r) {
  const double mtbf = in.mtbf, cost = in.cost, restart = in.restart, exact = r.exact, period = r.period;
  Plot plot;
  plot.title = StrCat("Goodput against checkpoint interval (MTBF ", Dur(mtbf), ")");
  plot.x_label = "interval between checkpoint starts";
  plot.y_label = "goodput";
  plot.log_x = true;
  plot.x_format = TickDur;
  const double shortest = in.async ? std::min(period, exact + cost) : exact + cost;
  const double longest = in.async ? std::max(period, exact + cost) : exact + cost;
  const double lo = shortest / 6, hi = longest * 6;
  const double top = std::max(DalyGoodput(exact, cost, restart, mtbf),
                              in.async ? AsyncGoodput(period, in.stall, in.write, restart, mtbf) : 0.0);
  plot.y_floor = std::max(0.0, top - 0.3);
  PlotSeries block{"blocking (Daly model)", "#1f77b4", {}};
  PlotSeries asy{"asynchronous", "#d62728", {}};
  for (int i = 0; i <= 120; ++i) {
    const double x = lo * std::pow(hi / lo, i / 120.0);
    if (x > cost) block.points.push_back({x, DalyGoodput(x - cost, cost, restart, mtbf)});
    if (in.async && x >= in.stall + in.write) {
      asy.points.push_back({x, AsyncGoodput(x, in.stall, in.write, restart, mtbf)});
    }
  }
  plot.series.push_back(block);
  if (in.async) plot.series.push_back(asy);
  if (in.simulate > 0) {
    PlotSeries sb{"simulated, blocking", "#1f77b4", {}, false, true};
    PlotSeries sa{"simulated, async", "#d62728", {}, false, true};
    for (double f : {0.25, 0.5, 1.0, 2.0, 4.0}) {
      SimulationConfig c = SimulationOf(in, r.sim_work);
      c.runs = std::max<int64_t>(100, in.simulate / 4);
      c.seed = static_cast<uint64_t>(in.seed) + 17;
      c.interval = exact * f;
      c.delta = cost;
      SimulationResult s = Simulate(c);
      sb.points.push_back({c.interval + cost, s.goodput});
      sb.error.push_back(s.goodput_ci95);
      if (in.async) {
        c.async = true;
        c.interval = std::max(period * f, in.stall + in.write);
        c.stall = in.stall;
        c.write = in.write;
        s = Simulate(c);
        sa.points.push_back({c.interval, s.goodput});
        sa.error.push_back(s.goodput_ci95);
      }
    }
    plot.series.push_back(sb);
    if (in.async) plot.series.push_back(sa);
  }
  plot.markers.push_back({exact + cost, "blocking optimum", "#1f77b4"});
  if (in.async) plot.markers.push_back({period, "async optimum", "#d62728"});
  if (std::isfinite(in.current)) plot.markers.push_back({in.current, "current interval", "#555"});
  std::ofstream out(in.plot_path);
  out << RenderSvg(plot);
  if (!out) return absl::InvalidArgumentError("cannot write " + in.plot_path);
  return absl::OkStatus();
}

long long Steps(const IntervalInputs& in, double s) {
  return std::isfinite(in.step) ? std::llround(s / in.step) : -1LL;
}

void WriteJson(JsonWriter& w, const IntervalInputs& in, const IntervalResults& r) {
  const bool sim = in.simulate > 0, steps = std::isfinite(in.step);
  w.BeginObject().Field("mtbf_s", in.mtbf).Field("mtbf_source", in.mtbf_source);
  if (in.estimate.failures > 0) {
    w.Field("mtbf_lower95_s", in.estimate.lower95).Field("mtbf_upper95_s", in.estimate.upper95);
  }
  if (in.weibull) w.Field("weibull_shape", in.weibull->shape).Field("weibull_scale_s", in.weibull->scale);
  w.Field("checkpoint_cost_s", in.cost).Field("restart_s", in.restart);
  w.Key("blocking")
      .BeginObject()
      .Field("young_s", r.young)
      .Field("daly_s", r.daly)
      .Field("optimum_s", r.exact)
      .Field("goodput", r.block_goodput);
  if (steps) w.Field("optimum_steps", Steps(in, r.exact));
  if (std::isfinite(in.work)) {
    w.Field("expected_wall_s", DalyWallTime(in.work, r.exact, in.cost, in.restart, in.mtbf));
  }
  if (sim) w.Field("simulated_goodput", r.sim_block.goodput).Field("simulated_ci95", r.sim_block.goodput_ci95);
  w.EndObject();
  if (in.async) {
    w.Key("async")
        .BeginObject()
        .Field("stall_s", in.stall)
        .Field("write_s", in.write)
        .Field("period_s", r.period)
        .Field("loss_per_failure_s", AsyncLossPerFailure(r.period, in.stall, in.write, in.restart, in.mtbf))
        .Field("goodput", r.async_goodput);
    if (steps) w.Field("period_steps", Steps(in, r.period));
    if (sim) w.Field("simulated_goodput", r.sim_async.goodput).Field("simulated_ci95", r.sim_async.goodput_ci95);
    w.EndObject();
  }
  if (in.two_level) {
    w.Key("two_level")
        .BeginObject()
        .Field("memory_stall_s", in.memory_costs.stall)
        .Field("memory_write_s", in.memory_costs.write)
        .Field("memory_restart_s", in.memory_costs.restart)
        .Field("survivable", in.survivable)
        .Field("memory_period_s", r.plan2.memory_period)
        .Field("durable_every", r.plan2.durable_every)
        .Field("durable_period_s", r.plan2.durable_period)
        .Field("goodput", r.plan2.goodput);
    if (steps) {
      w.Field("memory_period_steps", Steps(in, r.plan2.memory_period))
          .Field("durable_period_steps", Steps(in, r.plan2.durable_period));
    }
    if (sim) {
      w.Field("simulated_goodput", r.sim_two.goodput)
          .Field("simulated_ci95", r.sim_two.goodput_ci95)
          .Field("simulated_memory_restores_per_run", r.sim_two.memory_restores_per_run)
          .Field("simulated_durable_restores_per_run", r.sim_two.durable_restores_per_run);
    }
    w.EndObject();
  }
  w.Field("hours_lost_per_day", r.lost_per_day);
  if (std::isfinite(r.dollars_per_day)) w.Field("cost_lost_per_day", r.dollars_per_day);
  if (std::isfinite(in.current)) w.Field("current_interval_s", in.current).Field("current_goodput", r.current_goodput);
  w.EndObject();
}

void PrintText(const IntervalInputs& in, const IntervalResults& r) {
  const double mtbf = in.mtbf, cost = in.cost, restart = in.restart, stall = in.stall, write = in.write;
  const bool sim = in.simulate > 0;
  std::printf("failures: MTBF %s (%s)", Dur(mtbf).c_str(), in.mtbf_source.c_str());
  if (in.estimate.failures > 0) {
    std::printf(", 95%% interval %s to %s", Dur(in.estimate.lower95).c_str(), Dur(in.estimate.upper95).c_str());
  }
  std::printf("\n");
  if (in.weibull) {
    std::printf("  Weibull fit: shape %.2f (%s), scale %s\n", in.weibull->shape,
                in.weibull->shape < 0.9   ? "failures cluster early"
                : in.weibull->shape > 1.1 ? "wear-out"
                                          : "close to exponential",
                Dur(in.weibull->scale).c_str());
  }
  std::printf("costs: checkpoint %s", Dur(cost).c_str());
  if (in.async) std::printf(" (stall %s, then durable after %s)", Dur(stall).c_str(), Dur(write).c_str());
  std::printf(", restart %s\n\n", Dur(restart).c_str());
  auto in_steps = [&](double s) {
    return std::isfinite(in.step) ? StrCat(" = ", Steps(in, s), " steps") : std::string();
  };
  std::printf("blocking saves (the job stops %s each time):\n", Dur(cost).c_str());
  std::printf("  Young              %s%s\n", Dur(r.young).c_str(), in_steps(r.young).c_str());
  std::printf("  Daly (eq. 37)      %s%s\n", Dur(r.daly).c_str(), in_steps(r.daly).c_str());
  std::printf("  exact optimum      %s%s   goodput %.4f", Dur(r.exact).c_str(), in_steps(r.exact).c_str(),
              r.block_goodput);
  if (sim) std::printf("   simulated %.4f +- %.4f", r.sim_block.goodput, r.sim_block.goodput_ci95);
  std::printf("\n");
  if (std::isfinite(in.work)) {
    std::printf("  expected wall time for %s of work: %s\n", Dur(in.work).c_str(),
                Dur(DalyWallTime(in.work, r.exact, cost, restart, mtbf)).c_str());
  }
  if (in.async) {
    std::printf("asynchronous saves:\n");
    std::printf("  optimum period     %s%s   goodput %.4f", Dur(r.period).c_str(), in_steps(r.period).c_str(),
                r.async_goodput);
    if (sim) std::printf("   simulated %.4f +- %.4f", r.sim_async.goodput, r.sim_async.goodput_ci95);
    std::printf("\n  expected loss per failure %s\n",
                Dur(AsyncLossPerFailure(r.period, stall, write, restart, mtbf)).c_str());
  }
  if (in.two_level) {
    const TwoLevelPlan& p = r.plan2;
    std::printf(
        "two levels (memory saves: stall %s, replicated after %s, restart %s; %.0f%% of failures "
        "survivable):\n",
        Dur(in.memory_costs.stall).c_str(), Dur(in.memory_costs.write).c_str(), Dur(in.memory_costs.restart).c_str(),
        100 * in.survivable);
    std::printf("  a save every %s%s, one in %lld durable (every %s%s), the others memory   goodput %.4f",
                Dur(p.memory_period).c_str(), in_steps(p.memory_period).c_str(),
                static_cast<long long>(p.durable_every), Dur(p.durable_period).c_str(),
                in_steps(p.durable_period).c_str(), p.goodput);
    if (sim) std::printf("   simulated %.4f +- %.4f", r.sim_two.goodput, r.sim_two.goodput_ci95);
    std::printf("\n  against durable saves alone: %+.2f h of every 24 h\n", (p.goodput - r.async_goodput) * 24);
    if (sim) {
      std::printf("  simulated restores per run: %.1f from memory, %.1f from storage\n",
                  r.sim_two.memory_restores_per_run, r.sim_two.durable_restores_per_run);
    }
  }
  if (std::isfinite(in.current)) {
    std::printf("current interval %s: goodput %.4f (%.2f h/day more lost than at the optimum)\n",
                Dur(in.current).c_str(), r.current_goodput, (r.best_goodput - r.current_goodput) * 24);
  }
  std::printf("\nat the optimum: %.2f h of every 24 h lost", r.lost_per_day);
  if (std::isfinite(r.dollars_per_day)) {
    std::printf(", %.0f GPU-hours a day, %.0f a day at %.2f per GPU-hour", r.lost_per_day * in.gpus, r.dollars_per_day,
                in.gpu_hour_cost);
  }
  std::printf("\n");
  if (sim) {
    std::printf("simulation: %lld runs of %s, %s failures (mean %.1f per run)\n", static_cast<long long>(in.simulate),
                Dur(r.sim_work).c_str(), in.shape == 1.0 ? "exponential" : StrCat("Weibull(", in.shape, ")").c_str(),
                r.sim_block.failures_per_run);
  }
  if (!in.plot_path.empty()) std::printf("plot: %s\n", in.plot_path.c_str());
}

}  // namespace

int IntervalMain(int argc, char** argv, int first) {
  IntervalFlags f;
  IntervalInputs in;
  int64_t nodes = 0;
  double weibull_shape = 0;
  bool json = false;
  Args args("interval", "(--mtbf T | --node-failure-rate X/day --nodes N | --failure-log F) [options]",
            "Computes how often to checkpoint. Blocking saves (the job stops for the whole\n"
            "checkpoint cost): Young's and Daly's estimates and the exact optimum of Daly's\n"
            "model with its expected goodput. Asynchronous saves (the job stalls for the\n"
            "copy, the write finishes in the background, a failure before it is durable\n"
            "falls back to the previous checkpoint): the optimum period and its goodput.\n"
            "--simulate checks the numbers by Monte Carlo; --plot draws goodput against the\n"
            "interval. With --memory-stall and --survivable, two levels: memory saves\n"
            "(replicated into peers' memory; they survive the fraction --survivable of\n"
            "failures, those of one failure domain; or, from --domain-losses and\n"
            "--memory-tolerates, those that took out no more domains than the memory level\n"
            "tolerates: R replicas or M parity pieces) and durable saves: the memory period\n"
            "and how many saves apart the durable ones go. Durations take s, m, h, d\n"
            "suffixes.");
  args.String("mtbf", &f.mtbf, "mean time between failures of the whole job, e.g. 24h");
  args.String("node-failure-rate", &f.node_rate, "failures per node per day, e.g. 0.001/day");
  args.Int("nodes", &nodes, "node count (with --node-failure-rate)");
  args.String("failure-log", &f.log_path, "failure timestamps (CSV or JSON array) to fit");
  args.Switch("log-intervals", &f.log_intervals, "the log holds inter-failure durations, not times");
  args.String("stall", &f.stall, "async: how long a save blocks training");
  args.String("write", &f.write, "async: from the end of the stall until durable");
  args.String("checkpoint-cost", &f.cost, "blocking: the whole save (default stall + write)");
  args.String("costs", &f.costs_path, "JSON with stall_s and write_s/commit_s (ckpt synth --json)");
  args.String("restart", &f.restart, "time to restart after a failure (default 10m)");
  args.String("work", &f.work, "total compute of the run, for the expected wall time");
  args.String("step-time", &f.step, "one training step, to express intervals in steps");
  args.Int("gpus", &in.gpus, "GPUs in the job, to price the lost time");
  args.Double("gpu-hour-cost", &in.gpu_hour_cost, "price of one GPU-hour");
  args.String("current-interval", &f.current, "the interval in use today, for comparison");
  args.Int("simulate", &in.simulate, "Monte Carlo runs beside the formulas (e.g. 2000)");
  args.Int("seed", &in.seed, "simulation seed (default 1)");
  args.Double("weibull-shape", &weibull_shape, "simulate Weibull failures of this shape");
  args.String("plot", &in.plot_path, "write goodput against interval as SVG");
  args.String("memory-stall", &f.memory_stall, "two levels: how long a memory save blocks training");
  args.String("memory-write", &f.memory_write, "two levels: from the stall until replicated (default 0)");
  args.String("memory-restart", &f.memory_restart, "two levels: restart from peers' memory (default 1m)");
  args.Double("survivable", &in.survivable, "two levels: fraction of failures a memory save survives, in [0, 1)");
  args.String("domain-losses", &f.domain_losses,
              "two levels, instead of --survivable: shares of failures that took out 1, 2, 3, ... failure domains "
              "at once, e.g. 0.9,0.08,0.02");
  args.Int("memory-tolerates", &f.memory_tolerates,
           "with --domain-losses: domains the memory level survives losing at once: R for --memory-replicas R, "
           "M for --memory-erasure K+M (default 1)");
  args.Switch("json", &json, "print JSON");
  int exit = 0;
  if (!args.Parse(argc, argv, first, &exit)) return exit;
  in.shape = weibull_shape > 0 ? weibull_shape : 1.0;
  absl::Status s = ReadFailureRate(f, nodes, in);
  if (s.ok()) s = ReadCosts(f, in);
  const IntervalResults r = s.ok() ? Compute(in) : IntervalResults{};
  if (s.ok() && !in.plot_path.empty()) s = WritePlot(in, r);
  if (!s.ok()) {
    std::fprintf(stderr, "ckpt interval: %s\n", std::string(s.message()).c_str());
    return kExitUsage;
  }
  Render(
      json, [&](JsonWriter& w) { WriteJson(w, in, r); }, [&] { PrintText(in, r); });
  return kExitOk;
}

}  // namespace ckpt::tools
