// The coordinator's state in etcd: real etcd processes on loopback ports,
// started and stopped (by PID) by the tests.
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <string>
#include <thread>

#include "absl/strings/str_join.h"
#include "ckpt/coordinator.h"
#include "coordinator/etcd_client.h"
#include "coordinator/harness.h"
#include "coordinator/held_replay.h"
#include "coordinator/state_log.h"
#include "net/http_client.h"
#include "testutil/test_util.h"
#include "util/strings.h"

namespace ckpt::testing {
namespace {

TEST(Etcd, Base64AndPrefixEnds) {
  for (const std::string& s : std::vector<std::string>{"", "f", "fo", "foo", "foob", std::string("\0\xff\x10", 3)}) {
    auto back = coord::Base64Decode(coord::Base64Encode(s));
    ASSERT_OK(back);
    EXPECT_EQ(*back, s);
  }
  EXPECT_EQ(coord::Base64Encode("foo"), "Zm9v");
  EXPECT_FALSE(coord::Base64Decode("Zm9").ok());
  EXPECT_FALSE(coord::Base64Decode("Zm9*").ok());
  EXPECT_EQ(coord::EtcdClient::PrefixEnd("/a/"), "/a0");
  EXPECT_EQ(coord::EtcdClient::PrefixEnd(std::string("a\xff", 2)), "b");
  for (const std::string bad : {"etcd://", "etcd://h:1", "etcd://h:1/", "etcd://h/p", "etcd://h:1/p?colour=red",
                                "etcd://h:1/p?cert_file=c", "etcd://h:1/p?timeout=0", "s3://h:1/p"}) {
    EXPECT_FALSE(coord::ParseEtcdUri(bad).ok()) << bad;
  }
  unsetenv("CKPT_ETCD_PASSWORD");
  auto no_password = coord::ParseEtcdUri("etcd://h:1/p?user=ckpt");
  ASSERT_FALSE(no_password.ok());
  EXPECT_NE(no_password.status().message().find("CKPT_ETCD_PASSWORD"), absl::string_view::npos);
  auto two = coord::ParseEtcdUri("etcd://a:1,b:2/jobs/j1/?ca_file=/ca.pem");
  ASSERT_OK(two);
  ASSERT_EQ(two->endpoints.size(), 2u);
  EXPECT_EQ(two->endpoints[1], "https://b:2");
  EXPECT_EQ(two->prefix, "/jobs/j1/");
}

// Records replay in order from the store. Only the leader of the prefix
// appends: a second log stands by in Open until the leader key goes (here
// removed by hand, as when the leader's lease lapses while it is paused),
// then leads and replays everything; the old leader's next append is
// refused (fenced off). A key under the prefix that no coordinator wrote
// stops the replay, named.
TEST(Etcd, StateLogReplaysFencesAndRefusesForeignKeys) {
  TempDir dir;
  EtcdServer etcd(dir);
  ASSERT_TRUE(etcd.up()) << etcd.log();
  const std::string uri = etcd.Uri("/ckpt/test-log");
  std::vector<std::string> lines;
  std::mutex mu;
  auto say = [&](const std::string& l) {
    std::lock_guard<std::mutex> lock(mu);
    lines.push_back(l);
  };
  auto a = coord::NewEtcdLog(uri, "replica a", say);
  ASSERT_OK(a);
  uint64_t torn = 0;
  ASSERT_OK((*a)->Open([](std::string_view) { return absl::OkStatus(); }, &torn));
  std::vector<std::string> written;
  for (int i = 0; i < 1205; ++i) {  // more than one page of the replay
    written.push_back(StrCat("record ", i, std::string(i % 7, '\0')));
    ASSERT_OK((*a)->Append(written.back()));
  }
  auto b = coord::NewEtcdLog(uri, "replica b", say);
  ASSERT_OK(b);
  std::vector<std::string> replayed;
  absl::Status b_open = absl::UnknownError("not opened");
  std::thread standby([&] {
    b_open = (*b)->Open(
        [&](std::string_view r) {
          replayed.emplace_back(r);
          return absl::OkStatus();
        },
        &torn);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(800));
  EXPECT_TRUE(replayed.empty()) << "a standby replays nothing while another leads";
  coord::EtcdClient raw(*coord::ParseEtcdUri(uri));
  ASSERT_OK(raw.Delete("/ckpt/test-log/leader"));  // a's leadership lapses
  standby.join();
  ASSERT_OK(b_open);
  EXPECT_EQ(replayed, written);
  absl::Status fenced = (*a)->Append("from a");
  EXPECT_TRUE(absl::IsFailedPrecondition(fenced)) << fenced;
  EXPECT_NE(fenced.message().find("fenced off"), absl::string_view::npos) << fenced;
  ASSERT_OK((*b)->Append("from b"));
  {
    std::lock_guard<std::mutex> lock(mu);
    bool stood_by = false;
    for (const std::string& l : lines)
      stood_by = stood_by || l.find("standing by: replica a leads") != std::string::npos;
    EXPECT_TRUE(stood_by);
  }

  const std::string foreign = etcd.Uri("/ckpt/test-foreign");
  coord::EtcdClient raw_foreign(*coord::ParseEtcdUri(foreign));
  ASSERT_OK(raw_foreign.PutIfAbsent("/ckpt/test-foreign/log/not-a-number", "x").status());
  auto c = coord::NewEtcdLog(foreign);
  ASSERT_OK(c);
  absl::Status bad = (*c)->Open([](std::string_view) { return absl::OkStatus(); }, &torn);
  EXPECT_TRUE(absl::IsDataLoss(bad)) << bad;
  EXPECT_NE(bad.message().find("/ckpt/test-foreign/log/not-a-number"), absl::string_view::npos) << bad;
  // A record that does not decode is refused with its key.
  const std::string other = etcd.Uri("/ckpt/test-garbage");
  coord::EtcdClient raw2(*coord::ParseEtcdUri(other));
  ASSERT_OK(raw2.PutIfAbsent("/ckpt/test-garbage/log/00000000000000000001", "\x07garbage").status());
  CoordinatorOptions o = InProcess(dir, 1);
  o.state_dir.clear();
  o.store = other;
  auto coordinator = Coordinator::Start(o);
  ASSERT_FALSE(coordinator.ok());
  EXPECT_NE(coordinator.status().message().find("/ckpt/test-garbage/log/00000000000000000001"), absl::string_view::npos)
      << coordinator.status();
  // Nothing listens: a clear error naming the store, not a hang.
  auto dead = coord::NewEtcdLog("etcd://127.0.0.1:1/ckpt/x?timeout=0.5");
  ASSERT_OK(dead);
  absl::Status unreachable = (*dead)->Open([](std::string_view) { return absl::OkStatus(); }, &torn);
  EXPECT_TRUE(absl::IsUnavailable(unreachable)) << unreachable;
  EXPECT_NE(unreachable.message().find("127.0.0.1:1"), absl::string_view::npos) << unreachable;
}

// A hostile proxy in front of one etcd member: it passes each request on
// (one per connection, as HTTP/1.0, so etcd closes after answering) and
// hands back the answer, except for the first transaction that names
// `key`: that one reaches etcd and is applied, and its answer is dropped
// (the connection closes unanswered), as a member that fails between
// applying a write and answering it does.
class LosesOneAnswer {
 public:
  LosesOneAnswer(int etcd_port, std::string key_b64) : etcd_port_(etcd_port), key_b64_(std::move(key_b64)) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    if (bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || listen(fd_, 16) != 0 ||
        getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      return;
    }
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { Accept(); });
  }
  ~LosesOneAnswer() {
    stop_ = true;
    shutdown(fd_, SHUT_RDWR);
    if (thread_.joinable()) thread_.join();
    close(fd_);
  }
  int port() const { return port_; }
  bool dropped() const { return dropped_; }

