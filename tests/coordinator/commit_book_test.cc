// The coordinator's commit ledger, alone: no sockets, no journal.
#include "coordinator/commit_book.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "coordinator/records.h"
#include "coordinator/state_log.h"
#include "testutil/test_util.h"
#include "util/bytes.h"

namespace ckpt::coord {
namespace {

using Kind = BookEvent::Kind;

SaveVote Ok(double write_s = 1.0, std::vector<ReplicaHash> replicas = {}) {
  SaveVote v;
  v.ok = true;
  v.stall_s = 0.1;
  v.write_s = write_s;
  v.replicas = std::move(replicas);
  return v;
}

TEST(CommitBook, TheLastGoodVoteDecidesAndThePublishCommitsOnce) {
  CommitBook book;
  std::vector<SdcAlert> alerts;
  EXPECT_TRUE(book.Vote(10, 1, 0, Ok(), 3, &alerts).empty());
  EXPECT_TRUE(book.Vote(10, 1, 2, Ok(), 3, &alerts).empty());
  auto e = book.Vote(10, 1, 1, Ok(), 3, &alerts);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].kind, Kind::kDecidedCommit);
  EXPECT_EQ(e[0].step, 10);
  EXPECT_EQ(e[0].generation, 1);
  EXPECT_TRUE(alerts.empty());
  EXPECT_TRUE(book.Vote(10, 1, 1, Ok(), 3, &alerts).empty()) << "a late vote changes nothing";
  ASSERT_TRUE(book.Find(10)->decision.has_value());
  EXPECT_FALSE(book.Find(10)->outcome.has_value());

  auto c = book.Published(10, 1, true, "");
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->size(), 1u);
  EXPECT_EQ((*c)[0].kind, Kind::kCommitted);
  EXPECT_EQ((*c)[0].durations.write.size(), 3u);
  auto again = book.Published(10, 1, true, "");
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->empty()) << "a repeated publish commits nothing twice";
  // A later generation sees the step committed, never restarted.
  const CommitBook::Step& st = book.For(10, 2);
  ASSERT_TRUE(st.outcome.has_value());
  EXPECT_TRUE(st.outcome->ok());
  EXPECT_TRUE(book.AbortGeneration(1, absl::AbortedError("x")).empty());
}

TEST(CommitBook, AFailedVoteAbortsAtOnceAndPublishingItIsRefused) {
  CommitBook book;
  std::vector<SdcAlert> alerts;
  SaveVote bad;
  bad.ok = false;
  bad.error = "ENOSPC writing rank-000001.ckd";
  auto e = book.Vote(5, 1, 1, bad, 4, &alerts);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].kind, Kind::kAborted);
  EXPECT_TRUE(absl::IsAborted(e[0].status));
  EXPECT_NE(e[0].status.message().find("rank 1 failed to save step 5: ENOSPC"), std::string::npos) << e[0].status;
  EXPECT_TRUE(book.Vote(5, 1, 0, Ok(), 4, &alerts).empty());
  auto p = book.Published(5, 1, true, "");
  EXPECT_TRUE(absl::IsFailedPrecondition(p.status())) << p.status();
  EXPECT_TRUE(absl::IsFailedPrecondition(book.Published(6, 1, true, "").status())) << "never voted on";
  EXPECT_TRUE(book.Abort(5, absl::AbortedError("again")).empty()) << "aborted once";
}

TEST(CommitBook, ALeaderThatCannotPublishAbortsTheStep) {
  CommitBook book;
  std::vector<SdcAlert> alerts;
  ASSERT_EQ(book.Vote(7, 1, 0, Ok(), 1, &alerts).size(), 1u);
  auto p = book.Published(7, 1, false, "EIO renaming MANIFEST");
  ASSERT_TRUE(p.ok());
  ASSERT_EQ(p->size(), 1u);
  EXPECT_EQ((*p)[0].kind, Kind::kAborted);
  EXPECT_NE((*p)[0].status.message().find("could not publish step 7: EIO renaming MANIFEST"), std::string::npos);
}

