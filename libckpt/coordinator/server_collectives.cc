// The coordinator service (server_impl.h): collectives among a generation's ranks.
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

absl::Status CoordinatorImpl::CheckRank(const std::shared_ptr<Session>& s, int64_t gen, int rank) {
  if (!membership_.running() || gen != membership_.generation()) {
    return absl::AbortedError(
        StrCat("generation ", gen, " is over (current: ", membership_.generation(), "); join again"));
  }
  if (!membership_.OwnsRank(s->member_id, rank)) {
    return absl::PermissionDeniedError(StrCat("rank ", rank, " does not belong to member ", s->member_id));
  }
  return absl::OkStatus();
}

absl::Status CoordinatorImpl::OnCollective(const std::shared_ptr<Session>& s, const FrameHeader& h,
                                           std::string_view payload) {
  CKPT_ASSIGN_OR_RETURN(CollectiveRequest req, Decode<CollectiveRequest>(payload, options_.max_frame_bytes));
  const int64_t gen = req.generation;
  const int rank = static_cast<int>(req.rank);
  const uint64_t seq = req.seq;
  const CollectiveOp op = req.op;
  const double timeout = static_cast<double>(req.timeout_ms) / 1000.0;
  std::string& part = req.part;
  if (absl::Status st = CheckRank(s, gen, rank); !st.ok()) {
    s->ReplyError(h.request_id, st);
    return absl::OkStatus();
  }
  Collective& c = collectives_[seq];
  if (c.parts.empty()) c.op = op;
  if (c.op != op) {
    s->ReplyError(h.request_id, absl::FailedPreconditionError(
                                    StrCat("collective ", seq, ": rank ", rank, " called a different collective")));
    return absl::OkStatus();
  }
  c.parts[rank] = std::move(part);  // a resend after a reconnect replaces the first
  c.waiters[rank] = Waiter{s, h.request_id, 0};
  const double deadline = NowSeconds() + timeout;
  c.deadline = c.deadline == 0 ? deadline : std::max(c.deadline, deadline);
  if (static_cast<int>(c.parts.size()) < membership_.world()) return absl::OkStatus();
  // Everyone arrived: answer each rank.
  std::vector<std::string> pieces;
  if (op == CollectiveOp::kScatter) {
    auto from_leader = DecodeParts(c.parts[0], options_.max_frame_bytes, "scatter from the leader");
    if (from_leader.ok()) pieces = std::move(from_leader).value();
    if (static_cast<int>(pieces.size()) != membership_.world()) {
      pieces.assign(static_cast<size_t>(membership_.world()), "");
    }
  }
  for (auto& [rk, wt] : c.waiters) {
    auto ws = wt.session.lock();
    if (!ws) continue;
    std::string result;
    switch (op) {
      case CollectiveOp::kGather: {
        std::vector<std::string> all;
        if (rk == 0) {
          for (auto& [pr, p] : c.parts) all.push_back(p);
        }
        result = EncodeParts(all);
        break;
      }
      case CollectiveOp::kScatter:
        result = EncodeBytes(pieces[static_cast<size_t>(rk)]);
        break;
      case CollectiveOp::kBroadcast:
        result = EncodeBytes(c.parts[0]);
        break;
      case CollectiveOp::kBarrier:
        break;
    }
    ws->Reply(wt.request_id, MsgType::kCollectiveResult, result);
  }
  collectives_.erase(seq);
  return absl::OkStatus();
}

}  // namespace ckpt::coord
