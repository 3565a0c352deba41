// The codec workers' step alone: every codec's frame passes the reader's
// checks and decodes to the staged bytes; bare blocks stay as staged.
#include "pipeline/block_encoder.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "format/frame_check.h"
#include "util/aligned_buffer.h"
#include "util/hash.h"

namespace ckpt {
namespace {

std::vector<std::byte> Smooth(size_t n) {  // bf16-like values: compressible
  std::vector<std::byte> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<std::byte>(i % 2 == 0 ? (i / 64) % 7 : 0x3f);
  return v;
}

std::vector<std::byte> Noise(size_t n) {
  std::mt19937_64 rng(7);
  std::vector<std::byte> v(n);
  for (auto& b : v) b = static_cast<std::byte>(rng());
  return v;
}

struct Slot {
  AlignedBuffer buf;
  explicit Slot(const std::vector<std::byte>& raw) {
    buf = std::move(AlignedBuffer::Allocate(FrameLength(raw.size()), false)).value();
    std::memcpy(buf.data(), raw.data(), raw.size());
  }
};

TEST(BlockEncoder, EveryCodecsFramePassesTheReadersChecksAndDecodesBack) {
  BlockCodec codec;
  std::vector<std::byte> scratch(BlockCodec::MaxStoredBytes(1 << 20));
  std::vector<std::byte> decoded;
  for (Codec c : {Codec::kNone, Codec::kZstd, Codec::kShuffleZstd}) {
    for (const auto& raw : {Smooth(1 << 20), Noise(300000), Smooth(4095)}) {
      SCOPED_TRACE(testing::Message() << CodecName(c) << " " << raw.size() << " bytes");
      Slot slot(raw);
      BlockEncoding how{true, c, 3};
      auto e = EncodeBlockInPlace(codec, how, DType::kBF16, 17, slot.buf.data(), static_cast<uint32_t>(raw.size()),
                                  absl::Span<std::byte>(scratch));
      ASSERT_TRUE(e.ok()) << e.status();
      EXPECT_EQ(e->raw_len, raw.size());
      EXPECT_EQ(e->raw_hash, Xxh3(raw.data(), raw.size()));
      EXPECT_EQ(e->frame_len % 4096, 0u);
      EXPECT_EQ(e->frame_len, FrameLength(e->stored_len));
      EXPECT_EQ(e->flags & kFlagBareBlock, 0);
      if (c == Codec::kNone || raw.size() == 300000) {
        EXPECT_EQ(e->codec, static_cast<uint8_t>(Codec::kNone)) << "noise is stored raw";
        EXPECT_EQ(e->stored_len, raw.size());
      } else {
        EXPECT_NE(e->codec, static_cast<uint8_t>(Codec::kNone));  // shuffle may settle for plain zstd
        EXPECT_LT(e->stored_len, raw.size());
      }
      const absl::Span<const std::byte> frame(slot.buf.data(), e->frame_len);
      ASSERT_TRUE(CheckFrame(frame, *e, 17, "test").ok());
      auto back = DecodeFrame(codec, frame, *e, decoded, "test");
      ASSERT_TRUE(back.ok()) << back.status();
      ASSERT_EQ(back->size(), raw.size());
      EXPECT_EQ(std::memcmp(back->data(), raw.data(), raw.size()), 0);
      // The reader finds one flipped stored byte, and a frame of another id.
      EXPECT_FALSE(CheckFrame(frame, *e, 18, "test").ok());
      slot.buf.data()[e->stored_len / 2] ^= std::byte{0x10};
      EXPECT_FALSE(CheckFrame(frame, *e, 17, "test").ok());
    }
  }
}

// A delta's elements are small integers (zig-zag differences), not
// floats: shuffling them unrotated keeps a difference under 128 within one
// byte plane. The same bytes as a whole float block are rotated.
TEST(BlockEncoder, FloatDeltasAreShuffledUnrotated) {
  BlockCodec codec;
  std::vector<std::byte> scratch(BlockCodec::MaxStoredBytes(1 << 16));
  std::vector<std::byte> diffs(1 << 16);
  std::mt19937_64 rng(3);
  for (size_t i = 0; i < diffs.size(); i += 2) diffs[i] = static_cast<std::byte>(rng() % 128);
  for (bool delta : {false, true}) {
    Slot slot(diffs);
    BlockEncoding how{true, Codec::kShuffleZstd, 1};
    how.delta = delta;
    how.raw_hash = 99;
    auto e = EncodeBlockInPlace(codec, how, DType::kBF16, 3, slot.buf.data(), static_cast<uint32_t>(diffs.size()),
                                absl::Span<std::byte>(scratch));
    ASSERT_TRUE(e.ok()) << e.status();
    ASSERT_EQ(e->codec, static_cast<uint8_t>(Codec::kShuffleZstd));
    EXPECT_EQ((e->flags & kFlagRotated) != 0, !delta);
    EXPECT_EQ((e->flags & kFlagDelta) != 0, delta);
    std::vector<std::byte> back(diffs.size());
    ASSERT_TRUE(codec
                    .Decode(Codec::kShuffleZstd, e->elem_width, e->flags,
                            absl::Span<const std::byte>(slot.buf.data(), e->stored_len), absl::Span<std::byte>(back),
                            "test")
                    .ok());
    EXPECT_EQ(back, diffs);
  }
}

TEST(BlockEncoder, BareBlocksAreWrittenExactlyAsStaged) {
  BlockCodec codec;
  std::vector<std::byte> scratch(BlockCodec::MaxStoredBytes(1 << 16));
  const std::vector<std::byte> raw = Smooth(1 << 16);
  Slot slot(raw);
  // The codec asked for is ignored: an HDF5 dataset holds raw values.
  BlockEncoding how{false, Codec::kZstd, 3};
  auto e = EncodeBlockInPlace(codec, how, DType::kF32, 3, slot.buf.data(), static_cast<uint32_t>(raw.size()),
                              absl::Span<std::byte>(scratch));
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->flags, kFlagBareBlock);
  EXPECT_EQ(e->codec, static_cast<uint8_t>(Codec::kNone));
  EXPECT_EQ(e->frame_len, raw.size());
  EXPECT_EQ(e->stored_hash, Xxh3(raw.data(), raw.size()));
  EXPECT_EQ(e->elem_width, 4);
  EXPECT_EQ(std::memcmp(slot.buf.data(), raw.data(), raw.size()), 0);
  EXPECT_TRUE(CheckFrame(absl::Span<const std::byte>(slot.buf.data(), e->frame_len), *e, 3, "test").ok());
}

}  // namespace
}  // namespace ckpt
