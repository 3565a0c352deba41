// Block codecs: lossless for every dtype, raw fallback, corrupt input caught.
#include "codec/codec.h"

#include <cstring>
#include <random>

#include "ckpt/synthetic.h"
#include "testutil/test_util.h"

namespace ckpt::testing {
namespace {

std::vector<std::byte> Synthetic(DType dt, int64_t n, const char* name = "w") {
  TensorSpec spec{name, dt, {n}};
  std::vector<std::byte> v(static_cast<size_t>(n) * DTypeSize(dt));
  FillSynthetic(spec, Box::Whole(spec.shape), 1, v.data());
  return v;
}

TEST(Codec, RoundTripEveryCodecAndWidth) {
  BlockCodec codec;
  for (DType dt : {DType::kF64, DType::kF32, DType::kBF16, DType::kF16, DType::kF8E4M3, DType::kI64, DType::kI32,
                   DType::kI16, DType::kU8, DType::kBool}) {
    for (Codec c : {Codec::kZstd, Codec::kShuffleZstd}) {
      for (int64_t n : {1, 7, 1000, 65536}) {
        auto raw = Synthetic(dt, n);
        std::vector<std::byte> out(BlockCodec::MaxStoredBytes(raw.size()));
        auto enc = codec.Encode(c, dt, raw, absl::Span<std::byte>(out));
        ASSERT_OK(enc);
        std::vector<std::byte> back(raw.size());
        if (enc->codec == Codec::kNone) continue;  // stored raw by the caller
        EXPECT_LT(enc->stored_len, raw.size());
        ASSERT_OK(codec.Decode(enc->codec, enc->elem_width, enc->flags,
                               absl::Span<const std::byte>(out.data(), enc->stored_len), absl::Span<std::byte>(back),
                               "test"));
        EXPECT_EQ(back, raw) << DTypeName(dt) << " " << CodecName(c) << " n=" << n;
      }
    }
  }
}

TEST(Codec, ShuffleBeatsZstdOnBf16Weights) {
  BlockCodec codec;
  auto raw = Synthetic(DType::kBF16, 1 << 20, "layers.0.mlp.weight");
  std::vector<std::byte> out(BlockCodec::MaxStoredBytes(raw.size()));
  auto z = codec.Encode(Codec::kZstd, DType::kBF16, raw, absl::Span<std::byte>(out));
  auto s = codec.Encode(Codec::kShuffleZstd, DType::kBF16, raw, absl::Span<std::byte>(out));
  ASSERT_OK(z);
  ASSERT_OK(s);
  const double rz = static_cast<double>(z->stored_len) / raw.size();
  const double rs = static_cast<double>(s->stored_len) / raw.size();
  EXPECT_LT(rs, 0.72) << "shuffle-zstd ratio";
  EXPECT_LT(rs, rz);
  EXPECT_EQ(s->flags & kFlagRotated, kFlagRotated);
  // The planes are entropy-coded (Huffman literals, no match search):
  // smaller than level-1 zstd of the same planes (0.678 of the block).
  EXPECT_LT(rs, 0.67) << "shuffle-zstd ratio";
  std::vector<std::byte> back(raw.size());
  ASSERT_OK(codec.Decode(Codec::kShuffleZstd, s->elem_width, s->flags,
                         absl::Span<const std::byte>(out.data(), s->stored_len), absl::Span<std::byte>(back), "test"));
  EXPECT_EQ(back, raw);
  // A level above the default asks for ratio and applies to the planes too.
  BlockCodec strong(9);
  auto s9 = strong.Encode(Codec::kShuffleZstd, DType::kBF16, raw, absl::Span<std::byte>(out));
  ASSERT_OK(s9);
  EXPECT_LT(s9->stored_len, raw.size());
}

TEST(Codec, IncompressibleDataIsStoredRaw) {
  BlockCodec codec;
  std::mt19937_64 rng(1);
  std::vector<std::byte> raw(1 << 16);
  for (auto& b : raw) b = static_cast<std::byte>(rng());
  std::vector<std::byte> out(BlockCodec::MaxStoredBytes(raw.size()));
  for (Codec c : {Codec::kZstd, Codec::kShuffleZstd}) {
    auto enc = codec.Encode(c, DType::kF32, raw, absl::Span<std::byte>(out));
    ASSERT_OK(enc);
    EXPECT_EQ(enc->codec, Codec::kNone) << CodecName(c);
  }
  EXPECT_GT(SampledEntropyBits(raw), 7.9);
  std::vector<std::byte> zeros(1 << 16);
  EXPECT_LT(SampledEntropyBits(zeros), 0.01);
}

// A plane of almost only zero bytes (a delta block's high planes) is coded
// by runs, under Huffman's floor of one bit a byte, and decodes exactly.
TEST(Codec, ASparsePlaneCostsLessThanABitAByte) {
  BlockCodec codec;
  std::mt19937_64 rng(2);
  // 1 MiB of i32: 1 % of the elements small numbers, the rest zero. Plane
  // 3 (the low bytes) is sparse; planes 0 to 2 are all zero.
  std::vector<uint32_t> v(1 << 18, 0);
  for (auto& x : v) {
    if (rng() % 100 == 0) x = 1 + static_cast<uint32_t>(rng() % 255);
  }
  std::vector<std::byte> raw(v.size() * 4);
  std::memcpy(raw.data(), v.data(), raw.size());
  const size_t plane = v.size();
  std::vector<std::byte> low(plane);
  for (size_t i = 0; i < plane; ++i) low[i] = raw[4 * i];
  ASSERT_LT(SampledEntropyBits(low), 0.5);
  std::vector<std::byte> out(BlockCodec::MaxStoredBytes(raw.size()));
  auto enc = codec.Encode(Codec::kShuffleZstd, DType::kI32, raw, absl::Span<std::byte>(out));
  ASSERT_OK(enc);
  ASSERT_EQ(enc->codec, Codec::kShuffleZstd);
  // One bit a byte of the sparse plane alone would be plane / 8.
  EXPECT_LT(enc->stored_len, plane / 16) << enc->stored_len;
  std::vector<std::byte> back(raw.size());
  ASSERT_OK(codec.Decode(enc->codec, enc->elem_width, enc->flags,
                         absl::Span<const std::byte>(out.data(), enc->stored_len), absl::Span<std::byte>(back),
                         "sparse"));
  EXPECT_EQ(back, raw);
}

TEST(Codec, CorruptStoredBytesFailCleanly) {
  BlockCodec codec;
  auto raw = Synthetic(DType::kBF16, 50000);
  std::vector<std::byte> out(BlockCodec::MaxStoredBytes(raw.size()));
  for (Codec c : {Codec::kZstd, Codec::kShuffleZstd}) {
    auto enc = codec.Encode(c, DType::kBF16, raw, absl::Span<std::byte>(out));
    ASSERT_OK(enc);
    ASSERT_NE(enc->codec, Codec::kNone);
    std::mt19937 rng(3);
    int failures = 0, changed = 0;
    for (int trial = 0; trial < 200; ++trial) {
      std::vector<std::byte> copy(out.begin(), out.begin() + enc->stored_len);
      copy[rng() % copy.size()] ^= std::byte(1 << (rng() % 8));
      std::vector<std::byte> back(raw.size());
      absl::Status s = codec.Decode(enc->codec, enc->elem_width, enc->flags, copy, absl::Span<std::byte>(back), "blk");
      // Either the codec notices, or it decodes to different bytes (which
      // the raw checksum catches); it never crashes or overruns.
      if (!s.ok()) {
        ++failures;
        EXPECT_TRUE(absl::IsDataLoss(s)) << s;
      } else if (back != raw) {
        ++changed;
      }
    }
    EXPECT_GT(failures + changed, 150) << "failures " << failures << " changed " << changed;
    std::vector<std::byte> small(raw.size() - 1);
    EXPECT_FALSE(codec
                     .Decode(enc->codec, enc->elem_width, enc->flags,
                             absl::Span<const std::byte>(out.data(), enc->stored_len), absl::Span<std::byte>(small),
                             "blk")
                     .ok());
  }
}

// One list of the codecs' names, for every help line and error.
TEST(Codec, ChoicesNameEveryCodecAndParseBack) {
  EXPECT_EQ(CodecChoices(), "none, zstd, shuffle-zstd or auto");
  for (Codec c : {Codec::kNone, Codec::kZstd, Codec::kShuffleZstd, Codec::kAuto}) {
    EXPECT_EQ(ParseCodec(CodecName(c)), c);
    EXPECT_NE(CodecChoices().find(CodecName(c)), std::string::npos);
  }
  EXPECT_EQ(ParseCodec("lz4"), std::nullopt);
}

TEST(Codec, UnknownCodecIsNamed) {
  BlockCodec codec;
  std::vector<std::byte> in(8), out(8);
  absl::Status s = codec.Decode(static_cast<Codec>(9), 1, 0, in, absl::Span<std::byte>(out), "blk");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("unknown codec 9"), absl::string_view::npos) << s;
}

// Regression (found by fuzz_frame): decoding an empty codec-none block passed
// null pointers to memcpy.
TEST(Codec, EmptyBlocksDecode) {
  BlockCodec codec;
  EXPECT_OK(codec.Decode(Codec::kNone, 1, 0, {}, {}, "empty"));
  std::vector<std::byte> one(1);
  EXPECT_FALSE(codec.Decode(Codec::kNone, 1, 0, {}, absl::Span<std::byte>(one), "short").ok());
  EXPECT_FALSE(codec.Decode(Codec::kShuffleZstd, 2, 0, {}, absl::Span<std::byte>(one), "x").ok());
  EXPECT_FALSE(codec.Decode(Codec::kZstd, 1, 0, {}, absl::Span<std::byte>(one), "x").ok());
}

// Shuffle's planes, vector loops and scalar ones, against the layout the
// format names (plane 0: the most significant byte after rotating left by
// one bit), at lengths around the vector width, and back.
TEST(Codec, BytePlanesMatchTheFormatAtEveryLength) {
  std::mt19937_64 rng(7);
  for (size_t width : {2u, 4u, 8u}) {
    for (bool rotate : {false, true}) {
      for (size_t n : {0u, 1u, 31u, 32u, 33u, 63u, 64u, 65u, 1000u, 65537u}) {
        std::vector<std::byte> in(n * width);
        for (auto& b : in) b = static_cast<std::byte>(rng());
        std::vector<std::byte> want(in.size());
        for (size_t i = 0; i < n; ++i) {
          uint64_t x = 0;
          for (size_t b = 0; b < width; ++b) x |= uint64_t{static_cast<uint8_t>(in[i * width + b])} << (8 * b);
          if (rotate) {
            const uint64_t top = (x >> (8 * width - 1)) & 1;
            x = ((x << 1) | top) & (width == 8 ? ~uint64_t{0} : (uint64_t{1} << (8 * width)) - 1);
          }
          for (size_t b = 0; b < width; ++b) want[(width - 1 - b) * n + i] = static_cast<std::byte>(x >> (8 * b));
        }
        for (bool vector : {false, true}) {
          std::vector<std::byte> planes(in.size()), back(in.size());
          internal::SplitBytePlanes(width, in.data(), n, rotate, planes.data(), vector);
          EXPECT_EQ(planes, want) << "width " << width << " rotate " << rotate << " n " << n << " vector " << vector;
          internal::JoinBytePlanes(width, planes.data(), n, rotate, back.data(), vector);
          EXPECT_EQ(back, in) << "width " << width << " rotate " << rotate << " n " << n << " vector " << vector;
        }
      }
    }
  }
}

}  // namespace
}  // namespace ckpt::testing
