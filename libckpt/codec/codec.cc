#include "codec/codec.h"

// For ZSTD_c_literalCompressionMode, which the header files under the
// experimental parameters; a library that refuses it gets the plain level.
#define ZSTD_STATIC_LINKING_ONLY
#include <immintrin.h>
#include <zstd.h>

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "util/bytes.h"
#include "util/cpu.h"
#include "util/strings.h"

namespace ckpt {
namespace {

// Shuffle payload: [u8 planes][u8 reserved][u16 reserved] then per plane
// [u8 mode (0 raw, 1 zstd)][u8 0][u16 0][u32 stored_len], then plane data.
constexpr size_t kShuffleHeader = 4;
constexpr size_t kPlaneEntry = 8;
constexpr double kIncompressibleBits = 7.9;
// Byte planes of floats (exponents, high mantissa bits) shrink by entropy
// coding, hardly by matches: a plane is compressed with the fastest match
// search and Huffman-coded literals, which on bf16 exponent planes is three
// times as fast as level 1 and smaller (0.32 against 0.36 of the plane).
constexpr int kPlaneLevel = -1000;
// A plane of almost nothing but zero bytes (the high planes of a delta
// block) is runs, not symbols: the block's own level, which finds them,
// stored the high plane of an f32 delta in 0.034 of its bytes against 0.124,
// in half the time.
constexpr double kSparseBits = 0.5;

template <typename U>
inline U RotL1(U x) {
  return static_cast<U>((x << 1) | (x >> (sizeof(U) * 8 - 1)));
}
template <typename U>
inline U RotR1(U x) {
  return static_cast<U>((x >> 1) | (x << (sizeof(U) * 8 - 1)));
}

// Shuffling splits elements of width W into W planes, plane 0 holding the
// most significant byte; with `rotate`, each element is first rotated left
// by one bit so IEEE exponent bits fill the leading plane. 2- and 4-byte
// elements go 32 at a time (the rest by the loops below): the scalar loops
// took a quarter of a worker's time compressing bf16, as much as zstd.
#define CKPT_AVX2 [[gnu::target("avx2")]]

CKPT_AVX2 inline __m256i Rot16(__m256i x, bool left) {
  return left ? _mm256_or_si256(_mm256_slli_epi16(x, 1), _mm256_srli_epi16(x, 15))
              : _mm256_or_si256(_mm256_srli_epi16(x, 1), _mm256_slli_epi16(x, 15));
}
CKPT_AVX2 inline __m256i Rot32(__m256i x, bool left) {
  return left ? _mm256_or_si256(_mm256_slli_epi32(x, 1), _mm256_srli_epi32(x, 31))
              : _mm256_or_si256(_mm256_srli_epi32(x, 1), _mm256_slli_epi32(x, 31));
}

// Returns the elements done (a multiple of 32).
CKPT_AVX2 size_t Split16Avx2(const std::byte* in, size_t n, bool rotate, std::byte* out) {
  const __m256i low = _mm256_set1_epi16(0xFF);
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + 2 * i));
    __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + 2 * i + 32));
    if (rotate) {
      a = Rot16(a, true);
      b = Rot16(b, true);
    }
    // packus interleaves the two inputs by 128-bit lane: 64-bit groups
    // a0-7 b0-7 a8-15 b8-15, put back in order by the permute.
    const __m256i hi = _mm256_packus_epi16(_mm256_srli_epi16(a, 8), _mm256_srli_epi16(b, 8));
    const __m256i lo = _mm256_packus_epi16(_mm256_and_si256(a, low), _mm256_and_si256(b, low));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm256_permute4x64_epi64(hi, 0xD8));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + n + i), _mm256_permute4x64_epi64(lo, 0xD8));
  }
  return i;
}

