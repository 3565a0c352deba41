// The coordinator service (server_impl.h): joins, forming a generation (its
// restore step and memory level), ending it, growing back.
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

absl::Status CoordinatorImpl::OnJoin(const std::shared_ptr<Session>& s, const FrameHeader& h,
                                     std::string_view payload) {
  CKPT_ASSIGN_OR_RETURN(const JoinRequest join, Decode<JoinRequest>(payload));
  const std::string& job = join.job;
  const std::string& host = join.host;
  const int local = static_cast<int>(join.local_ranks);
  const uint64_t previous = join.previous_member;
  const int64_t previous_gen = join.previous_generation;
  const bool resume = join.resume;
  const std::string& mac = join.mac;
  const auto expect = Hmac(options_.token, JoinChallenge(s->nonce(), job, host));
  if (mac.size() != kMacSize || !MacEqual(expect.data(), reinterpret_cast<const uint8_t*>(mac.data()))) {
    ++refused_;
    CountDrop(DropReason::kRefusedJoin,
              StrCat("refused a join from ", s->peer(), " (host '", host, "', job '", job, "'): wrong token"));
    AssignReply refused;
    refused.status = AssignReply::kRefused;
    refused.message = "refused: the join was not signed with the job's token";
    s->Reply(h.request_id, MsgType::kAssign, Encode(refused));
    s->CloseAfterWrite();  // one guess per connection
    return absl::OkStatus();
  }
  Authenticated(*s);
  if (local < 1) return absl::InvalidArgumentError("a member needs at least one local rank");
  // A member of the running generation reconnecting (the coordinator
  // restarted, or the network dropped): it keeps its place.
  if (resume && membership_.CanResume(previous, previous_gen)) {
    const Member& m = membership_.Resume(previous, s, NowSeconds());
    s->member_id = previous;
    s->Reply(h.request_id, MsgType::kAssign, AssignPayload(m));
    Log(StrCat("member ", previous, " (", m.host, ") reconnected to generation ", membership_.generation()));
    return absl::OkStatus();
  }
  if (resume) {
    // Its generation is over (or unknown here): it must join afresh.
    AssignReply over;
    over.status = AssignReply::kNotResumable;
    over.message =
        StrCat("generation ", previous_gen, " is over (current: ", membership_.generation(), "); join again");
    s->Reply(h.request_id, MsgType::kAssign, Encode(over));
    return absl::OkStatus();
  }
  const uint64_t id = membership_.IdFor(previous);
  if (membership_.IsMember(id)) {
    // Its previous incarnation is gone: the generation cannot go on.
    EndGeneration(StrCat("member ", id, " (", membership_.Find(id)->host, ") re-joined: its previous process is gone"));
  }
  s->member_id = id;
  Member m;
  m.id = id;
  m.host = host;
  m.local_ranks = local;
  m.session = s;
  m.last_seen = NowSeconds();
  m.peer_endpoint = join.peer_endpoint;
  m.peer_domain = join.peer_domain;
  m.held = join.held;
  membership_.AddWaiting(std::move(m));
  pending_joins_[id] = Waiter{s, h.request_id, 0};
  Log(StrCat("member ", id, " (", host, ", ", local, " rank(s)) joined; ", membership_.waiting_count(), " waiting"));
  MaybeForm(false);
  return absl::OkStatus();
}

std::string CoordinatorImpl::AssignPayload(const Member& m) {
  AssignReply a;
  a.member_id = m.id;
  a.generation = membership_.generation();
  a.first_rank = static_cast<uint64_t>(m.first_rank);
  a.local_ranks = static_cast<uint64_t>(m.local_ranks);
  a.world_size = static_cast<uint64_t>(membership_.world());
  a.members = membership_.member_count();
  a.restore_step = membership_.restore_step();
  a.heartbeat_ms = static_cast<uint64_t>(options_.heartbeat_s * 1000);
  a.restore_level = restore_level_;
  a.memory_note = memory_note_;
  a.endpoints = peer_endpoints_;
  a.holders = peer_holders_;
  a.restore_holders = restore_holders_;
  if (!peer_holders_.empty()) {
    a.erasure_k = static_cast<uint8_t>(options_.memory_erasure_k);
    a.erasure_m = static_cast<uint8_t>(options_.memory_erasure_m);
  }
  return Encode(a);
}

void CoordinatorImpl::MaybeForm(bool timer_fired) {
  if (membership_.running()) return;  // newcomers wait as spares for the next generation
  int n = static_cast<int>(membership_.waiting_count());
  if (n >= options_.max_nodes || (timer_fired && n >= options_.min_nodes)) {
    // Waiters whose connection is gone are counted out only here, when a
    // generation may form: once per join, it would cost every rendezvous
    // time quadratic in its size.
    ForgetDisconnectedWaiters();
    n = static_cast<int>(membership_.waiting_count());
    if (n >= options_.max_nodes || (timer_fired && n >= options_.min_nodes)) {
      Form();
      return;
    }
  }
  if (n >= options_.min_nodes) {
    // Wait a little for more; every join restarts the wait.
    form_timer_.expires_after(std::chrono::milliseconds(static_cast<int64_t>(options_.join_timeout_s * 1000)));
    form_timer_.async_wait([this](const boost::system::error_code& ec) {
      if (!ec) MaybeForm(true);
    });
  }
}

