#include <chrono>
#include <cstdint>
#include <numeric>
#include <thread>

#include "ckpt/mpi.h"
#include "util/errors.h"
#include "util/strings.h"

namespace ckpt {
namespace {

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(MPI_Comm comm) : comm_(comm) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && !broken_) MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  absl::StatusOr<std::vector<std::string>> Gather(std::string_view mine, double timeout_s) override {
    const double deadline = Now() + timeout_s;
    int64_t len = static_cast<int64_t>(mine.size());
    std::vector<int64_t> lens(rank_ == 0 ? size_ : 0);
    MPI_Request req;
    MPI_Igather(&len, 1, MPI_INT64_T, lens.data(), 1, MPI_INT64_T, 0, comm_, &req);
    CKPT_RETURN_IF_ERROR(WaitFor(&req, deadline, "gather (sizes)"));
    std::vector<int> counts, displs;
    std::string all;
    if (rank_ == 0) {
      counts.resize(size_);
      displs.resize(size_);
      int64_t total = 0;
      for (int r = 0; r < size_; ++r) {
        if (lens[r] > INT32_MAX || total > INT32_MAX) {
          return absl::ResourceExhaustedError("gathered metadata exceeds 2 GiB");
        }
        counts[r] = static_cast<int>(lens[r]);
        displs[r] = static_cast<int>(total);
        total += lens[r];
      }
      all.resize(total);
    }
    MPI_Igatherv(mine.data(), static_cast<int>(len), MPI_BYTE, all.data(), counts.data(), displs.data(), MPI_BYTE, 0,
                 comm_, &req);
    CKPT_RETURN_IF_ERROR(WaitFor(&req, deadline, "gather"));
    std::vector<std::string> out;
    if (rank_ == 0) {
      for (int r = 0; r < size_; ++r) out.push_back(all.substr(displs[r], counts[r]));
    }
    return out;
  }

  absl::StatusOr<std::string> Scatter(const std::vector<std::string>& from_leader, double timeout_s) override {
    const double deadline = Now() + timeout_s;
    std::vector<int64_t> lens;
    std::vector<int> counts, displs;
    std::string all;
    if (rank_ == 0) {
      if (static_cast<int>(from_leader.size()) != size_) {
        return absl::InvalidArgumentError(StrCat("scatter needs ", size_, " messages"));
      }
      for (const std::string& m : from_leader) {
        lens.push_back(static_cast<int64_t>(m.size()));
        displs.push_back(static_cast<int>(all.size()));
        counts.push_back(static_cast<int>(m.size()));
        all += m;
      }
    }
    int64_t len = 0;
    MPI_Request req;
    MPI_Iscatter(lens.data(), 1, MPI_INT64_T, &len, 1, MPI_INT64_T, 0, comm_, &req);
    CKPT_RETURN_IF_ERROR(WaitFor(&req, deadline, "scatter (sizes)"));
    std::string out(static_cast<size_t>(len), '\0');
    MPI_Iscatterv(all.data(), counts.data(), displs.data(), MPI_BYTE, out.data(), static_cast<int>(len), MPI_BYTE, 0,
                  comm_, &req);
    CKPT_RETURN_IF_ERROR(WaitFor(&req, deadline, "scatter"));
    return out;
  }

  absl::StatusOr<std::string> Broadcast(std::string_view from_leader, double timeout_s) override {
    const double deadline = Now() + timeout_s;
    int64_t len = rank_ == 0 ? static_cast<int64_t>(from_leader.size()) : 0;
    MPI_Request req;
    MPI_Ibcast(&len, 1, MPI_INT64_T, 0, comm_, &req);
    CKPT_RETURN_IF_ERROR(WaitFor(&req, deadline, "broadcast (size)"));
    std::string out = rank_ == 0 ? std::string(from_leader) : std::string(len, '\0');
    MPI_Ibcast(out.data(), static_cast<int>(len), MPI_BYTE, 0, comm_, &req);
    CKPT_RETURN_IF_ERROR(WaitFor(&req, deadline, "broadcast"));
    return out;
  }

  absl::Status Barrier(double timeout_s) override {
    MPI_Request req;
    MPI_Ibarrier(comm_, &req);
    return WaitFor(&req, Now() + timeout_s, "barrier");
  }

 private:
  static double Now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  }

  absl::Status WaitFor(MPI_Request* req, double deadline, const char* what) {
    if (broken_) {
      return absl::FailedPreconditionError("MPI communicator unusable after an earlier timeout");
    }
    double sleep = 1e-5;
    while (true) {
      int done = 0;
      int rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
      if (rc != MPI_SUCCESS) {
        broken_ = true;
        return absl::InternalError(StrCat("MPI ", what, " on rank ", rank_, " failed (error ", rc, ")"));
      }
      if (done) return absl::OkStatus();
      if (Now() > deadline) {
        broken_ = true;
        return absl::DeadlineExceededError(
            StrCat("MPI ", what, " on rank ", rank_, " did not complete in time; a rank may be dead"));
      }
      std::this_thread::sleep_for(std::chrono::duration<double>(sleep));
      sleep = std::min(sleep * 2, 1e-3);
    }
  }

  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 1;
  bool broken_ = false;
};

}  // namespace

absl::StatusOr<std::shared_ptr<Communicator>> CreateMpiCommunicator(MPI_Comm comm) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) return absl::FailedPreconditionError("MPI is not initialized");
  MPI_Comm dup;
  if (MPI_Comm_dup(comm, &dup) != MPI_SUCCESS) {
    return absl::InternalError("MPI_Comm_dup failed");
  }
  return std::shared_ptr<Communicator>(std::make_shared<MpiCommunicator>(dup));
}

}  // namespace ckpt