TEST(CommitBook, ReplicasThatDisagreeRaiseAnAlertAndBlockOnlyAWrongWrittenCopy) {
  auto rh = [](uint64_t hash, bool written) { return std::vector<ReplicaHash>{{"w[0:64]", hash, written}}; };
  {
    // The written copy is the majority's: committed, with an alert naming rank 2.
    CommitBook book;
    std::vector<SdcAlert> alerts;
    book.Vote(1, 1, 0, Ok(1, rh(0xA, true)), 3, &alerts);
    book.Vote(1, 1, 1, Ok(1, rh(0xA, false)), 3, &alerts);
    auto e = book.Vote(1, 1, 2, Ok(1, rh(0xB, false)), 3, &alerts);
    ASSERT_EQ(e.size(), 1u);
    EXPECT_EQ(e[0].kind, Kind::kDecidedCommit);
    ASSERT_EQ(alerts.size(), 1u);
    EXPECT_EQ(alerts[0].key, "w[0:64]");
    EXPECT_EQ(alerts[0].detail, "rank(s) 2 disagree with the other 2 of 3 replicas");
  }
  {
    // The written copy is the odd one out: not committed.
    CommitBook book;
    std::vector<SdcAlert> alerts;
    book.Vote(1, 1, 0, Ok(1, rh(0xA, false)), 3, &alerts);
    book.Vote(1, 1, 1, Ok(1, rh(0xA, false)), 3, &alerts);
    auto e = book.Vote(1, 1, 2, Ok(1, rh(0xB, true)), 3, &alerts);
    ASSERT_EQ(e.size(), 1u);
    EXPECT_EQ(e[0].kind, Kind::kAborted);
    EXPECT_TRUE(absl::IsDataLoss(e[0].status)) << e[0].status;
    EXPECT_NE(e[0].status.message().find("the copy of rank 2 that was written disagrees with the majority"),
              std::string::npos);
  }
  {
    // Two copies that differ: no majority, not committed.
    std::map<int, SaveVote> votes = {{0, Ok(1, rh(0xA, true))}, {1, Ok(1, rh(0xB, false))}};
    std::vector<SdcAlert> alerts;
    absl::Status s = CheckReplicas(4, votes, &alerts);
    EXPECT_TRUE(absl::IsDataLoss(s)) << s;
    ASSERT_EQ(alerts.size(), 1u);
    EXPECT_EQ(alerts[0].detail, "no majority among 2 replicas");
    EXPECT_EQ(alerts[0].step, 4);
  }
}

