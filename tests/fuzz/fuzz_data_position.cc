// libFuzzer target: the data position record parser (ckpt/data_position.h).
#include <cstdint>
#include <string>

#include "ckpt/data_position.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  ckpt::DataPosition p(1000, 8, 7, true);
  if (!p.Restore(text).ok()) return 0;
  // What it accepted is a position of this dataset, and encodes back to it.
  if (p.consumed() < 0 || p.consumed() >= p.size() || p.epoch() < 0) __builtin_trap();
  ckpt::DataPosition q(1000, 8, 7, true);
  if (!q.Restore(p.Encode()).ok() || q.epoch() != p.epoch() || q.consumed() != p.consumed()) __builtin_trap();
  for (int64_t i : p.Batch(2, 3)) {
    if (i < 0 || i >= p.size()) __builtin_trap();
  }
  return 0;
}
