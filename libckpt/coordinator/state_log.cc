#include "coordinator/state_log.h"

#include <unistd.h>

#include <algorithm>
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
  explicit JournalLog(std::string dir) : journal_(std::move(dir)) {}
  absl::Status Open(const std::function<absl::Status(std::string_view)>& replay, uint64_t* torn) override {
    return journal_.Open(replay, torn);
  }
  absl::Status Append(std::string_view record) override { return journal_.Append(record); }
  std::string Describe() const override { return StrCat("journal ", journal_.path()); }
  StoreView View() const override {
    StoreView v;
    v.kind = "journal";
    v.where = Describe();
    return v;
  }

 private:
  Journal journal_;
};

class EtcdLog final : public StateLog {
 public:
  EtcdLog(EtcdConfig config, std::string identity, std::function<void(const std::string&)> log)
      : client_(std::move(config)), identity_(std::move(identity)), log_(std::move(log)) {
    view_.kind = "etcd";
    view_.where = Describe();
    view_.self = identity_;
    view_.leaders = 0;
  }

  ~EtcdLog() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (keeper_.joinable()) keeper_.join();
    if (observer_.joinable()) observer_.join();
    // Hand over at once rather than after the lease runs out.
    if (lease_ != 0) (void)client_.LeaseRevoke(lease_);
  }

  void set_patient(bool patient) { patient_ = patient; }

  absl::Status Open(const std::function<absl::Status(std::string_view)>& replay, uint64_t* torn) override {
    *torn = 0;
    observer_ = std::thread([this] { Observe(); });
    CKPT_RETURN_IF_ERROR(Lead());
    int64_t last = 0;
    CKPT_RETURN_IF_ERROR(ReadAll([&](int64_t seq, std::string_view rec) {
      last = seq;
      return replay(rec);
    }));
    next_ = last + 1;
    return absl::OkStatus();
  }

  // Every record in order, refusing gaps and keys no coordinator wrote.
  absl::Status ReadAll(const std::function<absl::Status(int64_t, std::string_view)>& replay) {
    const std::string dir = LogDir();
    const std::string end = EtcdClient::PrefixEnd(dir);
    std::string from = dir;
    int64_t expect = 1;
    // Pages advance (Range refuses keys before `from`), and a log longer
    // than any job writes is refused rather than read forever.
    constexpr int kMaxPages = 100000;  // 10^8 records
    for (int pages = 0;; ++pages) {
      if (pages == kMaxPages) {
        return absl::DataLossError(
            StrCat(Describe(), ": more than ", kMaxPages, " pages of records; refusing a log that never ends"));
      }
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
        absl::Status s = replay(seq, kv.value);
        if (!s.ok()) return Annotate(s, StrCat("etcd key ", kv.key, " under ", Describe()));
        ++expect;
      }
      if (!more || page->empty()) break;
      from = page->back().key + std::string(1, '\0');
    }
    return absl::OkStatus();
  }

  absl::Status Append(std::string_view record) override {
    CKPT_RETURN_IF_ERROR(Health());
    char key[32];
    std::snprintf(key, sizeof(key), "%020" PRId64, next_);
    int64_t revision = 0;
    auto created = client_.CreateGuarded(StrCat(LogDir(), key), record, 0, LeaderKey(), leader_revision_, &revision);
    if (!created.ok()) return Annotate(created.status(), StrCat("appending record ", next_, " to ", Describe()));
    if (!*created && WroteItself(StrCat(LogDir(), key), record)) {
      Say(StrCat("record ", next_, " is this replica's own (an answer to its write was lost)"));
      *created = true;
    }
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

  StoreView View() const override {
    std::lock_guard<std::mutex> lock(mu_);
    StoreView v = view_;
    if (v.probed_s_ago >= 0) {
      v.probed_s_ago = std::chrono::duration<double>(std::chrono::steady_clock::now() - probed_at_).count();
    }
    return v;
  }

 private:
  // Whether a guarded create that failed had in fact gone through: an
  // earlier try of it was applied, its answer lost, and the client asked
  // the next member, whose compare then failed. It did when `key` holds
  // `value` and this replica still holds the leader key it wrote (so no
  // other leader could have written since).
  bool WroteItself(const std::string& key, std::string_view value) {
    bool more = false;
    auto mine = client_.Range(key, "", 0, &more);
    auto leader = client_.Range(LeaderKey(), "", 0, &more);
    return mine.ok() && leader.ok() && !mine->empty() && !leader->empty() && mine->front().value == value &&
           leader->front().create_revision == leader_revision_ && leader->front().lease == lease_;
  }

  std::string LogDir() const { return StrCat(client_.config().prefix, "log/"); }
  std::string LeaderKey() const { return StrCat(client_.config().prefix, "leader"); }
  std::string ReplicasDir() const { return StrCat(client_.config().prefix, "replicas/"); }
  std::string LeadersDir() const { return StrCat(client_.config().prefix, "leaders/"); }

  void Say(const std::string& line) {
    if (log_) log_(line);
  }

  // A lease for this replica, and its entry among the replicas under it.
  absl::Status GrantLease() {
    CKPT_ASSIGN_OR_RETURN(lease_, client_.LeaseGrant(client_.config().lease_s));
    char key[32];
    std::snprintf(key, sizeof(key), "%016" PRIx64, static_cast<uint64_t>(lease_));
    int64_t revision = 0;
    CKPT_RETURN_IF_ERROR(
        client_.CreateGuarded(StrCat(ReplicasDir(), key), identity_, lease_, "", 0, &revision).status());
    return absl::OkStatus();
  }

  // Becomes the prefix's leader, waiting while another is.
  absl::Status Lead() {
    const int64_t ttl = client_.config().lease_s;
    std::string seen, trouble;
    auto renewed = std::chrono::steady_clock::now();
    bool reached = patient_;  // the store answered this replica once (or it waits anyway)
    while (true) {
      absl::Status s = TryToLead(ttl, &renewed, &seen);
      if (s.ok() && leader_revision_ != 0) break;
      if (!s.ok()) {
        // Once it has stood by, a standby outlives a store that is down or
        // without quorum: it waits, and takes over when the store is back.
        // Before that, a store it cannot use is a setup error, said at once.
        if (!reached || absl::IsPermissionDenied(s) || absl::IsInvalidArgument(s)) return s;
        if (std::string(s.message()) != trouble) {
          Say(StrCat("standing by: the store does not answer (", s.message(), "); trying again"));
          trouble = std::string(s.message());
        }
        lease_ = 0;  // it may have expired meanwhile: a new one
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
        continue;
      }
      reached = true;
      trouble.clear();
      // The leader key is tried ten times a second; etcd itself removes an
      // expired lease's keys only every 500 ms.
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    keeper_ = std::thread([this] { KeepLeading(); });
    return absl::OkStatus();
  }

  // One try at the leader key; OK either way (leader_revision_ is set when
  // it won), an error when the store did not answer.
  absl::Status TryToLead(int64_t ttl, std::chrono::steady_clock::time_point* renewed, std::string* seen) {
    if (lease_ == 0) {
      CKPT_RETURN_IF_ERROR(GrantLease());
      *renewed = std::chrono::steady_clock::now();
    }
    int64_t revision = 0;
    CKPT_ASSIGN_OR_RETURN(bool won, client_.CreateGuarded(LeaderKey(), identity_, lease_, "", 0, &revision));
    std::vector<EtcdKv> leader;
    if (!won) {
      bool more = false;
      CKPT_ASSIGN_OR_RETURN(leader, client_.Range(LeaderKey(), "", 0, &more));
      // The key is this replica's, on its own lease: an earlier try of this
      // write went through, but its answer was lost and the client asked
      // the next member, whose compare then failed. Standing by would wait
      // for a key that its own renewals keep alive.
      if (!leader.empty() && leader.front().lease == lease_ && leader.front().value == identity_) {
        won = true;
        revision = leader.front().create_revision;
        Say("the leader key is this replica's own (an answer to its write was lost): leading");
      }
    }
    if (won) {
      leader_revision_ = revision;
      // One key per leadership, so that status can count the changes.
      char key[32];
      std::snprintf(key, sizeof(key), "%020" PRId64, revision);
      int64_t ignored = 0;
      (void)client_.CreateGuarded(StrCat(LeadersDir(), key), identity_, 0, LeaderKey(), revision, &ignored);
      {
        std::lock_guard<std::mutex> lock(mu_);
        view_.leader = identity_;
      }
      Say(StrCat("leading ", Describe(), " (lease ", ttl, " s)"));
      return absl::OkStatus();
    }
    const std::string who = !leader.empty() ? leader.front().value : std::string("?");
    if (who != *seen) {
      Say(StrCat("standing by: ", who, " leads ", Describe()));
      *seen = who;
    }
    // Our own lease must outlive the wait: renewed three times a lease.
    const auto now = std::chrono::steady_clock::now();
    if (now - *renewed >= std::chrono::milliseconds(ttl * 1000 / 3)) {
      CKPT_ASSIGN_OR_RETURN(int64_t left, client_.LeaseKeepAlive(lease_));
      if (left <= 0) lease_ = 0;
      *renewed = now;
    }
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

  // Refreshes the view every second or two: each member's own status,
  // who leads, the replicas and how many leaders there have been. Runs on
  // its own thread so that a slow member never delays a lease renewal.
  void Observe() {
    const auto every = std::chrono::milliseconds(std::clamp<int64_t>(client_.config().lease_s * 1000 / 2, 500, 2000));
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      lock.unlock();
      std::vector<StoreView::Endpoint> endpoints;
      for (const std::string& url : client_.config().endpoints) {
        StoreView::Endpoint e;
        e.url = url;
        const auto t0 = std::chrono::steady_clock::now();
        auto st = client_.StatusOf(url);
        e.rtt_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (st.ok()) {
          e.up = true;
          e.raft_leader = st->member_id != 0 && st->member_id == st->leader;
          e.raft_term = st->raft_term;
          e.db_bytes = st->db_size;
          if (st->leader == 0) e.error = "no raft leader";
        } else {
          e.error = std::string(st.status().message());
        }
        endpoints.push_back(std::move(e));
      }
      bool more = false;
      auto leader = client_.Range(LeaderKey(), "", 0, &more);
      auto replicas = client_.Range(ReplicasDir(), EtcdClient::PrefixEnd(ReplicasDir()), 0, &more);
      auto leaders = client_.Count(LeadersDir(), EtcdClient::PrefixEnd(LeadersDir()));
      lock.lock();
      view_.endpoints = std::move(endpoints);
      probed_at_ = std::chrono::steady_clock::now();
      view_.probed_s_ago = 0;
      if (leader.ok()) view_.leader = leader->empty() ? std::string() : leader->front().value;
      if (replicas.ok()) {
        view_.standbys.clear();
        for (const EtcdKv& kv : *replicas) {
          if (kv.value != view_.leader) view_.standbys.push_back(kv.value);
        }
      }
      if (leaders.ok()) view_.leaders = *leaders;
      cv_.wait_for(lock, every, [&] { return stop_; });
    }
  }

  EtcdClient client_;
  const std::string identity_;
  std::function<void(const std::string&)> log_;
  int64_t next_ = 1;
  int64_t lease_ = 0;
  int64_t leader_revision_ = 0;
  bool patient_ = false;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  absl::Status lost_;
  StoreView view_;
  std::chrono::steady_clock::time_point probed_at_;
  std::thread keeper_;
  std::thread observer_;
};

}  // namespace

