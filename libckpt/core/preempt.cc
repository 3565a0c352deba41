#include "ckpt/preempt.h"

#include <signal.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <string>

#include "util/log.h"
#include "util/strings.h"

namespace ckpt {

namespace {

// Written by the handler: async-signal-safe atomics only.
std::atomic<bool> requested{false};
std::atomic<int64_t> requested_at_ns{0};

int64_t MonotonicNanos() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

void OnSignal(int) {
  int64_t none = 0;
  requested_at_ns.compare_exchange_strong(none, MonotonicNanos());
  requested.store(true);
}

}  // namespace

absl::Status WatchForPreemption(const std::vector<int>& signals) {
  for (int sig : signals) {
    struct sigaction sa {};
    sa.sa_handler = OnSignal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    if (sig <= 0 || sig >= NSIG || sig == SIGKILL || sig == SIGSTOP || sigaction(sig, &sa, nullptr) != 0) {
      return absl::InvalidArgumentError(StrCat("cannot watch signal ", sig, " for preemption"));
    }
  }
  return absl::OkStatus();
}

bool PreemptionRequested() { return requested.load(); }

void ClearPreemption() {
  requested.store(false);
  requested_at_ns.store(0);
}

double SecondsSincePreemption() {
  const int64_t at = requested_at_ns.load();
  return at == 0 ? -1 : static_cast<double>(MonotonicNanos() - at) / 1e9;
}

absl::StatusOr<bool> AgreeOnPreemption(Communicator* comm, double timeout_s) {
  const bool mine = PreemptionRequested();
  if (comm == nullptr || comm->size() == 1) return mine;
  static constexpr std::string_view kYes = "1", kNo = "0";
  auto flags = comm->Gather(mine ? kYes : kNo, timeout_s);
  if (!flags.ok()) return flags.status();
  bool any = false;
  for (const std::string& f : *flags) any = any || f == kYes;
  auto said = comm->Broadcast(any ? kYes : kNo, timeout_s);  // the leader's is the one sent
  if (!said.ok()) return said.status();
  return *said == kYes;
}

PreemptionSave SaveForPreemption(Checkpointer& checkpointer, int64_t step, const State& state, double deadline_s) {
  PreemptionSave out;
  out.step = step;
  const double since = SecondsSincePreemption();
  const int64_t start_ns = MonotonicNanos() - (since > 0 ? static_cast<int64_t>(since * 1e9) : 0);
  auto elapsed = [&] { return static_cast<double>(MonotonicNanos() - start_ns) / 1e9; };
  // Saves of this checkpointer still in flight (a periodic save) finish
  // first or are abandoned: a new save waits for them anyway.
  std::vector<SaveLevel> levels;
  if (checkpointer.memory_storage() != nullptr) levels.push_back(SaveLevel::kMemory);
  levels.push_back(SaveLevel::kDurable);
  for (SaveLevel level : levels) {
    const double left = deadline_s - elapsed();
    if (left <= 0) break;
    SaveOptions so;
    so.level = level;
    auto h = checkpointer.Save(step, state, so);
    if (!h.ok()) {
      LogWarning(StrCat("preempted: the ", SaveLevelName(level), " save of step ", step,
                        " did not start: ", h.status().ToString()));
      continue;
    }
    absl::Status s = h->WaitFor(std::max(0.0, deadline_s - elapsed()));
    if (absl::IsDeadlineExceeded(s) && !h->Done()) {
      out.abandoned = true;
      LogWarning(StrCat("preempted: the ", SaveLevelName(level), " save of step ", step, " was abandoned at the ",
                        deadline_s, " s deadline (never committed)"));
      break;
    }
    if (!s.ok()) {
      LogWarning(StrCat("preempted: the ", SaveLevelName(level), " save of step ", step, " failed: ", s.ToString()));
      continue;
    }
    out.committed.push_back(level);
  }
  out.seconds = elapsed();
  std::string said;
  for (SaveLevel l : out.committed) said += StrCat(said.empty() ? "" : ", ", SaveLevelName(l));
  LogWarning(out.committed.empty()
                 ? StrCat("preempted: step ", step, " could not be committed within ", deadline_s, " s")
                 : StrCat("preempted: step ", step, " committed (", said, ") ", out.seconds, " s after the signal"));
  return out;
}

}  // namespace ckpt
