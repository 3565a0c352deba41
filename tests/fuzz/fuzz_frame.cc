// libFuzzer target: a block frame as read from disk, checked and decoded with
// every codec, as a whole block or as a delta (flag bit 3) rebuilt from a
// base of bytes chosen by the input, and refused without one. The first 8
// input bytes choose the index entry fields.
#include <cstdint>
#include <cstring>
#include <vector>

#include "codec/codec.h"
#include "format/frame_check.h"
#include "pipeline/delta_chain.h"
#include "util/block_flags.h"
#include "util/bytes.h"
#include "util/hash.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 8) return 0;
  static ckpt::BlockCodec codec;
  const uint8_t codec_id = data[0] % 4;
  const uint8_t width = data[1] % 9;
  const uint16_t flags = data[2] & (ckpt::kFlagRotated | ckpt::kFlagDelta);
  const uint32_t raw_len = ckpt::LoadLE32(data + 4) % (1 << 20);
  std::vector<std::byte> payload(reinterpret_cast<const std::byte*>(data + 8),
                                 reinterpret_cast<const std::byte*>(data + size));
  // Decode the payload directly with each codec.
  std::vector<std::byte> raw(raw_len);
  (void)codec.Decode(static_cast<ckpt::Codec>(codec_id), width, flags, payload, absl::Span<std::byte>(raw), "fuzz");
  // And as a whole frame with a consistent index entry.
  ckpt::IndexEntry e;
  e.stored_len = static_cast<uint32_t>(payload.size());
  e.raw_len = raw_len;
  e.codec = codec_id;
  e.elem_width = width;
  e.flags = flags;
  e.stored_hash = ckpt::Xxh3(payload.data(), payload.size());
  e.raw_hash = codec_id == 0 ? e.stored_hash : 0;
  e.frame_len = static_cast<uint32_t>(ckpt::FrameLength(e.stored_len));
  std::vector<std::byte> frame(e.frame_len, std::byte{0});
  if (!payload.empty()) std::memcpy(frame.data(), payload.data(), payload.size());
  ckpt::FrameTrailer t;
  t.codec = codec_id;
  t.elem_width = width;
  t.flags = flags;
  t.raw_len = raw_len;
  t.stored_len = e.stored_len;
  t.raw_hash = e.raw_hash;
  t.stored_hash = e.stored_hash;
  ckpt::EncodeTrailer(t, frame.data() + e.stored_len);
  if (ckpt::CheckFrame(frame, e, 0, "fuzz").ok()) {
    std::vector<std::byte> scratch;
    auto whole = ckpt::DecodeFrame(codec, frame, e, scratch, "fuzz");
    if ((flags & ckpt::kFlagDelta) != 0) {
      if (whole.ok()) __builtin_trap();  // a delta is never read without its base
      std::vector<std::byte> pattern(raw_len, std::byte{data[3]});
      const size_t w = size_t{1} << (data[3] % 4);
      const ckpt::DeltaBaseFn base = [&](absl::Span<std::byte> bytes) {
        ckpt::UndoDelta(bytes, pattern, w);
        return absl::OkStatus();
      };
      (void)ckpt::DecodeFrame(codec, frame, e, scratch, "fuzz", &base);
    }
  }
  return 0;
}