 private:
  void Accept() {
    while (!stop_) {
      const int c = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) return;
      timeval tv{5, 0};
      setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
      Serve(c);
      close(c);
    }
  }
  static bool SendAll(int fd, const std::string& bytes) {
    size_t at = 0;
    while (at < bytes.size()) {
      const ssize_t n = send(fd, bytes.data() + at, bytes.size() - at, MSG_NOSIGNAL);
      if (n <= 0) return false;
      at += static_cast<size_t>(n);
    }
    return true;
  }
  void Serve(int c) {
    std::string req;
    char buf[4096];
    size_t head_end = std::string::npos;
    size_t want = 0;
    while (true) {
      if (head_end == std::string::npos && (head_end = req.find("\r\n\r\n")) != std::string::npos) {
        const size_t cl = req.find("Content-Length: ");
        want = head_end + 4 + (cl != std::string::npos && cl < head_end ? std::stoul(req.substr(cl + 16)) : 0);
      }
      if (head_end != std::string::npos && req.size() >= want) break;
      const ssize_t n = recv(c, buf, sizeof(buf), 0);
      if (n <= 0) return;
      req.append(buf, static_cast<size_t>(n));
    }
    const size_t version = req.find(" HTTP/1.1\r\n");
    if (version != std::string::npos && version < head_end) req.replace(version, 11, " HTTP/1.0\r\n");
    const bool drop = !dropped_ && req.rfind("POST /v3/kv/txn ", 0) == 0 && req.find(key_b64_) != std::string::npos;
    const int e = RawConnect(etcd_port_);
    if (e < 0) return;
    std::string answer;
    if (SendAll(e, req)) {
      ssize_t n;
      while ((n = recv(e, buf, sizeof(buf), 0)) > 0) answer.append(buf, static_cast<size_t>(n));
    }
    close(e);
    if (drop) {
      dropped_ = true;  // applied by etcd; the client hears nothing
      return;
    }
    (void)SendAll(c, answer);
  }

