// libFuzzer target: the manifest decoder never crashes, and whatever it
// accepts re-encodes to the same bytes, whether its grids are expanded or
// kept as grids (both forms accept the same inputs). Grids (version 4) may describe at
// most 2^16 chunks here, so a few bytes cannot ask for gigabytes. The ranged
// reader of version 4 never crashes either, and reads every part of what the
// whole decoder accepted.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "format/manifest.h"
#include "format/manifest_part.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  auto m = ckpt::DecodeManifest(bytes, "fuzz", uint64_t{1} << 16);
  if (m.ok()) {
    if (ckpt::EncodeManifest(*m) != bytes) std::abort();
  }
  // Kept as grids, it accepts exactly the same inputs and re-encodes the same.
  auto grids = ckpt::DecodeManifest(bytes, "fuzz", uint64_t{1} << 16, ckpt::GridChunks::kGridsOnly);
  if (grids.ok() != m.ok()) std::abort();
  if (grids.ok() && ckpt::EncodeManifest(*grids) != bytes) std::abort();
  ckpt::ManifestWants wants;
  if (m.ok()) {
    for (const ckpt::ManifestTensor& t : m->tensors)
      wants.boxes.push_back({t.spec.fqn, ckpt::Box::Whole(t.spec.shape)});
    for (const ckpt::ManifestBlob& b : m->blobs) wants.blobs.push_back({b.name, b.rank});
  } else {
    wants.boxes.push_back({"a", ckpt::Box({0}, {1})});
    wants.blobs.push_back({"rng", 0});
  }
  auto part = ckpt::ReadManifestPart(
      [&](uint64_t offset, uint64_t len) -> absl::StatusOr<std::string> { return bytes.substr(offset, len); },
      bytes.size(), wants, "fuzz");
  if (m.ok() && m->format_version >= 4 && !part.ok()) std::abort();
  return 0;
}
