// libFuzzer target: header, footer, index and trailer decoders on arbitrary
// bytes.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "format/data_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::byte> buf(ckpt::kDataHeaderSize, std::byte{0});
  std::memcpy(buf.data(), data, std::min(size, buf.size()));
  (void)ckpt::DecodeDataHeader(buf.data(), "fuzz");
  if (size >= ckpt::kFooterSize) {
    (void)ckpt::DecodeFooter(reinterpret_cast<const std::byte*>(data + size - ckpt::kFooterSize), "fuzz", 0);
  }
  if (size >= ckpt::kTrailerSize) {
    (void)ckpt::DecodeTrailer(reinterpret_cast<const std::byte*>(data), "fuzz", 0);
  }
  auto idx = ckpt::DecodeIndex(std::string(reinterpret_cast<const char*>(data), size), "fuzz", 0);
  if (idx.ok() && ckpt::EncodeIndex(*idx) != std::string(reinterpret_cast<const char*>(data), size)) {
    __builtin_trap();
  }
  return 0;
}