  int etcd_port_;
  std::string key_b64_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<bool> dropped_{false};
  std::thread thread_;
};

// One etcd behind a LosesOneAnswer proxy (the first of two endpoints, the
// etcd itself the second), dropping the answer to the first write of
// PREFIX + `dropped`, and a log under PREFIX whose lines are kept.
struct LossyEtcd {
  LossyEtcd(const std::string& prefix, const std::string& dropped)
      : etcd(dir),
        direct(etcd.Uri(prefix)),
        etcd_port(std::stoi(direct.substr(direct.rfind(':', direct.find(prefix)) + 1))),
        proxy(etcd_port, coord::Base64Encode(prefix + dropped)),
        uri(StrCat("etcd://127.0.0.1:", proxy.port(), ",127.0.0.1:", etcd_port, prefix, "?timeout=2")) {}
  absl::StatusOr<std::unique_ptr<coord::StateLog>> Log(const std::string& identity) {
    return coord::NewEtcdLog(uri, identity, [this](const std::string& l) {
      std::lock_guard<std::mutex> lock(mu);
      lines.push_back(l);
    });
  }
  bool Said(const std::string& text) {
    std::lock_guard<std::mutex> lock(mu);
    for (const std::string& l : lines) {
      if (l.find(text) != std::string::npos) return true;
    }
    return false;
  }
  std::string Lines() {
    std::lock_guard<std::mutex> lock(mu);
    return absl::StrJoin(lines, "\n");
  }
  TempDir dir;
  EtcdServer etcd;
  std::string direct;  // etcd://127.0.0.1:PORT/PREFIX, around the proxy
  int etcd_port;
  LosesOneAnswer proxy;
  std::string uri;
  std::mutex mu;
  std::vector<std::string> lines;
};

