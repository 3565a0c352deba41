#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>

#include "ckpt/communicator.h"
#include "util/strings.h"

namespace ckpt {
namespace {

// State shared by the ranks of one local group. Collective number k of every
// rank meets in ops[k].
struct LocalGroup {
  explicit LocalGroup(int n) : size(n) {}
  struct Op {
    std::vector<std::string> in;   // one per rank (gather)
    std::vector<std::string> out;  // from the leader (scatter/broadcast)
    int arrived = 0;
    int departed = 0;
    bool leader_done = false;
  };
  const int size;
  std::mutex mu;
  std::condition_variable cv;
  std::map<uint64_t, Op> ops;
};

class LocalCommunicator final : public Communicator {
 public:
  LocalCommunicator(std::shared_ptr<LocalGroup> group, int rank) : group_(std::move(group)), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return group_->size; }

  absl::StatusOr<std::vector<std::string>> Gather(std::string_view mine, double timeout_s) override {
    std::vector<std::string> result;
    absl::Status s = Run(
        timeout_s, "gather", [&](LocalGroup::Op& op) { op.in[rank_] = std::string(mine); },
        [&](LocalGroup::Op& op) {
          if (rank_ == 0) result = op.in;
        },
        /*leader_publishes=*/false);
    if (!s.ok()) return s;
    return result;
  }

  absl::StatusOr<std::string> Scatter(const std::vector<std::string>& from_leader, double timeout_s) override {
    if (rank_ == 0 && static_cast<int>(from_leader.size()) != group_->size) {
      return absl::InvalidArgumentError(StrCat("scatter needs ", group_->size, " messages, got ", from_leader.size()));
    }
    std::string result;
    absl::Status s = Run(
        timeout_s, "scatter",
        [&](LocalGroup::Op& op) {
          if (rank_ == 0) op.out = from_leader;
        },
        [&](LocalGroup::Op& op) { result = op.out[rank_]; }, /*leader_publishes=*/true);
    if (!s.ok()) return s;
    return result;
  }

  absl::StatusOr<std::string> Broadcast(std::string_view from_leader, double timeout_s) override {
    std::string result;
    absl::Status s = Run(
        timeout_s, "broadcast",
        [&](LocalGroup::Op& op) {
          if (rank_ == 0) op.out = {std::string(from_leader)};
        },
        [&](LocalGroup::Op& op) { result = op.out[0]; }, /*leader_publishes=*/true);
    if (!s.ok()) return s;
    return result;
  }

  absl::Status Barrier(double timeout_s) override {
    return Run(
        timeout_s, "barrier", [](LocalGroup::Op&) {}, [](LocalGroup::Op&) {}, false);
  }
  bool CallableFromAnyThread() const override { return true; }

 private:
  // Every rank deposits, waits for all ranks (or, when the leader publishes,
  // for the leader), reads, and the last to leave frees the slot.
  template <typename Deposit, typename Read>
  absl::Status Run(double timeout_s, const char* what, Deposit deposit, Read read, bool leader_publishes) {
    const uint64_t id = next_op_++;
    std::unique_lock<std::mutex> lock(group_->mu);
    LocalGroup::Op& op = group_->ops[id];
    if (op.in.empty()) op.in.resize(group_->size);
    deposit(op);
    ++op.arrived;
    if (rank_ == 0) op.leader_done = true;
    group_->cv.notify_all();
    auto ready = [&] { return leader_publishes ? op.leader_done : op.arrived == group_->size; };
    if (!group_->cv.wait_for(lock, std::chrono::duration<double>(timeout_s), ready)) {
      return absl::DeadlineExceededError(StrCat("local ", what, " #", id, " on rank ", rank_, ": ",
                                                group_->size - op.arrived, " rank(s) did not arrive within ", timeout_s,
                                                " s"));
    }
    // A gather's leader must also wait for everyone; the others may leave.
    read(op);
    if (++op.departed == group_->size) group_->ops.erase(id);
    return absl::OkStatus();
  }

  std::shared_ptr<LocalGroup> group_;
  const int rank_;
  uint64_t next_op_ = 0;
};

}  // namespace

std::vector<std::shared_ptr<Communicator>> CreateLocalCommunicators(int n) {
  auto group = std::make_shared<LocalGroup>(n);
  std::vector<std::shared_ptr<Communicator>> out;
  for (int r = 0; r < n; ++r) out.push_back(std::make_shared<LocalCommunicator>(group, r));
  return out;
}

}  // namespace ckpt
