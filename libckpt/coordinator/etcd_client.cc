#include "coordinator/etcd_client.h"

#include <openssl/evp.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "net/http_client.h"
#include "net/uri.h"
#include "util/errors.h"
#include "util/json.h"
#include "util/json_reader.h"
#include "util/strings.h"

namespace ckpt::coord {
namespace {

int64_t Int(const JsonValue* v) {
  // proto3's JSON writes 64-bit integers as strings.
  if (v == nullptr) return 0;
  int64_t n = 0;
  if (!ParseInt64(v->text, &n)) return 0;
  return n;
}

// Member ids use all 64 bits.
uint64_t UInt(const JsonValue* v) {
  if (v == nullptr || v->text.empty()) return 0;
  char* end = nullptr;
  const unsigned long long n = std::strtoull(v->text.c_str(), &end, 10);
  return end != nullptr && *end == '\0' ? static_cast<uint64_t>(n) : 0;
}

}  // namespace

std::string Base64Encode(std::string_view data) {
  std::string out(4 * ((data.size() + 2) / 3) + 1, '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(data.data()), static_cast<int>(data.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

absl::StatusOr<std::string> Base64Decode(std::string_view text) {
  if (text.size() % 4 != 0) return absl::DataLossError("base64 text whose length is not a multiple of 4");
  std::string out(3 * (text.size() / 4) + 1, '\0');
  const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(text.data()), static_cast<int>(text.size()));
  if (n < 0) return absl::DataLossError("text that is not base64");
  size_t pad = 0;
  if (!text.empty() && text.back() == '=') ++pad;
  if (text.size() > 1 && text[text.size() - 2] == '=') ++pad;
  out.resize(static_cast<size_t>(n) - pad);
  return out;
}

absl::StatusOr<EtcdConfig> ParseEtcdUri(std::string_view uri) {
  CKPT_ASSIGN_OR_RETURN(ParsedUri parsed, ParseUri(uri));
  if (parsed.scheme != "etcd") {
    return absl::InvalidArgumentError(StrCat("'", uri, "' is not an etcd://HOST:PORT[,HOST:PORT]/PREFIX URI"));
  }
  for (const auto& param : parsed.params) {
    const std::string& k = param.first;
    if (k != "ca_file" && k != "cert_file" && k != "key_file" && k != "user" && k != "password_file" &&
        k != "timeout" && k != "lease") {
      return absl::InvalidArgumentError(
          StrCat("'", uri, "': unknown etcd option '", k,
                 "' (known: ca_file, cert_file, key_file, user, password_file, timeout, lease)"));
    }
  }
  EtcdConfig c;
  const std::string loc = parsed.location;
  const size_t slash = loc.find('/');
  const std::string hosts = loc.substr(0, slash);
  std::string prefix = slash == std::string::npos ? "" : loc.substr(slash);
  while (prefix.size() > 1 && prefix.back() == '/') prefix.pop_back();
  if (prefix.empty() || prefix == "/") {
    return absl::InvalidArgumentError(
        StrCat("'", uri, "': name a key prefix for this job (etcd://HOST:PORT/ckpt/job42)"));
  }
  c.prefix = prefix + "/";
  c.ca_file = parsed.Str("ca_file", "");
  c.cert_file = parsed.Str("cert_file", "");
  c.key_file = parsed.Str("key_file", "");
  if (c.cert_file.empty() != c.key_file.empty()) {
    return absl::InvalidArgumentError(StrCat("'", uri, "': cert_file and key_file go together"));
  }
  const bool tls = !c.ca_file.empty() || !c.cert_file.empty();
  size_t start = 0;
  while (start <= hosts.size()) {
    size_t comma = hosts.find(',', start);
    if (comma == std::string::npos) comma = hosts.size();
    const std::string h = hosts.substr(start, comma - start);
    if (h.empty() || h.find(':') == std::string::npos) {
      return absl::InvalidArgumentError(StrCat("'", uri, "': '", h, "' is not HOST:PORT"));
    }
    c.endpoints.push_back(StrCat(tls ? "https://" : "http://", h));
    start = comma + 1;
  }
  c.user = parsed.Str("user", "");
  if (!c.user.empty()) {
    const std::string file = parsed.Str("password_file", "");
    if (!file.empty()) {
      std::ifstream in(file);
      if (!in) return absl::NotFoundError(StrCat("etcd password_file ", file, " cannot be read"));
      std::stringstream ss;
      ss << in.rdbuf();
      c.password = ss.str();
      while (!c.password.empty() && (c.password.back() == '\n' || c.password.back() == '\r')) c.password.pop_back();
    } else if (const char* p = std::getenv("CKPT_ETCD_PASSWORD")) {
      c.password = p;
    } else {
      return absl::InvalidArgumentError(
          StrCat("'", uri, "': user=", c.user, " needs a password: password_file= or $CKPT_ETCD_PASSWORD"));
    }
  }
  CKPT_ASSIGN_OR_RETURN(c.timeout_s, parsed.Seconds("timeout", 5));
  if (c.timeout_s <= 0) return absl::InvalidArgumentError(StrCat("'", uri, "': timeout must be > 0"));
  CKPT_ASSIGN_OR_RETURN(double lease, parsed.Seconds("lease", 3));
  if (lease < 1 || lease > 3600) return absl::InvalidArgumentError(StrCat("'", uri, "': lease must be 1..3600 s"));
  c.lease_s = static_cast<int64_t>(lease + 0.5);
  return c;
}

EtcdClient::EtcdClient(EtcdConfig config) : config_(std::move(config)), http_(std::make_unique<HttpClient>()) {}
EtcdClient::~EtcdClient() = default;

std::string EtcdClient::Describe() const {
  std::string out = config_.endpoints.empty() ? "etcd" : config_.endpoints.front();
  if (config_.endpoints.size() > 1) StrAppend(&out, " (and ", config_.endpoints.size() - 1, " more)");
  return out;
}

std::string EtcdClient::PrefixEnd(std::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    if (static_cast<unsigned char>(end.back()) < 0xff) {
      end.back() = static_cast<char>(static_cast<unsigned char>(end.back()) + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // every key
}

absl::StatusOr<std::string> EtcdClient::Post(const std::string& endpoint, std::string_view path,
                                             const std::string& body, long* status) {
  HttpRequest req;
  req.method = "POST";
  req.url = StrCat(endpoint, path);
  req.headers = {"Content-Type: application/json"};
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!token_.empty()) req.headers.push_back(StrCat("Authorization: ", token_));
  }
  req.body = absl::Span<const std::byte>(reinterpret_cast<const std::byte*>(body.data()), body.size());
  req.timeout_s = config_.timeout_s;
  req.connect_timeout_s = config_.timeout_s;
  req.ca_file = config_.ca_file;
  req.cert_file = config_.cert_file;
  req.key_file = config_.key_file;
  auto resp = http_->Perform(req);
  if (!resp.ok()) {
    const std::string m(resp.status().message());
    // A server that refuses the client's certificate (or the lack of one)
    // ends the TLS session, which TLS 1.3 reports only as a dropped
    // connection: say what to check.
    if (req.url.rfind("https://", 0) == 0 && !absl::IsFailedPrecondition(resp.status()) &&
        (m.find("SSL") != std::string::npos || m.find("peer") != std::string::npos ||
         m.find("certificate") != std::string::npos)) {
      return absl::Status(
          resp.status().code(),
          StrCat(m,
                 " (the TLS session ended: does etcd demand a client certificate (--client-cert-auth) and not "
                 "trust this one? ",
                 config_.cert_file.empty() ? std::string("no cert_file= is given")
                                           : StrCat("cert_file=", config_.cert_file),
                 ")"));
    }
    return resp.status();
  }
  *status = resp->status;
  return std::move(resp->body);
}

absl::Status EtcdClient::Authenticate(const std::string& endpoint) {
  JsonWriter w;
  w.BeginObject().Field("name", config_.user).Field("password", config_.password).EndObject();
  long status = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    token_.clear();
  }
  CKPT_ASSIGN_OR_RETURN(std::string body, Post(endpoint, "/v3/auth/authenticate", w.str(), &status));
  CKPT_ASSIGN_OR_RETURN(JsonValue v, ParseJson(body, "etcd's authenticate answer"));
  const JsonValue* token = v.Find("token");
  if (status != 200 || token == nullptr || token->text.empty()) {
    const JsonValue* msg = v.Find("message");
    return absl::PermissionDeniedError(StrCat("etcd ", endpoint, ": authenticating as '", config_.user,
                                              "' failed: ", msg != nullptr ? msg->text : StrCat("HTTP ", status)));
  }
  std::lock_guard<std::mutex> lock(mu_);
  token_ = token->text;
  return absl::OkStatus();
}

absl::StatusOr<std::string> EtcdClient::Call(std::string_view path, const std::string& body) {
  absl::Status last = absl::UnavailableError("no etcd endpoint");
  size_t first;
  {
    std::lock_guard<std::mutex> lock(mu_);
    first = current_;
  }
  for (size_t i = 0; i < config_.endpoints.size(); ++i) {
    const std::string& ep = config_.endpoints[(first + i) % config_.endpoints.size()];
    bool need_auth;
    {
      std::lock_guard<std::mutex> lock(mu_);
      need_auth = !config_.user.empty() && token_.empty();
    }
    if (need_auth) {
      absl::Status a = Authenticate(ep);
      if (absl::IsUnavailable(a)) {
        last = a;
        continue;
      }
      CKPT_RETURN_IF_ERROR(a);
    }
    long status = 0;
    auto body_or = Post(ep, path, body, &status);
    if (!body_or.ok()) {
      last = body_or.status();
      if (absl::IsUnavailable(last)) continue;  // the next member
      return last;
    }
    if (status == 200) {
      std::lock_guard<std::mutex> lock(mu_);
      current_ = (first + i) % config_.endpoints.size();
      return std::move(*body_or);
    }
    auto err = ParseJson(*body_or, "etcd's error answer");
    std::string msg = StrCat("HTTP ", status);
    if (err.ok()) {
      if (const JsonValue* m = err->Find("message"); m != nullptr && !m->text.empty()) msg = Printable(m->text);
    }
    if (!config_.user.empty() && msg.find("token") != std::string::npos) {
      // An expired token: once more with a new one.
      absl::Status a = Authenticate(ep);
      CKPT_RETURN_IF_ERROR(a);
      auto again = Post(ep, path, body, &status);
      if (again.ok() && status == 200) return std::move(*again);
    }
    // No leader, a stopped member, too many requests: another member may
    // answer; anything else is the request's own fault.
    last = absl::UnavailableError(StrCat("etcd ", ep, path, ": ", msg));
    if (status >= 500 || msg.find("leader") != std::string::npos || msg.find("timed out") != std::string::npos) {
      continue;
    }
    return absl::FailedPreconditionError(StrCat("etcd ", ep, path, ": ", msg));
  }
  return last;
}

absl::StatusOr<std::vector<EtcdKv>> EtcdClient::Range(std::string_view key, std::string_view range_end, int64_t limit,
                                                      bool* more) {
  JsonWriter w;
  w.BeginObject().Field("key", Base64Encode(key)).Field("range_end", Base64Encode(range_end));
  if (limit > 0) w.Field("limit", limit);
  w.EndObject();
  CKPT_ASSIGN_OR_RETURN(std::string body, Call("/v3/kv/range", w.str()));
  CKPT_ASSIGN_OR_RETURN(JsonValue v, ParseJson(body, "etcd's range answer"));
  std::vector<EtcdKv> out;
  if (const JsonValue* kvs = v.Find("kvs"); kvs != nullptr && kvs->is_array()) {
    for (const JsonValue& kv : kvs->items) {
      EtcdKv e;
      const JsonValue* k = kv.Find("key");
      const JsonValue* val = kv.Find("value");
      if (k == nullptr) return absl::DataLossError("etcd's range answer: a key-value without a key");
      CKPT_ASSIGN_OR_RETURN(e.key, Base64Decode(k->text));
      // A key outside the range asked for is refused, never acted on (a
      // proxy or server that ignores range_end must not hand this client
      // another prefix's keys).
      const bool inside = range_end.empty() ? e.key == key : (e.key >= key && e.key < range_end);
      if (!inside) {
        return absl::DataLossError(StrCat("etcd's range answer names the key '", Printable(e.key),
                                          "', outside the range asked for ['", Printable(key), "', '",
                                          Printable(range_end), "')"));
      }
      if (val != nullptr) {
        auto decoded = Base64Decode(val->text);
        if (!decoded.ok()) return absl::DataLossError(StrCat("etcd key ", e.key, ": ", decoded.status().message()));
        e.value = std::move(*decoded);
      }
      e.create_revision = Int(kv.Find("create_revision"));
      e.mod_revision = Int(kv.Find("mod_revision"));
      e.lease = Int(kv.Find("lease"));
      out.push_back(std::move(e));
    }
  }
  if (more != nullptr) {
    const JsonValue* m = v.Find("more");
    *more = m != nullptr && m->boolean;
  }
  return out;
}

absl::StatusOr<int64_t> EtcdClient::Count(std::string_view key, std::string_view range_end) {
  JsonWriter w;
  w.BeginObject().Field("key", Base64Encode(key)).Field("range_end", Base64Encode(range_end));
  w.Field("count_only", true).EndObject();
  CKPT_ASSIGN_OR_RETURN(std::string body, Call("/v3/kv/range", w.str()));
  CKPT_ASSIGN_OR_RETURN(JsonValue v, ParseJson(body, "etcd's range answer"));
  return Int(v.Find("count"));
}

absl::StatusOr<EtcdClient::MemberStatus> EtcdClient::StatusOf(const std::string& endpoint) {
  long status = 0;
  CKPT_ASSIGN_OR_RETURN(std::string body, Post(endpoint, "/v3/maintenance/status", "{}", &status));
  CKPT_ASSIGN_OR_RETURN(JsonValue v, ParseJson(body, "etcd's status answer"));
  if (status != 200) {
    const JsonValue* m = v.Find("message");
    return absl::UnavailableError(
        StrCat("etcd ", endpoint, ": ", m != nullptr && !m->text.empty() ? m->text : StrCat("HTTP ", status)));
  }
  MemberStatus s;
  if (const JsonValue* h = v.Find("header"); h != nullptr) {
    s.member_id = UInt(h->Find("member_id"));
    s.raft_term = Int(h->Find("raft_term"));
  }
  s.leader = UInt(v.Find("leader"));
  s.db_size = Int(v.Find("dbSize"));
  return s;
}

absl::StatusOr<bool> EtcdClient::PutIfAbsent(std::string_view key, std::string_view value) {
  int64_t revision = 0;
  return CreateGuarded(key, value, 0, "", 0, &revision);
}

absl::StatusOr<bool> EtcdClient::CreateGuarded(std::string_view key, std::string_view value, int64_t lease,
                                               std::string_view guard_key, int64_t guard_revision, int64_t* revision) {
  const std::string k = Base64Encode(key);
  JsonWriter w;
  w.BeginObject().Key("compare").BeginArray();
  w.BeginObject().Field("result", "EQUAL").Field("target", "CREATE").Field("key", k).Field("create_revision", "0");
  w.EndObject();
  if (!guard_key.empty()) {
    w.BeginObject().Field("result", "EQUAL").Field("target", "CREATE").Field("key", Base64Encode(guard_key));
    w.Field("create_revision", std::to_string(guard_revision)).EndObject();
  }
  w.EndArray();
  w.Key("success").BeginArray().BeginObject().Key("request_put").BeginObject();
  w.Field("key", k).Field("value", Base64Encode(value));
  if (lease != 0) w.Field("lease", std::to_string(lease));
  w.EndObject().EndObject().EndArray();
  w.EndObject();
  CKPT_ASSIGN_OR_RETURN(std::string body, Call("/v3/kv/txn", w.str()));
  CKPT_ASSIGN_OR_RETURN(JsonValue v, ParseJson(body, "etcd's txn answer"));
  if (const JsonValue* h = v.Find("header"); h != nullptr) *revision = Int(h->Find("revision"));
  // proto3 JSON leaves out a false "succeeded".
  const JsonValue* ok = v.Find("succeeded");
  return ok != nullptr && ok->boolean;
}

absl::Status EtcdClient::Delete(std::string_view key) {
  JsonWriter w;
  w.BeginObject().Field("key", Base64Encode(key)).EndObject();
  return Call("/v3/kv/deleterange", w.str()).status();
}

absl::StatusOr<int64_t> EtcdClient::LeaseGrant(int64_t ttl_s) {
  JsonWriter w;
  w.BeginObject().Field("TTL", std::to_string(ttl_s)).EndObject();
  CKPT_ASSIGN_OR_RETURN(std::string body, Call("/v3/lease/grant", w.str()));
  CKPT_ASSIGN_OR_RETURN(JsonValue v, ParseJson(body, "etcd's lease grant answer"));
  const int64_t id = Int(v.Find("ID"));
  if (id == 0) {
    const JsonValue* e = v.Find("error");
    return absl::UnavailableError(StrCat("etcd refused a lease: ", e != nullptr ? e->text : body.substr(0, 200)));
  }
  return id;
}

absl::StatusOr<int64_t> EtcdClient::LeaseKeepAlive(int64_t lease) {
  JsonWriter w;
  w.BeginObject().Field("ID", std::to_string(lease)).EndObject();
  CKPT_ASSIGN_OR_RETURN(std::string body, Call("/v3/lease/keepalive", w.str()));
  // A stream of one message: {"result":{...,"TTL":"3"}}; a lease that is
  // gone answers without a TTL.
  CKPT_ASSIGN_OR_RETURN(JsonValue v, ParseJson(body, "etcd's lease keep-alive answer"));
  const JsonValue* r = v.Find("result");
  return r != nullptr ? Int(r->Find("TTL")) : 0;
}

absl::Status EtcdClient::LeaseRevoke(int64_t lease) {
  JsonWriter w;
  w.BeginObject().Field("ID", std::to_string(lease)).EndObject();
  return Call("/v3/lease/revoke", w.str()).status();
}

}  // namespace ckpt::coord