// The answer to a standby's write of the leader key is lost and the client
// asks the next member, whose compare then fails: the key is the replica's
// own, on its own lease, and the replica leads. (It used to stand by for a
// key its own renewals kept alive, and the job had no coordinator.)
TEST(Etcd, AReplicaWhoseLeaderWriteLostItsAnswerLeads) {
  LossyEtcd lossy("/ckpt/lost", "/leader");
  ASSERT_TRUE(lossy.etcd.up()) << lossy.etcd.log();
  ASSERT_GT(lossy.proxy.port(), 0);
  auto log = lossy.Log("replica behind a lossy member");
  ASSERT_OK(log);
  std::promise<absl::Status> opened;
  std::thread opener([&] {
    uint64_t torn = 0;
    opened.set_value((*log)->Open([](std::string_view) { return absl::OkStatus(); }, &torn));
  });
  auto result = opened.get_future();
  const bool led = result.wait_for(std::chrono::seconds(20)) == std::future_status::ready;
  if (!led) {
    // Unblock the replica (it waits for the key to go) before failing.
    coord::EtcdClient raw(*coord::ParseEtcdUri(lossy.direct));
    (void)raw.Delete("/ckpt/lost/leader");
  }
  opener.join();
  EXPECT_TRUE(lossy.proxy.dropped()) << "the proxy never saw the leader write";
  ASSERT_TRUE(led) << "the replica stood by for its own leader key";
  ASSERT_OK(result.get());
  ASSERT_OK((*log)->Append("a record after the lost answer"));
  EXPECT_TRUE(lossy.Said("an answer to its write was lost")) << lossy.Lines();
}

// The same for a record: the answer to the leader's first append is lost
// after etcd applied it; the record is the leader's own and it goes on
// leading, with the record written once.
TEST(Etcd, ALeaderWhoseAppendLostItsAnswerGoesOn) {
  LossyEtcd lossy("/ckpt/lost-append", "/log/00000000000000000001");
  ASSERT_TRUE(lossy.etcd.up()) << lossy.etcd.log();
  ASSERT_GT(lossy.proxy.port(), 0);
  auto log = lossy.Log("leader behind a lossy member");
  ASSERT_OK(log);
  uint64_t torn = 0;
  ASSERT_OK((*log)->Open([](std::string_view) { return absl::OkStatus(); }, &torn));
  ASSERT_OK((*log)->Append("first"));
  EXPECT_TRUE(lossy.proxy.dropped()) << "the proxy never saw the first append";
  ASSERT_OK((*log)->Append("second"));
  coord::EtcdClient raw(*coord::ParseEtcdUri(lossy.direct));
  bool more = false;
  auto records = raw.Range("/ckpt/lost-append/log/", "/ckpt/lost-append/log0", 0, &more);
  ASSERT_OK(records);
  ASSERT_EQ(records->size(), 2u);
  EXPECT_EQ((*records)[0].value, "first");
  EXPECT_EQ((*records)[1].value, "second");
  EXPECT_TRUE(lossy.Said("record 1 is this replica's own")) << lossy.Lines();
}

// A replica that won the store's leader key answers as a standby while it
// replays the log from etcd (held at its first record), then serves it.
TEST(Etcd, ANewLeaderAnswersAsAStandbyWhileItReplaysTheStore) {
  TempDir dir;
  EtcdServer etcd(dir);
  ASSERT_TRUE(etcd.up()) << etcd.log();
  CoordinatorOptions o = InProcess(dir, 1);
  o.state_dir.clear();
  o.store = etcd.Uri("/ckpt/held");
  ASSERT_NO_FATAL_FAILURE(RecordOneCommittedStep(o, 7));
  auto log = coord::NewEtcdLog(o.store, "held replica");
  ASSERT_OK(log);
  ASSERT_NO_FATAL_FAILURE(ExpectStandbyWhileReplaying(o, std::move(log).value(), 7));
}

