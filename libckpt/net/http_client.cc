#include "net/http_client.h"

#include <curl/curl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <cstring>

#include "absl/strings/ascii.h"
#include "util/strings.h"

namespace ckpt {
namespace {

struct Transfer {
  const HttpRequest* req;
  HttpResponse* resp;
  HttpClient::Conn* conn;
  size_t body_off = 0;
};

size_t ReadBody(char* buf, size_t size, size_t nitems, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t want = size * nitems;
  const size_t left = t->req->body.size() - t->body_off;
  const size_t n = want < left ? want : left;
  if (n > 0) std::memcpy(buf, t->req->body.data() + t->body_off, n);
  t->body_off += n;
  return n;
}

int SeekBody(void* user, curl_off_t offset, int origin) {
  auto* t = static_cast<Transfer*>(user);
  if (origin != SEEK_SET || offset < 0 || static_cast<size_t>(offset) > t->req->body.size()) {
    return CURL_SEEKFUNC_FAIL;
  }
  t->body_off = static_cast<size_t>(offset);
  return CURL_SEEKFUNC_OK;
}

size_t WriteBody(char* data, size_t size, size_t nmemb, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t n = size * nmemb;
  const bool ok_status = t->resp->status == 0 || (t->resp->status >= 200 && t->resp->status < 300);
  if (t->req->has_into && ok_status) {
    const size_t room = t->req->into.size() - t->resp->into_bytes;
    if (n > room) {
      t->resp->into_overflow = true;
      return 0;  // aborts the transfer
    }
    std::memcpy(t->req->into.data() + t->resp->into_bytes, data, n);
    t->resp->into_bytes += n;
  } else {
    if (t->resp->body.size() + n > (size_t{64} << 20)) return 0;  // a runaway error body
    t->resp->body.append(data, n);
  }
  return n;
}

// The answer to a small request often comes as a header segment and a body
// segment that the server's Nagle holds back until the first is
// acknowledged, and a reused connection acknowledges in delayed-ACK mode,
// tens of milliseconds later: every small GET on a kept-alive connection
// waited that long against RADOS Gateway (docs/performance.md, "Figures behind the code").
// Asking for quick ACKs once the answer has begun
// sends the pending ACK at once (the kernel leaves quick-ACK mode on its
// own, and setting it before sending the request does not hold).
void AckNow(const Transfer& t) {
  if (t.conn->fd == CURL_SOCKET_BAD) return;
  int one = 1;
  (void)setsockopt(t.conn->fd, IPPROTO_TCP, TCP_QUICKACK, &one, sizeof(one));
}

// Remembers the socket of the connection a handle opens (it stays the
// handle's while kept alive).
int OnSocket(void* user, curl_socket_t fd, curlsocktype purpose) {
  static_cast<HttpClient::Conn*>(user)->fd = fd;
  return CURL_SOCKOPT_OK;
}

size_t HeaderLine(char* data, size_t size, size_t nitems, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t n = size * nitems;
  std::string_view line(data, n);
  AckNow(*t);
  if (ConsumePrefix(&line, "HTTP/")) {
    // A new status line (after a 100 Continue, or a redirect): start over.
    t->resp->headers.clear();
    const size_t sp = line.find(' ');
    int64_t code = 0;
    if (sp != std::string_view::npos && ParseInt64(line.substr(sp + 1, 3), &code)) t->resp->status = code;
    return n;
  }
  const size_t colon = line.find(':');
  if (colon != std::string_view::npos) {
    t->resp->headers[absl::AsciiStrToLower(AV(Trim(line.substr(0, colon))))] =
        std::string(Trim(line.substr(colon + 1)));
  }
  return n;
}

}  // namespace

HttpClient::HttpClient() {
  static const bool init = [] { return curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK; }();
  (void)init;
}

HttpClient::~HttpClient() {
  for (Conn* c : idle_) {
    curl_easy_cleanup(static_cast<CURL*>(c->handle));
    delete c;
  }
}

HttpClient::Conn* HttpClient::Acquire() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!idle_.empty()) {
      Conn* c = idle_.back();
      idle_.pop_back();
      return c;
    }
  }
  CURL* h = curl_easy_init();
  if (h == nullptr) return nullptr;
  Conn* c = new Conn;
  c->handle = h;
  c->fd = CURL_SOCKET_BAD;
  return c;
}

