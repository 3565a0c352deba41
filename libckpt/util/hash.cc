#include "util/hash.h"

#include <xxhash.h>

#include <cstdio>

namespace ckpt {

uint64_t Xxh3(const void* data, size_t size) { return XXH3_64bits(data, size); }

uint64_t Xxh3Seeded(const void* data, size_t size, uint64_t seed) { return XXH3_64bits_withSeed(data, size, seed); }

std::string_view HexHashTo(uint64_t hash, char (&buf)[19]) {
  std::snprintf(buf, sizeof(buf), "0x%016llx", static_cast<unsigned long long>(hash));
  return std::string_view(buf, 18);
}

}  // namespace ckpt
