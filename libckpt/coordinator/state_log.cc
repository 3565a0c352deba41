#include "coordinator/state_log.h"

#include <unistd.h>

#include <chrono>
#include <cinttypes>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>

#include "coordinator/etcd_client.h"
#include "coordinator/journal.h"
#include "util/errors.h"
#include "util/strings.h"

namespace ckpt::coord {
namespace {

class JournalLog final : public StateLog {
 public:
  explicit JournalLog(std::string dir) : dir_(std::move(dir)) {}
  absl::Status Open(const std::function<absl::Status(std::string_view)>& replay, uint64_t* torn) override {
    return journal_.Open(dir_, replay, torn);
  }
  absl::Status Append(std::string_view record) override { return journal_.Append(record); }
  std::string Describe() const override { return StrCat("journal ", journal_.path()); }

 private:
  std::string dir_;
  Journal journal_;
};

class EtcdLog final : public StateLog {
 public:
  EtcdLog(EtcdConfig config, std::string identity, std::function<void(const std::string&)> log)
      : client_(std::move(config)), identity_(std::move(identity)), log_(std::move(log)) {}

  ~EtcdLog() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (keeper_.joinable()) keeper_.join();
    // Hand over at once rather than after the lease runs out.
    if (lease_ != 0) (void)client_.LeaseRevoke(lease_);
  }

  absl::Status Open(const std::function<absl::Status(std::string_view)>& replay, uint64_t* torn) override {
    *torn = 0;
    CKPT_RETURN_IF_ERROR(Lead());
    const std::string dir = LogDir();
    const std::string end = EtcdClient::PrefixEnd(dir);
    std::string from = dir;
    int64_t expect = 1;
    while (true) {
      bool more = false;
      auto page = client_.Range(from, end, 1000, &more);
      if (!page.ok()) return Annotate(page.status(), StrCat("reading the coordinator's state from ", Describe()));
      for (const EtcdKv& kv : *page) {
        int64_t seq = 0;
        const std::string_view tail = std::string_view(kv.key).substr(dir.size());
        if (tail.size() != 20 || !ParseInt64(tail, &seq) || seq != expect) {
          return absl::DataLossError(StrCat("etcd key ", kv.key, " under ", Describe(), ": expected record ", expect,
                                            " (", dir,
                                            "%020d); the store holds something this coordinator did "
                                            "not write"));
        }
        absl::Status s = replay(kv.value);
        if (!s.ok()) return Annotate(s, StrCat("etcd key ", kv.key, " under ", Describe()));
        ++expect;
      }
      if (!more || page->empty()) break;
      from = page->back().key + std::string(1, '\0');
    }
    next_ = expect;
    return absl::OkStatus();
  }

  absl::Status Append(std::string_view record) override {
    CKPT_RETURN_IF_ERROR(Health());
    char key[32];
    std::snprintf(key, sizeof(key), "%020" PRId64, next_);
    int64_t revision = 0;
    auto created = client_.CreateGuarded(StrCat(LogDir(), key), record, 0, LeaderKey(), leader_revision_, &revision);
    if (!created.ok()) return Annotate(created.status(), StrCat("appending record ", next_, " to ", Describe()));
    if (!*created) {
      return absl::FailedPreconditionError(
          StrCat("record ", next_, " under ", Describe(),
                 " was not written: another coordinator leads the prefix (this one's lease lapsed, or another wrote "
                 "the record); this one is fenced off and stops acting"));
    }
    ++next_;
    return absl::OkStatus();
  }

  std::string Describe() const override { return StrCat("etcd ", client_.Describe(), " ", client_.config().prefix); }

  absl::Status Health() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return lost_;
  }

 private:
  std::string LogDir() const { return StrCat(client_.config().prefix, "log/"); }
  std::string LeaderKey() const { return StrCat(client_.config().prefix, "leader"); }

  void Say(const std::string& line) {
    if (log_) log_(line);
  }

  // Becomes the prefix's leader, waiting while another is.
  absl::Status Lead() {
    const int64_t ttl = client_.config().lease_s;
    std::string seen;
    while (true) {
      if (lease_ == 0) {
        CKPT_ASSIGN_OR_RETURN(lease_, client_.LeaseGrant(ttl));
      }
      int64_t revision = 0;
      CKPT_ASSIGN_OR_RETURN(bool won, client_.CreateGuarded(LeaderKey(), identity_, lease_, "", 0, &revision));
      if (won) {
        leader_revision_ = revision;
        Say(StrCat("leading ", Describe(), " (lease ", ttl, " s)"));
        break;
      }
      bool more = false;
      auto leader = client_.Range(LeaderKey(), "", 0, &more);
      const std::string who = leader.ok() && !leader->empty() ? leader->front().value : std::string("?");
      if (who != seen) {
        Say(StrCat("standing by: ", who, " leads ", Describe()));
        seen = who;
      }
      // Our own lease must outlive the wait.
      auto left = client_.LeaseKeepAlive(lease_);
      if (!left.ok() || *left <= 0) lease_ = 0;
      std::this_thread::sleep_for(std::chrono::milliseconds(std::max<int64_t>(100, ttl * 1000 / 6)));
    }
    keeper_ = std::thread([this] { KeepLeading(); });
    return absl::OkStatus();
  }

  // Renews the lease three times a lease; when that fails for longer than
  // the lease, leadership is lost (the key is gone or going).
  void KeepLeading() {
    const auto ttl = std::chrono::seconds(client_.config().lease_s);
    auto last_ok = std::chrono::steady_clock::now();
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      cv_.wait_for(lock, ttl / 3, [&] { return stop_; });
      if (stop_) return;
      lock.unlock();
      auto left = client_.LeaseKeepAlive(lease_);
      const auto now = std::chrono::steady_clock::now();
      lock.lock();
      if (left.ok() && *left > 0) {
        last_ok = now;
        continue;
      }
      if ((left.ok() && *left <= 0) || now - last_ok >= ttl) {
        lost_ = absl::UnavailableError(
            StrCat("lost the leadership of ", Describe(), ": ",
                   left.ok() ? std::string("the lease expired") : std::string(left.status().message())));
        return;
      }
    }
  }

  EtcdClient client_;
  const std::string identity_;
  std::function<void(const std::string&)> log_;
  int64_t next_ = 1;
  int64_t lease_ = 0;
  int64_t leader_revision_ = 0;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  absl::Status lost_;
  std::thread keeper_;
};

}  // namespace

std::unique_ptr<StateLog> NewJournalLog(const std::string& dir) { return std::make_unique<JournalLog>(dir); }

absl::StatusOr<std::unique_ptr<StateLog>> NewEtcdLog(std::string_view uri, std::string identity,
                                                     std::function<void(const std::string&)> log) {
  CKPT_ASSIGN_OR_RETURN(EtcdConfig config, ParseEtcdUri(uri));
  if (identity.empty()) {
    char host[256] = {0};
    gethostname(host, sizeof(host) - 1);
    identity = StrCat(host, " pid ", getpid());
  }
  return std::unique_ptr<StateLog>(std::make_unique<EtcdLog>(std::move(config), std::move(identity), std::move(log)));
}

}  // namespace ckpt::coord
