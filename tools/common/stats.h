// Small statistics shared by the tools and benchmarks.
#ifndef CKPT_TOOLS_COMMON_STATS_H_
#define CKPT_TOOLS_COMMON_STATS_H_

#include <algorithm>
#include <vector>

namespace ckpt::tools {

/// The median of `v` (the mean of the middle two for an even count); 0 when
/// empty.
inline double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace ckpt::tools

#endif  // CKPT_TOOLS_COMMON_STATS_H_
