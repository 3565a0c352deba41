#include "storage/roots/s3/s3_client.h"

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "net/uri.h"
#include "storage/roots/s3/s3_parse.h"
#include "util/errors.h"
#include "util/log.h"

namespace ckpt::s3 {
namespace {

constexpr const char* kEmptySha256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

}  // namespace

bool Retryable(long status, const std::string& code) {
  if (status >= 500) return true;
  if (status == 429 || status == 408) return true;
  return code == "SlowDown" || code == "RequestTimeout" || code == "ConditionalRequestConflict" ||
         code == "OperationAborted" || code == "InternalError";
}

absl::StatusOr<HttpResponse> S3Client::Send(const S3Call& call, int* attempts, Tried* tried) {
  const auto start = Clock::now();
  const auto deadline = call.deadline.value_or(DeadlineFromNow());
  const std::string payload_hash = !call.payload_hash.empty() ? call.payload_hash
                                   : call.body.empty()        ? std::string(kEmptySha256)
                                                              : Sha256Hex(call.body.data(), call.body.size());
  std::string path, host = cfg_.host;
  if (cfg_.virtual_host) {
    host = StrCat(cfg_.bucket, ".", cfg_.host);
    path = StrCat("/", S3UriEncode(call.key, true));
  } else {
    path = call.key.empty() ? StrCat("/", cfg_.bucket) : StrCat("/", cfg_.bucket, "/", S3UriEncode(call.key, true));
  }
  const std::string query = S3CanonicalQuery(call.query);
  const std::string url = StrCat(cfg_.scheme, "://", host, path, query.empty() ? "" : "?", query);
  int attempt = 0;
  double backoff = 0.05;
  absl::StatusOr<HttpResponse> last = absl::UnavailableError("not sent");
  bool out_of_time = false;
  while (true) {
    const double left = std::chrono::duration<double>(deadline - Clock::now()).count();
    if (left < 0.001) {
      out_of_time = true;
      if (attempt == 0) last = absl::DeadlineExceededError("no time was left to send it");
      break;
    }
    ++attempt;
    SigV4Request sreq;
    sreq.method = call.method;
    sreq.canonical_uri = path;
    sreq.query = call.query;
    const std::string date = AmzDate(std::time(nullptr) + clock_offset_s_.load(std::memory_order_relaxed));
    sreq.headers = {{"host", host}, {"x-amz-date", date}, {"x-amz-content-sha256", payload_hash}};
    if (!cfg_.creds.session_token.empty()) sreq.headers.emplace_back("x-amz-security-token", cfg_.creds.session_token);
    for (const auto& h : call.headers) sreq.headers.push_back(h);
    sreq.payload_hash = payload_hash;
    HttpRequest req;
    req.method = call.method;
    req.url = url;
    for (const auto& [k, v] : sreq.headers) req.headers.push_back(StrCat(k, ": ", v));
    req.headers.push_back(StrCat("Authorization: ", SigV4Authorization(sreq, cfg_.creds, cfg_.region, date)));
    req.body = call.body;
    req.timeout_s = left;
    req.connect_timeout_s = std::min(req.connect_timeout_s, left);
    req.ca_file = cfg_.ca_file;
    req.into = call.into;
    req.has_into = call.has_into;
    const auto sent = Clock::now();
    last = http_.Perform(req);
    if (trace_) {
      LogMessage(LogLevel::kInfo, "s3",
                 absl::StrFormat("%s -> %s in %.1f ms%s", call.what,
                                 last.ok() ? std::to_string(last->status) : std::string(last.status().message()),
                                 std::chrono::duration<double, std::milli>(Clock::now() - sent).count(),
                                 attempt > 1 ? StrCat(" (attempt ", attempt, ")") : std::string()));
    }
    bool retry;
    if (!last.ok()) {
      retry = absl::IsUnavailable(last.status());
    } else if (last->status >= 200 && last->status < 300) {
      if (call.has_into && last->into_bytes != call.into.size()) {
        last = absl::UnavailableError(
            StrCat(call.what, ": the answer ended after ", last->into_bytes, " of ", call.into.size(), " bytes"));
        retry = true;
      } else {
        break;
      }
    } else {
      const S3ErrorBody e = ParseS3Error(last->body);
      retry = Retryable(last->status, e.code);
      if (e.code == "RequestTimeTooSkewed" && attempt == 1 && AdoptServerClock(*last)) retry = true;
    }
    if (!retry) break;
    if (attempt == 1) {
      // The first retry of a request is said; the attempts are counted in
      // the error if it fails in the end.
      LogMessage(LogLevel::kInfo, "s3",
                 StrCat(call.what, " answered ", last.ok() ? StrCat("HTTP ", last->status) : last.status().ToString(),
                        "; retrying until its deadline"));
    }
    // Full jitter: uniform in [0, backoff], the window doubling to 2 s;
    // the last wait ends at the deadline, where one more attempt is cut.
    thread_local std::mt19937_64 rng{std::random_device{}()};
    const double sleep = std::min(std::uniform_real_distribution<double>(0, backoff)(rng),
                                  std::max(0.0, std::chrono::duration<double>(deadline - Clock::now()).count()));
    std::this_thread::sleep_for(std::chrono::duration<double>(sleep));
    backoff = std::min(backoff * 2, 2.0);
  }
  if (attempts != nullptr) *attempts = attempt;
  if (!last.ok()) {
    return absl::Status(
        out_of_time && absl::IsUnavailable(last.status()) ? absl::StatusCode::kDeadlineExceeded : last.status().code(),
        StrCat(call.what, ": ", last.status().message(), Tries(attempt, start, out_of_time)));
  }
  // The account of the attempts is made for a failed answer only.
  if (tried != nullptr && (last->status < 200 || last->status >= 300)) {
    *tried = Tried{out_of_time, Tries(attempt, start, out_of_time)};
  }
  return last;
}

std::string S3Client::Tries(int attempt, Clock::time_point start, bool out_of_time) const {
  const auto ms = static_cast<int64_t>(std::chrono::duration<double>(Clock::now() - start).count() * 1000 + 0.5);
  return StrCat(" (", attempt, attempt == 1 ? " attempt" : " attempts", " in ", ms, " ms",
                out_of_time ? StrCat("; the deadline of ", cfg_.deadline_s, " s ran out") : std::string(), ")");
}

absl::StatusOr<HttpResponse> S3Client::Do(const S3Call& call, int* attempts) {
  Tried tried;
  CKPT_ASSIGN_OR_RETURN(HttpResponse resp, Send(call, attempts, &tried));
  if (resp.status >= 200 && resp.status < 300) return resp;
  absl::Status error = ErrorOf(call, resp, tried.text);
  // Retried until the deadline: the storage did not answer in time.
  if (tried.out_of_time && absl::IsUnavailable(error)) return absl::DeadlineExceededError(error.message());
  return error;
}

absl::Status S3Client::ErrorOf(const S3Call& call, const HttpResponse& resp, std::string_view tries) const {
  S3ErrorBody e = ParseS3Error(resp.body);
  if (e.code.empty()) {
    // HEAD answers carry no body.
    e.code = resp.status == 404 ? "NotFound" : resp.status == 403 ? "Forbidden" : StrCat("HTTP ", resp.status);
  }
  std::string msg = StrCat(Printable(call.what), ": ", Printable(e.code),
                           e.message.empty() ? "" : StrCat(" (", Printable(e.message.substr(0, 1024)), ")"));
  if (!e.request_id.empty()) StrAppend(&msg, " [request ", Printable(e.request_id.substr(0, 256)), "]");
  StrAppend(&msg, tries);
  if (e.code == "RequestTimeTooSkewed") {
    auto d = resp.headers.find("date");
    StrAppend(&msg, ": this machine's clock and the server's differ too much",
              d != resp.headers.end() ? StrCat(" (server: ", d->second, ")") : std::string(),
              "; set the clock (NTP) and retry");
    return absl::FailedPreconditionError(msg);
  }
  if (e.code == "NoSuchBucket") {
    return absl::NotFoundError(StrCat(msg, ": the bucket '", cfg_.bucket, "' does not exist at ", cfg_.scheme, "://",
                                      cfg_.host, " (create it, or check endpoint= and region=)"));
  }
  if (resp.status == 404) return absl::NotFoundError(msg);
  if (resp.status == 403 || resp.status == 401) {
    if (e.code == "InvalidAccessKeyId" || e.code == "SignatureDoesNotMatch" || e.code == "Forbidden" ||
        e.code == "AccessDenied") {
      StrAppend(&msg, ": check the credentials (", cfg_.creds.source, ") and region=", cfg_.region);
    }
    return absl::PermissionDeniedError(msg);
  }
  if (resp.status == 412) return absl::FailedPreconditionError(msg);
  if (resp.status == 409) return absl::AbortedError(msg);
  if (resp.status >= 500 || resp.status == 429) return absl::UnavailableError(msg);
  return absl::InvalidArgumentError(msg);
}

bool S3Client::AdoptServerClock(const HttpResponse& resp) {
  auto d = resp.headers.find("date");
  if (d == resp.headers.end()) return false;
  std::tm tm{};
  if (strptime(d->second.c_str(), "%a, %d %b %Y %H:%M:%S GMT", &tm) == nullptr) return false;
  const int64_t server = static_cast<int64_t>(timegm(&tm));
  clock_offset_s_.store(server - static_cast<int64_t>(std::time(nullptr)), std::memory_order_relaxed);
  return true;
}

// A ranged GET of `dst.size()` bytes at `offset` of `key`, straight into
// `dst`, of the object with ETag `etag` only (when known): a replaced
// object is an error, never a mix of two versions. `total` is the object's
// size, for the one answer other than 206 that is right (200, whole object).
absl::Status RangedGet(S3Client& client, const std::string& key, const std::string& etag, uint64_t total,
                       uint64_t offset, absl::Span<std::byte> dst, std::string_view verb) {
  S3Call call;
  call.key = key;
  call.headers = {{"range", StrCat("bytes=", offset, "-", offset + dst.size() - 1)}};
  if (!etag.empty()) call.headers.emplace_back("if-match", etag);
  call.into = dst;
  call.has_into = true;
  call.what = StrCat(verb, " ", client.Uri(key), " bytes ", offset, "..", offset + dst.size());
  auto resp = client.Do(call);
  if (!resp.ok()) {
    if (absl::IsFailedPrecondition(resp.status())) {
      return absl::DataLossError(StrCat(resp.status().message(), ": the object changed since it was opened"));
    }
    return resp.status();
  }
  if (resp->status != 206 && !(resp->status == 200 && offset == 0 && dst.size() == total)) {
    return absl::DataLossError(StrCat(call.what, ": the server answered ", resp->status, " to a ranged GET"));
  }
  return absl::OkStatus();
}

namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::string(v) : std::string();
}

