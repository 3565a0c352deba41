#include "util/hash.h"

#include <xxhash.h>
// libxxhash's x86 build carries AVX2 and AVX-512 variants of xxh3, chosen at
// run time by these entry points; the plain ones stay on SSE2, several times
// slower (docs/performance.md, "Figures behind the code"), and every block is hashed twice
// on a save (raw and stored) and again on a load.
#if defined(__x86_64__) && __has_include(<xxh_x86dispatch.h>)
#include <xxh_x86dispatch.h>
#endif

#include <cstdio>
#include <new>

namespace ckpt {

uint64_t Xxh3(const void* data, size_t size) { return XXH3_64bits(data, size); }

uint64_t Xxh3Seeded(const void* data, size_t size, uint64_t seed) { return XXH3_64bits_withSeed(data, size, seed); }

Xxh3Stream::Xxh3Stream() : state_(XXH3_createState()) {
  if (state_ == nullptr) throw std::bad_alloc();
  Reset();
}

Xxh3Stream::~Xxh3Stream() { XXH3_freeState(static_cast<XXH3_state_t*>(state_)); }

void Xxh3Stream::Reset() { (void)XXH3_64bits_reset(static_cast<XXH3_state_t*>(state_)); }

void Xxh3Stream::Update(const void* data, size_t size) {
  (void)XXH3_64bits_update(static_cast<XXH3_state_t*>(state_), data, size);
}

uint64_t Xxh3Stream::Digest() const { return XXH3_64bits_digest(static_cast<const XXH3_state_t*>(state_)); }

std::string_view HexHashTo(uint64_t hash, char (&buf)[19]) {
  std::snprintf(buf, sizeof(buf), "0x%016llx", static_cast<unsigned long long>(hash));
  return std::string_view(buf, 18);
}

}  // namespace ckpt
