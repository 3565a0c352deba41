// Little-endian encoding and bounds-checked decoding of on-disk structures.
#ifndef CKPT_UTIL_BYTES_H_
#define CKPT_UTIL_BYTES_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "util/strings.h"

namespace ckpt {

inline void StoreLE16(void* p, uint16_t v) {
  uint8_t* b = static_cast<uint8_t*>(p);
  b[0] = static_cast<uint8_t>(v);
  b[1] = static_cast<uint8_t>(v >> 8);
}
inline void StoreLE32(void* p, uint32_t v) {
  uint8_t* b = static_cast<uint8_t*>(p);
  for (int i = 0; i < 4; ++i) b[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline void StoreLE64(void* p, uint64_t v) {
  uint8_t* b = static_cast<uint8_t*>(p);
  for (int i = 0; i < 8; ++i) b[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline uint16_t LoadLE16(const void* p) {
  const uint8_t* b = static_cast<const uint8_t*>(p);
  return static_cast<uint16_t>(b[0] | (b[1] << 8));
}
inline uint32_t LoadLE32(const void* p) {
  const uint8_t* b = static_cast<const uint8_t*>(p);
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | b[i];
  return v;
}
inline uint64_t LoadLE64(const void* p) {
  const uint8_t* b = static_cast<const uint8_t*>(p);
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | b[i];
  return v;
}

/// Appends little-endian fields and LEB128 varints to a string.
class ByteWriter {
 public:
  void U8(uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void U16(uint16_t v) { Fixed(v, 2); }
  void U32(uint32_t v) { Fixed(v, 4); }
  void U64(uint64_t v) { Fixed(v, 8); }
  void Var(uint64_t v) {
    while (v >= 0x80) {
      out_.push_back(static_cast<char>((v & 0x7f) | 0x80));
      v >>= 7;
    }
    out_.push_back(static_cast<char>(v));
  }
  /// Zig-zag signed varint.
  void SVar(int64_t v) { Var((static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63)); }
  void Str(std::string_view s) {
    Var(s.size());
    out_.append(s);
  }
  void Raw(const void* p, size_t n) { out_.append(static_cast<const char*>(p), n); }
  size_t size() const { return out_.size(); }
  std::string& str() { return out_; }
  std::string Take() { return std::move(out_); }

 private:
  void Fixed(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_.push_back(static_cast<char>(v >> (8 * i)));
  }
  std::string out_;
};

/// Reads what ByteWriter wrote. Every read is bounds-checked; the first
/// failure sticks and names `what` and the byte offset (relative to
/// `base_offset`, so messages give file offsets).
class ByteReader {
 public:
  ByteReader(absl::Span<const uint8_t> data, std::string what, uint64_t base_offset = 0)
      : data_(data), what_(std::move(what)), base_(base_offset) {}
  ByteReader(std::string_view data, std::string what, uint64_t base_offset = 0)
      : ByteReader(absl::Span<const uint8_t>(reinterpret_cast<const uint8_t*>(data.data()), data.size()),
                   std::move(what), base_offset) {}

  uint8_t U8() {
    const uint8_t* p = Take(1);
    return p ? p[0] : 0;
  }
  uint16_t U16() {
    const uint8_t* p = Take(2);
    return p ? LoadLE16(p) : 0;
  }
  uint32_t U32() {
    const uint8_t* p = Take(4);
    return p ? LoadLE32(p) : 0;
  }
  uint64_t U64() {
    const uint8_t* p = Take(8);
    return p ? LoadLE64(p) : 0;
  }
  uint64_t Var() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      const uint8_t* p = Take(1);
      if (p == nullptr) return 0;
      v |= static_cast<uint64_t>(*p & 0x7f) << shift;
      if ((*p & 0x80) == 0) return v;
    }
    Fail("varint longer than 10 bytes");
    return 0;
  }
  int64_t SVar() {
    uint64_t u = Var();
    return static_cast<int64_t>((u >> 1) ^ (~(u & 1) + 1));
  }
  /// A varint bounded by `limit` (counts, sizes); fails when above.
  uint64_t Count(uint64_t limit, std::string_view field) {
    uint64_t pos = pos_;
    uint64_t v = Var();
    if (ok() && v > limit) {
      FailAt(pos, StrCat(field, " = ", v, " exceeds the limit ", limit));
      return 0;
    }
    return v;
  }
  std::string Str(uint64_t max_len = 1 << 20) {
    uint64_t n = Count(max_len, "string length");
    const uint8_t* p = Take(n);
    return p ? std::string(reinterpret_cast<const char*>(p), n) : std::string();
  }
  const uint8_t* Bytes(size_t n) { return Take(n); }

  bool ok() const { return status_.ok(); }
  const absl::Status& status() const { return status_; }
  size_t pos() const { return pos_; }
  size_t remaining() const { return data_.size() - pos_; }
  bool AtEnd() const { return pos_ == data_.size(); }

  void Fail(std::string_view why) { FailAt(pos_, why); }
  void FailAt(uint64_t pos, std::string_view why) {
    if (status_.ok()) {
      status_ = absl::DataLossError(StrCat(what_, ": ", why, " at byte offset ", base_ + pos));
    }
  }

 private:
  const uint8_t* Take(size_t n) {
    if (!status_.ok()) return nullptr;
    if (n > data_.size() - pos_) {
      status_ = absl::DataLossError(StrCat(what_, ": truncated: needs ", n, " bytes at byte offset ", base_ + pos_,
                                           " but only ", data_.size() - pos_, " remain"));
      return nullptr;
    }
    const uint8_t* p = data_.data() + pos_;
    pos_ += n;
    return p;
  }

  absl::Span<const uint8_t> data_;
  std::string what_;
  uint64_t base_;
  size_t pos_ = 0;
  absl::Status status_;
};

inline absl::Span<const std::byte> AsBytesView(std::string_view s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

}  // namespace ckpt

#endif  // CKPT_UTIL_BYTES_H_
