// A small etcd v3 client over etcd's JSON gateway (HTTP/1.1 POST to
// /v3/kv/range, /v3/kv/txn, /v3/auth/authenticate), for the coordinator's
// state in etcd.
//
// The gateway rather than gRPC: Debian's etcd-server serves it on the client
// port, it needs only the HTTP client already used for s3:// (libcurl:
// keep-alive, TLS with client certificates), and the coordinator uses a
// handful of unary calls; a gRPC stack would be a large dependency for them.
#ifndef CKPT_COORDINATOR_ETCD_CLIENT_H_
#define CKPT_COORDINATOR_ETCD_CLIENT_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace ckpt {
class HttpClient;
}

namespace ckpt::coord {

/// etcd://HOST:PORT[,HOST:PORT...]/PREFIX[?options]
///   ca_file=PEM    https, the server checked against this CA
///   cert_file=PEM, key_file=PEM   https client certificate (etcd --client-cert-auth)
///   user=NAME      etcd authentication; the password is read from the file
///                  password_file=PATH or from $CKPT_ETCD_PASSWORD, never the URI
///   timeout=SECONDS  per request (default 5)
///   lease=SECONDS  how long a coordinator's leadership outlives its last
///                  renewal (default 3): a standby takes over that long after
///                  the leader dies
struct EtcdConfig {
  std::vector<std::string> endpoints;  ///< "http(s)://host:port"
  std::string prefix;                  ///< "/ckpt/job42/" (always ends with '/')
  std::string ca_file, cert_file, key_file;
  std::string user, password;
  double timeout_s = 5;
  int64_t lease_s = 3;
};

absl::StatusOr<EtcdConfig> ParseEtcdUri(std::string_view uri);

struct EtcdKv {
  std::string key;
  std::string value;
  int64_t create_revision = 0;
  int64_t mod_revision = 0;
  int64_t lease = 0;  ///< the lease the key is attached to, 0 for none
};

class EtcdClient {
 public:
  explicit EtcdClient(EtcdConfig config);
  ~EtcdClient();

  const EtcdConfig& config() const { return config_; }

  /// Keys in [key, range_end) in key order, at most `limit` (0: no limit).
  absl::StatusOr<std::vector<EtcdKv>> Range(std::string_view key, std::string_view range_end, int64_t limit,
                                            bool* more);

  /// Creates `key` with `value` only if it does not exist (a transaction
  /// comparing its create revision with 0). False when it existed.
  absl::StatusOr<bool> PutIfAbsent(std::string_view key, std::string_view value);

  /// PutIfAbsent with two more conditions: the key is attached to `lease`
  /// (0: none), and when `guard_key` is not empty, that key's create
  /// revision must be `guard_revision` (the leader key this writer created).
  /// On success `*revision` is the store's revision after the write.
  absl::StatusOr<bool> CreateGuarded(std::string_view key, std::string_view value, int64_t lease,
                                     std::string_view guard_key, int64_t guard_revision, int64_t* revision);

  /// Removes `key` (absent: nothing happens).
  absl::Status Delete(std::string_view key);

  /// A lease of `ttl_s` seconds; its id.
  absl::StatusOr<int64_t> LeaseGrant(int64_t ttl_s);
  /// Renews the lease; the seconds it now has left (0: it expired).
  absl::StatusOr<int64_t> LeaseKeepAlive(int64_t lease);
  /// Ends the lease now (its keys go at once).
  absl::Status LeaseRevoke(int64_t lease);

  /// How many keys are in [key, range_end).
  absl::StatusOr<int64_t> Count(std::string_view key, std::string_view range_end);

  /// One member's own view (/v3/maintenance/status), asked of `endpoint`
  /// only: no move to another member.
  struct MemberStatus {
    uint64_t member_id = 0;
    uint64_t leader = 0;  ///< the raft leader's member id
    int64_t raft_term = 0;
    int64_t db_size = 0;
  };
  absl::StatusOr<MemberStatus> StatusOf(const std::string& endpoint);

  /// The end of the range of every key starting with `prefix`.
  static std::string PrefixEnd(std::string_view prefix);

  /// "http://127.0.0.1:2379 (and 2 more)": for messages.
  std::string Describe() const;

 private:
  // POSTs `body` to `path` on the current endpoint, moving to the next on a
  // transport failure; authenticates first when a user is configured.
  absl::StatusOr<std::string> Call(std::string_view path, const std::string& body);
  absl::StatusOr<std::string> Post(const std::string& endpoint, std::string_view path, const std::string& body,
                                   long* status);
  absl::Status Authenticate(const std::string& endpoint);

  EtcdConfig config_;
  std::unique_ptr<HttpClient> http_;
  std::mutex mu_;
  size_t current_ = 0;  // endpoint in use
  std::string token_;   // auth token, when a user is configured
};

/// Base64 (RFC 4648, padded), as the gateway carries keys and values.
std::string Base64Encode(std::string_view data);
absl::StatusOr<std::string> Base64Decode(std::string_view text);

}  // namespace ckpt::coord

#endif  // CKPT_COORDINATOR_ETCD_CLIENT_H_