CKPT_AVX2 size_t Join16Avx2(const std::byte* in, size_t n, bool rotate, std::byte* out) {
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i));
    const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + n + i));
    // Within each lane: elements 0-7 and 16-23, then 8-15 and 24-31.
    const __m256i x0 = _mm256_unpacklo_epi8(lo, hi);
    const __m256i x1 = _mm256_unpackhi_epi8(lo, hi);
    __m256i a = _mm256_permute2x128_si256(x0, x1, 0x20);
    __m256i b = _mm256_permute2x128_si256(x0, x1, 0x31);
    if (rotate) {
      a = Rot16(a, false);
      b = Rot16(b, false);
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 2 * i), a);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 2 * i + 32), b);
  }
  return i;
}

CKPT_AVX2 size_t Split32Avx2(const std::byte* in, size_t n, bool rotate, std::byte* out) {
  const __m256i byte = _mm256_set1_epi32(0xFF);
  // packus of four registers leaves 32-bit groups a b c d a' b' c' d'.
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256i v[4];
    for (int k = 0; k < 4; ++k) {
      v[k] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + 4 * i + 32 * k));
      if (rotate) v[k] = Rot32(v[k], true);
    }
    for (int b = 0; b < 4; ++b) {
      const __m128i shift = _mm_cvtsi32_si128(8 * b);
      const __m256i p0 = _mm256_packus_epi32(_mm256_and_si256(_mm256_srl_epi32(v[0], shift), byte),
                                             _mm256_and_si256(_mm256_srl_epi32(v[1], shift), byte));
      const __m256i p1 = _mm256_packus_epi32(_mm256_and_si256(_mm256_srl_epi32(v[2], shift), byte),
                                             _mm256_and_si256(_mm256_srl_epi32(v[3], shift), byte));
      const __m256i q = _mm256_permutevar8x32_epi32(_mm256_packus_epi16(p0, p1), order);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + (3 - b) * n + i), q);
    }
  }
  return i;
}

CKPT_AVX2 size_t Join32Avx2(const std::byte* in, size_t n, bool rotate, std::byte* out) {
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256i b3 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i));
    const __m256i b2 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + n + i));
    const __m256i b1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + 2 * n + i));
    const __m256i b0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + 3 * n + i));
    // 16-bit halves, within each lane elements 0-7 and 16-23, then 8-15
    // and 24-31; then 32-bit words in runs of four.
    const __m256i l01 = _mm256_unpacklo_epi8(b0, b1), h01 = _mm256_unpackhi_epi8(b0, b1);
    const __m256i l23 = _mm256_unpacklo_epi8(b2, b3), h23 = _mm256_unpackhi_epi8(b2, b3);
    const __m256i r0 = _mm256_unpacklo_epi16(l01, l23);  // 0-3, 16-19
    const __m256i r1 = _mm256_unpackhi_epi16(l01, l23);  // 4-7, 20-23
    const __m256i r2 = _mm256_unpacklo_epi16(h01, h23);  // 8-11, 24-27
    const __m256i r3 = _mm256_unpackhi_epi16(h01, h23);  // 12-15, 28-31
    __m256i w[4] = {_mm256_permute2x128_si256(r0, r1, 0x20), _mm256_permute2x128_si256(r2, r3, 0x20),
                    _mm256_permute2x128_si256(r0, r1, 0x31), _mm256_permute2x128_si256(r2, r3, 0x31)};
    for (int k = 0; k < 4; ++k) {
      if (rotate) w[k] = Rot32(w[k], false);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 4 * i + 32 * k), w[k]);
    }
  }
  return i;
}

// Elements [done, n) (all of them from 0; the rest after a vector loop).
template <typename U>
void SplitTail(const std::byte* in, size_t n, size_t done, bool rotate, std::byte* out) {
  constexpr size_t W = sizeof(U);
  for (size_t i = done; i < n; ++i) {
    U x;
    std::memcpy(&x, in + i * W, W);
    if (rotate) x = RotL1(x);
    for (size_t b = 0; b < W; ++b) out[(W - 1 - b) * n + i] = static_cast<std::byte>(x >> (8 * b));
  }
}

