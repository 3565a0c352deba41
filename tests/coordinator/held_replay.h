// A coordinator caught in the middle of replaying its state. A restarted
// coordinator listens before it leads: while its starting thread replays the
// journal (or the etcd log), its io thread already answers hellos, status
// and metrics as a standby. HeldReplayLog holds that replay at its first
// record; ExpectStandbyWhileReplaying then talks to the coordinator and
// checks what a standby must say, and ThreadSanitizer checks that nothing
// the io thread reads meanwhile is written by the replaying thread.
#ifndef CKPT_TESTS_COORDINATOR_HELD_REPLAY_H_
#define CKPT_TESTS_COORDINATOR_HELD_REPLAY_H_

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

#include "ckpt/coordinator.h"
#include "coordinator/harness.h"
#include "coordinator/messages.h"
#include "coordinator/server.h"
#include "coordinator/state_log.h"
#include "support/sim_member.h"
#include "testutil/test_util.h"

namespace ckpt::testing {

/// Where a HeldReplayLog's Open stops, shared with the test so that it
/// outlives a coordinator that failed to start. Two relaxed atomics on
/// purpose: a mutex or a condition variable would order the replaying
/// thread's writes before whatever the test does next, and hide a race from
/// ThreadSanitizer.
class ReplayHold {
 public:
  /// True once the replay holds (false after `timeout_s`).
  bool WaitHeld(double timeout_s) const {
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    while (!held_.load(std::memory_order_relaxed)) {
      if (std::chrono::steady_clock::now() > until) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return true;
  }
  void Release() { released_.store(true, std::memory_order_relaxed); }
  /// Records replayed past the hold so far.
  int replayed() const { return replayed_.load(std::memory_order_relaxed); }

 private:
  friend class HeldReplayLog;
  void Hold() {
    held_.store(true, std::memory_order_relaxed);
    while (!released_.load(std::memory_order_relaxed)) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::atomic<bool> held_{false}, released_{false};
  std::atomic<int> replayed_{0};
};

/// Forwards to a real state log; Open stops at the first record replayed
/// until the hold is released.
class HeldReplayLog final : public coord::StateLog {
 public:
  HeldReplayLog(std::unique_ptr<coord::StateLog> inner, std::shared_ptr<ReplayHold> hold)
      : inner_(std::move(inner)), hold_(std::move(hold)) {}

  absl::Status Open(const std::function<absl::Status(std::string_view)>& replay, uint64_t* torn) override {
    bool first = true;
    return inner_->Open(
        [&](std::string_view record) {
          if (first) {
            first = false;
            hold_->Hold();
          }
          hold_->replayed_.fetch_add(1, std::memory_order_relaxed);
          return replay(record);
        },
        torn);
  }
  absl::Status Append(std::string_view record) override { return inner_->Append(record); }
  std::string Describe() const override { return inner_->Describe(); }
  absl::Status Health() const override { return inner_->Health(); }
  coord::StoreView View() const override { return inner_->View(); }

 private:
  std::unique_ptr<coord::StateLog> inner_;
  std::shared_ptr<ReplayHold> hold_;
};

/// Runs a coordinator on the log in `options` (state dir or store) that
/// already holds a generation with `committed` as its last committed step,
/// holds its replay, and checks the standby's answers: a hello naming why it
/// does not lead, JSON and text status, metrics and a health page, and a join
/// refused as Unavailable. Then the replay goes on and the coordinator serves
/// the replayed state.
inline void ExpectStandbyWhileReplaying(CoordinatorOptions options, std::unique_ptr<coord::StateLog> inner,
                                        int64_t committed) {
  const int port = FreePort();
  options.listen = StrCat("127.0.0.1:", port);
  const std::string where = inner->Describe();
  auto hold = std::make_shared<ReplayHold>();
  auto held_log = std::make_unique<HeldReplayLog>(std::move(inner), hold);
  absl::StatusOr<std::unique_ptr<Coordinator>> started = absl::UnknownError("not started");
  std::thread starter([&] { started = coord::StartCoordinator(options, std::move(held_log)); });
  // Released whatever happens below, so that the starter can be joined.
  struct ReleaseOnExit {
    ReplayHold* hold;
    std::thread* t;
    ~ReleaseOnExit() {
      hold->Release();
      if (t->joinable()) t->join();
    }
  } release{hold.get(), &starter};
  ASSERT_TRUE(hold->WaitHeld(30)) << "the replay never began";

  // Several rounds, from fresh connections: each one's hello and requests
  // are read on the io thread while the replay is held mid-record.
  for (int round = 0; round < 3; ++round) {
    coord::SimMember m;
    ASSERT_TRUE(m.Connect(port)) << "no hello from a coordinator that is replaying";
    EXPECT_NE(m.hello().standby_of, "") << "a replaying coordinator said it leads";
    auto json = m.Request(coord::MsgType::kStatus, coord::Encode(coord::StatusRequest{false}));
    ASSERT_TRUE(json && json->first == coord::MsgType::kStatusReply);
    auto json_text = coord::DecodeBytes(json->second, 1 << 24, "status");
    ASSERT_OK(json_text);
    EXPECT_NE(json_text->find("\"serving\":false"), std::string::npos) << *json_text;
    EXPECT_NE(json_text->find(where), std::string::npos) << *json_text;
    auto text = m.Request(coord::MsgType::kStatus, coord::Encode(coord::StatusRequest{true}));
    ASSERT_TRUE(text && text->first == coord::MsgType::kStatusReply);
    auto text_text = coord::DecodeBytes(text->second, 1 << 24, "status");
    ASSERT_OK(text_text);
    EXPECT_NE(text_text->find("standby"), std::string::npos) << *text_text;
    const std::string metrics = HttpGet(port, "/metrics");
    EXPECT_NE(metrics.find("HTTP/1.0 200 OK"), std::string::npos) << metrics;
    EXPECT_NE(metrics.find("ckpt_coordinator_leader 0"), std::string::npos) << metrics;
    const std::string http_status = HttpGet(port, "/status");
    EXPECT_NE(http_status.find("\"serving\":false"), std::string::npos) << "GET /status answered: " << http_status;
    // A join is refused as a standby's, and the connection closed.
    ASSERT_TRUE(m.SendJoin(kToken, StrCat("held-", round)));
    auto refused = m.Read();
    ASSERT_TRUE(refused.has_value());
    EXPECT_EQ(refused->first, coord::MsgType::kError);
    EXPECT_NE(refused->second.find("stands by"), std::string::npos) << refused->second;
  }
  EXPECT_EQ(hold->replayed(), 0) << "the replay went on while held";

  hold->Release();
  starter.join();
  ASSERT_OK(started);
  const std::string status = (*started)->StatusJson();
  EXPECT_NE(status.find("\"serving\":true"), std::string::npos) << status;
  EXPECT_NE(status.find("\"generation\":1"), std::string::npos) << status;
  EXPECT_NE(status.find(StrCat("\"last_committed_step\":", committed)), std::string::npos) << status;
  coord::SimMember after;
  ASSERT_TRUE(after.Connect(port));
  EXPECT_EQ(after.hello().standby_of, "") << "the coordinator still stands by after its replay";
}

/// Leaves in the state that `options` names a generation of one member and
/// `step` committed: an in-process coordinator, one simulated member that
/// joins, votes and has the step decided, then the coordinator stops.
inline void RecordOneCommittedStep(const CoordinatorOptions& options, int64_t step) {
  auto coord = Coordinator::Start(options);
  ASSERT_OK(coord);
  coord::SimMember m;
  ASSERT_TRUE(m.Connect((*coord)->port()));
  ASSERT_TRUE(m.SendJoin(kToken, "recorder"));
  ASSERT_TRUE(m.ReadAssign());
  ASSERT_TRUE(m.SendVote(step));
  auto ack = m.Read();
  ASSERT_TRUE(ack && ack->first == coord::MsgType::kAck);
  ASSERT_TRUE(m.SendDecide(step));
  auto decision = m.Read();
  ASSERT_TRUE(decision && decision->first == coord::MsgType::kDecision);
  ASSERT_EQ(decision->second[0], 1) << "not decided for commit";
  ASSERT_TRUE(m.SendPublished(step));
  auto published = m.Read();
  ASSERT_TRUE(published && published->first == coord::MsgType::kAck);
}

}  // namespace ckpt::testing

#endif  // CKPT_TESTS_COORDINATOR_HELD_REPLAY_H_