// How many records a log opened on `uri` replays (it leads, then lets go);
// -1 when it cannot open.
int RecordsIn(const std::string& uri) {
  auto log = coord::NewEtcdLog(uri);
  if (!log.ok()) return -1;
  int records = 0;
  uint64_t torn = 0;
  absl::Status s = (*log)->Open(
      [&](std::string_view) {
        ++records;
        return absl::OkStatus();
      },
      &torn);
  return s.ok() ? records : -1;
}

// etcd with authentication on: a user whose role may read and write the
// job's prefix leads and appends with its password (from a file, or the
// environment); a wrong password is refused with etcd's reason and the
// password appears in no message.
TEST(Etcd, AuthenticatedUsersAndWrongPasswords) {
  TempDir dir;
  EtcdServer etcd(dir);
  ASSERT_TRUE(etcd.up()) << etcd.log();
  const std::string uri = etcd.Uri("/ckpt/auth");
  const std::string endpoint = uri.substr(std::string("etcd://").size(), uri.find('/', 7) - 7);
  const std::string ctl = StrCat("ETCDCTL_API=3 /usr/bin/etcdctl --endpoints=http://", endpoint, " ");
  for (const std::string& cmd : std::vector<std::string>{
           "user add root --new-user-password=root-pw-1", "user add ckpt --new-user-password=s3cret-pw",
           "role add ckpt-rw", "role grant-permission ckpt-rw --prefix=true readwrite /ckpt/",
           "user grant-role ckpt ckpt-rw", "auth enable"}) {
    CommandResult r = RunCommand(ctl + cmd + " 2>&1");
    ASSERT_EQ(r.code, 0) << cmd << ": " << r.out;
  }
  WriteFile(dir.Join("pw"), "s3cret-pw\n");
  uint64_t torn = 0;
  {
    auto log = coord::NewEtcdLog(StrCat(uri, "?user=ckpt&password_file=", dir.Join("pw")));
    ASSERT_OK(log);
    ASSERT_OK((*log)->Open([](std::string_view) { return absl::OkStatus(); }, &torn));
    ASSERT_OK((*log)->Append("first"));
  }
  {
    setenv("CKPT_ETCD_PASSWORD", "s3cret-pw", 1);
    EXPECT_EQ(RecordsIn(StrCat(uri, "?user=ckpt")), 1);
    unsetenv("CKPT_ETCD_PASSWORD");
  }
  WriteFile(dir.Join("bad"), "not-the-pw");
  auto wrong = coord::NewEtcdLog(StrCat(uri, "?user=ckpt&password_file=", dir.Join("bad")));
  ASSERT_OK(wrong);
  absl::Status refused = (*wrong)->Open([](std::string_view) { return absl::OkStatus(); }, &torn);
  EXPECT_TRUE(absl::IsPermissionDenied(refused)) << refused;
  EXPECT_NE(refused.message().find("authenticating as 'ckpt' failed"), absl::string_view::npos) << refused;
  EXPECT_EQ(refused.message().find("not-the-pw"), absl::string_view::npos) << "the password is never shown";
  // Without a user the store refuses the request itself.
  auto anonymous = coord::NewEtcdLog(uri);
  ASSERT_OK(anonymous);
  absl::Status no_user = (*anonymous)->Open([](std::string_view) { return absl::OkStatus(); }, &torn);
  EXPECT_FALSE(no_user.ok());
}

// A CA, and a certificate it signs for `name` with the given extended key
// usage (and the loopback address as subject alternative name), made with
// the openssl command line in `dir`.
void MakeCa(const TempDir& dir, const std::string& ca) {
  CommandResult r = RunCommand(StrCat("cd ", dir.path(), " && openssl req -x509 -newkey rsa:2048 -nodes -keyout ", ca,
                                      ".key -out ", ca, ".pem -days 2 -subj /CN=", ca, " 2>&1"));
  ASSERT_EQ(r.code, 0) << r.out;
}
void MakeCert(const TempDir& dir, const std::string& ca, const std::string& name, const std::string& usage) {
  WriteFile(dir.Join(name + ".ext"),
            StrCat("subjectAltName=IP:127.0.0.1\nextendedKeyUsage=", usage, "\nbasicConstraints=CA:FALSE\n"));
  CommandResult r = RunCommand(StrCat("cd ", dir.path(), " && openssl req -newkey rsa:2048 -nodes -keyout ", name,
                                      ".key -out ", name, ".csr -subj /CN=", name, " 2>&1 && openssl x509 -req -in ",
                                      name, ".csr -CA ", ca, ".pem -CAkey ", ca, ".key -CAcreateserial -out ", name,
                                      ".pem -days 2 -extfile ", name, ".ext 2>&1"));
  ASSERT_EQ(r.code, 0) << r.out;
}