void HttpClient::Release(Conn* conn, bool keep) {
  if (!keep) {
    curl_easy_cleanup(static_cast<CURL*>(conn->handle));
    delete conn;
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  idle_.push_back(conn);
}

absl::StatusOr<HttpResponse> HttpClient::Perform(const HttpRequest& req) {
  Conn* conn = Acquire();
  if (conn == nullptr) return absl::ResourceExhaustedError("HTTP: libcurl could not make a handle");
  CURL* h = static_cast<CURL*>(conn->handle);
  curl_easy_reset(h);
  HttpResponse resp;
  Transfer t{&req, &resp, conn};
  char errbuf[CURL_ERROR_SIZE] = {0};
  curl_easy_setopt(h, CURLOPT_URL, req.url.c_str());
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
  curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(req.connect_timeout_s * 1000));
  if (req.timeout_s > 0) curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, static_cast<long>(req.timeout_s * 1000));
  if (!req.ca_file.empty()) curl_easy_setopt(h, CURLOPT_CAINFO, req.ca_file.c_str());
  if (!req.cert_file.empty()) curl_easy_setopt(h, CURLOPT_SSLCERT, req.cert_file.c_str());
  if (!req.key_file.empty()) curl_easy_setopt(h, CURLOPT_SSLKEY, req.key_file.c_str());
  // A stalled transfer (a server that stopped answering mid-body) fails
  // after 30 s under 1 KiB/s instead of hanging.
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1024L);
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, 30L);
  curl_easy_setopt(h, CURLOPT_SOCKOPTFUNCTION, OnSocket);
  curl_easy_setopt(h, CURLOPT_SOCKOPTDATA, conn);
  curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, HeaderLine);
  curl_easy_setopt(h, CURLOPT_HEADERDATA, &t);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, WriteBody);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &t);
  if (req.method == "HEAD") {
    curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
  } else if (req.method == "GET") {
    curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
  } else if (req.method == "PUT" || req.method == "POST") {
    curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(h, CURLOPT_READFUNCTION, ReadBody);
    curl_easy_setopt(h, CURLOPT_READDATA, &t);
    curl_easy_setopt(h, CURLOPT_SEEKFUNCTION, SeekBody);
    curl_easy_setopt(h, CURLOPT_SEEKDATA, &t);
    curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(req.body.size()));
    if (req.method == "POST") curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, "POST");
  } else {
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, req.method.c_str());
  }
  curl_slist* headers = nullptr;
  for (const std::string& hd : req.headers) headers = curl_slist_append(headers, hd.c_str());
  // No "Expect: 100-continue" round trip before each body, and no
  // Content-Type curl would add to POSTs.
  headers = curl_slist_append(headers, "Expect:");
  headers = curl_slist_append(headers, "Transfer-Encoding:");
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
  const CURLcode rc = curl_easy_perform(h);
  curl_slist_free_all(headers);
  if (rc != CURLE_OK) {
    Release(conn, false);
    if (rc == CURLE_WRITE_ERROR && resp.into_overflow) {
      return absl::DataLossError(
          StrCat(req.method, " ", req.url, ": the server sent more than the ", req.into.size(), " bytes asked for"));
    }
    const std::string why = StrCat(req.method, " ", req.url, ": ", curl_easy_strerror(rc),
                                   errbuf[0] != '\0' ? StrCat(" (", errbuf, ")") : std::string());
    switch (rc) {
      case CURLE_PEER_FAILED_VERIFICATION:
      case CURLE_SSL_CACERT_BADFILE:
      case CURLE_SSL_CERTPROBLEM:
      case CURLE_SSL_ISSUER_ERROR:
        return absl::FailedPreconditionError(
            StrCat(why,
                   ": the server's certificate is not trusted; name the CA that signed it with ca_file= "
                   "in the URI or AWS_CA_BUNDLE"));
      case CURLE_URL_MALFORMAT:
      case CURLE_UNSUPPORTED_PROTOCOL:
        return absl::InvalidArgumentError(why);
      default:
        return absl::UnavailableError(why);
    }
  }
  long code = 0;
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
  resp.status = code;
  Release(conn, true);
  return resp;
}

}  // namespace ckpt