std::string ThisProcess() {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  return StrCat(host, " pid ", getpid());
}

std::unique_ptr<StateLog> NewJournalLog(const std::string& dir) { return std::make_unique<JournalLog>(dir); }

absl::StatusOr<std::unique_ptr<StateLog>> NewEtcdLog(std::string_view uri, std::string identity,
                                                     std::function<void(const std::string&)> log, bool patient) {
  CKPT_ASSIGN_OR_RETURN(EtcdConfig config, ParseEtcdUri(uri));
  if (identity.empty()) identity = ThisProcess();
  auto etcd = std::make_unique<EtcdLog>(std::move(config), std::move(identity), std::move(log));
  etcd->set_patient(patient);
  return std::unique_ptr<StateLog>(std::move(etcd));
}

absl::Status ReadStateLog(const std::string& state_dir, const std::string& store,
                          const std::function<absl::Status(int64_t seq, std::string_view record)>& replay,
                          std::string* where) {
  if (!store.empty()) {
    CKPT_ASSIGN_OR_RETURN(EtcdConfig config, ParseEtcdUri(store));
    EtcdLog log(std::move(config), "", nullptr);
    *where = log.Describe();
    return log.ReadAll(replay);
  }
  *where = StrCat("journal ", state_dir, "/journal");
  int64_t seq = 0;
  uint64_t torn = 0;
  return Journal::Read(
      state_dir, [&](std::string_view rec) { return replay(++seq, rec); }, &torn);
}

absl::Status ReadHistory(const std::string& state_dir, const std::string& store, History* history, std::string* where) {
  return ReadStateLog(
      state_dir, store,
      [history](int64_t seq, std::string_view rec) -> absl::Status {
        auto r = DecodeRecord(seq, rec);
        if (!r.ok()) return r.status();
        history->Add(std::move(*r));
        return absl::OkStatus();
      },
      where);
}

}  // namespace ckpt::coord

namespace ckpt {

absl::StatusOr<CoordinatorHistory> ReadCoordinatorHistory(const std::string& state_dir, const std::string& store) {
  if (state_dir.empty() == store.empty()) {
    return absl::InvalidArgumentError("give one of a state directory and a store");
  }
  coord::History history;
  std::string where;
  CKPT_RETURN_IF_ERROR(coord::ReadHistory(state_dir, store, &history, &where));
  CoordinatorHistory out = std::move(history);
  out.where = std::move(where);
  return out;
}

}  // namespace ckpt