// etcd serving https and demanding client certificates (--client-cert-auth):
// a coordinator's log with ca_file, cert_file and key_file leads, appends
// and replays, and `ckpt coordinator history` reads it; without a client
// certificate, with a certificate from another CA, or trusting another CA,
// the store is refused with the reason and the endpoint named.
TEST(Etcd, TlsWithClientCertificates) {
  TempDir dir;
  MakeCa(dir, "ca");
  MakeCa(dir, "other-ca");
  // etcd's gateway calls its own gRPC port as a client with the server's
  // certificate: it needs both usages.
  MakeCert(dir, "ca", "server", "serverAuth,clientAuth");
  MakeCert(dir, "ca", "client", "clientAuth");
  MakeCert(dir, "other-ca", "stranger", "clientAuth");
  EtcdServer etcd(dir, 1, {dir.Join("server.pem"), dir.Join("server.key"), dir.Join("ca.pem")});
  ASSERT_TRUE(etcd.up()) << etcd.log();
  const std::string base = etcd.Uri("/ckpt/tls");
  const std::string uri = StrCat(base, "?ca_file=", dir.Join("ca.pem"), "&cert_file=", dir.Join("client.pem"),
                                 "&key_file=", dir.Join("client.key"));
  uint64_t torn = 0;
  {
    auto log = coord::NewEtcdLog(uri);
    ASSERT_OK(log);
    ASSERT_OK((*log)->Open([](std::string_view) { return absl::OkStatus(); }, &torn));
    EXPECT_NE((*log)->Describe().find("https://127.0.0.1:"), std::string::npos) << (*log)->Describe();
    ASSERT_OK((*log)->Append(std::string("\x02\x02", 2)));  // "generation 1 ended"
  }
  EXPECT_EQ(RecordsIn(uri), 1);
  CommandResult history = RunCommand(StrCat(CKPT_BIN, " coordinator history --store '", uri, "' 2>&1"));
  EXPECT_EQ(history.code, 0) << history.out;
  EXPECT_NE(history.out.find("       1  generation 1 ended\n"), std::string::npos) << history.out;
  const std::string endpoint = base.substr(7, base.find('/', 7) - 7);
  auto refused = [&](const std::string& options, const std::string& why) {
    SCOPED_TRACE(options);
    auto log = coord::NewEtcdLog(StrCat(base, "?timeout=2&", options));
    ASSERT_OK(log);
    absl::Status s = (*log)->Open([](std::string_view) { return absl::OkStatus(); }, &torn);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find(StrCat("https://", endpoint)), absl::string_view::npos) << s;
    EXPECT_NE(s.message().find(why), absl::string_view::npos) << s;
  };
  refused(StrCat("ca_file=", dir.Join("ca.pem")), "client certificate (--client-cert-auth)");
  refused(StrCat("ca_file=", dir.Join("ca.pem"), "&cert_file=", dir.Join("stranger.pem"),
                 "&key_file=", dir.Join("stranger.key")),
          StrCat("cert_file=", dir.Join("stranger.pem")));
  refused(StrCat("ca_file=", dir.Join("other-ca.pem"), "&cert_file=", dir.Join("client.pem"),
                 "&key_file=", dir.Join("client.key")),
          "certificate");
}

}  // namespace
}  // namespace ckpt::testing
