#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

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

// Two levels (interval.h): saves every `interval` of wall time, every
// durable_every-th durable. Each failure is survivable by memory with
// probability `survivable`; a failure during a restart is drawn the same
// way, and one that is not survivable turns a memory restore into a
// durable one. A survivable failure goes back to the newest committed save
// of either level, from peers' memory when that is a memory save and from
// storage when it is the durable one (durable saves are not held in
// memory).
double RunTwoLevel(const SimulationConfig& c, FailureClock& clock, std::mt19937_64& kind, int64_t* failures,
                   int64_t* memory_restores, int64_t* durable_restores) {
  const LevelCosts durable{c.stall, c.write, c.restart};
  const int64_t k = std::max<int64_t>(1, c.durable_every);
  const double period = std::max(c.interval, k > 1 ? c.memory.stall + c.memory.write : c.stall + c.write);
  std::uniform_real_distribution<double> coin(0, 1);
  struct Pending {
    double progress, at;
    bool durable;
  };
  std::vector<Pending> pending;
  // newest: the newest committed save of either level (its progress, and
  // whether it is durable); dur_point: the newest durable one.
  double t = 0, progress = 0, newest = 0, dur_point = 0;
  bool newest_durable = true;  // the start, as if saved durably
  int64_t index = 0;           // saves started
  double next_failure = clock.Next(0);
  auto settle = [&](double now) {
    for (size_t i = 0; i < pending.size();) {
      if (pending[i].at <= now) {
        if (pending[i].progress > newest) {
          newest = pending[i].progress;
          newest_durable = pending[i].durable;
        }
        if (pending[i].durable) dur_point = std::max(dur_point, pending[i].progress);
        pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(i));
      } else {
        ++i;
      }
    }
  };
  auto lose_memory = [&] {  // the memory copies are gone
    newest = dur_point;
    newest_durable = true;
  };
  auto fail = [&] {
    t = next_failure;
    ++*failures;
    settle(t);
    pending.clear();  // saves still committing are lost
    if (coin(kind) >= c.survivable) lose_memory();
    next_failure = clock.Next(t);
    while (next_failure - t < (newest_durable ? durable.restart : c.memory.restart)) {
      t = next_failure;
      ++*failures;
      if (coin(kind) >= c.survivable) lose_memory();
      next_failure = clock.Next(t);
    }
    t += newest_durable ? durable.restart : c.memory.restart;
    progress = newest;
    ++*(newest_durable ? durable_restores : memory_restores);
  };
  while (progress < c.work) {
    const bool is_durable = (index + 1) % k == 0;
    const LevelCosts& level = is_durable ? durable : c.memory;
    const double compute = std::min(period - level.stall, c.work - progress);
    if (next_failure - t < compute) {
      fail();
      continue;
    }
    t += compute;
    progress += compute;
    settle(t);
    if (progress >= c.work) break;
    if (next_failure - t < level.stall) {
      fail();
      continue;
    }
    t += level.stall;
    pending.push_back({progress, t + level.write, is_durable});
    ++index;
  }
  return t;
}

// Asynchronous saves of one level: two levels where every save is durable
// and no failure is survivable by memory.
double RunAsync(const SimulationConfig& c, FailureClock& clock, int64_t* failures) {
  SimulationConfig one = c;
  one.durable_every = 1;
  one.survivable = 0;
  one.memory = {c.stall, c.write, c.restart};
  std::mt19937_64 unused(0);
  int64_t memory_restores = 0, durable_restores = 0;
  return RunTwoLevel(one, clock, unused, failures, &memory_restores, &durable_restores);
}

}  // namespace

SimulationResult Simulate(const SimulationConfig& config) {
  SimulationResult r;
  if (config.runs <= 0 || config.work <= 0 || config.interval <= 0) return r;
  double sum = 0, sum2 = 0, wall = 0;
  int64_t failures = 0, memory_restores = 0, durable_restores = 0;
  for (int64_t i = 0; i < config.runs; ++i) {
    const uint64_t seed = config.seed * 1000003 + static_cast<uint64_t>(i);
    FailureClock clock(config.mtbf, config.weibull_shape, seed);
    std::mt19937_64 kind(seed ^ 0x9e3779b97f4a7c15ULL);
    const double t = config.two_level ? RunTwoLevel(config, clock, kind, &failures, &memory_restores, &durable_restores)
                     : config.async   ? RunAsync(config, clock, &failures)
                                      : RunBlocking(config, clock, &failures);
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
  r.memory_restores_per_run = static_cast<double>(memory_restores) / n;
  r.durable_restores_per_run = static_cast<double>(durable_restores) / n;
  return r;
}

}  // namespace ckpt
