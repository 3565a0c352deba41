// Splitting storage URIs: "scheme://location?key=value&key=value".
#ifndef CKPT_NET_URI_H_
#define CKPT_NET_URI_H_

#include <map>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace ckpt {

struct ParsedUri {
  std::string scheme;    ///< "file" for a plain path
  std::string location;  ///< what follows "scheme://", without the query, as written
  std::map<std::string, std::string> params;
  bool has_scheme = false;  ///< false: a plain path

  /// The location as a path or name: percent-decoded when the URI has a
  /// scheme ("file:///data/run%207" is "/data/run 7", UTF-8 names too); a
  /// plain path is taken as it is ("/data/100%" stays). Wrappers that pass
  /// their location on as a URI (faulty://) use `location`.
  std::string Path() const;

  /// Boolean parameter: "1/true/yes/on" or "0/false/no/off"; `def` if unset.
  absl::StatusOr<bool> Bool(std::string_view key, bool def) const;
  absl::StatusOr<int64_t> Int(std::string_view key, int64_t def) const;
  /// Byte count with an optional K, M, G or T suffix (powers of 1024).
  absl::StatusOr<int64_t> Bytes(std::string_view key, int64_t def) const;
  /// Duration in seconds: "250us", "5ms", "2s", "1.5" (seconds).
  absl::StatusOr<double> Seconds(std::string_view key, double def) const;
  absl::StatusOr<double> Double(std::string_view key, double def) const;
  std::string Str(std::string_view key, std::string_view def) const;
};

/// Splits a URI. Query values are percent-decoded, so a URI can carry
/// another one: "tiered://?local=%2Fnvme%2Fck&durable=file%3A%2F%2F%2Fs%3Fdirect%3D0".
absl::StatusOr<ParsedUri> ParseUri(std::string_view uri);

/// Percent-encodes the characters that would end a query value.
std::string EncodeUriValue(std::string_view value);

/// Percent-encodes what a path needs to stay itself as a URI's location
/// ('%', '?', '#', spaces and control bytes), for building "scheme://" +
/// path from a path that may hold them.
std::string EncodeUriPath(std::string_view path);

}  // namespace ckpt

#endif  // CKPT_NET_URI_H_
