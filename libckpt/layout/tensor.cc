#include "ckpt/tensor.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "util/strings.h"

namespace ckpt {

Box Box::Whole(const Shape& shape) { return Box(Dims(shape.size(), 0), Dims(shape.begin(), shape.end())); }

namespace {

// Product of `dims`, saturating at INT64_MAX (an empty dimension wins).
// Shapes and boxes are checked against kMaxTensorElements where they enter,
// so saturation only keeps an unchecked one from being undefined behaviour.
template <typename Range>
int64_t SaturatingProduct(const Range& dims) {
  int64_t v = 1;
  bool overflow = false;
  for (int64_t s : dims) {
    if (s == 0) return 0;
    if (!overflow && __builtin_mul_overflow(v, s, &v)) overflow = true;
  }
  return overflow ? std::numeric_limits<int64_t>::max() : v;
}

}  // namespace

int64_t Box::Volume() const { return SaturatingProduct(sizes); }

std::string Box::ToString() const {
  std::string out = "[";
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (i) out += ", ";
    StrAppend(&out, offsets[i], ":", offsets[i] + sizes[i]);
  }
  out += "]";
  return out;
}

bool BoxWithin(const Box& box, const Shape& shape) {
  if (box.offsets.size() != shape.size() || box.sizes.size() != shape.size()) {
    return false;
  }
  for (size_t i = 0; i < shape.size(); ++i) {
    if (box.offsets[i] < 0 || box.sizes[i] < 0) return false;
    if (box.offsets[i] > shape[i] || box.sizes[i] > shape[i] - box.offsets[i]) {
      return false;
    }
  }
  return true;
}

Box Intersect(const Box& a, const Box& b) {
  Box out;
  const size_t n = a.sizes.size();
  out.offsets.resize(n);
  out.sizes.resize(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t lo = std::max(a.offsets[i], b.offsets[i]);
    int64_t hi = std::min(a.offsets[i] + a.sizes[i], b.offsets[i] + b.sizes[i]);
    out.offsets[i] = lo;
    out.sizes[i] = std::max<int64_t>(0, hi - lo);
  }
  return out;
}

int64_t TensorSpec::NumElements() const { return SaturatingProduct(shape); }

absl::Status CheckTensorSpec(const TensorSpec& spec) {
  if (spec.fqn.empty()) return absl::InvalidArgumentError("tensor name (fqn) is empty");
  if (spec.fqn.size() > kMaxNameBytes) {
    return absl::InvalidArgumentError(StrCat("tensor '", spec.fqn.substr(0, 64), "...': its name is ", spec.fqn.size(),
                                             " bytes; the limit is ", kMaxNameBytes));
  }
  if (spec.shape.size() > static_cast<size_t>(kMaxTensorRank)) {
    return absl::InvalidArgumentError(StrCat("tensor '", spec.fqn, "': rank ", spec.shape.size(),
                                             " exceeds the limit of ", kMaxTensorRank, " dimensions"));
  }
  int64_t elements = 1;
  for (int64_t d : spec.shape) {
    if (d < 0) {
      return absl::InvalidArgumentError(
          StrCat("tensor '", spec.fqn, "': negative dimension in shape ", ShapeToString(spec.shape)));
    }
    if (d > kMaxTensorElements) {
      return absl::InvalidArgumentError(StrCat("tensor '", spec.fqn, "': dimension ", d, " of shape ",
                                               ShapeToString(spec.shape), " exceeds the limit of ", kMaxTensorElements,
                                               " elements"));
    }
  }
  for (int64_t d : spec.shape) {
    if (d == 0) return absl::OkStatus();
  }
  for (int64_t d : spec.shape) {
    if (__builtin_mul_overflow(elements, d, &elements) || elements > kMaxTensorElements) {
      return absl::InvalidArgumentError(StrCat("tensor '", spec.fqn, "': shape ", ShapeToString(spec.shape),
                                               " has more than ", kMaxTensorElements, " elements"));
    }
  }
  return absl::OkStatus();
}

std::string ShapeToString(const Shape& shape) { return StrCat("[", absl::StrJoin(shape, ", "), "]"); }

}  // namespace ckpt
