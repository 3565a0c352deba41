// libFuzzer target: the manifest decoder never crashes, and whatever it
// accepts re-encodes to the same bytes. Grids (version 4) may describe at
// most 2^16 chunks here, so a few bytes cannot ask for gigabytes.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "format/manifest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  auto m = ckpt::DecodeManifest(bytes, "fuzz", uint64_t{1} << 16);
  if (m.ok()) {
    if (ckpt::EncodeManifest(*m) != bytes) std::abort();
  }
  return 0;
}
