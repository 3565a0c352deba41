// libFuzzer target: the decoder of the coordinator's state records (what
// `ckpt coordinator history` and a replaying coordinator read from a journal
// or from etcd, where anyone with write access may have put bytes). The
// input is cut into records at each 0x00 0xff pair; every one is decoded and
// the decoded ones go through the contradiction check. Anything may be
// refused; nothing may crash or read out of bounds.
#include <cstdint>
#include <string_view>

#include "coordinator/records.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  ckpt::coord::History h;
  int64_t seq = 0;
  while (true) {
    const size_t cut = in.find(std::string_view("\x00\xff", 2));
    auto r = ckpt::coord::DecodeRecord(++seq, in.substr(0, cut));
    if (r.ok()) h.Add(std::move(*r));
    if (cut == std::string_view::npos) break;
    in.remove_prefix(cut + 2);
  }
  return 0;
}