void CoordinatorImpl::Form() {
  form_timer_.cancel();
  if (forming_) return;
  forming_ = true;
  // A step decided for commit may have been published by its leader
  // without the coordinator hearing of it (the generation ended, or the
  // coordinator stopped, in between): with a root to check, the newest
  // step the storage holds committed up to the newest decision is the
  // restore step. Without one, only steps known committed are.
  const int64_t at_most = options_.root.empty() ? last_committed_ : std::max(last_committed_, last_decided_);
  if (verifier_.joinable()) verifier_.join();  // the previous one has posted its result and ended
  verifier_ = std::thread([this, at_most] {
    const int64_t step = PickRestoreStep(at_most);
    asio::post(io_, [this, step] { FinishForm(step); });
  });
}

void CoordinatorImpl::FinishForm(int64_t restore_step) {
  forming_ = false;
  if (membership_.running()) return;
  ForgetDisconnectedWaiters();
  if (static_cast<int>(membership_.waiting_count()) < options_.min_nodes) {
    Log(StrCat("not forming a generation: ", membership_.waiting_count(),
               " member(s) still waiting after the restore step was chosen, fewer than ", options_.min_nodes));
    return;
  }
  std::vector<uint64_t> ids = membership_.Form(restore_step, options_.max_nodes, NowSeconds());
  collectives_.clear();
  const int64_t from_memory = PlanMemoryLevel(restore_step);
  if (from_memory > restore_step) {
    restore_step = from_memory;
    membership_.SetRestoreStep(restore_step);
  }
  ByteWriter w;
  w.U8(static_cast<uint8_t>(JournalKind::kGeneration));
  membership_.EncodeGeneration(w);
  if (!Journaled(w.Take())) return;
  formed_at_ = NowSeconds();
  Log(StrCat("generation ", membership_.generation(), " formed: ", ids.size(), " member(s), world size ",
             membership_.world(),
             restore_step >= 0 ? StrCat(", restore ", restore_level_ == kMemoryLevel ? "memory step " : "step ",
                                        restore_step, restore_level_ == kMemoryLevel ? " from peers' memory" : "")
                               : std::string(", nothing to restore")));
  size_t told = 0;
  for (uint64_t id : ids) {
    if (2 * told >= ids.size() && told > 0) CrashPoint("rendezvous");
    auto it = pending_joins_.find(id);
    if (it == pending_joins_.end()) continue;
    if (auto s = it->second.session.lock()) {
      s->Reply(it->second.request_id, MsgType::kAssign, AssignPayload(*membership_.Find(id)));
    }
    pending_joins_.erase(it);
    ++told;
  }
}

int64_t CoordinatorImpl::PlanMemoryLevel(int64_t durable) {
  restore_level_ = 0;
  memory_note_.clear();
  peer_endpoints_.clear();
  peer_holders_.clear();
  restore_holders_.clear();
  const std::vector<const Member*> members = membership_.Members();
  std::map<std::string, uint32_t> index;
  std::vector<std::string> domains;
  std::vector<uint32_t> rank_endpoint;
  for (const Member* m : members) {
    if (m->peer_endpoint.empty()) {
      memory_note_ = StrCat("member ", m->id, " (", m->host, ") has no peer memory");
      continue;
    }
    auto [it, fresh] = index.emplace(m->peer_endpoint, static_cast<uint32_t>(peer_endpoints_.size()));
    if (fresh) peer_endpoints_.push_back(m->peer_endpoint);
    for (int r = 0; r < m->local_ranks; ++r) {
      domains.push_back(m->peer_domain);
      rank_endpoint.push_back(it->second);
    }
  }
  if (peer_endpoints_.empty()) return -1;  // no member has a memory level
  const bool erasure = options_.memory_erasure_k > 0;
  if (memory_note_.empty()) {
    // Each rank's own endpoint first, then its replica holders'; or its
    // piece holders in piece order (PlaceErasure puts piece 0 with the rank).
    auto placement = erasure ? PlaceErasure(domains, options_.memory_erasure_k, options_.memory_erasure_m)
                             : PlaceReplicas(domains, options_.memory_replicas);
    if (placement.ok()) {
      for (size_t r = 0; r < domains.size(); ++r) {
        std::vector<uint32_t> h;
        if (!erasure) h.push_back(rank_endpoint[r]);
        for (int k : (*placement)[r]) h.push_back(rank_endpoint[static_cast<size_t>(k)]);
        peer_holders_.push_back(std::move(h));
      }
    } else {
      memory_note_ = std::string(placement.status().message());
    }
  }
  if (!memory_note_.empty()) Log(StrCat("no memory-level saves in this generation: ", memory_note_));
  for (auto it = memory_commits_.rbegin(); it != memory_commits_.rend() && it->first > durable; ++it) {
    const int64_t step = it->first;
    const MemoryCommit& mc = it->second;
    std::vector<std::vector<uint32_t>> holders(static_cast<size_t>(std::max(mc.world, 0)));
    for (const Member* m : members) {
      auto e = index.find(m->peer_endpoint);
      if (e == index.end()) continue;
      for (const HeldStep& h : m->held) {
        if (h.step != step || h.generation != mc.generation) continue;
        for (uint32_t o : h.owners) {
          if (o < holders.size()) holders[o].push_back(e->second);
        }
      }
    }
    // A rank's files are whole at each holder, or one piece of k at each.
    std::vector<std::string> missing;
    for (size_t o = 0; o < holders.size(); ++o) {
      if (static_cast<int>(holders[o].size()) < std::max(mc.pieces_needed, 1)) missing.push_back(std::to_string(o));
    }
    if (!holders.empty() && missing.empty()) {
      restore_level_ = kMemoryLevel;
      restore_holders_ = std::move(holders);
      return step;
    }
    if (missing.size() > 8) {
      const size_t n = missing.size();
      missing.resize(8);
      missing.push_back(StrCat("... (", n, " in all)"));
    }
    Log(StrCat("memory step ", step, " (generation ", mc.generation, ", ", mc.world, " ranks) cannot be restored: ",
               mc.pieces_needed > 1 ? StrCat("fewer than ", mc.pieces_needed, " live members hold pieces of")
                                    : std::string("no live member holds"),
               " the files of rank(s) ", absl::StrJoin(missing, ", "), " of its save",
               durable >= 0 ? StrCat("; restoring durable step ", durable) : std::string()));
  }
  return -1;
}