template <typename U>
void JoinTail(const std::byte* in, size_t n, size_t done, bool rotate, std::byte* out) {
  constexpr size_t W = sizeof(U);
  for (size_t i = done; i < n; ++i) {
    U x = 0;
    for (size_t b = 0; b < W; ++b) x |= static_cast<U>(static_cast<U>(in[(W - 1 - b) * n + i]) << (8 * b));
    if (rotate) x = RotR1(x);
    std::memcpy(out + i * W, &x, W);
  }
}

}  // namespace

namespace internal {

void SplitBytePlanes(size_t width, const std::byte* in, size_t n, bool rotate, std::byte* out, bool vector) {
  vector = vector && Cpu().avx2;
  switch (width) {
    case 2:
      SplitTail<uint16_t>(in, n, vector ? Split16Avx2(in, n, rotate, out) : 0, rotate, out);
      break;
    case 4:
      SplitTail<uint32_t>(in, n, vector ? Split32Avx2(in, n, rotate, out) : 0, rotate, out);
      break;
    case 8:
      SplitTail<uint64_t>(in, n, 0, rotate, out);
      break;
    default:
      std::memcpy(out, in, n * width);
  }
}

void JoinBytePlanes(size_t width, const std::byte* in, size_t n, bool rotate, std::byte* out, bool vector) {
  vector = vector && Cpu().avx2;
  switch (width) {
    case 2:
      JoinTail<uint16_t>(in, n, vector ? Join16Avx2(in, n, rotate, out) : 0, rotate, out);
      break;
    case 4:
      JoinTail<uint32_t>(in, n, vector ? Join32Avx2(in, n, rotate, out) : 0, rotate, out);
      break;
    case 8:
      JoinTail<uint64_t>(in, n, 0, rotate, out);
      break;
    default:
      std::memcpy(out, in, n * width);
  }
}

}  // namespace internal

double SampledEntropyBits(absl::Span<const std::byte> data) {
  if (data.empty()) return 0;
  // 16384 samples: the estimate's bias (about 255 / (2 n ln 2) bits) stays
  // near 0.01 bit, well inside kIncompressibleBits' margin. Four tallies
  // take turns: a plane of few distinct bytes (an exponent plane) would
  // otherwise chain every increment on the one before it.
  constexpr size_t kSamples = 16384;
  uint32_t hist[4][256] = {};
  const size_t step = data.size() > kSamples ? data.size() / kSamples : 1;
  const auto* p = reinterpret_cast<const uint8_t*>(data.data());
  size_t n = 0, i = 0;
  for (; i + 3 * step < data.size(); i += 4 * step, n += 4) {
    ++hist[0][p[i]];
    ++hist[1][p[i + step]];
    ++hist[2][p[i + 2 * step]];
    ++hist[3][p[i + 3 * step]];
  }
  for (; i < data.size(); i += step, ++n) ++hist[0][p[i]];
  double bits = 0;
  for (int v = 0; v < 256; ++v) {
    const uint32_t c = hist[0][v] + hist[1][v] + hist[2][v] + hist[3][v];
    if (c == 0) continue;
    double q = static_cast<double>(c) / static_cast<double>(n);
    bits -= q * std::log2(q);
  }
  return bits;
}

BlockCodec::BlockCodec(int zstd_level) : level_(zstd_level) {
  cctx_ = ZSTD_createCCtx();
  dctx_ = ZSTD_createDCtx();
  // Contexts allocate their workspace on first use, so a codec that only
  // decodes pays nothing for this one.
  plane_cctx_ = ZSTD_createCCtx();
  plane_ready_ = plane_cctx_ != nullptr &&
                 !ZSTD_isError(ZSTD_CCtx_setParameter(plane_cctx_, ZSTD_c_compressionLevel, kPlaneLevel)) &&
                 !ZSTD_isError(ZSTD_CCtx_setParameter(plane_cctx_, ZSTD_c_literalCompressionMode, ZSTD_ps_enable));
}

BlockCodec::~BlockCodec() {
  ZSTD_freeCCtx(plane_cctx_);
  ZSTD_freeCCtx(cctx_);
  ZSTD_freeDCtx(dctx_);
}

size_t BlockCodec::MaxStoredBytes(size_t raw_len) {
  return ZSTD_compressBound(raw_len) + kShuffleHeader + 8 * kPlaneEntry + 64;
}

