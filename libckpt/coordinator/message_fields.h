// How a coordinator message's fields are walked: one Fields() per message
// (messages.h) that a FieldWriter walks to encode and a FieldReader to
// decode. Nothing here changes when a message is added.
#ifndef CKPT_COORDINATOR_MESSAGE_FIELDS_H_
#define CKPT_COORDINATOR_MESSAGE_FIELDS_H_

#include <bit>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "util/bytes.h"
#include "util/strings.h"

namespace ckpt::coord {

// Most replica hashes one vote may carry, and most parts of a gather.
inline constexpr uint64_t kMaxListEntries = uint64_t{1} << 24;
// Most local ranks one member may bring.
inline constexpr uint64_t kMaxLocalRanks = uint64_t{1} << 20;
// Longest nonce and MAC.
inline constexpr uint64_t kMaxNonceBytes = 256;
inline constexpr uint64_t kMaxMacBytes = 64;
inline constexpr uint64_t kMaxHeldSteps = 64;

// Each message's fields are listed once, in a Fields() function that a
// FieldWriter walks to encode and a FieldReader walks to decode. A field
// read past the payload, or over its limit, fails the reader (DataLoss,
// naming the message and the byte offset); every later read is a no-op.
class FieldWriter {
 public:
  static constexpr bool kReading = false;
  void U8(uint8_t v) { w_.U8(v); }
  void Bool(bool v) { w_.U8(v ? 1 : 0); }
  void Var(uint64_t v) { w_.Var(v); }
  void Count(uint64_t v, uint64_t /*limit*/, std::string_view /*what*/) { w_.Var(v); }
  void SVar(int64_t v) { w_.SVar(v); }
  void U64(uint64_t v) { w_.U64(v); }
  void F64(double v) { w_.U64(std::bit_cast<uint64_t>(v)); }
  void Str(const std::string& s, uint64_t /*limit*/) { w_.Str(s); }
  // An index into a list of `n`: written as it is.
  void Index(uint32_t v, size_t /*n*/, std::string_view /*what*/, std::string_view /*of*/) { w_.Var(v); }
  // A part appended in a later version: written when `present`.
  bool Tail(bool present) const { return present; }
  // A condition on what was read (nothing to check when writing).
  void Check(bool /*holds*/, std::string_view /*why*/) {}
  bool ok() const { return true; }
  template <typename T, typename Each>
  void List(const std::vector<T>& v, uint64_t /*limit*/, std::string_view /*what*/, Each each) {
    w_.Var(v.size());
    for (const T& x : v) each(x);
  }
  // An enum that travels as a byte.
  template <typename E>
  void Enum(E v, E /*last*/, std::string_view /*what*/) {
    w_.U8(static_cast<uint8_t>(v));
  }
  // The largest part a message may carry (the reader's frame limit).
  uint64_t PartLimit() const { return std::numeric_limits<uint64_t>::max(); }
  std::string Take() { return w_.Take(); }

 private:
  ByteWriter w_;
};

class FieldReader {
 public:
  static constexpr bool kReading = true;
  FieldReader(std::string_view payload, std::string what, uint64_t part_limit)
      : r_(payload, std::move(what)), part_limit_(part_limit) {}
  void U8(uint8_t& v) { v = r_.U8(); }
  void Bool(bool& v) { v = r_.U8() != 0; }
  void Var(uint64_t& v) { v = r_.Var(); }
  void Count(uint64_t& v, uint64_t limit, std::string_view what) { v = r_.Count(limit, what); }
  void Count(uint32_t& v, uint64_t limit, std::string_view what) { v = static_cast<uint32_t>(r_.Count(limit, what)); }
  void SVar(int64_t& v) { v = r_.SVar(); }
  void U64(uint64_t& v) { v = r_.U64(); }
  void F64(double& v) { v = std::bit_cast<double>(r_.U64()); }
  void Str(std::string& s, uint64_t limit) { s = r_.Str(limit); }
  // An index into a list of `n` ("holder 2 is not one of the 2 endpoints").
  void Index(uint32_t& v, size_t n, std::string_view what, std::string_view of) {
    const uint64_t x = r_.Var();
    if (r_.ok() && x >= n) r_.Fail(StrCat(what, " ", x, " is not one of the ", n, " ", of));
    v = static_cast<uint32_t>(x);
  }
  // A part appended in a later version: read when bytes remain.
  bool Tail(bool /*present*/) const { return r_.ok() && !r_.AtEnd(); }
  // Fails the read with `why` unless what was read `holds`.
  void Check(bool holds, std::string_view why) {
    if (r_.ok() && !holds) r_.Fail(why);
  }
  bool ok() const { return r_.ok(); }
  const absl::Status& status() const { return r_.status(); }
  // An enum that travels as a byte, no larger than `last` ("unknown collective 9").
  template <typename E>
  void Enum(E& v, E last, std::string_view what) {
    const uint8_t x = r_.U8();
    if (r_.ok() && x > static_cast<uint8_t>(last)) r_.Fail(StrCat("unknown ", what, " ", static_cast<int>(x)));
    v = static_cast<E>(x);
  }
  uint64_t PartLimit() const { return part_limit_; }
  template <typename T, typename Each>
  void List(std::vector<T>& v, uint64_t limit, std::string_view what, Each each) {
    const uint64_t n = r_.Count(limit, what);
    for (uint64_t i = 0; i < n && r_.ok(); ++i) {
      T x{};
      each(x);
      v.push_back(std::move(x));
    }
  }

 private:
  ByteReader r_;
  uint64_t part_limit_;
};

}  // namespace ckpt::coord

#endif  // CKPT_COORDINATOR_MESSAGE_FIELDS_H_
