// String helpers. Debian's abseil has its own string_view type, so StrCat
// here also accepts std::string_view arguments.
#ifndef CKPT_UTIL_STRINGS_H_
#define CKPT_UTIL_STRINGS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace ckpt {
namespace strings_internal {
template <typename T>
const T& Arg(const T& v) {
  return v;
}
inline absl::string_view Arg(std::string_view v) { return {v.data(), v.size()}; }
}  // namespace strings_internal

/// absl::string_view of a std::string_view.
inline absl::string_view AV(std::string_view v) { return {v.data(), v.size()}; }
/// std::string_view of an absl::string_view.
inline std::string_view SV(absl::string_view v) { return {v.data(), v.size()}; }

template <typename... Args>
std::string StrCat(const Args&... args) {
  return absl::StrCat(strings_internal::Arg(args)...);
}

template <typename... Args>
void StrAppend(std::string* out, const Args&... args) {
  absl::StrAppend(out, strings_internal::Arg(args)...);
}

inline bool ConsumePrefix(std::string_view* s, std::string_view prefix) {
  if (!s->starts_with(prefix)) return false;
  s->remove_prefix(prefix.size());
  return true;
}
inline bool ConsumeSuffix(std::string_view* s, std::string_view suffix) {
  if (!s->ends_with(suffix)) return false;
  s->remove_suffix(suffix.size());
  return true;
}

/// `s` without leading and trailing white space.
std::string_view Trim(std::string_view s);

/// Parses a whole decimal integer (optional leading '-'); false otherwise.
bool ParseInt64(std::string_view s, int64_t* out);
/// Parses "0x" and exactly 16 lower-case hex digits (how HexHashTo writes a
/// 64-bit value).
bool ParseHex64(std::string_view s, uint64_t* out);
/// Parses a whole decimal number.
bool ParseDouble(std::string_view s, double* out);

/// The one duration syntax of the tree (CLI flags, URI parameters, failure
/// logs): a non-negative number of seconds with an optional unit us, ms, s,
/// m, h or d ("500ms", "2.5", "15m", "24h"); surrounding spaces are ignored.
std::optional<double> ParseDuration(std::string_view text);

/// The one byte-count syntax: a non-negative number with an optional K, M,
/// G or T, optionally followed by "iB" or "B" ("64M", "1.5GiB", "4096").
/// The multipliers are powers of 1024 when `binary`, else of 1000 (counts
/// such as "125M" parameters). nullopt beyond 2^62 or when malformed.
std::optional<int64_t> ParseByteCount(std::string_view text, bool binary = true);

/// Shell-style glob match ('*' any run, '?' one character).
bool GlobMatch(std::string_view pattern, std::string_view text);

/// `s` with & < > " ' written as XML/HTML entities (SVG text, S3 request bodies).
std::string XmlEscape(std::string_view s);

/// `s` safe to print on a terminal or in a log line: control characters
/// (C0, DEL, NUL, and the C1 range as UTF-8) and backslashes written as
/// \xNN escapes, everything else as it is. For text that came from outside
/// (server error messages, listed names) before it reaches a message.
std::string Printable(std::string_view s);

}  // namespace ckpt

#endif  // CKPT_UTIL_STRINGS_H_
