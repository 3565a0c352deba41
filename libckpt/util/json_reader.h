// A strict JSON reader (RFC 8259) for headers that arrive from outside:
// bounded nesting, duplicate keys refused, strings checked as UTF-8, and
// errors that give the byte offset.
#ifndef CKPT_UTIL_JSON_READER_H_
#define CKPT_UTIL_JSON_READER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace ckpt {

struct JsonValue {
  enum class Kind : uint8_t { kNull, kBool, kNumber, kString, kArray, kObject };
  Kind kind = Kind::kNull;
  bool boolean = false;
  std::string text;              ///< a string's decoded value, or a number's literal text
  std::vector<JsonValue> items;  ///< array elements
  struct Member;
  std::vector<Member> members;  ///< object members, in order
  uint64_t offset = 0;          ///< where the value starts in the input

  bool is_object() const { return kind == Kind::kObject; }
  bool is_array() const { return kind == Kind::kArray; }
  bool is_string() const { return kind == Kind::kString; }
  /// The member named `key` of an object, or null.
  const JsonValue* Find(std::string_view key) const;
  /// A number that is a non-negative integer written without fraction or
  /// exponent and fits in 64 bits.
  std::optional<uint64_t> AsUint64() const;
};

struct JsonValue::Member {
  std::string key;
  JsonValue value;
};

/// Whether `s` is well-formed UTF-8 (shortest forms, no surrogates, at most
/// U+10FFFF): what a JSON string may hold.
bool IsValidUtf8(std::string_view s);

/// Parses `text` as exactly one JSON value (surrounding whitespace allowed).
/// `what` names the input in errors, which are InvalidArgument.
absl::StatusOr<JsonValue> ParseJson(std::string_view text, std::string_view what, int max_depth = 64);

}  // namespace ckpt

#endif  // CKPT_UTIL_JSON_READER_H_
