// libFuzzer target: the LATEST pointer parser.
#include <cstdint>
#include <string>

#include "format/root_files.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  auto step = ckpt::DecodeLatest(text);
  if (step.ok() && ckpt::EncodeLatest(*step) != text) __builtin_trap();
  return 0;
}
