// Built with -fopenmp-simd: the `omp simd` reductions below may reorder
// additions across vector lanes, which is what lets them vectorise; the
// order is fixed by the build, so results repeat from run to run.
#include "core/value_tally.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "ckpt/synthetic.h"
#include "util/cpu.h"

namespace ckpt {
namespace {

// Values are summarised in pieces of this many elements: one vector pass
// per piece, redone element by element when the piece holds NaN or Inf.
constexpr int64_t kPiece = 4096;

inline float Bf16ToFloat(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;  // bf16 is the top half of an f32
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Element loaders: types, not function pointers, so that the loops inline
// them and vectorise.
struct F32 {
  static double Load(const std::byte* p, int64_t i) {
    float v;
    std::memcpy(&v, p + 4 * i, 4);
    return v;
  }
};
struct Bf16 {
  static double Load(const std::byte* p, int64_t i) {
    uint16_t h;
    std::memcpy(&h, p + 2 * i, 2);
    return Bf16ToFloat(h);
  }
};
struct F64 {
  static double Load(const std::byte* p, int64_t i) {
    double v;
    std::memcpy(&v, p + 8 * i, 8);
    return v;
  }
};

// Piece [begin, end) of p, in one vector pass; added to `t` only when every
// element was finite. Returns whether it was.
template <typename T>
[[gnu::always_inline]] inline bool TallyFinitePiece(const std::byte* p, int64_t begin, int64_t end, ValueTally& t) {
  double sum = 0, sumsq = 0, mn = t.min, mx = t.max;
  int64_t zeros = 0, bad = 0;
#pragma omp simd reduction(+ : sum, sumsq, zeros, bad) reduction(min : mn) reduction(max : mx)
  for (int64_t i = begin; i < end; ++i) {
    const double v = T::Load(p, i);
    bad += v - v != 0 ? 1 : 0;  // NaN for NaN and Inf
    sum += v;
    sumsq += v * v;
    mn = v < mn ? v : mn;
    mx = v > mx ? v : mx;
    zeros += v == 0 ? 1 : 0;
  }
  if (bad != 0) return false;
  t.sum += sum;
  t.sumsq += sumsq;
  t.min = mn;
  t.max = mx;
  t.zeros += zeros;
  t.finite += end - begin;
  t.elements += end - begin;
  return true;
}

template <typename T>
[[gnu::always_inline]] inline void TallyTyped(const std::byte* p, int64_t n, ValueTally& t) {
  for (int64_t o = 0; o < n; o += kPiece) {
    const int64_t end = std::min(n, o + kPiece);
    if (!TallyFinitePiece<T>(p, o, end, t)) {
      for (int64_t i = o; i < end; ++i) t.Add(T::Load(p, i));
    }
  }
}

template <typename T>
[[gnu::always_inline]] inline void SumSquaresFinite(const std::byte* p, int64_t n, double& out) {
  double sumsq = 0;
#pragma omp simd reduction(+ : sumsq)
  for (int64_t i = 0; i < n; ++i) {
    const double v = T::Load(p, i);
    sumsq += v - v == 0 ? v * v : 0.0;
  }
  out += sumsq;
}

// One entry per dtype, each built for AVX2 and for the baseline; the first
// call picks one for the machine. (Sums from the two builds may differ in
// their last bits; one machine always takes the same one.) Chosen in code,
// not by the compiler's target_clones: its ifunc resolvers run during
// relocation, before ThreadSanitizer's runtime is up, and clang exports them
// from the shared library whatever their visibility.
bool HasAvx2() { return Cpu().avx2; }
#if defined(__x86_64__)
#define CKPT_AVX2 [[gnu::target("avx2")]]
#else
#define CKPT_AVX2
#endif
template <typename T>
CKPT_AVX2 void TallyAvx2(const std::byte* p, int64_t n, ValueTally& t) {
  TallyTyped<T>(p, n, t);
}
template <typename T>
void TallyBase(const std::byte* p, int64_t n, ValueTally& t) {
  TallyTyped<T>(p, n, t);
}
template <typename T>
void Tally(const std::byte* p, int64_t n, ValueTally& t) {
  static const auto fn = HasAvx2() ? &TallyAvx2<T> : &TallyBase<T>;
  fn(p, n, t);
}
template <typename T>
CKPT_AVX2 void SumSquaresAvx2(const std::byte* p, int64_t n, double& out) {
  SumSquaresFinite<T>(p, n, out);
}
template <typename T>
void SumSquaresBase(const std::byte* p, int64_t n, double& out) {
  SumSquaresFinite<T>(p, n, out);
}
template <typename T>
void SumSquares(const std::byte* p, int64_t n, double& out) {
  static const auto fn = HasAvx2() ? &SumSquaresAvx2<T> : &SumSquaresBase<T>;
  fn(p, n, out);
}
#undef CKPT_AVX2

}  // namespace

void ValueTally::Add(double v) {
  ++elements;
  if (!std::isfinite(v)) [[unlikely]] {
    if (std::isnan(v)) {
      ++nan;
    } else {
      ++inf;
    }
    return;
  }
  ++finite;
  zeros += v == 0;
  min = v < min ? v : min;
  max = v > max ? v : max;
  sum += v;
  sumsq += v * v;
}

void ValueTally::Merge(const ValueTally& o) {
  elements += o.elements;
  nan += o.nan;
  inf += o.inf;
  zeros += o.zeros;
  finite += o.finite;
  min = std::min(min, o.min);
  max = std::max(max, o.max);
  sum += o.sum;
  sumsq += o.sumsq;
}

void TallyValues(DType dtype, const std::byte* p, int64_t n, ValueTally& t) {
  switch (dtype) {
    case DType::kF32:
      return Tally<F32>(p, n, t);
    case DType::kBF16:
      return Tally<Bf16>(p, n, t);
    case DType::kF64:
      return Tally<F64>(p, n, t);
    default: {
      const size_t es = DTypeSize(dtype);
      for (int64_t i = 0; i < n; ++i) t.Add(ElementToDouble(dtype, p + es * i));
    }
  }
}

void ValueComparison::Merge(const ValueComparison& o) {
  differing += o.differing;
  max_abs = std::max(max_abs, o.max_abs);
  sum_sq_diff += o.sum_sq_diff;
  sum_sq_a += o.sum_sq_a;
}

void CompareValues(DType dtype, const std::byte* a, const std::byte* b, int64_t n, ValueComparison& c) {
  const size_t es = DTypeSize(dtype);
  if (std::memcmp(a, b, static_cast<size_t>(n) * es) == 0) {
    switch (dtype) {
      case DType::kF32:
        return SumSquares<F32>(a, n, c.sum_sq_a);
      case DType::kBF16:
        return SumSquares<Bf16>(a, n, c.sum_sq_a);
      case DType::kF64:
        return SumSquares<F64>(a, n, c.sum_sq_a);
      default:
        for (int64_t i = 0; i < n; ++i) {
          const double v = ElementToDouble(dtype, a + es * i);
          if (std::isfinite(v)) c.sum_sq_a += v * v;
        }
        return;
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    const double va = ElementToDouble(dtype, a + es * i);
    const double vb = ElementToDouble(dtype, b + es * i);
    if (std::isfinite(va)) c.sum_sq_a += va * va;
    const bool same = va == vb || (std::isnan(va) && std::isnan(vb));
    if (same) continue;
    if (c.differing++ == 0) c.first = i;
    if (std::isfinite(va) && std::isfinite(vb)) {
      const double diff = va - vb;
      c.max_abs = std::max(c.max_abs, std::fabs(diff));
      c.sum_sq_diff += diff * diff;
    }
  }
}

}  // namespace ckpt
