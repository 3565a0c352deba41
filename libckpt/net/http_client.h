// A small blocking HTTP/1.1 client over libcurl, for the s3:// backend and
// the coordinator's etcd store.
//
// libcurl (Debian's, built with OpenSSL) rather than Boost.Beast: it brings
// keep-alive connection reuse, TLS with the system's CA store and its
// verification, proxies from the environment, and low-speed timeouts; with
// Beast each of those would be ours to write and to get right. Each
// Perform takes an idle easy handle from a pool (its connection stays open
// for the next request) and returns it after.
#ifndef CKPT_NET_HTTP_CLIENT_H_
#define CKPT_NET_HTTP_CLIENT_H_

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace ckpt {

struct HttpRequest {
  std::string method = "GET";  ///< GET, HEAD, PUT, POST, DELETE
  std::string url;
  std::vector<std::string> headers;  ///< "Name: value"
  absl::Span<const std::byte> body;
  /// When set, a 2xx body is written here (and must fit); otherwise into
  /// HttpResponse::body.
  absl::Span<std::byte> into;
  bool has_into = false;
  double timeout_s = 0;  ///< whole request; 0: none (the low-speed limit still applies)
  double connect_timeout_s = 10;
  /// PEM file of the CAs to trust for https; empty: the system's store.
  std::string ca_file;
  /// PEM client certificate and its key (servers that ask for one).
  std::string cert_file, key_file;
};

struct HttpResponse {
  long status = 0;
  std::string body;
  std::map<std::string, std::string> headers;  ///< names in lower case
  uint64_t into_bytes = 0;                     ///< bytes written to HttpRequest::into
  bool into_overflow = false;
};

class HttpClient {
 public:
  HttpClient();
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  /// Sends the request and reads the answer. A transport failure (refused,
  /// reset, timed out) is Unavailable with libcurl's reason; a server whose
  /// certificate is not trusted is FailedPrecondition (retrying cannot
  /// help); any HTTP status is a response.
  absl::StatusOr<HttpResponse> Perform(const HttpRequest& req);

  /// A libcurl handle and the socket of its kept-alive connection.
  struct Conn {
    void* handle = nullptr;
    int fd = -1;
  };

 private:
  Conn* Acquire();
  void Release(Conn* conn, bool keep);

  std::mutex mu_;
  std::vector<Conn*> idle_;
};

}  // namespace ckpt

#endif  // CKPT_NET_HTTP_CLIENT_H_