// A newer generation saves an uncommitted step again from scratch, even
// one an older generation aborted (a replayed abort included); an older
// generation's request changes nothing; a committed step stays committed.
TEST(CommitBook, ANewGenerationRestartsAnUncommittedStep) {
  CommitBook book;
  std::vector<SdcAlert> alerts;
  book.Vote(3, 1, 0, Ok(), 2, &alerts);
  EXPECT_EQ(book.For(3, 2).votes.size(), 0u) << "saved again from scratch";
  EXPECT_EQ(book.Find(3)->generation, 2);
  EXPECT_EQ(book.For(3, 1).generation, 2) << "an older generation's request resets nothing";
  EXPECT_TRUE(book.Vote(3, 1, 0, Ok(), 2, &alerts).empty()) << "an older generation's vote is not counted";
  EXPECT_TRUE(book.Find(3)->votes.empty());
  book.ReplayAborted(15, 2);
  ASSERT_EQ(book.Vote(15, 4, 0, Ok(), 1, &alerts).size(), 1u) << "a step aborted in generation 2 commits in 4";
  ASSERT_TRUE(book.Published(15, 4, true, "").ok());
  EXPECT_TRUE(book.Find(15)->outcome->ok());
  EXPECT_EQ(book.For(15, 5).generation, 4) << "committed stays committed";
  // A memory step committed in generation 4 is saved again by generation 5
  // (which restored an older step: its copies were lost), not answered with
  // generation 4's outcome.
  const int64_t m15 = StepKey(15, /*memory=*/true);
  ASSERT_EQ(book.Vote(m15, 4, 0, Ok(), 1, &alerts).size(), 1u);
  ASSERT_TRUE(book.Published(m15, 4, true, "").ok());
  const CommitBook::Step& again = book.For(m15, 5);
  EXPECT_EQ(again.generation, 5);
  EXPECT_FALSE(again.outcome.has_value());
  EXPECT_TRUE(book.Find(15)->outcome->ok()) << "the durable step 15 is another entry";
  // Replayed after a failover: aborted in generation 8, then decided (not
  // yet committed) in generation 10. The decision must not sit beside the
  // old abort: the others still wait for the outcome, and the leader's
  // publish must commit it.
  CommitBook replayed;
  replayed.ReplayAborted(40, 8);
  replayed.ReplayDecided(40, 10);
  const CommitBook::Step* st = replayed.Find(40);
  ASSERT_NE(st, nullptr);
  EXPECT_EQ(st->generation, 10);
  EXPECT_TRUE(st->decision->ok());
  EXPECT_FALSE(st->outcome.has_value()) << st->outcome->message();
  auto published = replayed.Published(40, 10, true, "");
  ASSERT_TRUE(published.ok());
  ASSERT_EQ(published->size(), 1u);
  EXPECT_EQ((*published)[0].kind, BookEvent::Kind::kCommitted);
  // Ending generation 2 aborts its undecided steps, not older committed ones.
  book.Vote(2, 2, 0, Ok(), 1, &alerts);
  ASSERT_TRUE(book.Published(2, 2, true, "").ok());
  auto e = book.AbortGeneration(2, absl::AbortedError("generation 2 ended: member 4 died"));
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].step, 3);
  EXPECT_TRUE(book.Find(2)->outcome->ok());
}

TEST(CommitBook, ReplayRestoresDecisionsAndTrimKeepsTheNewest) {
  CommitBook book;
  book.ReplayCommitted(1, 1);
  book.ReplayAborted(2, 1);
  book.ReplayDecided(3, 2);
  EXPECT_TRUE(book.Find(1)->outcome->ok());
  EXPECT_TRUE(absl::IsAborted(*book.Find(2)->outcome));
  EXPECT_NE(book.Find(2)->outcome->message().find("step 2 was aborted in generation 1"), std::string::npos);
  EXPECT_TRUE(book.Find(3)->decision->ok());
  // A leader that published before a restart finds its decision.
  auto p = book.Published(3, 2, true, "");
  ASSERT_TRUE(p.ok());
  ASSERT_EQ(p->size(), 1u);
  EXPECT_EQ((*p)[0].kind, Kind::kCommitted);
  book.ReplayDecided(4, 2);  // undecided outcome: kept by a trim of decided steps only
  book.Trim(1, /*only_decided=*/true);
  EXPECT_EQ(book.Find(1), nullptr);
  EXPECT_EQ(book.Find(3), nullptr);
  EXPECT_NE(book.Find(4), nullptr);
  book.Trim(0, /*only_decided=*/false);
  EXPECT_TRUE(book.steps().empty());
}

TEST(CommitBook, StragglersAreFarSlowerThanTheTypicalRank) {
  std::map<int, SaveVote> votes;
  for (int r = 0; r < 8; ++r) votes[r] = Ok(r == 5 ? 4.0 : 1.0 + 0.01 * r);
  SaveDurations d = Durations(9, votes);
  EXPECT_EQ(d.step, 9);
  EXPECT_EQ(d.write.size(), 8u);
  ASSERT_EQ(d.stragglers.size(), 1u);
  EXPECT_EQ(d.stragglers[0].first, 5);
  EXPECT_DOUBLE_EQ(d.stragglers[0].second, 4.0);
  // Two ranks are too few to call either slow.
  std::map<int, SaveVote> two = {{0, Ok(1)}, {1, Ok(9)}};
  EXPECT_TRUE(Durations(1, two).stragglers.empty());
}

// A journal record of a step's decision, commit or abort.
std::string StepRecord(JournalKind kind, int64_t st, int64_t gen) {
  ByteWriter w;
  w.U8(static_cast<uint8_t>(kind));
  w.SVar(st);
  w.SVar(gen);
  return w.Take();
}