int64_t CoordinatorImpl::PickRestoreStep(int64_t last_committed) {
  if (last_committed < 0 || options_.root.empty()) return last_committed;
  auto storage = OpenStorage(options_.root);
  if (!storage.ok()) {
    Log(StrCat("cannot open ", options_.root, " to check the restore step: ", storage.status().message()));
    return last_committed;
  }
  return NewestRestorableStep(**storage, last_committed, [this](const std::string& line) { Log(line); });
}

void CoordinatorImpl::MaybeGrow(int64_t step, int64_t generation) {
  if (!options_.grow || !membership_.running() || membership_.generation() != generation || forming_) return;
  if (membership_.waiting_count() == 0 || static_cast<int>(membership_.member_count()) >= options_.max_nodes) return;
  if (NowSeconds() - formed_at_ < options_.grow_spacing_s) return;
  ForgetDisconnectedWaiters();
  const size_t spares = membership_.waiting_count();
  if (spares == 0) return;
  ++grows_;
  EndGeneration(StrCat("growing back: ", spares, " member(s) wait beside the ", membership_.member_count(),
                       " of this generation (at most ", options_.max_nodes, "), and ", StepName(step),
                       " is committed"));
}

void CoordinatorImpl::EndGeneration(const std::string& reason, bool finished) {
  if (!membership_.running()) return;
  const int64_t generation = membership_.generation();
  ByteWriter w;
  w.U8(static_cast<uint8_t>(JournalKind::kEnded));
  w.SVar(generation);
  if (finished) w.U8(1);
  if (!Journaled(w.Take())) return;
  Log(StrCat("generation ", generation, " ended: ", reason));
  const absl::Status why = absl::AbortedError(StrCat("generation ", generation, " ended: ", reason));
  for (auto& [seq, c] : collectives_) {
    for (auto& [rank, wt] : c.waiters) {
      if (auto s = wt.session.lock()) s->ReplyError(wt.request_id, why);
    }
  }
  collectives_.clear();
  Apply(book_.AbortGeneration(generation, why));
  for (const Member& m : membership_.End()) {
    if (auto s = m.session.lock()) s->Send(EncodeFrame(MsgType::kStop, 0, Encode(StopPush{generation, reason})));
  }
  if (finished) {
    // Spares that waited for a next generation would wait out their join
    // timeout and report a failure: there is none, the job is done.
    AssignReply over;
    over.status = AssignReply::kJobFinished;
    over.message = StrCat("the job finished: every member of generation ", generation, " left",
                          last_committed_ >= 0 ? StrCat(" (last committed step ", last_committed_, ")") : "");
    const std::string payload = Encode(over);
    for (const Member& m : membership_.TakeWaiting()) {
      auto it = pending_joins_.find(m.id);
      if (it == pending_joins_.end()) continue;
      if (auto s = it->second.session.lock()) s->Reply(it->second.request_id, MsgType::kAssign, payload);
      pending_joins_.erase(it);
      Log(StrCat("member ", m.id, " (", m.host, ") waited as a spare: told the job finished"));
    }
    return;
  }
  MaybeForm(false);
}

}  // namespace ckpt::coord
