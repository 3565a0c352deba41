#include "coordinator/commit_book.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_join.h"
#include "coordinator/records.h"
#include "util/strings.h"

namespace ckpt::coord {

absl::Status CheckReplicas(int64_t step, const std::map<int, SaveVote>& votes, std::vector<SdcAlert>* alerts) {
  struct Copy {
    int rank;
    uint64_t hash;
    bool written;
  };
  std::map<std::string, std::vector<Copy>> by_key;
  for (const auto& [rank, v] : votes) {
    for (const ReplicaHash& rh : v.replicas) by_key[rh.key].push_back(Copy{rank, rh.hash, rh.written});
  }
  absl::Status verdict;
  for (const auto& [key, copies] : by_key) {
    if (copies.size() < 2) continue;
    std::map<uint64_t, std::vector<int>> groups;
    for (const Copy& c : copies) groups[c.hash].push_back(c.rank);
    if (groups.size() == 1) continue;
    uint64_t major = 0;
    size_t best = 0;
    for (const auto& [hash, ranks] : groups) {
      if (ranks.size() > best) {
        best = ranks.size();
        major = hash;
      }
    }
    const bool strict = best * 2 > copies.size();
    std::vector<int> minority;
    for (const auto& [hash, ranks] : groups) {
      if (hash != major || !strict) minority.insert(minority.end(), ranks.begin(), ranks.end());
    }
    std::sort(minority.begin(), minority.end());
    int writer = -1;
    uint64_t written_hash = 0;
    for (const Copy& c : copies) {
      if (c.written) {
        writer = c.rank;
        written_hash = c.hash;
      }
    }
    SdcAlert alert;
    alert.step = step;
    alert.key = key;
    alert.detail = strict ? StrCat("rank(s) ", absl::StrJoin(minority, ", "), " disagree with the other ", best, " of ",
                                   copies.size(), " replicas")
                          : StrCat("no majority among ", copies.size(), " replicas");
    alerts->push_back(std::move(alert));
    if ((!strict || written_hash != major) && verdict.ok()) {
      verdict = absl::DataLossError(StrCat(
          "silent data corruption in ", key, " at step ", step, ": the copy of rank ", writer, " that was written ",
          strict ? "disagrees with the majority" : "has no majority", "; the step is not committed"));
    }
  }
  return verdict;
}

SaveDurations Durations(int64_t step, const std::map<int, SaveVote>& votes) {
  SaveDurations d;
  d.step = step;
  for (const auto& [rank, v] : votes) {
    d.stall.push_back(v.stall_s);
    d.write.push_back(v.write_s);
  }
  std::vector<double> w = d.write;
  std::sort(w.begin(), w.end());
  d.median_write = w.empty() ? 0 : w[w.size() / 2];
  std::vector<double> dev;
  for (double x : w) dev.push_back(std::fabs(x - d.median_write));
  std::sort(dev.begin(), dev.end());
  const double mad = dev.empty() ? 0 : dev[dev.size() / 2];
  const double limit = std::max({d.median_write + 5 * 1.4826 * mad, 1.5 * d.median_write, d.median_write + 0.01});
  if (w.size() >= 3) {
    for (const auto& [rank, v] : votes) {
      if (v.write_s > limit) d.stragglers.emplace_back(rank, v.write_s);
    }
  }
  return d;
}

CommitBook::Step& CommitBook::For(int64_t step, int64_t gen) {
  Step& st = steps_[step];
  const bool committed = st.outcome && st.outcome->ok();
  // A memory step committed by an older generation is saved again only when
  // that generation's copies were lost (the restore went further back): the
  // new save supersedes it.
  if (st.generation < gen && (!committed || IsMemoryKey(step))) {
    st = Step{};
    st.generation = gen;
  }
  return st;
}

const CommitBook::Step* CommitBook::Find(int64_t step) const {
  auto it = steps_.find(step);
  return it == steps_.end() ? nullptr : &it->second;
}

std::vector<BookEvent> CommitBook::Vote(int64_t step, int64_t gen, int rank, SaveVote vote, int world,
                                        std::vector<SdcAlert>* alerts) {
  Step& st = For(step, gen);
  if (st.generation != gen || st.outcome || st.decision) return {};
  const bool ok = vote.ok;
  const std::string error = vote.error;
  st.votes[rank] = std::move(vote);
  if (!ok) {
    return Abort(step, absl::AbortedError(StrCat("rank ", rank, " failed to save ", StepName(step), ": ", error)));
  }
  if (static_cast<int>(st.votes.size()) != world) return {};
  absl::Status verdict = CheckReplicas(step, st.votes, alerts);
  if (!verdict.ok()) return Abort(step, verdict);
  st.decision = absl::OkStatus();
  BookEvent e;
  e.kind = BookEvent::Kind::kDecidedCommit;
  e.step = step;
  e.generation = st.generation;
  return {std::move(e)};
}

absl::StatusOr<std::vector<BookEvent>> CommitBook::Published(int64_t step, int64_t gen, bool ok,
                                                             std::string_view message) {
  Step& st = For(step, gen);
  if (st.generation != gen || !st.decision || !st.decision->ok()) {
    return absl::FailedPreconditionError(StrCat(StepName(step), " was not decided for commit"));
  }
  if (!ok)
    return Abort(step, absl::AbortedError(StrCat("the leader could not publish ", StepName(step), ": ", message)));
  if (st.outcome) return std::vector<BookEvent>{};
  st.outcome = absl::OkStatus();
  BookEvent e;
  e.kind = BookEvent::Kind::kCommitted;
  e.step = step;
  e.generation = st.generation;
  e.durations = Durations(step, st.votes);
  st.votes.clear();  // the durations travel in the event
  return std::vector<BookEvent>{std::move(e)};
}

std::vector<BookEvent> CommitBook::Abort(int64_t step, const absl::Status& why) {
  Step& st = steps_[step];
  if (st.outcome) return {};
  st.decision = why;
  st.outcome = why;
  BookEvent e;
  e.kind = BookEvent::Kind::kAborted;
  e.step = step;
  e.generation = st.generation;
  e.status = why;
  return {std::move(e)};
}

std::vector<BookEvent> CommitBook::AbortGeneration(int64_t gen, const absl::Status& why) {
  std::vector<BookEvent> events;
  for (auto& [step, st] : steps_) {
    if (st.generation == gen && !st.outcome) {
      for (BookEvent& e : Abort(step, why)) events.push_back(std::move(e));
    }
  }
  return events;
}

// A record of another generation than the step's entry starts it afresh:
// a step an older generation aborted and a newer one saved again must not
// keep the old outcome beside the new decision.
CommitBook::Step& CommitBook::ReplayFor(int64_t step, int64_t gen) {
  Step& st = steps_[step];
  if (st.generation != gen) {
    st = Step{};
    st.generation = gen;
  }
  return st;
}

void CommitBook::ReplayDecided(int64_t step, int64_t gen) { ReplayFor(step, gen).decision = absl::OkStatus(); }

void CommitBook::ReplayCommitted(int64_t step, int64_t gen) { ReplayFor(step, gen).outcome = absl::OkStatus(); }

void CommitBook::ReplayAborted(int64_t step, int64_t gen) {
  Step& st = ReplayFor(step, gen);
  st.decision = st.outcome = absl::AbortedError(StrCat(StepName(step), " was aborted in generation ", gen));
}

void CommitBook::Trim(size_t keep, bool only_decided) {
  while (steps_.size() > keep && (!only_decided || steps_.begin()->second.outcome)) steps_.erase(steps_.begin());
}

}  // namespace ckpt::coord