absl::StatusOr<S3Credentials> FindCredentials(const std::string& profile_param) {
  S3Credentials c;
  c.access_key = Env("AWS_ACCESS_KEY_ID");
  c.secret_key = Env("AWS_SECRET_ACCESS_KEY");
  if (!c.access_key.empty() || !c.secret_key.empty()) {
    if (c.access_key.empty() || c.secret_key.empty()) {
      return absl::InvalidArgumentError(
          "s3: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY must be set together (one of them is empty)");
    }
    c.session_token = Env("AWS_SESSION_TOKEN");
    c.source = "AWS_ACCESS_KEY_ID in the environment";
    return c;
  }
  std::string file = Env("AWS_SHARED_CREDENTIALS_FILE");
  if (file.empty()) {
    const std::string home = Env("HOME");
    if (!home.empty()) file = home + "/.aws/credentials";
  }
  std::string profile = !profile_param.empty() ? profile_param : Env("AWS_PROFILE");
  if (profile.empty()) profile = "default";
  std::ifstream in(file);
  if (!file.empty() && in) {
    std::stringstream ss;
    ss << in.rdbuf();
    auto ini = ParseIniFile(ss.str());
    if (!ini.ok()) return absl::InvalidArgumentError(StrCat("s3: ", file, ": ", ini.status().message()));
    auto sec = ini->find(profile);
    if (sec != ini->end()) {
      auto get = [&](const char* k) {
        auto it = sec->second.find(k);
        return it != sec->second.end() ? it->second : std::string();
      };
      c.access_key = get("aws_access_key_id");
      c.secret_key = get("aws_secret_access_key");
      c.session_token = get("aws_session_token");
      if (c.access_key.empty() || c.secret_key.empty()) {
        return absl::InvalidArgumentError(
            StrCat("s3: profile [", profile, "] of ", file, " lacks aws_access_key_id or aws_secret_access_key"));
      }
      c.source = StrCat("profile [", profile, "] of ", file);
      return c;
    }
    if (!profile_param.empty() || !Env("AWS_PROFILE").empty()) {
      return absl::NotFoundError(StrCat("s3: no profile [", profile, "] in ", file));
    }
  }
  return absl::UnauthenticatedError(
      StrCat("s3: no credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or put them in ",
             file.empty() ? "~/.aws/credentials" : file, " under [", profile, "] (AWS_PROFILE chooses the section)"));
}

}  // namespace