size_t BlockCodec::CompressPlane(absl::Span<const std::byte> in, std::byte* out, size_t cap) {
  size_t r = ZSTD_compressCCtx(cctx_, out, cap, in.data(), in.size(), level_);
  if (ZSTD_isError(r)) return SIZE_MAX;
  return r;
}

size_t BlockCodec::CompressBytePlane(absl::Span<const std::byte> in, std::byte* out, size_t cap) {
  // Levels above the default ask for ratio: they apply to planes too. A
  // library that refused the plane parameters gets the plain level.
  if (level_ > 1 || !plane_ready_) return CompressPlane(in, out, cap);
  const size_t r = ZSTD_compress2(plane_cctx_, out, cap, in.data(), in.size());
  return ZSTD_isError(r) ? SIZE_MAX : r;
}

absl::StatusOr<EncodedBlock> BlockCodec::Encode(Codec codec, DType dtype, absl::Span<const std::byte> raw,
                                                absl::Span<std::byte> out) {
  EncodedBlock result;
  const size_t width = DTypeSize(dtype);
  result.elem_width = static_cast<uint8_t>(width);
  if (codec == Codec::kNone || raw.empty()) return result;
  if (codec == Codec::kZstd || (codec == Codec::kShuffleZstd && (width <= 1 || raw.size() % width))) {
    size_t r = CompressPlane(raw, out.data(), out.size());
    if (r == SIZE_MAX) return absl::InternalError("zstd compression failed");
    if (r < raw.size()) {
      result.codec = Codec::kZstd;
      result.stored_len = static_cast<uint32_t>(r);
    }
    return result;
  }
  if (codec != Codec::kShuffleZstd) {
    return absl::InvalidArgumentError(StrCat("unknown codec ", static_cast<int>(codec)));
  }
  const size_t n = raw.size() / width;
  const bool rotate = rotate_floats_ && IsFloatingPoint(dtype);
  planes_.resize(raw.size());
  internal::SplitBytePlanes(width, raw.data(), n, rotate, planes_.data(), true);

  std::byte* hdr = out.data();
  hdr[0] = static_cast<std::byte>(width);
  hdr[1] = hdr[2] = hdr[3] = std::byte{0};
  size_t pos = kShuffleHeader + width * kPlaneEntry;
  for (size_t p = 0; p < width; ++p) {
    absl::Span<const std::byte> plane(planes_.data() + p * n, n);
    std::byte* entry = hdr + kShuffleHeader + p * kPlaneEntry;
    size_t stored = SIZE_MAX;
    const double bits = SampledEntropyBits(plane);
    if (bits < kSparseBits) {
      stored = CompressPlane(plane, out.data() + pos, out.size() - pos);
    } else if (bits < kIncompressibleBits) {
      stored = CompressBytePlane(plane, out.data() + pos, out.size() - pos);
    }
    uint8_t mode = 1;
    if (stored == SIZE_MAX || stored >= n) {
      std::memcpy(out.data() + pos, plane.data(), n);
      stored = n;
      mode = 0;
    }
    entry[0] = static_cast<std::byte>(mode);
    entry[1] = entry[2] = entry[3] = std::byte{0};
    StoreLE32(entry + 4, static_cast<uint32_t>(stored));
    pos += stored;
  }
  if (pos < raw.size()) {
    result.codec = Codec::kShuffleZstd;
    result.stored_len = static_cast<uint32_t>(pos);
    result.flags = rotate ? kFlagRotated : 0;
  }
  return result;
}

