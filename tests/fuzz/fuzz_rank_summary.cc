// libFuzzer target: a rank's summary of a save of layouts, as the leader
// reads it from the storage. A summary that decodes re-encodes to its bytes.
#include <cstdint>
#include <string>

#include "format/rank_summary.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  auto s = ckpt::DecodeRankSummary(bytes, "summary");
  if (s.ok() && ckpt::EncodeRankSummary(*s) != bytes) __builtin_trap();
  return 0;
}
