// Hosts as network namespaces for tests of what crosses a network: a C++
// face of scripts/cluster.sh. Each host has its own network stack, address,
// hostname and local-disk directory; the test cuts, slows and heals their
// links. The cluster
// belongs to the test process: the destructor removes it, and if the
// process dies first, the next cluster made on the machine collects it.
#ifndef CKPT_TESTS_SUPPORT_NETNS_CLUSTER_H_
#define CKPT_TESTS_SUPPORT_NETNS_CLUSTER_H_

#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "testutil/test_util.h"

#ifndef CKPT_CLUSTER_SH
#error "CKPT_CLUSTER_SH must name scripts/cluster.sh"
#endif

namespace ckpt::testing {

class NetnsCluster {
 public:
  /// Makes `hosts` hosts on a bridge of their own.
  static absl::StatusOr<std::unique_ptr<NetnsCluster>> Up(int hosts) {
    CommandResult r = RunCommand(absl::StrCat(CKPT_CLUSTER_SH, " up ", hosts, " --owner ", getpid(), " 2>&1"));
    std::string id = r.out;
    while (!id.empty() && (id.back() == '\n' || id.back() == ' ')) id.pop_back();
    if (r.code != 0 || id.size() != 6) {
      return absl::FailedPreconditionError(absl::StrCat("cluster.sh up ", hosts, " failed (", r.code, "): ", r.out));
    }
    return std::unique_ptr<NetnsCluster>(new NetnsCluster(id, hosts));
  }

  ~NetnsCluster() { (void)RunCommand(absl::StrCat(CKPT_CLUSTER_SH, " down ", id_, " 2>&1")); }
  NetnsCluster(const NetnsCluster&) = delete;
  NetnsCluster& operator=(const NetnsCluster&) = delete;

  const std::string& id() const { return id_; }
  int hosts() const { return hosts_; }
  /// The host's address.
  std::string Addr(int host) const { return Script("addr", host); }
  /// This machine's address on the cluster's bridge.
  std::string Gateway() const { return Script("gateway", -1); }
  /// The host's local-disk directory (removed with the cluster; what runs on
  /// the host finds it in $CKPT_HOST_DISK).
  std::string Disk(int host) const { return Script("disk", host); }
  /// The command line that runs `args` on `host` (for Spawn): the process
  /// keeps its pid through the namespace switch. `clock`: an offset for
  /// faketime ("+120s", "-2m").
  std::vector<std::string> On(int host, std::vector<std::string> args, const std::string& clock = "") const {
    std::vector<std::string> out = {CKPT_CLUSTER_SH, "exec", id_, std::to_string(host)};
    if (!clock.empty()) out.insert(out.end(), {"--clock", clock});
    out.insert(out.end(), args.begin(), args.end());
    return out;
  }
  /// A shell command line running `command` on `host` (for RunCommand).
  std::string Shell(int host, const std::string& command) const {
    return absl::StrCat(CKPT_CLUSTER_SH, " exec ", id_, " ", host, " sh -c '", command, "'");
  }

  absl::Status Cut(int host) { return Run(absl::StrCat("cut ", id_, " ", host)); }
  /// `host`'s packets to `peer` are dropped; the other way still works.
  absl::Status CutFrom(int host, int peer) { return Run(absl::StrCat("cut-from ", id_, " ", host, " ", peer)); }
  /// The host's link limited to `rate` ("10mbit") both ways.
  absl::Status Limit(int host, const std::string& rate) {
    return Run(absl::StrCat("limit ", id_, " ", host, " ", rate));
  }
  absl::Status Heal(int host) { return Run(absl::StrCat("heal ", id_, " ", host)); }
  /// iperf3's measured receive rate from `host` to an iperf3 server at
  /// `server_addr` port 5201, in bits per second; -1 when the client failed
  /// (no connection within a second).
  double Iperf(int host, const std::string& server_addr, int seconds = 1) const {
    CommandResult r = RunCommand(
        Shell(host, absl::StrCat("iperf3 -c ", server_addr, " -p 5201 -t ", seconds, " -J --connect-timeout 1000")) +
        " 2>&1");
    if (r.code != 0) return -1;
    const size_t sum = r.out.find("\"sum_received\"");
    if (sum == std::string::npos) return -1;
    const std::string key = "\"bits_per_second\":";
    const size_t at = r.out.find(key, sum);
    if (at == std::string::npos) return -1;
    return std::strtod(r.out.c_str() + at + key.size(), nullptr);
  }
  /// Iperf until it succeeds (a link brought back up, or a server just
  /// started, takes a moment), for up to `wait_s`.
  double IperfOnceUp(int host, const std::string& server_addr, double wait_s, int seconds = 1) const {
    for (int i = 0;; ++i) {
      const double rate = Iperf(host, server_addr, seconds);
      if (rate >= 0 || i * 0.1 >= wait_s) return rate;
      usleep(100000);
    }
  }
  /// SIGKILLs every process running on the host.
  void KillHost(int host) {
    (void)RunCommand(absl::StrCat("ip netns pids ck-", id_, "-h", host, " | xargs -r kill -9"));
  }

 private:
  NetnsCluster(std::string id, int hosts) : id_(std::move(id)), hosts_(hosts) {}

  std::string Script(const std::string& what, int host) const {
    CommandResult r = RunCommand(
        absl::StrCat(CKPT_CLUSTER_SH, " ", what, " ", id_, host >= 0 ? absl::StrCat(" ", host) : "", " 2>&1"));
    std::string out = r.out;
    while (!out.empty() && out.back() == '\n') out.pop_back();
    return r.code == 0 ? out : "";
  }
  absl::Status Run(const std::string& args) {
    CommandResult r = RunCommand(absl::StrCat(CKPT_CLUSTER_SH, " ", args, " 2>&1"));
    if (r.code != 0) return absl::InternalError(absl::StrCat("cluster.sh ", args, ": ", r.out));
    return absl::OkStatus();
  }

  std::string id_;
  int hosts_;
};

}  // namespace ckpt::testing

#endif  // CKPT_TESTS_SUPPORT_NETNS_CLUSTER_H_
