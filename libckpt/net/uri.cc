#include "net/uri.h"

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "util/strings.h"

namespace ckpt {
namespace {

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string Decode(std::string_view v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] == '%' && i + 2 < v.size() && HexDigit(v[i + 1]) >= 0 && HexDigit(v[i + 2]) >= 0) {
      out += static_cast<char>(HexDigit(v[i + 1]) * 16 + HexDigit(v[i + 2]));
      i += 2;
    } else {
      out += v[i];
    }
  }
  return out;
}

}  // namespace

std::string EncodeUriValue(std::string_view value) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (char c : value) {
    if (c == '%' || c == '&' || c == '=' || c == '?' || c == '#' || c == ' ') {
      out += '%';
      out += kHex[static_cast<unsigned char>(c) >> 4];
      out += kHex[static_cast<unsigned char>(c) & 15];
    } else {
      out += c;
    }
  }
  return out;
}

std::string EncodeUriPath(std::string_view path) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (char c : path) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (c == '%' || c == '?' || c == '#' || u <= 0x20 || u == 0x7f) {
      out += '%';
      out += kHex[u >> 4];
      out += kHex[u & 15];
    } else {
      out += c;
    }
  }
  return out;
}

std::string ParsedUri::Path() const { return has_scheme ? Decode(location) : location; }

absl::StatusOr<ParsedUri> ParseUri(std::string_view uri) {
  ParsedUri out;
  if (uri.empty()) return absl::InvalidArgumentError("empty storage URI");
  std::string_view rest = uri;
  size_t sep = uri.find("://");
  if (sep != std::string_view::npos) {
    out.scheme = absl::AsciiStrToLower(AV(uri.substr(0, sep)));
    for (char c : out.scheme) {
      if (!absl::ascii_isalnum(c) && c != '+' && c != '-' && c != '.') {
        return absl::InvalidArgumentError(StrCat("bad scheme in storage URI '", uri, "'"));
      }
    }
    rest = uri.substr(sep + 3);
    out.has_scheme = true;
  } else {
    out.scheme = "file";
  }
  size_t q = rest.find('?');
  out.location = std::string(rest.substr(0, q));
  if (q != std::string_view::npos) {
    for (absl::string_view kv : absl::StrSplit(AV(rest.substr(q + 1)), '&', absl::SkipEmpty())) {
      std::pair<std::string, std::string> p = absl::StrSplit(kv, absl::MaxSplits('=', 1));
      out.params[Decode(p.first)] = Decode(p.second);
    }
  }
  return out;
}

absl::StatusOr<bool> ParsedUri::Bool(std::string_view key, bool def) const {
  auto it = params.find(std::string(key));
  if (it == params.end()) return def;
  std::string v = absl::AsciiStrToLower(it->second);
  if (v == "1" || v == "true" || v == "yes" || v == "on" || v.empty()) return true;
  if (v == "0" || v == "false" || v == "no" || v == "off") return false;
  return absl::InvalidArgumentError(StrCat("URI parameter ", key, "=", it->second, " is not a boolean"));
}

absl::StatusOr<int64_t> ParsedUri::Int(std::string_view key, int64_t def) const {
  auto it = params.find(std::string(key));
  if (it == params.end()) return def;
  int64_t v;
  if (!absl::SimpleAtoi(it->second, &v)) {
    return absl::InvalidArgumentError(StrCat("URI parameter ", key, "=", it->second, " is not an integer"));
  }
  return v;
}

absl::StatusOr<int64_t> ParsedUri::Bytes(std::string_view key, int64_t def) const {
  auto it = params.find(std::string(key));
  if (it == params.end()) return def;
  auto n = ParseByteCount(it->second, /*binary=*/true);
  if (!n) {
    return absl::InvalidArgumentError(
        StrCat("URI parameter ", key, "=", it->second, " is not a byte count (e.g. 64M)"));
  }
  return *n;
}

absl::StatusOr<double> ParsedUri::Double(std::string_view key, double def) const {
  auto it = params.find(std::string(key));
  if (it == params.end()) return def;
  double d;
  if (!ParseDouble(it->second, &d)) {
    return absl::InvalidArgumentError(StrCat("URI parameter ", key, "=", it->second, " is not a number"));
  }
  return d;
}

absl::StatusOr<double> ParsedUri::Seconds(std::string_view key, double def) const {
  auto it = params.find(std::string(key));
  if (it == params.end()) return def;
  auto d = ParseDuration(it->second);
  if (!d) {
    return absl::InvalidArgumentError(StrCat("URI parameter ", key, "=", it->second, " is not a duration (e.g. 5ms)"));
  }
  return *d;
}

std::string ParsedUri::Str(std::string_view key, std::string_view def) const {
  auto it = params.find(std::string(key));
  return it == params.end() ? std::string(def) : it->second;
}

}  // namespace ckpt
