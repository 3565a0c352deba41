// The coordinator service (server_impl.h): the two-phase commit (votes,
// decisions, publications, outcomes), SDC alerts and save durations.
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <future>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <boost/asio.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "ckpt/checkpointer.h"
#include "ckpt/coordinator.h"
#include "ckpt/peer.h"
#include "ckpt/storage.h"
#include "ckpt/verify.h"
#include "coordinator/commit_book.h"
#include "coordinator/membership.h"
#include "coordinator/messages.h"
#include "coordinator/protocol.h"
#include "coordinator/records.h"
#include "coordinator/server_impl.h"
#include "coordinator/session.h"
#include "coordinator/state_log.h"
#include "coordinator/status.h"
#include "util/bytes.h"
#include "util/clock.h"
#include "util/descriptors.h"
#include "util/errors.h"
#include "util/status_wire.h"
#include "util/strings.h"

namespace ckpt::coord {

void CoordinatorImpl::CrashPoint(std::string_view phase) {
  static const char* const at = std::getenv("CKPT_COORDINATOR_CRASH_AT");
  if (at == nullptr || phase != at) return;
  Log(StrCat("crash point '", phase, "' reached: SIGKILL"));
  ::kill(::getpid(), SIGKILL);
}

void CoordinatorImpl::AnswerAll(StepWaiters& w, const absl::Status& why) {
  for (const Waiter& d : w.decide) {
    if (auto s = d.session.lock()) s->Reply(d.request_id, MsgType::kDecision, EncodeDecision(why));
  }
  for (const Waiter& o : w.outcome) {
    if (auto s = o.session.lock()) s->Reply(o.request_id, MsgType::kOutcome, EncodeDecision(why));
  }
  w.decide.clear();
  w.outcome.clear();
}

const CommitBook::Step& CoordinatorImpl::StepFor(int64_t step, int64_t gen) {
  const CommitBook::Step* old = book_.Find(step);
  if (old != nullptr && old->generation < gen && (!(old->outcome && old->outcome->ok()) || IsMemoryKey(step))) {
    if (auto it = waiters_.find(step); it != waiters_.end()) {
      AnswerAll(it->second, absl::AbortedError(StrCat(StepName(step), " of generation ", old->generation,
                                                      " is over: generation ", gen, " saves it again")));
      waiters_.erase(it);
    }
  }
  return book_.For(step, gen);
}

bool CoordinatorImpl::JournalStep(JournalKind kind, int64_t step, int64_t generation, int save_world, int erasure_k,
                                  int erasure_m) {
  ByteWriter w;
  w.U8(static_cast<uint8_t>(kind));
  w.SVar(step);
  w.SVar(generation);
  if (save_world > 0) w.Var(static_cast<uint64_t>(save_world));
  if (save_world > 0 && erasure_k > 0) {
    w.U8(static_cast<uint8_t>(erasure_k));
    w.U8(static_cast<uint8_t>(erasure_m));
  }
  return Journaled(w.Take());
}

void CoordinatorImpl::RaiseAlerts(std::vector<SdcAlert> alerts) {
  for (SdcAlert& alert : alerts) {
    ByteWriter w;
    w.U8(static_cast<uint8_t>(JournalKind::kSdc));
    w.SVar(alert.step);
    w.Str(alert.key);
    w.Str(alert.detail);
    if (!Journaled(w.Take())) return;
    Log(StrCat("SDC ALERT step ", alert.step, " ", alert.key, ": ", alert.detail));
    sdc_.push_back(std::move(alert));
  }
}

void CoordinatorImpl::Apply(std::vector<BookEvent> events) {
  for (BookEvent& e : events) {
    StepWaiters& w = waiters_[e.step];
    switch (e.kind) {
      case BookEvent::Kind::kDecidedCommit:
        CrashPoint("votes");
        if (!JournalStep(JournalKind::kDecided, e.step, e.generation)) return;
        CrashPoint("decided");
        if (!IsMemoryKey(e.step)) last_decided_ = std::max(last_decided_, e.step);
        for (Waiter& d : w.decide) {
          if (auto s = d.session.lock()) s->Reply(d.request_id, MsgType::kDecision, EncodeDecision(absl::OkStatus()));
        }
        w.decide.clear();
        break;
      case BookEvent::Kind::kAborted:
        if (!JournalStep(JournalKind::kAborted, e.step, e.generation)) return;
        ++aborts_;
        Log(StrCat(StepName(e.step), " aborted: ", e.status.message()));
        AnswerAll(w, e.status);
        break;
      case BookEvent::Kind::kCommitted:
        if (IsMemoryKey(e.step)) {
          const int world = static_cast<int>(e.durations.stall.size());
          if (!JournalStep(JournalKind::kCommitted, e.step, e.generation, world, options_.memory_erasure_k,
                           options_.memory_erasure_m)) {
            return;
          }
          memory_commits_[StepOfKey(e.step)] = MemoryCommit{e.generation, world, PiecesNeeded()};
          while (memory_commits_.size() > 64) memory_commits_.erase(memory_commits_.begin());
        } else {
          if (!JournalStep(JournalKind::kCommitted, e.step, e.generation)) return;
          last_committed_ = std::max(last_committed_, e.step);
        }
        ++commits_;
        // Once this event's answers are out, spares may join.
        asio::post(io_, [this, step = e.step, gen = e.generation] { MaybeGrow(step, gen); });
        RecordDurations(std::move(e.durations));
        for (size_t i = 0; i < w.outcome.size(); ++i) {
          if (2 * i >= w.outcome.size() && i > 0) CrashPoint("outcome");
          const Waiter& o = w.outcome[i];
          if (auto s = o.session.lock()) s->Reply(o.request_id, MsgType::kOutcome, EncodeDecision(absl::OkStatus()));
        }
        w.outcome.clear();
        break;
    }
    if (w.decide.empty() && w.outcome.empty()) waiters_.erase(e.step);
  }
}

absl::Status CoordinatorImpl::OnVote(const std::shared_ptr<Session>& s, const FrameHeader& h,
                                     std::string_view payload) {
  CKPT_ASSIGN_OR_RETURN(VoteRequest req, Decode<VoteRequest>(payload));
  const int64_t gen = req.generation;
  const int rank = static_cast<int>(req.rank);
  const int64_t step = StepKey(req.step, req.level == kMemoryLevel);
  SaveVote& v = req.vote;
  if (absl::Status st = CheckRank(s, gen, rank); !st.ok()) {
    s->ReplyError(h.request_id, st);
    return absl::OkStatus();
  }
  s->Reply(h.request_id, MsgType::kAck, "");
  std::vector<SdcAlert> alerts;
  StepFor(step, gen);
  std::vector<BookEvent> events = book_.Vote(step, gen, rank, std::move(v), membership_.world(), &alerts);
  RaiseAlerts(std::move(alerts));
  Apply(std::move(events));
  return absl::OkStatus();
}

absl::Status CoordinatorImpl::OnDecide(const std::shared_ptr<Session>& s, const FrameHeader& h,
                                       std::string_view payload) {
  CKPT_ASSIGN_OR_RETURN(const StepWaitRequest req, Decode<StepWaitRequest>(payload));
  const int64_t gen = req.generation;
  const int64_t step = StepKey(req.step, req.level == kMemoryLevel);
  const double timeout = static_cast<double>(req.timeout_ms) / 1000.0;
  if (absl::Status st = CheckRank(s, gen, 0); !st.ok()) {
    s->ReplyError(h.request_id, st);
    return absl::OkStatus();
  }
  const CommitBook::Step& st = StepFor(step, gen);
  if (st.decision && st.generation == gen) {
    s->Reply(h.request_id, MsgType::kDecision, EncodeDecision(*st.decision));
    return absl::OkStatus();
  }
  waiters_[step].decide.push_back(Waiter{s, h.request_id, NowSeconds() + timeout});
  return absl::OkStatus();
}

absl::Status CoordinatorImpl::OnPublished(const std::shared_ptr<Session>& s, const FrameHeader& h,
                                          std::string_view payload) {
  CKPT_ASSIGN_OR_RETURN(const PublishedRequest req, Decode<PublishedRequest>(payload));
  const int64_t gen = req.generation;
  const int64_t step = StepKey(req.step, req.level == kMemoryLevel);
  const bool ok = req.ok;
  const std::string& message = req.message;
  if (absl::Status st = CheckRank(s, gen, 0); !st.ok()) {
    s->ReplyError(h.request_id, st);
    return absl::OkStatus();
  }
  StepFor(step, gen);
  auto events = book_.Published(step, gen, ok, message);
  if (!events.ok()) {
    s->ReplyError(h.request_id, events.status());
    return absl::OkStatus();
  }
  Apply(std::move(events).value());
  s->Reply(h.request_id, MsgType::kAck, "");
  // Old steps are not needed once decided (the journal keeps their outcome).
  book_.Trim(256, /*only_decided=*/true);
  return absl::OkStatus();
}

void CoordinatorImpl::RecordDurations(SaveDurations d) {
  last_save_ = {{"stall", d.stall}, {"write", d.write}};
  stragglers_ = d.stragglers;
  if (!stragglers_.empty()) {
    std::string list;
    for (const auto& [rank, x] : stragglers_) StrAppend(&list, list.empty() ? "" : ", ", "rank ", rank, " ", x, " s");
    Log(StrCat(StepName(d.step), ": stragglers (median write ", d.median_write, " s): ", list));
  }
  straggler_step_ = d.step;
}

absl::Status CoordinatorImpl::OnAwaitOutcome(const std::shared_ptr<Session>& s, const FrameHeader& h,
                                             std::string_view payload) {
  CKPT_ASSIGN_OR_RETURN(const StepWaitRequest req, Decode<StepWaitRequest>(payload));
  const int64_t gen = req.generation;
  const int64_t step = StepKey(req.step, req.level == kMemoryLevel);
  const double timeout = static_cast<double>(req.timeout_ms) / 1000.0;
  const CommitBook::Step& st = StepFor(step, gen);
  if (st.generation > gen) {
    // A newer generation saves this step again: this attempt is over.
    s->Reply(h.request_id, MsgType::kOutcome,
             EncodeDecision(absl::AbortedError(StrCat(StepName(step), " of generation ", gen, " is over: generation ",
                                                      st.generation, " saves it again"))));
    return absl::OkStatus();
  }
  if (st.outcome) {
    s->Reply(h.request_id, MsgType::kOutcome, EncodeDecision(*st.outcome));
    return absl::OkStatus();
  }
  if (gen != membership_.generation() || !membership_.running()) {
    s->Reply(h.request_id, MsgType::kOutcome,
             EncodeDecision(absl::AbortedError(StrCat(StepName(step), ": generation ", gen, " is over"))));
    return absl::OkStatus();
  }
  waiters_[step].outcome.push_back(Waiter{s, h.request_id, NowSeconds() + timeout});
  return absl::OkStatus();
}

}  // namespace ckpt::coord
