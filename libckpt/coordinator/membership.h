// Who is in the job: the members of the running generation (their ranks and
// when each was last heard from) and those waiting for the next one. No
// sockets, timers or journal: the server turns what these calls return into
// replies and journal records, and membership_test drives it alone.
#ifndef CKPT_COORDINATOR_MEMBERSHIP_H_
#define CKPT_COORDINATOR_MEMBERSHIP_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "coordinator/messages.h"
#include "util/bytes.h"

namespace ckpt::coord {

class Session;

struct Member {
  uint64_t id = 0;
  std::string host;
  int local_ranks = 1;
  int first_rank = -1;
  double last_seen = 0;
  int late_intervals = 0;  // heartbeat intervals missed so far (metrics)
  bool left = false;       // finished: no longer expected to heartbeat
  std::weak_ptr<Session> session;
  // The memory level, as its join said (not journaled: a replayed
  // generation has no need of it).
  std::string peer_endpoint, peer_domain;
  std::vector<HeldStep> held;
};

class Membership {
 public:
  int64_t generation() const { return generation_; }
  bool running() const { return running_; }
  int world() const { return world_; }
  int64_t restore_step() const { return restore_step_; }

  /// Members of the running generation, by rank.
  std::vector<const Member*> Members() const;
  /// Members waiting for the next generation, in the order they joined.
  std::vector<const Member*> Waiting() const;
  size_t waiting_count() const { return waiting_.size(); }
  /// Members of the current generation (Members().size() without the list).
  size_t member_count() const { return order_.size(); }
  /// A member of the running generation, or null.
  const Member* Find(uint64_t id) const;

  // --- rendezvous ---

  /// Whether a member reconnecting from `previous_generation` may keep its
  /// place (it is a member of the running generation).
  bool CanResume(uint64_t previous, int64_t previous_generation) const;
  /// Gives a resumable member its new connection.
  const Member& Resume(uint64_t id, std::weak_ptr<Session> session, double now);
  /// The id of a new join: `previous` when it had one (a member keeps its
  /// id across generations), else a fresh one.
  uint64_t IdFor(uint64_t previous);
  /// Whether `id` is a member of the running generation.
  bool IsMember(uint64_t id) const { return running_ && members_.count(id) > 0; }
  /// Adds (or replaces) a member waiting for the next generation.
  void AddWaiting(Member m);
  /// Removes every waiting member and returns them, in join order (the job
  /// finished: they are told so instead of waiting for a generation).
  std::vector<Member> TakeWaiting();
  /// Drops waiting members whose connection is gone; returns their ids.
  std::vector<uint64_t> ForgetDisconnected();
  /// Forms the next generation from the waiting members: survivors of the
  /// last one first, by their old ranks, then newcomers in join order, at
  /// most `max_nodes`. Returns the members' ids by rank.
  std::vector<uint64_t> Form(int64_t restore_step, int max_nodes, double now);
  /// The running generation restores another step than Form was told (the
  /// memory level had a newer one); before the generation is journaled.
  void SetRestoreStep(int64_t step) { restore_step_ = step; }
  /// Ends the running generation and returns its members (to be told);
  /// their ranks order them first in the next one.
  std::vector<Member> End();
  /// A member leaves: it is waited for no more. True when `id` was a member
  /// of the running generation and now every member has left.
  bool Leave(uint64_t id);

  // --- heartbeats ---

  enum class Beat { kMember, kWaiting, kStale };
  /// A heartbeat from member `id` of `generation` over a connection joined
  /// as `connection_member`. kStale: it belongs to no generation here.
  Beat Heartbeat(uint64_t id, int64_t generation, uint64_t connection_member, double now);
  /// Looks at every member's silence: how many heartbeat intervals were
  /// newly missed, and the first member silent for `dead_after` intervals.
  struct Silence {
    uint64_t new_misses = 0;
    std::optional<std::string> dead;
  };
  Silence CheckSilence(double now, double heartbeat_s, int dead_after);
  /// After a restart every member gets a fresh grace period.
  void HeardFromAll(double now);
  /// Whether `rank` is one of member `id`'s ranks.
  bool OwnsRank(uint64_t id, int rank) const;

  // --- journal ---

  /// The running generation, as a journal record's body.
  void EncodeGeneration(ByteWriter& w) const;
  absl::Status ReplayGeneration(ByteReader& r);
  void ReplayEnded();

 private:
  void RemoveWaiting(uint64_t id);

  int64_t generation_ = 0;
  bool running_ = false;
  int world_ = 0;
  int64_t restore_step_ = -1;
  std::map<uint64_t, Member> members_;  // of the running generation
  std::vector<uint64_t> order_;         // members_ by rank
  std::map<uint64_t, int> previous_rank_;
  std::map<uint64_t, Member> waiting_;
  std::vector<uint64_t> waiting_order_;
  uint64_t next_member_id_ = 1;
};

}  // namespace ckpt::coord

#endif  // CKPT_COORDINATOR_MEMBERSHIP_H_
