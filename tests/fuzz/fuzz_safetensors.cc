// libFuzzer target: a safetensors file (the 8-byte length, the JSON header,
// the buffer) and a model.safetensors.index.json.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "format/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto* bytes = reinterpret_cast<const std::byte*>(data);
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  (void)ckpt::DecodeSafetensorsIndex(text, "index.json");
  if (size < 8) return 0;
  auto n = ckpt::DecodeSafetensorsPrefix(bytes, size, "f.safetensors");
  if (!n.ok()) return 0;
  auto file = ckpt::DecodeSafetensorsHeader(text.substr(8, *n), size, "f.safetensors");
  if (!file.ok()) return 0;
  // What decodes is consistent: the tensors tile the buffer, and encoding
  // them again gives a header that decodes to the same tensors.
  uint64_t at = 0;
  for (const auto& t : file->tensors) {
    if (t.begin != at || t.end < t.begin) __builtin_trap();
    at = t.end;
  }
  if (file->data_start + at != size) __builtin_trap();
  const std::string again = ckpt::EncodeSafetensorsHeader(file->tensors, file->metadata);
  auto n2 = ckpt::DecodeSafetensorsPrefix(reinterpret_cast<const std::byte*>(again.data()), again.size() + at, "again");
  if (!n2.ok()) __builtin_trap();
  auto file2 = ckpt::DecodeSafetensorsHeader(std::string_view(again).substr(8, *n2), again.size() + at, "again");
  if (!file2.ok() || file2->tensors.size() != file->tensors.size() || file2->metadata != file->metadata) {
    __builtin_trap();
  }
  for (size_t i = 0; i < file->tensors.size(); ++i) {
    const auto& a = file->tensors[i];
    const auto& b = file2->tensors[i];
    if (a.name != b.name || a.dtype_name != b.dtype_name || a.shape != b.shape || a.begin != b.begin ||
        a.end != b.end) {
      __builtin_trap();
    }
  }
  return 0;
}
