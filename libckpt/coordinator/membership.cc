#include "coordinator/membership.h"

#include <algorithm>
#include <climits>

#include "util/strings.h"

namespace ckpt::coord {

std::vector<const Member*> Membership::Members() const {
  std::vector<const Member*> out;
  for (uint64_t id : order_) out.push_back(&members_.at(id));
  return out;
}

std::vector<const Member*> Membership::Waiting() const {
  std::vector<const Member*> out;
  for (uint64_t id : waiting_order_) {
    if (auto it = waiting_.find(id); it != waiting_.end()) out.push_back(&it->second);
  }
  return out;
}

const Member* Membership::Find(uint64_t id) const {
  auto it = members_.find(id);
  return it == members_.end() ? nullptr : &it->second;
}

bool Membership::CanResume(uint64_t previous, int64_t previous_generation) const {
  return running_ && previous_generation == generation_ && members_.count(previous) > 0;
}

const Member& Membership::Resume(uint64_t id, std::weak_ptr<Session> session, double now) {
  Member& m = members_.at(id);
  m.session = std::move(session);
  m.last_seen = now;
  return m;
}

uint64_t Membership::IdFor(uint64_t previous) {
  const uint64_t id = previous != 0 ? previous : next_member_id_++;
  next_member_id_ = std::max(next_member_id_, id + 1);
  return id;
}

void Membership::AddWaiting(Member m) {
  const uint64_t id = m.id;
  waiting_[id] = std::move(m);
  if (std::find(waiting_order_.begin(), waiting_order_.end(), id) == waiting_order_.end()) {
    waiting_order_.push_back(id);
  }
}

void Membership::RemoveWaiting(uint64_t id) {
  waiting_.erase(id);
  waiting_order_.erase(std::remove(waiting_order_.begin(), waiting_order_.end(), id), waiting_order_.end());
}

std::vector<Member> Membership::TakeWaiting() {
  std::vector<Member> out;
  for (uint64_t id : waiting_order_) {
    auto it = waiting_.find(id);
    if (it != waiting_.end()) out.push_back(std::move(it->second));
  }
  waiting_.clear();
  waiting_order_.clear();
  return out;
}

std::vector<uint64_t> Membership::ForgetDisconnected() {
  std::vector<uint64_t> gone;
  for (const auto& [id, m] : waiting_) {
    if (m.session.expired()) gone.push_back(id);
  }
  for (uint64_t id : gone) RemoveWaiting(id);
  return gone;
}

std::vector<uint64_t> Membership::Form(int64_t restore_step, int max_nodes, double now) {
  std::vector<uint64_t> ids;
  for (uint64_t id : waiting_order_) {
    if (waiting_.count(id)) ids.push_back(id);
  }
  auto old_rank = [&](uint64_t id) {
    auto it = previous_rank_.find(id);
    return it == previous_rank_.end() ? INT_MAX : it->second;
  };
  std::stable_sort(ids.begin(), ids.end(), [&](uint64_t a, uint64_t b) { return old_rank(a) < old_rank(b); });
  if (max_nodes >= 0 && ids.size() > static_cast<size_t>(max_nodes)) ids.resize(static_cast<size_t>(max_nodes));
  ++generation_;
  members_.clear();
  order_.clear();
  int rank = 0;
  for (uint64_t id : ids) {
    Member m = std::move(waiting_[id]);
    m.first_rank = rank;
    m.last_seen = now;
    m.late_intervals = 0;
    m.left = false;
    rank += m.local_ranks;
    members_[id] = std::move(m);
    order_.push_back(id);
    RemoveWaiting(id);
  }
  world_ = rank;
  running_ = true;
  restore_step_ = restore_step;
  return ids;
}

std::vector<Member> Membership::End() {
  std::vector<Member> out;
  if (!running_) return out;
  running_ = false;
  for (uint64_t id : order_) {
    previous_rank_[id] = members_[id].first_rank;
    out.push_back(members_[id]);
  }
  members_.clear();
  order_.clear();
  world_ = 0;
  return out;
}

bool Membership::Leave(uint64_t id) {
  RemoveWaiting(id);
  auto it = members_.find(id);
  if (it == members_.end()) return false;
  it->second.left = true;  // never declared dead
  for (uint64_t m : order_) {
    if (!members_[m].left) return false;
  }
  return running_;
}

Membership::Beat Membership::Heartbeat(uint64_t id, int64_t generation, uint64_t connection_member, double now) {
  auto it = members_.find(id);
  if (running_ && generation == generation_ && it != members_.end() && id == connection_member) {
    it->second.last_seen = now;
    it->second.late_intervals = 0;
    return Beat::kMember;
  }
  if (auto w = waiting_.find(id); w != waiting_.end()) {
    w->second.last_seen = now;
    return Beat::kWaiting;
  }
  return Beat::kStale;
}

Membership::Silence Membership::CheckSilence(double now, double heartbeat_s, int dead_after) {
  Silence out;
  if (!running_) return out;
  for (uint64_t id : order_) {
    Member& m = members_[id];
    if (m.left) continue;
    const double silent = now - m.last_seen;
    const int late = static_cast<int>(silent / heartbeat_s);
    if (late > m.late_intervals) {
      out.new_misses += static_cast<uint64_t>(late - m.late_intervals);
      m.late_intervals = late;
    }
    if (silent > heartbeat_s * dead_after && !out.dead) {
      out.dead = StrCat("member ", id, " (", m.host, ", ranks ", m.first_rank, "..", m.first_rank + m.local_ranks - 1,
                        ") sent no heartbeat for ", silent, " s");
    }
  }
  return out;
}

void Membership::HeardFromAll(double now) {
  for (auto& [id, m] : members_) m.last_seen = now;
}

bool Membership::OwnsRank(uint64_t id, int rank) const {
  auto it = members_.find(id);
  return it != members_.end() && rank >= it->second.first_rank && rank < it->second.first_rank + it->second.local_ranks;
}

void Membership::EncodeGeneration(ByteWriter& w) const {
  w.SVar(generation_);
  w.Var(static_cast<uint64_t>(world_));
  w.SVar(restore_step_);
  w.Var(order_.size());
  for (uint64_t id : order_) {
    const Member& m = members_.at(id);
    w.Var(m.id);
    w.Str(m.host);
    w.Var(static_cast<uint64_t>(m.first_rank));
    w.Var(static_cast<uint64_t>(m.local_ranks));
  }
}

absl::Status Membership::ReplayGeneration(ByteReader& r) {
  generation_ = r.SVar();
  world_ = static_cast<int>(r.Var());
  restore_step_ = r.SVar();
  const uint64_t n = r.Count(1 << 24, "members");
  members_.clear();
  order_.clear();
  for (uint64_t i = 0; i < n && r.ok(); ++i) {
    Member m;
    m.id = r.Var();
    m.host = r.Str();
    m.first_rank = static_cast<int>(r.Var());
    m.local_ranks = static_cast<int>(r.Var());
    next_member_id_ = std::max(next_member_id_, m.id + 1);
    order_.push_back(m.id);
    members_[m.id] = std::move(m);
  }
  running_ = true;
  return r.status();
}

void Membership::ReplayEnded() {
  running_ = false;
  members_.clear();
  order_.clear();
  world_ = 0;
}

}  // namespace ckpt::coord
