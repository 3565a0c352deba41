#include <cmath>
#include <random>

#include "ckpt/interval.h"

namespace ckpt {
namespace {

// Failure gaps: Weibull with the given shape, scaled so the mean is `mtbf`
// (shape 1: exponential). Each gap starts at the previous failure.
class FailureClock {
 public:
  FailureClock(double mtbf, double shape, uint64_t seed)
      : rng_(seed), dist_(shape, mtbf / std::tgamma(1.0 + 1.0 / shape)) {}
  double Next(double now) { return now + dist_(rng_); }

 private:
  std::mt19937_64 rng_;
  std::weibull_distribution<double> dist_;
};

// Restart after a failure at `t`, failures may strike during the restart.
// Returns when the job runs again; counts the failures.
double Restart(double t, double restart, FailureClock& clock, double* next_failure, int64_t* failures) {
  *next_failure = clock.Next(t);
  while (*next_failure - t < restart) {
    t = *next_failure;
    ++*failures;
    *next_failure = clock.Next(t);
  }
  return t + restart;
}

double RunBlocking(const SimulationConfig& c, FailureClock& clock, int64_t* failures) {
  double t = 0, progress = 0;
  double next_failure = clock.Next(0);
  while (progress < c.work) {
    const double seg = std::min(c.interval, c.work - progress);
    const double need = seg + c.delta;
    if (next_failure - t >= need) {
      t += need;
      progress += seg;
      continue;
    }
    t = next_failure;  // the segment and its checkpoint are lost
    ++*failures;
    t = Restart(t, c.restart, clock, &next_failure, failures);
  }
  return t;
}

double RunAsync(const SimulationConfig& c, FailureClock& clock, int64_t* failures) {
  const double period = std::max(c.interval, c.stall + c.write);
  double t = 0, progress = 0, durable = 0;
  double pending_progress = -1, pending_at = 0;  // a save not yet durable
  double next_failure = clock.Next(0);
  auto settle = [&](double now) {
    if (pending_progress >= 0 && pending_at <= now) {
      durable = pending_progress;
      pending_progress = -1;
    }
  };
  auto fail = [&] {
    t = next_failure;
    ++*failures;
    settle(t);
    pending_progress = -1;  // a save still writing is lost
    progress = durable;
    t = Restart(t, c.restart, clock, &next_failure, failures);
  };
  while (progress < c.work) {
    // Compute until the next save (or the end of the work).
    const double compute = std::min(period - c.stall, c.work - progress);
    if (next_failure - t < compute) {
      fail();
      continue;
    }
    t += compute;
    progress += compute;
    settle(t);
    if (progress >= c.work) break;
    // The save: the trainer stalls, then the write goes on in the background.
    if (next_failure - t < c.stall) {
      fail();
      continue;
    }
    t += c.stall;
    pending_progress = progress;
    pending_at = t + c.write;
  }
  return t;
}

}  // namespace

SimulationResult Simulate(const SimulationConfig& config) {
  SimulationResult r;
  if (config.runs <= 0 || config.work <= 0 || config.interval <= 0) return r;
  double sum = 0, sum2 = 0, wall = 0;
  int64_t failures = 0;
  for (int64_t i = 0; i < config.runs; ++i) {
    FailureClock clock(config.mtbf, config.weibull_shape, config.seed * 1000003 + static_cast<uint64_t>(i));
    const double t = config.async ? RunAsync(config, clock, &failures) : RunBlocking(config, clock, &failures);
    const double g = config.work / t;
    sum += g;
    sum2 += g * g;
    wall += t;
  }
  const double n = static_cast<double>(config.runs);
  r.goodput = sum / n;
  const double var = std::max(0.0, sum2 / n - r.goodput * r.goodput) * n / std::max(1.0, n - 1);
  r.goodput_ci95 = 1.96 * std::sqrt(var / n);
  r.mean_wall = wall / n;
  r.failures_per_run = static_cast<double>(failures) / n;
  return r;
}

}  // namespace ckpt
