// libFuzzer target: the CLAIM parser (a step's one-writer record).
#include <cstdint>
#include <string>

#include "format/root_files.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  auto claim = ckpt::DecodeClaim(text, "CLAIM");
  if (!claim.ok()) return 0;
  // What decodes encodes to a claim that decodes to the same fields.
  auto again = ckpt::DecodeClaim(ckpt::EncodeClaim(*claim), "CLAIM");
  if (!again.ok() || again->save_id != claim->save_id || again->world_size != claim->world_size ||
      again->host != claim->host || again->pid != claim->pid || again->pid_start != claim->pid_start ||
      again->claimed_unix_ns != claim->claimed_unix_ns) {
    __builtin_trap();
  }
  return 0;
}
