#include "storage/roots/s3/s3_sign.h"

#include <openssl/evp.h>

#include <algorithm>
#include <array>
#include <cstring>

#include "absl/strings/ascii.h"
#include "util/crypto.h"
#include "util/strings.h"

namespace ckpt {
namespace {

constexpr char kHex[] = "0123456789abcdef";

std::string ToHex(const unsigned char* p, size_t n) {
  std::string out(2 * n, '\0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = kHex[p[i] >> 4];
    out[2 * i + 1] = kHex[p[i] & 15];
  }
  return out;
}

std::string Hmac(std::string_view key, std::string_view data) {
  const std::array<uint8_t, 32> mac = HmacSha256(key, data);
  return std::string(reinterpret_cast<const char*>(mac.data()), mac.size());
}

std::string CollapseSpaces(std::string_view v) {
  std::string out;
  v = Trim(v);
  bool space = false;
  for (char c : v) {
    if (c == ' ' || c == '\t') {
      space = true;
      continue;
    }
    if (space && !out.empty()) out += ' ';
    space = false;
    out += c;
  }
  return out;
}

}  // namespace

std::string S3UriEncode(std::string_view s, bool keep_slash) {
  static const char* kUpper = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (absl::ascii_isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/')) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kUpper[c >> 4];
      out += kUpper[c & 15];
    }
  }
  return out;
}

std::string S3CanonicalQuery(const std::vector<std::pair<std::string, std::string>>& query) {
  std::vector<std::pair<std::string, std::string>> enc;
  enc.reserve(query.size());
  for (const auto& [k, v] : query) enc.emplace_back(S3UriEncode(k, false), S3UriEncode(v, false));
  std::sort(enc.begin(), enc.end());
  std::string out;
  for (const auto& [k, v] : enc) {
    if (!out.empty()) out += '&';
    out += k;
    out += '=';
    out += v;
  }
  return out;
}

std::string AmzDate(std::time_t t) {
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y%m%dT%H%M%SZ", &tm);
  return buf;
}

std::string Sha256Hex(const void* data, size_t size) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  KeepOpenSslUntilExit();
  EVP_Digest(data, size, md, &len, EVP_sha256(), nullptr);
  return ToHex(md, len);
}

std::string Md5Base64(std::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  KeepOpenSslUntilExit();
  EVP_Digest(data.data(), data.size(), md, &len, EVP_md5(), nullptr);
  unsigned char b64[64];
  const int n = EVP_EncodeBlock(b64, md, static_cast<int>(len));
  return std::string(reinterpret_cast<const char*>(b64), static_cast<size_t>(n));
}

std::string SigV4CanonicalRequest(const SigV4Request& req, std::string* signed_headers) {
  std::vector<std::pair<std::string, std::string>> headers;
  headers.reserve(req.headers.size());
  for (const auto& [k, v] : req.headers) headers.emplace_back(absl::AsciiStrToLower(k), CollapseSpaces(v));
  std::sort(headers.begin(), headers.end());
  std::string canon_headers, names;
  for (const auto& [k, v] : headers) {
    StrAppend(&canon_headers, k, ":", v, "\n");
    if (!names.empty()) names += ';';
    names += k;
  }
  if (signed_headers != nullptr) *signed_headers = names;
  return StrCat(req.method, "\n", req.canonical_uri.empty() ? "/" : req.canonical_uri, "\n",
                S3CanonicalQuery(req.query), "\n", canon_headers, "\n", names, "\n", req.payload_hash);
}

std::string SigV4Authorization(const SigV4Request& req, const S3Credentials& creds, std::string_view region,
                               std::string_view amz_date) {
  std::string names;
  const std::string canonical = SigV4CanonicalRequest(req, &names);
  const std::string_view day = amz_date.substr(0, 8);
  const std::string scope = StrCat(day, "/", region, "/s3/aws4_request");
  const std::string to_sign = StrCat("AWS4-HMAC-SHA256\n", amz_date, "\n", scope, "\n", Sha256Hex(canonical));
  std::string key = Hmac(StrCat("AWS4", creds.secret_key), day);
  key = Hmac(key, region);
  key = Hmac(key, "s3");
  key = Hmac(key, "aws4_request");
  const std::string sig = Hmac(key, to_sign);
  return StrCat("AWS4-HMAC-SHA256 Credential=", creds.access_key, "/", scope, ",SignedHeaders=", names,
                ",Signature=", ToHex(reinterpret_cast<const unsigned char*>(sig.data()), sig.size()));
}

}  // namespace ckpt
