// Preemption saves: schedulers send SIGTERM (or SIGUSR1) some seconds before
// they kill a job. The trainer asks at each step boundary whether any rank
// got one; if so, every rank saves that step before the deadline, then exits.
//
//   ckpt::WatchForPreemption({SIGTERM, SIGUSR1});
//   for (int64_t step = start + 1; ; ++step) {
//     Train();
//     auto now = ckpt::AgreeOnPreemption(comm.get(), 60);   // a collective
//     if (now.ok() && *now) {
//       auto done = ckpt::SaveForPreemption(*cp, step, state, /*deadline_s=*/30);
//       std::exit(ckpt::kPreemptedExitCode);
//     }
//     ...
//   }
#ifndef CKPT_PREEMPT_H_
#define CKPT_PREEMPT_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "ckpt/checkpointer.h"
#include "ckpt/communicator.h"
#include "ckpt/export.h"

namespace ckpt {

/// What a process preempted this way exits with: 128 + SIGTERM, what
/// schedulers expect of a job that ended on their signal.
inline constexpr int kPreemptedExitCode = 143;

/// Catches `signals` for the rest of the process: each records that a
/// preemption was asked for and when (nothing else runs in the handler).
CKPT_EXPORT absl::Status WatchForPreemption(const std::vector<int>& signals);

/// Whether this process got one of the watched signals.
CKPT_EXPORT bool PreemptionRequested();

/// Forgets the signals received so far: for a trainer that saved and chose
/// to go on rather than exit (the next signal starts a new deadline).
CKPT_EXPORT void ClearPreemption();

/// Seconds since the first watched signal reached this process; -1 when
/// none did.
CKPT_EXPORT double SecondsSincePreemption();

/// Whether any rank got a signal: a collective over `comm` (every rank
/// calls it at the same step boundary; the leader gathers the flags and
/// says). Without a communicator, PreemptionRequested().
CKPT_EXPORT absl::StatusOr<bool> AgreeOnPreemption(Communicator* comm, double timeout_s);

struct CKPT_EXPORT PreemptionSave {
  int64_t step = -1;
  /// The levels at which `step` committed, in order (memory, then durable).
  std::vector<SaveLevel> committed;
  /// A save still running at the deadline: abandoned, never committed (the
  /// next start collects what it left). The caller should exit at once
  /// (std::_Exit) rather than wait for it in destructors.
  bool abandoned = false;
  /// From the signal (or the call, on a rank no signal reached) to the end.
  double seconds = 0;
};

/// Every rank saves `step`: to the memory level first when the checkpointer
/// has one, then durably, each started only while `deadline_s` (counted
/// from the signal) allows, and waited for until then. Failures are said in
/// the log (ckpt/log.h) and in what is returned, not returned as errors: a
/// preempted trainer exits either way.
CKPT_EXPORT PreemptionSave SaveForPreemption(Checkpointer& checkpointer, int64_t step, const State& state,
                                             double deadline_s);

}  // namespace ckpt

#endif  // CKPT_PREEMPT_H_
