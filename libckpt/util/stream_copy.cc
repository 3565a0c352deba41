#include "util/stream_copy.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "util/cpu.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace ckpt {
#if defined(__x86_64__)
namespace {

// 32-byte streaming stores where the CPU has AVX2 (faster than the 16-byte
// SSE2 loop; docs/performance.md, "Figures behind the code"). REQUIRES: d 32-byte aligned.
__attribute__((target("avx2"))) size_t StreamAvx2(char* d, const char* s, size_t n) {
  size_t i = 0;
  for (; i + 128 <= n; i += 128) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 32));
    const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 64));
    const __m256i e = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 96));
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i), a);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i + 32), b);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i + 64), c);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i + 96), e);
  }
  return i;
}

size_t StreamSse2(char* d, const char* s, size_t n) {
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 32));
    const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 48), e);
  }
  return i;
}

constexpr size_t kPage = 4096;
constexpr size_t kGroup = 4 * kPage;

// Four pages at once, two lines of each in turn: the memory system then has
// four streams in flight instead of one. Copies whole groups only and
// returns the bytes copied. REQUIRES: d 64-byte aligned.
__attribute__((target("avx512f"))) size_t StreamPagesAvx512(char* d, const char* s, size_t n) {
  size_t base = 0;
  for (; base + kGroup <= n; base += kGroup) {
    for (size_t i = 0; i < kPage; i += 128) {
      __m512i r[4][2];
      for (int p = 0; p < 4; ++p) {
        r[p][0] = _mm512_loadu_si512(s + base + p * kPage + i);
        r[p][1] = _mm512_loadu_si512(s + base + p * kPage + i + 64);
      }
      for (int p = 0; p < 4; ++p) {
        _mm512_stream_si512(reinterpret_cast<__m512i*>(d + base + p * kPage + i), r[p][0]);
        _mm512_stream_si512(reinterpret_cast<__m512i*>(d + base + p * kPage + i + 64), r[p][1]);
      }
    }
  }
  return base;
}

__attribute__((target("avx2"))) size_t StreamPagesAvx2(char* d, const char* s, size_t n) {
  size_t base = 0;
  for (; base + kGroup <= n; base += kGroup) {
    for (size_t i = 0; i < kPage; i += 64) {
      __m256i r[4][2];
      for (int p = 0; p < 4; ++p) {
        r[p][0] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + base + p * kPage + i));
        r[p][1] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + base + p * kPage + i + 32));
      }
      for (int p = 0; p < 4; ++p) {
        _mm256_stream_si256(reinterpret_cast<__m256i*>(d + base + p * kPage + i), r[p][0]);
        _mm256_stream_si256(reinterpret_cast<__m256i*>(d + base + p * kPage + i + 32), r[p][1]);
      }
    }
  }
  return base;
}

// Whole groups of pages where the CPU has AVX2 or AVX-512; 0 otherwise.
// REQUIRES: d 64-byte aligned.
size_t StreamPages(char* d, const char* s, size_t n) {
  if (Cpu().avx512f) return StreamPagesAvx512(d, s, n);
  if (Cpu().avx2) return StreamPagesAvx2(d, s, n);
  return 0;
}

// Whole lines: n a multiple of 64, d 64-byte aligned.
__attribute__((target("avx2"))) void StreamLinesAvx2(char* d, const char* s, size_t n) {
  for (size_t i = 0; i < n; i += 64) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 32));
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i), a);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i + 32), b);
  }
}

}  // namespace
#endif

void StreamCopy(void* dst_v, const void* src_v, size_t n) {
  StreamCopyNoFence(dst_v, src_v, n);
  StreamFence();
}

void StreamFence() {
#if defined(__x86_64__)
  _mm_sfence();
#endif
}

void StreamCopyNoFence(void* dst_v, const void* src_v, size_t n) {
#if defined(__x86_64__)
  constexpr size_t kMinStreaming = 1 << 10;
  if (n >= kMinStreaming) {
    char* d = static_cast<char*>(dst_v);
    const char* s = static_cast<const char*>(src_v);
    // Align the destination to a line for the streaming stores.
    const size_t head = std::min(n, (64 - (reinterpret_cast<uintptr_t>(d) & 63)) & 63);
    std::memcpy(d, s, head);
    d += head;
    s += head;
    n -= head;
    const size_t pages = StreamPages(d, s, n);
    d += pages;
    s += pages;
    n -= pages;
    const size_t i = Cpu().avx2 ? StreamAvx2(d, s, n) : StreamSse2(d, s, n);
    std::memcpy(d + i, s + i, n - i);
    return;
  }
#endif
  std::memcpy(dst_v, src_v, n);
}

namespace {

void StreamLines(std::byte* dst, const std::byte* src, size_t n) {
  char* d = reinterpret_cast<char*>(dst);
  const char* s = reinterpret_cast<const char*>(src);
#if defined(__x86_64__)
  const size_t pages = StreamPages(d, s, n);
  d += pages;
  s += pages;
  n -= pages;
  if (Cpu().avx2) {
    StreamLinesAvx2(d, s, n);
  } else {
    StreamSse2(d, s, n);
  }
#else
  std::memcpy(d, s, n);
#endif
}

}  // namespace

void StreamAppender::Append(const std::byte* src, size_t n) {
  if (const size_t held = pos_ % kLine; held != 0) {
    const size_t k = std::min(kLine - held, n);
    std::memcpy(line_ + held, src, k);
    pos_ += k;
    src += k;
    n -= k;
    if (pos_ % kLine != 0) return;
    StreamLines(dst_ + pos_ - kLine, line_, kLine);
  }
  const size_t body = n / kLine * kLine;
  if (body > 0) {
    StreamLines(dst_ + pos_, src, body);
    pos_ += body;
  }
  if (n > body) {
    std::memcpy(line_, src + body, n - body);
    pos_ += n - body;
  }
}

void StreamAppender::Finish() {
  if (const size_t held = pos_ % kLine; held != 0) std::memcpy(dst_ + pos_ - held, line_, held);
}

}  // namespace ckpt