absl::StatusOr<S3Config> ParseConfig(std::string_view uri) {
  CKPT_ASSIGN_OR_RETURN(ParsedUri parsed, ParseUri(uri));
  static const char* kKnown[] = {"endpoint",    "region", "addressing", "profile",    "part_size",
                                 "connections", "buffer", "deadline",   "read_chunk", "ca_file"};
  for (const auto& param : parsed.params) {
    const std::string& k = param.first;
    if (std::find_if(std::begin(kKnown), std::end(kKnown), [&](const char* n) { return k == n; }) == std::end(kKnown)) {
      return absl::InvalidArgumentError(StrCat("storage URI '", uri, "': unknown s3 option '", k,
                                               "' (known: endpoint, region, addressing, profile, part_size, "
                                               "connections, buffer, deadline, read_chunk, ca_file)"));
    }
  }
  S3Config cfg;
  std::string loc = parsed.Path();
  while (!loc.empty() && loc.back() == '/') loc.pop_back();
  const size_t slash = loc.find('/');
  cfg.bucket = loc.substr(0, slash);
  cfg.prefix = slash == std::string::npos ? "" : loc.substr(slash + 1);
  while (!cfg.prefix.empty() && cfg.prefix.front() == '/') cfg.prefix.erase(0, 1);
  if (cfg.bucket.size() < 3 || cfg.bucket.size() > 63 ||
      cfg.bucket.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789.-_") != std::string::npos) {
    return absl::InvalidArgumentError(
        StrCat("storage URI '", uri, "': '", cfg.bucket,
               "' is not a bucket name (3-63 of a-z, 0-9, '.', '-'): s3://BUCKET/PREFIX"));
  }
  cfg.region = parsed.Str("region", "");
  if (cfg.region.empty()) cfg.region = Env("AWS_REGION");
  if (cfg.region.empty()) cfg.region = Env("AWS_DEFAULT_REGION");
  if (cfg.region.empty()) cfg.region = "us-east-1";
  std::string endpoint = parsed.Str("endpoint", "");
  if (endpoint.empty()) endpoint = Env("AWS_ENDPOINT_URL_S3");
  if (endpoint.empty()) endpoint = Env("AWS_ENDPOINT_URL");
  if (endpoint.empty()) endpoint = StrCat("https://s3.", cfg.region, ".amazonaws.com");
  std::string_view ep = endpoint;
  if (ConsumePrefix(&ep, "https://")) {
    cfg.scheme = "https";
  } else if (ConsumePrefix(&ep, "http://")) {
    cfg.scheme = "http";
  } else {
    return absl::InvalidArgumentError(
        StrCat("storage URI '", uri, "': endpoint '", endpoint, "' must start with http:// or https://"));
  }
  while (!ep.empty() && ep.back() == '/') ep.remove_suffix(1);
  if (ep.empty() || ep.find('/') != std::string_view::npos) {
    return absl::InvalidArgumentError(
        StrCat("storage URI '", uri, "': endpoint '", endpoint, "' must be scheme://host[:port] with no path"));
  }
  cfg.host = std::string(ep);
  // Default ports are not part of the signed host.
  if (cfg.scheme == "http" && absl::EndsWith(cfg.host, ":80")) cfg.host.resize(cfg.host.size() - 3);
  if (cfg.scheme == "https" && absl::EndsWith(cfg.host, ":443")) cfg.host.resize(cfg.host.size() - 4);
  const std::string addressing = parsed.Str("addressing", "auto");
  if (addressing == "path") {
    cfg.virtual_host = false;
  } else if (addressing == "virtual") {
    cfg.virtual_host = true;
  } else if (addressing == "auto") {
    cfg.virtual_host = absl::EndsWith(cfg.host, ".amazonaws.com") && cfg.bucket.find('.') == std::string::npos;
  } else {
    return absl::InvalidArgumentError(
        StrCat("storage URI '", uri, "': addressing must be auto, path or virtual, not '", addressing, "'"));
  }
  CKPT_ASSIGN_OR_RETURN(int64_t part, parsed.Bytes("part_size", 16 * kMiB));
  if (part < static_cast<int64_t>(kMinPart) || part > (int64_t{5} << 30)) {
    return absl::InvalidArgumentError(StrCat("storage URI '", uri, "': part_size must be 5M..5G (S3's limits)"));
  }
  cfg.part_size = static_cast<uint64_t>(part);
  CKPT_ASSIGN_OR_RETURN(int64_t conns, parsed.Int("connections", 16));
  if (conns < 1 || conns > 1024) {
    return absl::InvalidArgumentError(StrCat("storage URI '", uri, "': connections must be 1..1024"));
  }
  cfg.connections = static_cast<int>(conns);
  CKPT_ASSIGN_OR_RETURN(int64_t buffer, parsed.Bytes("buffer", static_cast<int64_t>(cfg.part_size) * conns));
  if (buffer < 0) return absl::InvalidArgumentError(StrCat("storage URI '", uri, "': buffer must be >= 0"));
  cfg.buffer_bytes = static_cast<uint64_t>(buffer);
  CKPT_ASSIGN_OR_RETURN(int64_t chunk, parsed.Bytes("read_chunk", static_cast<int64_t>(8 * kMiB)));
  if (chunk < 4096) return absl::InvalidArgumentError(StrCat("storage URI '", uri, "': read_chunk must be >= 4K"));
  cfg.read_chunk = static_cast<uint64_t>(chunk);
  CKPT_ASSIGN_OR_RETURN(cfg.deadline_s, parsed.Seconds("deadline", 120));
  if (cfg.deadline_s <= 0) return absl::InvalidArgumentError(StrCat("storage URI '", uri, "': deadline must be > 0"));
  cfg.ca_file = parsed.Str("ca_file", "");
  if (!cfg.ca_file.empty() && cfg.scheme != "https") {
    return absl::InvalidArgumentError(StrCat("storage URI '", uri, "': ca_file is for https endpoints"));
  }
  if (cfg.ca_file.empty() && cfg.scheme == "https") cfg.ca_file = Env("AWS_CA_BUNDLE");
  CKPT_ASSIGN_OR_RETURN(cfg.creds, FindCredentials(parsed.Str("profile", "")));
  return cfg;
}

}  // namespace ckpt::s3
