// SHA-256 (FIPS 180-4), for the SHA256SUMS that sit beside safetensors
// files, which carry no checksums of their own.
#ifndef CKPT_UTIL_SHA256_H_
#define CKPT_UTIL_SHA256_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ckpt {

class Sha256 {
 public:
  Sha256();
  void Update(const void* data, size_t n);
  /// The digest; the object must not be updated afterwards.
  std::array<uint8_t, 32> Finish();
  /// Finish() as 64 lower-case hex digits.
  std::string FinishHex();

 private:
  void Block(const uint8_t* p);
  uint32_t h_[8];
  uint8_t buf_[64];
  size_t fill_ = 0;
  uint64_t bytes_ = 0;
};

/// Parses one line of a SHA256SUMS file ("<64 hex>  <name>" or
/// "<64 hex> *<name>"); false when it is not one.
bool ParseSha256SumLine(std::string_view line, std::string* hex, std::string* name);

}  // namespace ckpt

#endif  // CKPT_UTIL_SHA256_H_
