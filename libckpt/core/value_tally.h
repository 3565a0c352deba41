// Per-element summaries of decoded tensor bytes, the inner loops of the
// audits: counts, extremes and sums (stats), and element-wise comparison
// of two runs of values (diff). Vectorised for f32, bf16 and f64.
#ifndef CKPT_CORE_VALUE_TALLY_H_
#define CKPT_CORE_VALUE_TALLY_H_

#include <cstddef>
#include <cstdint>
#include <limits>

#include "ckpt/dtype.h"

namespace ckpt {

/// Summary of a run of values. Sums are over finite values; NaN and Inf
/// are only counted.
struct ValueTally {
  int64_t elements = 0, nan = 0, inf = 0, zeros = 0, finite = 0;
  double min = std::numeric_limits<double>::infinity();
  double max = -std::numeric_limits<double>::infinity();
  double sum = 0, sumsq = 0;

  void Add(double v);
  void Merge(const ValueTally& o);
};

/// Adds `n` elements of `dtype` at `p` to `t`.
void TallyValues(DType dtype, const std::byte* p, int64_t n, ValueTally& t);

/// Element-wise comparison of two runs of the same dtype. NaN equals NaN.
struct ValueComparison {
  int64_t differing = 0;
  int64_t first = -1;  ///< index of the first differing element in the run
  double max_abs = 0;  ///< over elements finite in both
  double sum_sq_diff = 0;
  double sum_sq_a = 0;  ///< over finite elements of `a`

  /// Adds `o`'s counts and sums; `first` is left to the caller, who knows
  /// where each run lies.
  void Merge(const ValueComparison& o);
};

/// Compares `n` elements of `a` and `b` into `c` (adding to it).
void CompareValues(DType dtype, const std::byte* a, const std::byte* b, int64_t n, ValueComparison& c);

}  // namespace ckpt

#endif  // CKPT_CORE_VALUE_TALLY_H_
