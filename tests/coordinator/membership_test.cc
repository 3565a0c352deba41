// The coordinator's membership, alone: no sockets, timers or journal.
#include "coordinator/membership.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

namespace ckpt::coord {
namespace {

// A connection that is alive while `keep` is: an owner-sharing pointer with
// no Session behind it (membership only asks whether it expired).
struct Link {
  std::shared_ptr<int> keep = std::make_shared<int>(0);
  std::shared_ptr<Session> session{keep, nullptr};
};

Member Joined(uint64_t id, const std::string& host, int local_ranks, const Link& link, double now = 0) {
  Member m;
  m.id = id;
  m.host = host;
  m.local_ranks = local_ranks;
  m.session = link.session;
  m.last_seen = now;
  return m;
}

std::vector<uint64_t> Ids(const std::vector<const Member*>& members) {
  std::vector<uint64_t> out;
  for (const Member* m : members) out.push_back(m->id);
  return out;
}

TEST(Membership, AGenerationTakesTheWaitingInJoinOrderAndNumbersTheirRanks) {
  Membership ms;
  Link a, b, c;
  ms.AddWaiting(Joined(ms.IdFor(0), "a", 2, a));
  ms.AddWaiting(Joined(ms.IdFor(0), "b", 4, b));
  ms.AddWaiting(Joined(ms.IdFor(0), "c", 1, c));
  EXPECT_EQ(Ids(ms.Waiting()), (std::vector<uint64_t>{1, 2, 3}));
  EXPECT_FALSE(ms.running());

  const std::vector<uint64_t> ids = ms.Form(/*restore_step=*/40, /*max_nodes=*/8, /*now=*/5);
  EXPECT_EQ(ids, (std::vector<uint64_t>{1, 2, 3}));
  EXPECT_TRUE(ms.running());
  EXPECT_EQ(ms.generation(), 1);
  EXPECT_EQ(ms.world(), 7);
  EXPECT_EQ(ms.restore_step(), 40);
  EXPECT_EQ(ms.waiting_count(), 0u);
  EXPECT_EQ(ms.Find(1)->first_rank, 0);
  EXPECT_EQ(ms.Find(2)->first_rank, 2);
  EXPECT_EQ(ms.Find(3)->first_rank, 6);
  EXPECT_TRUE(ms.OwnsRank(2, 2));
  EXPECT_TRUE(ms.OwnsRank(2, 5));
  EXPECT_FALSE(ms.OwnsRank(2, 6));
  EXPECT_FALSE(ms.OwnsRank(2, 1));
  EXPECT_FALSE(ms.OwnsRank(99, 0));
}

TEST(Membership, SurvivorsKeepTheirOrderAndNewcomersFollowUpToTheLimit) {
  Membership ms;
  Link l1, l2, l3;
  ms.AddWaiting(Joined(ms.IdFor(0), "h1", 1, l1));
  ms.AddWaiting(Joined(ms.IdFor(0), "h2", 1, l2));
  ms.AddWaiting(Joined(ms.IdFor(0), "h3", 1, l3));
  ms.Form(-1, 8, 0);
  const std::vector<Member> ended = ms.End();
  ASSERT_EQ(ended.size(), 3u);
  EXPECT_FALSE(ms.running());
  EXPECT_EQ(ms.world(), 0);
  EXPECT_EQ(ms.End().size(), 0u) << "a generation ends once";

  // A newcomer joins first, then survivors 3 and 1 (2 died) join again.
  Link n, r3, r1;
  const uint64_t newcomer = ms.IdFor(0);
  EXPECT_EQ(newcomer, 4u);
  ms.AddWaiting(Joined(newcomer, "new", 1, n));
  ms.AddWaiting(Joined(ms.IdFor(3), "h3", 1, r3));
  ms.AddWaiting(Joined(ms.IdFor(1), "h1", 1, r1));
  EXPECT_EQ(ms.Form(12, /*max_nodes=*/2, 0), (std::vector<uint64_t>{1, 3}));
  EXPECT_EQ(ms.generation(), 2);
  EXPECT_EQ(ms.Find(1)->first_rank, 0);
  EXPECT_EQ(ms.Find(3)->first_rank, 1);
  EXPECT_EQ(ms.Find(4), nullptr);
  EXPECT_EQ(Ids(ms.Waiting()), (std::vector<uint64_t>{4})) << "past the limit, a newcomer waits as a spare";
}

TEST(Membership, OnlyTheRunningGenerationsMembersResume) {
  Membership ms;
  Link a, a2;
  ms.AddWaiting(Joined(ms.IdFor(0), "a", 1, a));
  ms.Form(-1, 8, 0);
  EXPECT_TRUE(ms.CanResume(1, 1));
  EXPECT_FALSE(ms.CanResume(1, 0)) << "an older generation";
  EXPECT_FALSE(ms.CanResume(2, 1)) << "not a member";
  const Member& m = ms.Resume(1, a2.session, 9.5);
  EXPECT_EQ(m.last_seen, 9.5);
  a.keep.reset();
  a.session.reset();
  EXPECT_FALSE(ms.Find(1)->session.expired()) << "the new connection replaced the old";
  ms.End();
  EXPECT_FALSE(ms.CanResume(1, 1)) << "the generation is over";
}

TEST(Membership, WaitersWhoseConnectionIsGoneAreForgotten) {
  Membership ms;
  Link a, b;
  ms.AddWaiting(Joined(ms.IdFor(0), "a", 1, a));
  ms.AddWaiting(Joined(ms.IdFor(0), "b", 1, b));
  ms.AddWaiting(Joined(ms.IdFor(0), "c", 1, Link{}));  // its link is already gone
  EXPECT_EQ(ms.ForgetDisconnected(), (std::vector<uint64_t>{3}));
  b.keep.reset();
  b.session.reset();
  EXPECT_EQ(ms.ForgetDisconnected(), (std::vector<uint64_t>{2}));
  EXPECT_EQ(Ids(ms.Waiting()), (std::vector<uint64_t>{1}));
  // Joining again keeps one place in the order.
  ms.AddWaiting(Joined(1, "a", 1, a));
  EXPECT_EQ(ms.waiting_count(), 1u);
}

TEST(Membership, HeartbeatsAreTakenFromTheRightConnectionAndGenerationOnly) {
  Membership ms;
  Link a, w;
  ms.AddWaiting(Joined(ms.IdFor(0), "a", 1, a));
  ms.Form(-1, 8, 0);
  ms.AddWaiting(Joined(ms.IdFor(0), "spare", 1, w));
  EXPECT_EQ(ms.Heartbeat(1, 1, 1, 3), Membership::Beat::kMember);
  EXPECT_EQ(ms.Find(1)->last_seen, 3);
  EXPECT_EQ(ms.Heartbeat(1, 0, 1, 4), Membership::Beat::kStale) << "an old generation";
  EXPECT_EQ(ms.Heartbeat(1, 1, 7, 4), Membership::Beat::kStale) << "sent over another member's connection";
  EXPECT_EQ(ms.Find(1)->last_seen, 3);
  EXPECT_EQ(ms.Heartbeat(2, 1, 2, 4), Membership::Beat::kWaiting);
  EXPECT_EQ(ms.Heartbeat(42, 1, 42, 4), Membership::Beat::kStale);
}

TEST(Membership, SilenceCountsEachMissedIntervalOnceAndNamesTheDead) {
  Membership ms;
  Link a, b;
  ms.AddWaiting(Joined(ms.IdFor(0), "node-a", 2, a));
  ms.AddWaiting(Joined(ms.IdFor(0), "node-b", 2, b));
  ms.Form(-1, 8, /*now=*/100);
  // Heartbeat every 1 s, dead after 3 silent intervals.
  Membership::Silence s = ms.CheckSilence(102.5, 1.0, 3);
  EXPECT_EQ(s.new_misses, 4u);  // two intervals for each member
  EXPECT_FALSE(s.dead);
  EXPECT_EQ(ms.CheckSilence(102.7, 1.0, 3).new_misses, 0u) << "counted once";
  ms.Heartbeat(1, 1, 1, 102.8);
  s = ms.CheckSilence(103.5, 1.0, 3);
  EXPECT_EQ(s.new_misses, 1u);
  ASSERT_TRUE(s.dead);
  EXPECT_NE(s.dead->find("member 2 (node-b, ranks 2..3)"), std::string::npos) << *s.dead;

  // A member that left is never declared dead; the last one leaving ends it.
  EXPECT_FALSE(ms.Leave(2));
  s = ms.CheckSilence(200, 1.0, 3);
  ASSERT_TRUE(s.dead);
  EXPECT_NE(s.dead->find("member 1 "), std::string::npos) << *s.dead;
  EXPECT_TRUE(ms.Leave(1));
  ms.End();
  EXPECT_FALSE(ms.Leave(1)) << "no generation runs";
}

TEST(Membership, TheGenerationRecordRoundTripsAndATruncatedOneIsRefused) {
  Membership ms;
  Link a, b;
  ms.AddWaiting(Joined(ms.IdFor(0), "alpha", 3, a));
  ms.AddWaiting(Joined(ms.IdFor(0), "beta", 5, b));
  ms.Form(77, 8, 0);
  ByteWriter w;
  ms.EncodeGeneration(w);
  const std::string rec = w.Take();

  Membership back;
  ByteReader r(rec, "generation record");
  ASSERT_TRUE(back.ReplayGeneration(r).ok());
  EXPECT_TRUE(back.running());
  EXPECT_EQ(back.generation(), 1);
  EXPECT_EQ(back.world(), 8);
  EXPECT_EQ(back.restore_step(), 77);
  ASSERT_EQ(Ids(back.Members()), (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(back.Find(2)->host, "beta");
  EXPECT_EQ(back.Find(2)->first_rank, 3);
  EXPECT_EQ(back.Find(2)->local_ranks, 5);
  EXPECT_EQ(back.IdFor(0), 3u) << "fresh ids start past the replayed ones";
  back.ReplayEnded();
  EXPECT_FALSE(back.running());
  EXPECT_TRUE(back.Members().empty());

  for (size_t cut = 0; cut < rec.size(); ++cut) {
    Membership m;
    ByteReader tr(std::string_view(rec).substr(0, cut), "generation record");
    EXPECT_FALSE(m.ReplayGeneration(tr).ok()) << "cut at " << cut;
  }
}

}  // namespace
}  // namespace ckpt::coord