// The records a coordinator writes decode back, and the history check
// tells legitimate sequences (a decided step aborted when its leader could
// not publish; a step aborted in one generation saved again in the next)
// from contradictions (one step of one generation committed and aborted;
// generations going back; one durable step committed by two generations).
TEST(History, DecodesRecordsAndFindsContradictions) {
  auto generation = [](int64_t gen) {
    ByteWriter w;
    w.U8(static_cast<uint8_t>(JournalKind::kGeneration));
    w.SVar(gen);
    w.Var(2);
    w.SVar(-1);
    w.Var(1);
    w.Var(7);
    w.Str("node-a");
    w.Var(0);
    w.Var(2);
    return w.Take();
  };
  History ok;
  int64_t seq = 0;
  for (const std::string& rec :
       {generation(1), StepRecord(JournalKind::kDecided, 5, 1), StepRecord(JournalKind::kCommitted, 5, 1),
        StepRecord(JournalKind::kDecided, 10, 1), StepRecord(JournalKind::kAborted, 10, 1), generation(2),
        StepRecord(JournalKind::kDecided, 10, 2), StepRecord(JournalKind::kCommitted, 10, 2)}) {
    auto r = DecodeRecord(++seq, rec);
    ASSERT_OK(r);
    ok.Add(std::move(*r));
  }
  EXPECT_TRUE(ok.contradictions.empty()) << ok.contradictions.front();
  EXPECT_EQ(ok.committed, (std::set<int64_t>{5, 10}));
  ASSERT_EQ(ok.records[0].members.size(), 1u);
  EXPECT_EQ(ok.records[0].members[0].host, "node-a");
  EXPECT_EQ(ok.records[0].members[0].local_ranks, 2);

  History bad;
  seq = 0;
  for (const std::string& rec :
       {generation(2), StepRecord(JournalKind::kCommitted, 5, 2), StepRecord(JournalKind::kAborted, 5, 2),
        generation(1), generation(3), StepRecord(JournalKind::kCommitted, 5, 3)}) {
    auto r = DecodeRecord(++seq, rec);
    ASSERT_OK(r);
    bad.Add(std::move(*r));
  }
  ASSERT_EQ(bad.contradictions.size(), 3u);
  EXPECT_EQ(bad.contradictions[0], "record 3: step 5 of generation 2 aborted after it was committed");
  EXPECT_EQ(bad.contradictions[1], "record 4: generation 1 after generation 2 (record 1)");
  EXPECT_EQ(bad.contradictions[2], "record 6: step 5 committed by generation 3 after generation 2 committed it");

  auto unknown = DecodeRecord(9, std::string("\x09\x01", 2));
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("record 9: unknown journal record kind 9"), absl::string_view::npos);
  EXPECT_FALSE(DecodeRecord(1, StepRecord(JournalKind::kCommitted, 5, 1).substr(0, 1)).ok());
}

