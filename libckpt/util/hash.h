// xxh3-64, the checksum of every stored structure.
#ifndef CKPT_UTIL_HASH_H_
#define CKPT_UTIL_HASH_H_

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace ckpt {

uint64_t Xxh3(const void* data, size_t size);
inline uint64_t Xxh3(std::string_view s) { return Xxh3(s.data(), s.size()); }
uint64_t Xxh3Seeded(const void* data, size_t size, uint64_t seed);

/// xxh3-64 of bytes given in pieces: the same value as Xxh3 of them all.
class Xxh3Stream {
 public:
  Xxh3Stream();
  ~Xxh3Stream();
  Xxh3Stream(const Xxh3Stream&) = delete;
  Xxh3Stream& operator=(const Xxh3Stream&) = delete;
  void Reset();
  void Update(const void* data, size_t size);
  uint64_t Digest() const;

 private:
  void* state_;  // XXH3_state_t
};

/// "0x0123456789abcdef".
std::string_view HexHashTo(uint64_t hash, char (&buf)[19]);

}  // namespace ckpt

#endif  // CKPT_UTIL_HASH_H_
