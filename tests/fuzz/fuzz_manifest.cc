// libFuzzer target: the manifest decoder never crashes, and whatever it
// accepts re-encodes to the same bytes.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "format/manifest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  auto m = ckpt::DecodeManifest(bytes, "fuzz");
  if (m.ok()) {
    if (ckpt::EncodeManifest(*m) != bytes) std::abort();
  }
  return 0;
}
