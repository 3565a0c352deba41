// How often to checkpoint: interval models (Young, Daly, the exact optimum of
// Daly's model, asynchronous saves), failure-rate estimation from logs, a
// Monte Carlo simulator to check them, and a policy a trainer can ask every
// step. All times are in seconds.
#ifndef CKPT_INTERVAL_H_
#define CKPT_INTERVAL_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ckpt/checkpointer.h"
#include "ckpt/export.h"

namespace ckpt {

// ---------------------------------------------------------------------------
// Blocking checkpoints (the job stops for `delta` seconds per checkpoint).

/// Young's first-order optimum: sqrt(2 * delta * M).
CKPT_EXPORT double YoungInterval(double delta, double mtbf);

/// Daly's higher-order estimate (FGCS 2006, eq. 37): compute time between
/// checkpoints; M when delta >= 2M.
CKPT_EXPORT double DalyInterval(double delta, double mtbf);

/// The exact minimiser of Daly's expected wall time,
/// tau = M * (1 + W0(-exp(-(delta / M + 1)))), W0 the Lambert W function.
CKPT_EXPORT double ExactDalyInterval(double delta, double mtbf);

/// Daly's expected wall time to finish `work` seconds of computation with
/// compute interval `tau`, checkpoint cost `delta`, restart `restart`, MTBF
/// `mtbf`, failures possible at any time (also during checkpoints and
/// restarts): M e^{R/M} (e^{(tau+delta)/M} - 1) work / tau.
CKPT_EXPORT double DalyWallTime(double work, double tau, double delta, double restart, double mtbf);

/// work / DalyWallTime: the fraction of wall time that is useful work.
CKPT_EXPORT double DalyGoodput(double tau, double delta, double restart, double mtbf);

// ---------------------------------------------------------------------------
// Asynchronous checkpoints: the job stops for `stall` seconds, then the save
// becomes durable `write` seconds later while training goes on. A failure
// before it is durable falls back to the previous checkpoint. `period` is the
// wall time from one save's start to the next; a save starts only after the
// previous one is durable, so period >= stall + write.

/// Goodput of asynchronous saves with exponential failures, exactly. Between
/// one save becoming durable and the next, `period` of wall time passes; a
/// failure in it falls back to the earlier save, so the retry needs restart +
/// write + period without a failure. Renewal arithmetic gives
///   (period - stall) / M * e^{-(restart + write) / M} / (e^{period / M} - 1),
/// Daly's blocking model with cost = stall, times e^{-write / M}.
CKPT_EXPORT double AsyncGoodput(double period, double stall, double write, double restart, double mtbf);

/// Expected wall time lost per failure in the same model (re-done work,
/// restart, failures during the restart): (E[window] - period) / failures
/// per window.
CKPT_EXPORT double AsyncLossPerFailure(double period, double stall, double write, double restart, double mtbf);

/// The period maximising AsyncGoodput: Daly's exact optimum for a cost of
/// `stall` (the write does not move it), but at least stall + write.
CKPT_EXPORT double AsyncInterval(double stall, double write, double mtbf);

// ---------------------------------------------------------------------------
// Two levels: memory saves (held in peers' memory) survive the failures that
// take out one failure domain, a fraction `survivable` of all failures;
// durable saves (storage) survive every failure. Saves start every
// `memory_period` of wall time; every `durable_every`-th is durable instead
// of a memory save. After a survivable failure the job restarts from the
// newest committed save of either level: from peers' memory at the memory
// level's restart cost when that is a memory save, from storage at the
// durable restart cost when it is the durable one (a durable save is not
// held in memory). After any other failure it restarts from the newest
// committed durable save. A memory save must commit before the next save
// starts, a durable one before the next durable one (memory saves may start
// while it drains).

struct CKPT_EXPORT LevelCosts {
  double stall = 0;    ///< the trainer is blocked this long per save
  double write = 0;    ///< then this long until the save is committed
  double restart = 0;  ///< restart and restore from this level
};

struct CKPT_EXPORT TwoLevelPlan {
  double memory_period = 0;   ///< wall time from one save's start to the next
  int64_t durable_every = 1;  ///< every k-th save is durable
  double durable_period = 0;  ///< memory_period * durable_every
  double goodput = 0;         ///< TwoLevelGoodput at this plan
};

/// First-order goodput of a two-level schedule (the waste of the saves and
/// of each kind of failure, added; exact to O((period / mtbf)^2)). With
/// commit delays c1 = s1 + w1, c2 = s2 + w2, and e = min(c2, P + c1):
///   1 - [(k-1) s1 + s2] / (k P)
///     - p/M (P/2 + [(k-1) c1 + e] / k + (1-f) r1 + f r2)
///     - (1-p)/M (k P/2 + c2 + r2),
/// where f = (P + c1 - e) / (k P) is the share of the cycle in which the
/// durable save is the newest committed one. For k = 1 every failure
/// restores the durable save: 1 - s2/P - (P/2 + c2 + r2)/M.
CKPT_EXPORT double TwoLevelGoodput(double memory_period, int64_t durable_every, const LevelCosts& memory,
                                   const LevelCosts& durable, double survivable, double mtbf);

/// The schedule maximising TwoLevelGoodput: for each k, the goodput is
/// A/P + B P + const on either side of P = c2 - c1, so the best period is a
/// side's stationary point sqrt(A/B) held to that side and to the commit
/// constraints, or a side's lower end; the best k of 1..100000. survivable
/// in [0, 1): with 0 memory saves cannot pay and k = 1.
CKPT_EXPORT TwoLevelPlan TwoLevelInterval(const LevelCosts& memory, const LevelCosts& durable, double survivable,
                                          double mtbf);

/// The fraction of failures the memory level survives when it tolerates
/// the loss of `tolerated` failure domains at once (replicas r: r; erasure
/// coding k+m: m), given `domains_lost[j]` the share (or count) of failures
/// that took out j + 1 domains at once. A failure of more domains is taken
/// as not survivable (some rank's copies, or more than m of its pieces,
/// may be among them). InvalidArgument for negative shares or none at all.
CKPT_EXPORT absl::StatusOr<double> SurvivableFraction(const std::vector<double>& domains_lost, int tolerated);

// ---------------------------------------------------------------------------
// Failure rates from logs.

struct CKPT_EXPORT MtbfEstimate {
  int64_t failures = 0;
  double observed_s = 0;  ///< total time the estimate is based on
  double mtbf = 0;        ///< maximum-likelihood estimate
  double lower95 = 0;     ///< chi-square 95% interval
  double upper95 = 0;
};

/// Exponential MLE from inter-failure times (time-truncated when
/// `censored_tail` > 0: that much observation after the last failure).
CKPT_EXPORT MtbfEstimate EstimateMtbf(const std::vector<double>& inter_failure_s, double censored_tail = 0);

struct CKPT_EXPORT WeibullFit {
  double shape = 1;  ///< k: < 1 infant mortality, > 1 wear-out
  double scale = 0;  ///< lambda, seconds
  double Mean() const;
};

/// Maximum-likelihood Weibull fit of inter-failure times (Newton on the
/// shape equation). Needs at least two distinct positive values.
CKPT_EXPORT absl::StatusOr<WeibullFit> FitWeibull(const std::vector<double>& inter_failure_s);

/// Parses a failure log: one entry per line or a JSON array; entries are
/// either timestamps (ISO-8601 "2024-05-01T03:12:00Z" or Unix seconds) or,
/// with `intervals`, inter-failure durations ("3h", "1800", "45m"). CSV
/// lines take the first field; a header line is skipped. Returns sorted
/// inter-failure times in seconds.
CKPT_EXPORT absl::StatusOr<std::vector<double>> ParseFailureLog(const std::string& text, bool intervals);

// ---------------------------------------------------------------------------
// Monte Carlo.

struct CKPT_EXPORT SimulationConfig {
  bool async = false;
  double work = 0;      ///< useful compute to finish
  double interval = 0;  ///< blocking: compute between checkpoints; async: period
  double delta = 0;     ///< blocking checkpoint cost
  double stall = 0;     ///< async
  double write = 0;     ///< async
  double restart = 0;
  double mtbf = 0;
  double weibull_shape = 1;  ///< 1: exponential failures
  int64_t runs = 1000;
  uint64_t seed = 1;
  /// Two levels (interval = memory period; stall, write and restart are the
  /// durable level's): every durable_every-th save is durable, the others
  /// memory saves with these costs; a failure is survivable by memory with
  /// probability `survivable`.
  bool two_level = false;
  LevelCosts memory;
  int64_t durable_every = 1;
  double survivable = 0;
};

struct CKPT_EXPORT SimulationResult {
  double goodput = 0;       ///< mean of work / wall time over runs
  double goodput_ci95 = 0;  ///< half-width of its 95% interval
  double mean_wall = 0;
  double failures_per_run = 0;
  /// Two levels: restarts from a memory save and from a durable one.
  double memory_restores_per_run = 0, durable_restores_per_run = 0;
};

/// Simulates `runs` independent runs; failures are a renewal process with
/// Weibull(shape, scale) gaps whose mean is `mtbf`, striking at any moment
/// (computing, checkpointing, restarting).
CKPT_EXPORT SimulationResult Simulate(const SimulationConfig& config);

// ---------------------------------------------------------------------------
// Policy.

struct CKPT_EXPORT IntervalPolicyOptions {
  double mtbf_s = 24 * 3600;
  double restart_s = 600;
  double stall_s = 1;   ///< starting estimate, refined by RecordSave
  double write_s = 30;  ///< starting estimate (async)
  bool async = true;
  double min_interval_s = 60;
  double max_interval_s = 24 * 3600;
  double smoothing = 0.3;  ///< weight of each new measurement
  /// Two levels (NextLevel): memory saves with these starting estimates,
  /// surviving this fraction of failures; stall_s, write_s and restart_s
  /// are then the durable level's. min/max_interval_s bound the memory
  /// period.
  bool two_level = false;
  double memory_stall_s = 0.2;
  double memory_write_s = 2;
  double memory_restart_s = 60;
  double survivable = 0.9;
};

/// Answers "checkpoint now?" each step, from the failure rate and the save
/// costs it measures (exponentially smoothed), never before the previous
/// save is durable. Not thread-safe.
class CKPT_EXPORT IntervalPolicy {
 public:
  explicit IntervalPolicy(IntervalPolicyOptions options);
  /// `now_s`: any monotonic clock. `previous_durable`: the last save's
  /// handle reports durable (or there was none).
  bool ShouldCheckpoint(double now_s, bool previous_durable = true);
  /// Call when a save started at `now_s` (resets the clock).
  void SaveStarted(double now_s);
  /// Folds a finished save's measured costs into the estimates.
  void RecordSave(const SaveStats& stats);
  /// Updates the failure rate (e.g. from a fresh log estimate).
  void SetMtbf(double mtbf_s);
  double interval_s() const { return interval_; }
  double stall_s() const { return stall_; }
  double write_s() const { return write_; }

  /// Two levels: the level of the save to start now, or nullopt for none
  /// now (never before the previous save committed). Durable every
  /// durable_every() saves.
  std::optional<SaveLevel> NextLevel(double now_s, bool previous_committed = true);
  /// Call when a save of `level` started at `now_s`.
  void SaveStarted(double now_s, SaveLevel level);
  /// Folds a finished save of `level` into that level's estimates.
  void RecordSave(const SaveStats& stats, SaveLevel level);
  int64_t durable_every() const { return durable_every_; }

 private:
  void Recompute();
  IntervalPolicyOptions options_;
  double stall_, write_;
  double memory_stall_, memory_write_;
  double interval_ = 0;
  int64_t durable_every_ = 1;
  int64_t saves_since_durable_ = 0;
  double last_start_ = -1;
};

}  // namespace ckpt

#endif  // CKPT_INTERVAL_H_
