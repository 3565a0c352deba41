// Signing S3 requests (AWS Signature Version 4) and the hashes S3 asks for.
// Pure functions over strings: the s3:// backend builds a request, signs it
// here and hands it to the HTTP client.
#ifndef CKPT_STORAGE_ROOTS_S3_S3_SIGN_H_
#define CKPT_STORAGE_ROOTS_S3_S3_SIGN_H_

#include <ctime>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ckpt {

struct S3Credentials {
  std::string access_key;
  std::string secret_key;
  std::string session_token;  ///< empty unless temporary credentials
  std::string source;         ///< where they came from, for messages (never the secret)
};

/// A request as SigV4 sees it.
struct SigV4Request {
  std::string method;         ///< "GET", "PUT", ...
  std::string canonical_uri;  ///< the path exactly as sent, already URI-encoded
  /// Query parameters, not encoded; a flag parameter ("uploads") has an
  /// empty value.
  std::vector<std::pair<std::string, std::string>> query;
  /// Headers to sign (any case); must hold host, x-amz-date and
  /// x-amz-content-sha256.
  std::vector<std::pair<std::string, std::string>> headers;
  std::string payload_hash;  ///< hex SHA-256 of the body, or "UNSIGNED-PAYLOAD"
};

/// RFC 3986 encoding as SigV4 wants it: everything but A-Z a-z 0-9 - _ . ~
/// as %XX (upper case); '/' kept when `keep_slash`.
std::string S3UriEncode(std::string_view s, bool keep_slash);

/// The query string of `query`, sorted and encoded: both the canonical
/// query of the signature and what is sent.
std::string S3CanonicalQuery(const std::vector<std::pair<std::string, std::string>>& query);

/// "20130524T000000Z" for a time in seconds since the epoch.
std::string AmzDate(std::time_t t);

/// Hex SHA-256 of `data` (OpenSSL; the hardware's SHA extensions where present).
std::string Sha256Hex(const void* data, size_t size);
inline std::string Sha256Hex(std::string_view s) { return Sha256Hex(s.data(), s.size()); }

/// Base64 of the MD5 of `data` (the Content-MD5 header).
std::string Md5Base64(std::string_view data);

/// The canonical request of SigV4 (exposed for tests and for diagnosing
/// SignatureDoesNotMatch answers).
std::string SigV4CanonicalRequest(const SigV4Request& req, std::string* signed_headers);

/// The Authorization header's value for `req`, signed at `amz_date` for
/// `region` and service "s3".
std::string SigV4Authorization(const SigV4Request& req, const S3Credentials& creds, std::string_view region,
                               std::string_view amz_date);

}  // namespace ckpt

#endif  // CKPT_STORAGE_ROOTS_S3_S3_SIGN_H_
