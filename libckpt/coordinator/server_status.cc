// The coordinator service (server_impl.h): hello, and status in JSON, text and metrics.
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

absl::Status CoordinatorImpl::OnHello(const std::shared_ptr<Session>& s, const FrameHeader& h,
                                      std::string_view /*payload*/) {
  HelloReply hello{s->nonce(), coordinator_id_, options_.max_frame_bytes, ""};
  if (!serving_) hello.standby_of = StandbyOf();
  s->Reply(h.request_id, MsgType::kHello, Encode(hello));
  return absl::OkStatus();
}

absl::Status CoordinatorImpl::OnStatus(const std::shared_ptr<Session>& s, const FrameHeader& h,
                                       std::string_view payload) {
  CKPT_ASSIGN_OR_RETURN(const StatusRequest req, Decode<StatusRequest>(payload));
  s->Reply(h.request_id, MsgType::kStatusReply, EncodeBytes(req.text ? BuildStatusText() : BuildStatus()));
  return absl::OkStatus();
}

std::string CoordinatorImpl::StandbyOf() const {
  if (!log_) return "not known yet";
  const StoreView v = log_->View();
  if (!v.leader.empty()) return v.leader;
  return v.kind == "journal" ? StrCat("none: ", address_, " is replaying its journal") : "not known yet";
}

StatusView CoordinatorImpl::View() {
  StatusView v;
  if (log_) v.store = log_->View();
  v.store.leading = serving_ && halted().empty();
  v.appends = appends_;
  if (!serving_) {
    v.serving = false;
    return v;
  }
  v.generation = membership_.generation();
  v.running = membership_.running();
  v.forming = forming_;
  v.world_size = membership_.world();
  v.restore_step = membership_.restore_step();
  v.last_committed_step = last_committed_;
  v.commits = commits_;
  v.aborts = aborts_;
  v.deaths = deaths_;
  v.grows = grows_;
  v.heartbeat_misses = heartbeat_misses_;
  v.refused_joins = refused_;
  v.bad_frames = bad_frames();
  for (size_t i = 0; i < static_cast<size_t>(DropReason::kCount); ++i) {
    v.dropped.emplace_back(DropReasonName(static_cast<DropReason>(i)), drops_[i]);
  }
  v.unauthenticated_connections = unauthenticated_.size();
  v.joined_connections = JoinedConnections();
  const double now = NowSeconds();
  for (const Member* m : membership_.Members()) {
    v.members.push_back({m->id, m->host, m->first_rank, m->local_ranks, now - m->last_seen, !m->session.expired()});
  }
  for (const Member* m : membership_.Waiting()) v.waiting.push_back({m->id, m->host});
  v.last_save = last_save_;
  v.straggler_step = straggler_step_;
  v.stragglers = stragglers_;
  v.sdc_alerts = sdc_;
  return v;
}

}  // namespace ckpt::coord
