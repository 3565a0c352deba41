// The coordinator service (server_impl.h): heartbeats, failure detection,
// members that leave.
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

absl::Status CoordinatorImpl::OnHeartbeat(const std::shared_ptr<Session>& s, const FrameHeader& h,
                                          std::string_view payload) {
  CKPT_ASSIGN_OR_RETURN(const HeartbeatRequest hb, Decode<HeartbeatRequest>(payload));
  const uint64_t id = hb.member;
  const int64_t gen = hb.generation;
  HeartbeatAck ack;
  ack.generation = membership_.generation();
  if (membership_.Heartbeat(id, gen, s->member_id, NowSeconds()) == Membership::Beat::kStale) {
    ack.stop = true;
    ack.reason = StrCat("generation ", gen, " is over (current: ", membership_.generation(), "); join again");
  }
  s->Reply(h.request_id, MsgType::kHeartbeatAck, Encode(ack));
  return absl::OkStatus();
}

void CoordinatorImpl::Tick() {
  tick_.expires_after(std::chrono::milliseconds(50));
  tick_.async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;
    const double now = NowSeconds();
    const Membership::Silence silence = membership_.CheckSilence(now, options_.heartbeat_s, options_.dead_after);
    heartbeat_misses_ += silence.new_misses;
    if (silence.dead) {
      ++deaths_;
      EndGeneration(*silence.dead);
    }
    ExpireWaiters(now);
    if (!membership_.running()) ForgetDisconnectedWaiters();  // so status lists only live spares
    if (absl::Status h = log_->Health(); !h.ok() && halted().empty()) Halt(std::string(h.message()));
    Tick();
  });
}

void CoordinatorImpl::ExpireWaiters(double now) {
  // A collective past its deadline means ranks that heartbeat but no
  // longer move together (a hung rank, or replies lost when the
  // coordinator died mid-answer): the generation cannot go on.
  for (auto& [seq, c] : collectives_) {
    if (c.deadline > 0 && now > c.deadline) {
      std::vector<int> missing;
      for (int r = 0; r < membership_.world() && missing.size() < 16; ++r) {
        if (!c.parts.count(r)) missing.push_back(r);
      }
      EndGeneration(
          StrCat("collective ", seq, " timed out: rank(s) ", absl::StrJoin(missing, ", "), " did not take part"));
      break;  // EndGeneration answered and cleared every collective
    }
  }
  for (auto wit = waiters_.begin(); wit != waiters_.end();) {
    const int64_t step = wit->first;
    const CommitBook::Step* st = book_.Find(step);
    const size_t voted = st ? st->votes.size() : 0;
    for (auto* list : {&wit->second.decide, &wit->second.outcome}) {
      for (auto it = list->begin(); it != list->end();) {
        if (it->deadline > 0 && now > it->deadline) {
          if (auto s = it->session.lock()) {
            s->ReplyError(it->request_id,
                          absl::DeadlineExceededError(StrCat(StepName(step), ": no decision within the deadline; ",
                                                             voted, " of ", membership_.world(), " ranks voted")));
          }
          it = list->erase(it);
        } else {
          ++it;
        }
      }
    }
    wit = wit->second.decide.empty() && wit->second.outcome.empty() ? waiters_.erase(wit) : std::next(wit);
  }
}

absl::Status CoordinatorImpl::OnLeave(const std::shared_ptr<Session>& s, const FrameHeader& h,
                                      std::string_view payload) {
  CKPT_ASSIGN_OR_RETURN(const LeaveRequest leave, Decode<LeaveRequest>(payload));
  const uint64_t id = leave.member;
  if (id != s->member_id) return absl::PermissionDeniedError("a member can only leave for itself");
  pending_joins_.erase(id);
  // Leaving ends the generation only when others would wait for it.
  if (membership_.Leave(id)) EndGeneration("every member left: the job finished", true);
  s->Reply(h.request_id, MsgType::kAck, "");
  return absl::OkStatus();
}

}  // namespace ckpt::coord