absl::Status BlockCodec::Decode(Codec codec, uint8_t elem_width, uint16_t flags, absl::Span<const std::byte> stored,
                                absl::Span<std::byte> raw_out, std::string_view where) {
  auto corrupt = [&](std::string_view why) { return absl::DataLossError(StrCat(where, ": ", why)); };
  switch (codec) {
    case Codec::kNone:
      if (stored.size() != raw_out.size()) {
        return corrupt(StrCat("stored size ", stored.size(), " != raw size ", raw_out.size()));
      }
      if (!stored.empty()) std::memcpy(raw_out.data(), stored.data(), stored.size());
      return absl::OkStatus();
    case Codec::kZstd: {
      size_t r = ZSTD_decompressDCtx(dctx_, raw_out.data(), raw_out.size(), stored.data(), stored.size());
      if (ZSTD_isError(r)) {
        return corrupt(StrCat("zstd: ", ZSTD_getErrorName(r)));
      }
      if (r != raw_out.size()) {
        return corrupt(StrCat("zstd produced ", r, " bytes, expected ", raw_out.size()));
      }
      return absl::OkStatus();
    }
    case Codec::kShuffleZstd: {
      if (stored.size() < kShuffleHeader) return corrupt("truncated shuffle header");
      const size_t width = static_cast<size_t>(stored[0]);
      if (width != elem_width || width < 2 || width > 8 || raw_out.size() % width != 0 || stored[1] != std::byte{0} ||
          stored[2] != std::byte{0} || stored[3] != std::byte{0}) {
        return corrupt(StrCat("bad shuffle header (width ", width, ")"));
      }
      const size_t n = raw_out.size() / width;
      size_t pos = kShuffleHeader + width * kPlaneEntry;
      if (stored.size() < pos) return corrupt("truncated plane table");
      planes_.resize(raw_out.size());
      for (size_t p = 0; p < width; ++p) {
        const std::byte* entry = stored.data() + kShuffleHeader + p * kPlaneEntry;
        const uint8_t mode = static_cast<uint8_t>(entry[0]);
        const uint32_t len = LoadLE32(entry + 4);
        if (entry[1] != std::byte{0} || entry[2] != std::byte{0} || entry[3] != std::byte{0} || mode > 1) {
          return corrupt(StrCat("bad entry for plane ", p));
        }
        if (len > stored.size() - pos) return corrupt("plane runs past the block");
        std::byte* dst = planes_.data() + p * n;
        if (mode == 0) {
          if (len != n) return corrupt(StrCat("raw plane ", p, " has ", len, " bytes, expected ", n));
          std::memcpy(dst, stored.data() + pos, n);
        } else {
          size_t r = ZSTD_decompressDCtx(dctx_, dst, n, stored.data() + pos, len);
          if (ZSTD_isError(r) || r != n) {
            return corrupt(StrCat("plane ", p, ": zstd ", ZSTD_isError(r) ? ZSTD_getErrorName(r) : "size mismatch"));
          }
        }
        pos += len;
      }
      if (pos != stored.size()) return corrupt("trailing bytes after the planes");
      internal::JoinBytePlanes(width, planes_.data(), n, (flags & kFlagRotated) != 0, raw_out.data(), true);
      return absl::OkStatus();
    }
    case Codec::kAuto:  // a save's choice, never a block's
      return corrupt("a block names codec 3 (auto), which only a save's options may name");
  }
  return corrupt(StrCat("unknown codec ", static_cast<int>(codec)));
}

std::string_view CodecName(Codec codec) {
  switch (codec) {
    case Codec::kNone:
      return "none";
    case Codec::kZstd:
      return "zstd";
    case Codec::kShuffleZstd:
      return "shuffle-zstd";
    case Codec::kAuto:
      return "auto";
  }
  return "unknown";
}

std::string CodecChoices() {
  constexpr Codec kAll[] = {Codec::kNone, Codec::kZstd, Codec::kShuffleZstd, Codec::kAuto};
  std::string out;
  for (size_t i = 0; i < std::size(kAll); ++i) {
    if (i > 0) out += i + 1 == std::size(kAll) ? " or " : ", ";
    out += CodecName(kAll[i]);
  }
  return out;
}

std::optional<Codec> ParseCodec(std::string_view name) {
  if (name == "none") return Codec::kNone;
  if (name == "zstd") return Codec::kZstd;
  if (name == "shuffle-zstd" || name == "shuffle") return Codec::kShuffleZstd;
  if (name == "auto") return Codec::kAuto;
  return std::nullopt;
}

}  // namespace ckpt
