// The coordinator's ledger of the two-phase commit: per step, the votes of
// the generation saving it, the decision and the outcome; the check that
// replicas agree; the per-rank save durations and their stragglers. No
// sockets, no journal, no clock: each call returns what it decided, and the
// server journals it, logs it and answers whoever waits.
#ifndef CKPT_COORDINATOR_COMMIT_BOOK_H_
#define CKPT_COORDINATOR_COMMIT_BOOK_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ckpt/experimental/commit_arbiter.h"

namespace ckpt::coord {

/// Replicas of one box disagreed.
struct SdcAlert {
  int64_t step = 0;
  std::string key;     ///< tensor and box
  std::string detail;  ///< which ranks disagree with the majority, or that there is none
};

/// Per-rank durations of a committed save, and the ranks far slower than
/// the typical one.
struct SaveDurations {
  int64_t step = -1;
  std::vector<double> stall, write;                ///< in rank order
  std::vector<std::pair<int, double>> stragglers;  ///< rank, write seconds
  double median_write = 0;
};

/// What a call to the book decided.
struct BookEvent {
  enum class Kind {
    kDecidedCommit,  ///< every rank voted ok and replicas agree: the leader may publish
    kAborted,        ///< the step will not be committed (`status` says why)
    kCommitted,      ///< the leader published the manifest
  };
  Kind kind = Kind::kAborted;
  int64_t step = 0;
  int64_t generation = 0;
  absl::Status status;      ///< kAborted: why
  SaveDurations durations;  ///< kCommitted: the votes' durations
};

/// Replicas of one box (same key in several ranks' votes) must have the same
/// hash. Each disagreement appends an alert naming the ranks outside the
/// majority; the result is DataLoss when the copy that was written is not the
/// majority's (or there is no majority), OK otherwise.
absl::Status CheckReplicas(int64_t step, const std::map<int, SaveVote>& votes, std::vector<SdcAlert>* alerts);

/// Durations by rank and the stragglers: ranks whose write took beyond 5
/// scaled MADs over the median, at least 1.5x the median and 10 ms more
/// (only with 3 or more ranks).
SaveDurations Durations(int64_t step, const std::map<int, SaveVote>& votes);

class CommitBook {
 public:
  struct Step {
    int64_t generation = 0;
    std::map<int, SaveVote> votes;
    std::optional<absl::Status> decision;  ///< OK: commit
    std::optional<absl::Status> outcome;   ///< set once published (OK) or aborted
  };

  /// The step as generation `gen` sees it. A step an older generation
  /// started and did not commit is started afresh (a new generation saves
  /// it again after restoring an earlier one); a committed step stays
  /// committed, except a memory step (records.h StepKey), which a newer
  /// generation saves again only when its copies were lost; a request of an
  /// older generation than the step's changes nothing (the caller checks
  /// `generation`).
  Step& For(int64_t step, int64_t gen);
  const Step* Find(int64_t step) const;
  const std::map<int64_t, Step>& steps() const { return steps_; }

  /// Rank `rank`'s vote on `step` in generation `gen` of `world` ranks. A
  /// failed vote aborts the step; the last vote decides it (commit when the
  /// replicas agree). Votes on a decided step are ignored. Alerts from the
  /// replica check are appended to `alerts`.
  std::vector<BookEvent> Vote(int64_t step, int64_t gen, int rank, SaveVote vote, int world,
                              std::vector<SdcAlert>* alerts);

  /// The leader published the manifest (`ok`) or could not (`message`).
  /// FailedPrecondition when the step was not decided for commit.
  absl::StatusOr<std::vector<BookEvent>> Published(int64_t step, int64_t gen, bool ok, std::string_view message);

  /// Aborts `step` unless it already has an outcome.
  std::vector<BookEvent> Abort(int64_t step, const absl::Status& why);
  /// Aborts every step of generation `gen` without an outcome.
  std::vector<BookEvent> AbortGeneration(int64_t gen, const absl::Status& why);

  /// Journal replay.
  void ReplayDecided(int64_t step, int64_t gen);
  void ReplayCommitted(int64_t step, int64_t gen);
  void ReplayAborted(int64_t step, int64_t gen);

  /// Forgets the oldest steps beyond `keep`: all of them (`only_decided`
  /// false, after a replay) or only those with an outcome.
  void Trim(size_t keep, bool only_decided);

 private:
  Step& ReplayFor(int64_t step, int64_t gen);
  std::map<int64_t, Step> steps_;
};

}  // namespace ckpt::coord

#endif  // CKPT_COORDINATOR_COMMIT_BOOK_H_
