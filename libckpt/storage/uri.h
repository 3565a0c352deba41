// Splitting storage URIs: "scheme://location?key=value&key=value".
#ifndef CKPT_STORAGE_URI_H_
#define CKPT_STORAGE_URI_H_

#include <map>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace ckpt {

struct ParsedUri {
  std::string scheme;    ///< "file" for a plain path
  std::string location;  ///< what follows "scheme://", without the query
  std::map<std::string, std::string> params;

  /// Boolean parameter: "1/true/yes/on" or "0/false/no/off"; `def` if unset.
  absl::StatusOr<bool> Bool(std::string_view key, bool def) const;
  absl::StatusOr<int64_t> Int(std::string_view key, int64_t def) const;
  std::string Str(std::string_view key, std::string_view def) const;
};

absl::StatusOr<ParsedUri> ParseUri(std::string_view uri);

}  // namespace ckpt

#endif  // CKPT_STORAGE_URI_H_
