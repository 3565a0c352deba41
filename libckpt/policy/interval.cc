#include "ckpt/interval.h"

#include <algorithm>
#include <cmath>

namespace ckpt {
namespace {

// Principal branch of the Lambert W function for x in [-1/e, 0).
double LambertW0(double x) {
  const double e = std::exp(1.0);
  if (x <= -1.0 / e) return -1.0;
  double w;
  if (x < -0.25) {
    // Series at the branch point.
    const double p = std::sqrt(2.0 * (e * x + 1.0));
    w = -1.0 + p - p * p / 3.0 + 11.0 / 72.0 * p * p * p;
  } else {
    w = std::log1p(x);
  }
  for (int i = 0; i < 64; ++i) {  // Halley's iteration
    const double ew = std::exp(w);
    const double f = w * ew - x;
    const double wp1 = w + 1.0;
    if (wp1 == 0) break;
    const double step = f / (ew * wp1 - (w + 2.0) * f / (2.0 * wp1));
    w -= step;
    if (std::fabs(step) <= 1e-15 * (1.0 + std::fabs(w))) break;
  }
  return w;
}

}  // namespace

double YoungInterval(double delta, double mtbf) { return std::sqrt(2.0 * delta * mtbf); }

double DalyInterval(double delta, double mtbf) {
  if (delta >= 2.0 * mtbf) return mtbf;
  const double r = delta / (2.0 * mtbf);
  return std::sqrt(2.0 * delta * mtbf) * (1.0 + std::sqrt(r) / 3.0 + r / 9.0) - delta;
}

double ExactDalyInterval(double delta, double mtbf) {
  return mtbf * (1.0 + LambertW0(-std::exp(-(delta / mtbf + 1.0))));
}

double DalyWallTime(double work, double tau, double delta, double restart, double mtbf) {
  return mtbf * std::exp(restart / mtbf) * std::expm1((tau + delta) / mtbf) * work / tau;
}

double DalyGoodput(double tau, double delta, double restart, double mtbf) {
  return tau / (mtbf * std::exp(restart / mtbf) * std::expm1((tau + delta) / mtbf));
}

double AsyncGoodput(double period, double stall, double write, double restart, double mtbf) {
  // Window: from save k durable to save k+1 durable, `period` long without
  // failures. A failure in it sends the job back to save k; getting from
  // there to save k+1 durable takes restart + write + period without a
  // failure. With rate l = 1/M, the expected window is
  //   (1 - e^{-l p}) / l  +  (1 - e^{-l p}) (e^{l (R + W + p)} - 1) / l
  //   = (1 - e^{-l p}) e^{l (R + W + p)} / l,
  // and it yields p - stall of work.
  const double p = std::max(period, stall + write);
  return (p - stall) / mtbf * std::exp(-(restart + write) / mtbf) / std::expm1(p / mtbf);
}

double AsyncLossPerFailure(double period, double stall, double write, double restart, double mtbf) {
  const double p = std::max(period, stall + write);
  const double window = -std::expm1(-p / mtbf) * std::exp((restart + write + p) / mtbf) * mtbf;
  const double failures = window / mtbf;
  return failures > 0 ? (window - p) / failures : 0;
}

double AsyncInterval(double stall, double write, double mtbf) {
  // The goodput is Daly's blocking model for a cost of `stall` times a
  // constant, so its maximiser is the same; the save must also be durable
  // before the next one starts.
  return std::max(stall + write, ExactDalyInterval(stall, mtbf) + stall);
}

absl::StatusOr<double> SurvivableFraction(const std::vector<double>& domains_lost, int tolerated) {
  double all = 0, survived = 0;
  for (size_t j = 0; j < domains_lost.size(); ++j) {
    if (!(domains_lost[j] >= 0)) {
      return absl::InvalidArgumentError("the shares of failures by domains lost must be >= 0");
    }
    all += domains_lost[j];
    if (static_cast<int64_t>(j) + 1 <= tolerated) survived += domains_lost[j];
  }
  if (!(all > 0)) return absl::InvalidArgumentError("no failures in the shares of domains lost");
  return survived / all;
}

double TwoLevelGoodput(double memory_period, int64_t durable_every, const LevelCosts& memory, const LevelCosts& durable,
                       double survivable, double mtbf) {
  const double P = memory_period;
  const double k = static_cast<double>(std::max<int64_t>(1, durable_every));
  const double p = std::clamp(survivable, 0.0, 1.0);
  if (P <= 0 || mtbf <= 0) return 0;
  const double saves = ((k - 1) * memory.stall + durable.stall) / (k * P);
  const double c1 = memory.stall + memory.write, c2 = durable.stall + durable.write;
  const double lost_durable = k * P / 2 + c2 + durable.restart;
  if (durable_every <= 1) return std::max(0.0, 1 - saves - lost_durable / mtbf);
  // A survivable failure goes back to the newest committed save of either
  // level. The durable save is that one from its commit (c2 after it starts)
  // until the next memory save commits (P + c1 after it); when it commits
  // later than that it never is. Averaged over a cycle of k saves the work
  // lost is P/2 plus the mean commit delay, with the durable one's capped at
  // P + c1, and a fraction f of these restores read storage.
  const double e = std::min(c2, P + c1);
  const double f = (P + c1 - e) / (k * P);
  const double lost_survivable = P / 2 + ((k - 1) * c1 + e) / k + (1 - f) * memory.restart + f * durable.restart;
  return std::max(0.0, 1 - saves - (p * lost_survivable + (1 - p) * lost_durable) / mtbf);
}

TwoLevelPlan TwoLevelInterval(const LevelCosts& memory, const LevelCosts& durable, double survivable, double mtbf) {
  const double p = std::clamp(survivable, 0.0, 0.999999);
  const double M = std::max(mtbf, 1e-9);
  const double c1 = memory.stall + memory.write, c2 = durable.stall + durable.write;
  TwoLevelPlan best;
  best.goodput = -1;
  for (int64_t k = 1; k <= 100000; ++k) {
    const double kd = static_cast<double>(k);
    // A save commits before the next starts; a durable one before the
    // next durable one.
    const double lowest = std::max(k > 1 ? c1 : c2, c2 / kd);
    // TwoLevelGoodput is A/P + B P + const on each side of P = c2 - c1
    // (below it the durable save is never the newest committed one): the
    // best period is the stationary point of a side held to that side, or
    // the side's lower end where the side only rises.
    const double A = ((kd - 1) * memory.stall + durable.stall) / kd;
    double P = lowest, g = TwoLevelGoodput(lowest, k, memory, durable, p, mtbf);
    auto consider = [&](double x) {
      const double gx = TwoLevelGoodput(x, k, memory, durable, p, mtbf);
      if (gx > g) P = x, g = gx;
    };
    auto side = [&](double a, double b, double from, double to) {
      from = std::max(from, lowest);
      if (from > to) return;
      consider(from);
      if (a > 0 && b > 0) consider(std::clamp(std::sqrt(a / b), from, to));
    };
    if (k == 1) {
      side(A, 1 / (2 * M), lowest, HUGE_VAL);
    } else {
      side(A, (p * (0.5 + 1 / kd) + (1 - p) * kd / 2) / M, 0, c2 - c1);
      side(A + p * (durable.restart - memory.restart) * (c1 - c2) / (kd * M), (p + (1 - p) * kd) / (2 * M),
           std::max(0.0, c2 - c1), HUGE_VAL);
    }
    if (g > best.goodput) {
      best.memory_period = P;
      best.durable_every = k;
      best.durable_period = P * kd;
      best.goodput = g;
    } else if (k > 8 && g < best.goodput - 0.01) {
      break;  // past the optimum by far: the waste only grows from here
    }
  }
  return best;
}

IntervalPolicy::IntervalPolicy(IntervalPolicyOptions options)
    : options_(options),
      stall_(options.stall_s),
      write_(options.write_s),
      memory_stall_(options.memory_stall_s),
      memory_write_(options.memory_write_s) {
  Recompute();
}

void IntervalPolicy::Recompute() {
  const double m = std::max(options_.mtbf_s, 1e-9);
  if (options_.two_level) {
    const TwoLevelPlan plan = TwoLevelInterval({memory_stall_, memory_write_, options_.memory_restart_s},
                                               {stall_, write_, options_.restart_s}, options_.survivable, m);
    interval_ = std::clamp(plan.memory_period, options_.min_interval_s, options_.max_interval_s);
    durable_every_ = plan.durable_every;
    return;
  }
  double interval = options_.async ? AsyncInterval(stall_, write_, m) : ExactDalyInterval(stall_, m) + stall_;
  interval_ = std::clamp(interval, options_.min_interval_s, options_.max_interval_s);
}

std::optional<SaveLevel> IntervalPolicy::NextLevel(double now_s, bool previous_committed) {
  if (last_start_ < 0) {
    last_start_ = now_s;  // the clock starts at the first question
    return std::nullopt;
  }
  if (!previous_committed || now_s - last_start_ < interval_) return std::nullopt;
  if (!options_.two_level) return SaveLevel::kDurable;
  return saves_since_durable_ + 1 >= durable_every_ ? SaveLevel::kDurable : SaveLevel::kMemory;
}

void IntervalPolicy::SaveStarted(double now_s, SaveLevel level) {
  last_start_ = now_s;
  if (level == SaveLevel::kDurable) {
    saves_since_durable_ = 0;
  } else {
    ++saves_since_durable_;
  }
}

void IntervalPolicy::RecordSave(const SaveStats& stats, SaveLevel level) {
  if (level != SaveLevel::kMemory || !options_.two_level) {
    RecordSave(stats);
    return;
  }
  const double a = std::clamp(options_.smoothing, 0.0, 1.0);
  const double done = stats.commit_s > 0 ? stats.commit_s : stats.write_s;
  memory_stall_ = (1 - a) * memory_stall_ + a * stats.stall_s;
  memory_write_ = (1 - a) * memory_write_ + a * std::max(0.0, done - stats.stall_s);
  Recompute();
}

bool IntervalPolicy::ShouldCheckpoint(double now_s, bool previous_durable) {
  if (last_start_ < 0) {
    last_start_ = now_s;  // the clock starts at the first question
    return false;
  }
  return previous_durable && now_s - last_start_ >= interval_;
}

void IntervalPolicy::SaveStarted(double now_s) { last_start_ = now_s; }

void IntervalPolicy::RecordSave(const SaveStats& stats) {
  const double a = std::clamp(options_.smoothing, 0.0, 1.0);
  const double done = stats.commit_s > 0 ? stats.commit_s : stats.write_s;
  if (options_.async) {
    stall_ = (1 - a) * stall_ + a * stats.stall_s;
    write_ = (1 - a) * write_ + a * std::max(0.0, done - stats.stall_s);
  } else {
    stall_ = (1 - a) * stall_ + a * done;  // a blocking save costs all of it
  }
  Recompute();
}

void IntervalPolicy::SetMtbf(double mtbf_s) {
  options_.mtbf_s = mtbf_s;
  Recompute();
}

}  // namespace ckpt