// The same records written to a journal and read back through the public
// ReadCoordinatorHistory, which reads only.
TEST(History, ReadCoordinatorHistoryReadsAJournalBack) {
  testing::TempDir dir;
  {
    std::unique_ptr<StateLog> log = NewJournalLog(dir.path());
    uint64_t torn = 0;
    ASSERT_OK(log->Open([](std::string_view) { return absl::OkStatus(); }, &torn));
    for (const std::string& rec : {StepRecord(JournalKind::kDecided, 5, 1), StepRecord(JournalKind::kCommitted, 5, 1),
                                   StepRecord(JournalKind::kAborted, 5, 1)}) {
      ASSERT_OK(log->Append(rec));
    }
  }
  auto h = ReadCoordinatorHistory(dir.path(), "");
  ASSERT_OK(h);
  ASSERT_EQ(h->records.size(), 3u);
  EXPECT_EQ(h->records[1].kind, CoordinatorRecordKind::kCommitted);
  EXPECT_STREQ(CoordinatorRecordKindName(h->records[2].kind), "aborted");
  EXPECT_EQ(h->committed, (std::set<int64_t>{5}));
  ASSERT_EQ(h->contradictions.size(), 1u) << "committed, then aborted";
  EXPECT_FALSE(h->where.empty());
  EXPECT_STREQ(CoordinatorMemoryStateName(h->memory.state), "none");
  EXPECT_TRUE(absl::IsInvalidArgument(ReadCoordinatorHistory("", "").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(ReadCoordinatorHistory(dir.path(), "etcd://127.0.0.1:1/x").status()));
  EXPECT_FALSE(ReadCoordinatorHistory(dir.Join("missing"), "").ok());
}

// The memory level through a log: the newest committed memory step is held
// while its generation runs, unconfirmed once that generation ends, held
// again by a generation that restores it, dropped by one that restores a
// durable step instead (even one of the same number), gone when the job
// finishes.
TEST(History, FollowsTheNewestMemoryStep) {
  auto step = [](JournalKind kind, int64_t st, int64_t gen, bool memory) {
    ByteWriter w;
    w.U8(static_cast<uint8_t>(kind));
    w.SVar(StepKey(st, memory));
    w.SVar(gen);
    if (memory) w.Var(6);
    return w.Take();
  };
  auto generation = [](int64_t gen, int64_t restore) {
    ByteWriter w;
    w.U8(static_cast<uint8_t>(JournalKind::kGeneration));
    w.SVar(gen);
    w.Var(2);
    w.SVar(restore);
    w.Var(0);
    return w.Take();
  };
  auto ended = [](int64_t gen, bool finished) {
    ByteWriter w;
    w.U8(static_cast<uint8_t>(JournalKind::kEnded));
    w.SVar(gen);
    if (finished) w.U8(1);
    return w.Take();
  };
  History h;
  int64_t seq = 0;
  auto add = [&](const std::string& rec) {
    auto r = DecodeRecord(++seq, rec);
    ASSERT_OK(r);
    h.Add(std::move(*r));
  };
  using State = MemoryLevelView::State;
  add(generation(1, -1));
  EXPECT_EQ(h.memory.state, State::kNone);
  add(step(JournalKind::kCommitted, 10, 1, false));
  add(step(JournalKind::kCommitted, 12, 1, true));
  add(step(JournalKind::kCommitted, 14, 1, true));
  EXPECT_EQ(h.memory.state, State::kHeld);
  EXPECT_EQ(h.memory.step, 14);
  EXPECT_EQ(h.memory.generation, 1);
  EXPECT_EQ(h.memory.save_world, 6);
  EXPECT_EQ(h.memory_committed, (std::set<int64_t>{12, 14}));
  EXPECT_EQ(h.committed, (std::set<int64_t>{10}));
  add(ended(1, false));
  EXPECT_EQ(h.memory.state, State::kUnconfirmed);
  EXPECT_STREQ(MemoryLevelStateName(h.memory.state), "unconfirmed");
  add(generation(2, 14));  // restored from memory
  EXPECT_EQ(h.memory.state, State::kHeld);
  EXPECT_EQ(h.memory.held_by, 2);
  EXPECT_EQ(h.memory.generation, 1);
  add(ended(2, false));
  add(generation(3, 10));  // the survivors did not hold it all
  EXPECT_EQ(h.memory.state, State::kDropped);
  EXPECT_EQ(h.memory.held_by, 3);
  add(step(JournalKind::kCommitted, 20, 3, false));
  add(step(JournalKind::kCommitted, 20, 3, true));
  EXPECT_EQ(h.memory.state, State::kHeld);
  add(ended(3, false));
  add(generation(4, 20));  // durable step 20: the memory step of that number is dropped
  EXPECT_EQ(h.memory.state, State::kDropped);
  add(step(JournalKind::kCommitted, 22, 4, true));
  add(ended(4, true));
  EXPECT_EQ(h.memory.state, State::kGone);
  EXPECT_EQ(h.memory.step, 22);
  EXPECT_TRUE(h.records.back().finished);
  EXPECT_TRUE(h.contradictions.empty());
}

}  // namespace
}  // namespace ckpt::coord
