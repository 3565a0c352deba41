// Helpers shared by the coordinator's tests: the coordinator and workers as
// real processes, raw sockets on loopback, and what /proc says of a process.
#ifndef CKPT_TESTS_COORDINATOR_HARNESS_H_
#define CKPT_TESTS_COORDINATOR_HARNESS_H_

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "ckpt/coordinator.h"
#include "net/http_client.h"
#include "support/free_ports.h"
#include "testutil/test_util.h"
#include "util/strings.h"

namespace ckpt::testing {

inline constexpr char kToken[] = "coordinator-test-token";

/// The job token, in a file only its owner may read (the coordinator and the
/// workers refuse any other).
inline void WriteToken(const TempDir& dir) {
  WriteFile(dir.Join("token"), kToken);
  chmod(dir.Join("token").c_str(), 0600);
}

inline int ReadPort(const std::string& file) {
  for (int i = 0; i < 600; ++i) {  // 15 s: a replica may first wait out its predecessor's lease
    std::ifstream f(file);
    int port = 0;
    if (f >> port && port > 0) return port;
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  return 0;
}

/// `ckpt coordinator` as its own process.
struct CoordinatorProcess {
  pid_t pid = -1;
  int port = 0;
  std::vector<std::string> args;
  std::string log;
  std::string root;                   // the checkpoint root it verifies; dir/root when empty
  std::string store;                  // --store URI instead of --state-dir dir/state
  std::string name = "coordinator";   // its files: dir/NAME.log, dir/NAME.port
  bool standby = false;               // do not wait for it to serve (another leads the store)
  std::vector<std::string> env;       // added to its environment ("NAME=value")
  std::vector<std::string> launcher;  // runs it (e.g. on a host of a NetnsCluster: NetnsCluster::On)
  void Start(const TempDir& dir, const std::string& listen, int min_nodes, int max_nodes,
             const std::vector<std::string>& extra = {}, rlim_t max_descriptors = 0) {
    const std::string port_file = dir.Join(name + ".port");
    std::remove(port_file.c_str());
    args = {CKPT_BIN,
            "coordinator",
            "--listen",
            listen,
            "--port-file",
            port_file,
            store.empty() ? "--state-dir" : "--store",
            store.empty() ? dir.Join("state") : store,
            "--token-file",
            dir.Join("token"),
            "--min-nodes",
            std::to_string(min_nodes),
            "--max-nodes",
            std::to_string(max_nodes),
            "--heartbeat",
            "200ms",
            "--dead-after",
            "3",
            "--join-timeout",
            "500ms",
            "--root",
            root.empty() ? dir.Join("root") : root};
    args.insert(args.end(), extra.begin(), extra.end());
    args.insert(args.begin(), launcher.begin(), launcher.end());
    log = dir.Join(name + ".log");
    pid = Spawn(args, log, max_descriptors, env);
    port = standby ? 0 : ReadPort(port_file);
  }
  void Kill() {
    kill(pid, SIGKILL);
    WaitExit(pid);
  }
  void Stop() {
    kill(pid, SIGTERM);
    WaitExit(pid);
  }
};

// An etcd cluster of `members` members (Debian's etcd-server) on loopback
// ports, in a temporary directory; members killed and started again by index.
/// TLS for a test etcd: its certificate and key, and the CA whose client
/// certificates it demands (--client-cert-auth).
struct EtcdTls {
  std::string cert_file, key_file, client_ca_file;
};

/// Where an etcd member runs: its address and what starts it (default:
/// 127.0.0.1 ports, this machine's stack). A NetnsCluster puts members on
/// hosts of their own: `address` the host's, `launcher` NetnsCluster::On.
struct EtcdPlacement {
  std::string address;
  std::vector<std::string> launcher;
};

class EtcdServer {
 public:
  explicit EtcdServer(const TempDir& dir, int members = 1, EtcdTls tls = {}, std::vector<EtcdPlacement> placements = {})
      : tls_(std::move(tls)), placements_(std::move(placements)) {
    std::string initial;
    const std::vector<int> ports = FreePorts(2 * members);
    for (int i = 0; i < members; ++i) {
      Member m;
      m.name = StrCat("m", i + 1);
      m.client_port = ports[2 * i];
      m.peer_url = StrCat("http://", Address(i), ":", ports[2 * i + 1]);
      m.data = dir.Join(StrCat("etcd-data-", m.name));
      m.log = dir.Join(StrCat("etcd-", m.name, ".log"));
      if (!initial.empty()) initial += ",";
      initial += StrCat(m.name, "=", m.peer_url);
      members_.push_back(m);
    }
    initial_cluster_ = initial;
    for (int i = 0; i < members; ++i) Spawn(i);
    up_ = true;
    for (int i = 0; i < members; ++i) up_ = WaitHealthy(i) && up_;
  }
  ~EtcdServer() {
    for (size_t i = 0; i < members_.size(); ++i) Kill(static_cast<int>(i));
  }
  // Member 0 (the only one of a one-member cluster).
  void Kill() { Kill(0); }
  void Start() { Start(0); }
  void Kill(int i) {
    Member& m = members_[i];
    if (m.pid > 0) {
      kill(m.pid, SIGKILL);
      WaitExit(m.pid);
      m.pid = -1;
    }
  }
  // Starts member `i` again on its ports and data (after Kill).
  void Start(int i) {
    Spawn(i);
    up_ = members_.size() > 1 || WaitHealthy(i);
  }
  bool up() const { return up_; }
  std::string log() const { return StrCat("last health check: ", last_health_, "\n", ReadFile(members_[0].log)); }
  // etcd://every member/prefix
  std::string Uri(const std::string& prefix) const {
    std::string hosts;
    for (size_t i = 0; i < members_.size(); ++i) {
      hosts += StrCat(hosts.empty() ? "" : ",", Address(static_cast<int>(i)), ":", members_[i].client_port);
    }
    return StrCat("etcd://", hosts, prefix);
  }

 private:
  struct Member {
    std::string name, peer_url, data, log;
    int client_port = 0;
    pid_t pid = -1;
  };
  void Spawn(int i) {
    Member& m = members_[i];
    const std::string client_url =
        StrCat(tls_.cert_file.empty() ? "http" : "https", "://", Address(i), ":", m.client_port);
    std::vector<std::string> args = {"/usr/bin/etcd",
                                     "--name",
                                     m.name,
                                     "--data-dir",
                                     m.data,
                                     "--listen-client-urls",
                                     client_url,
                                     "--advertise-client-urls",
                                     client_url,
                                     "--listen-peer-urls",
                                     m.peer_url,
                                     "--initial-advertise-peer-urls",
                                     m.peer_url,
                                     "--initial-cluster",
                                     initial_cluster_,
                                     "--initial-cluster-state",
                                     "new",
                                     "--log-level",
                                     "error"};
    if (!tls_.cert_file.empty()) {
      args.insert(args.end(), {"--cert-file", tls_.cert_file, "--key-file", tls_.key_file, "--client-cert-auth",
                               "--trusted-ca-file", tls_.client_ca_file});
    }
    if (i < static_cast<int>(placements_.size())) {
      args.insert(args.begin(), placements_[i].launcher.begin(), placements_[i].launcher.end());
    }
    m.pid = ::ckpt::testing::Spawn(args, m.log);
  }
  std::string Address(int i) const {
    return i < static_cast<int>(placements_.size()) ? placements_[i].address : "127.0.0.1";
  }
  bool WaitHealthy(int i) {
    HttpClient http;
    for (int k = 0; k < 300; ++k) {
      HttpRequest req;
      req.url =
          StrCat(tls_.cert_file.empty() ? "http" : "https", "://", Address(i), ":", members_[i].client_port, "/health");
      req.ca_file = tls_.client_ca_file;  // the tests' one CA signs both sides
      req.cert_file = tls_.cert_file;     // the server's certificate may serve as a client's too
      req.key_file = tls_.key_file;
      req.timeout_s = 1;
      auto r = http.Perform(req);
      if (r.ok() && r->status == 200 && r->body.find("true") != std::string::npos) return true;
      if (k == 299)
        last_health_ = r.ok() ? StrCat("HTTP ", r->status, " ", r->body) : std::string(r.status().message());
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

  EtcdTls tls_;
  std::vector<EtcdPlacement> placements_;
  std::string last_health_;
  std::vector<Member> members_;
  std::string initial_cluster_;
  bool up_ = false;
};

/// Options of an in-process coordinator for `nodes` members.
inline CoordinatorOptions InProcess(const TempDir& dir, int nodes) {
  CoordinatorOptions o;
  o.state_dir = dir.Join("state");
  o.token = kToken;
  o.min_nodes = o.max_nodes = nodes;
  o.heartbeat_s = 0.2;
  o.dead_after = 5;
  o.log = [](const std::string&) {};
  return o;
}

/// A blocking TCP connection to 127.0.0.1:port (-1 on failure).
inline int RawConnect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    const int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  return fd;
}

/// The whole answer to an HTTP GET of `path`; when no answer comes, what
/// failed and its errno, so that a failing check says why.
inline std::string HttpGet(int port, const std::string& path) {
  const int fd = RawConnect(port);
  if (fd < 0) return StrCat("(no answer: connect to port ", port, " failed: ", std::strerror(errno), ")");
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  const std::string req = "GET " + path + " HTTP/1.0\r\nHost: x\r\n\r\n";
  std::string out;
  if (send(fd, req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size())) {
    out = StrCat("(no answer: send failed: ", std::strerror(errno), ")");
  } else {
    char buf[4096];
    ssize_t n;
    while ((n = recv(fd, buf, sizeof(buf), 0)) > 0) out.append(buf, static_cast<size_t>(n));
    if (n < 0) StrAppend(&out, "(recv failed after ", out.size(), " bytes: ", std::strerror(errno), ")");
    if (out.empty()) out = "(no answer: the coordinator closed the connection without a byte)";
  }
  close(fd);
  return out;
}

/// True when the peer closed the connection within `timeout_s` (read
/// returns 0 or an error other than a timeout); what arrives before is read
/// and discarded.
inline bool ClosedByPeer(int fd, double timeout_s = 5) {
  timeval tv{static_cast<time_t>(timeout_s),
             static_cast<suseconds_t>((timeout_s - static_cast<double>(static_cast<time_t>(timeout_s))) * 1e6)};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  char buf[4096];
  while (true) {
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) return n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
  }
}

// The sum of `field` over the restore lines of generation 2's four ranks,
// each of which must have restored memory step 14 reading nothing from
// storage; -1 when a line or its field is missing.
inline int64_t SumOverMemoryRestores(const std::string& logs, const std::string& field) {
  int64_t sum = 0;
  for (int r = 0; r < 4; ++r) {
    const std::string line = StrCat("generation=2 rank=", r, " world=4 restore=14 level=memory");
    const size_t at = logs.find(line);
    EXPECT_NE(at, std::string::npos) << line << "\n" << logs;
    if (at == std::string::npos) return -1;
    const std::string rest = logs.substr(at, logs.find('\n', at) - at);
    EXPECT_NE(rest.find(" from_storage=0"), std::string::npos) << rest;
    const size_t p = rest.find(StrCat(" ", field, "="));
    EXPECT_NE(p, std::string::npos) << rest;
    if (p == std::string::npos) return -1;
    sum += std::stoll(rest.substr(p + field.size() + 2));
  }
  return sum;
}

}  // namespace ckpt::testing

#endif  // CKPT_TESTS_COORDINATOR_HARNESS_H_
