#include "ckpt/tensor.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "util/strings.h"
#include "absl/strings/str_join.h"

namespace ckpt {

Box Box::Whole(const Shape& shape) {
  return Box(Dims(shape.size(), 0), Dims(shape.begin(), shape.end()));
}

int64_t Box::Volume() const {
  int64_t v = 1;
  for (int64_t s : sizes) v *= s;
  return v;
}

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

int64_t TensorSpec::NumElements() const {
  int64_t v = 1;
  for (int64_t s : shape) v *= s;
  return v;
}

std::string ShapeToString(const Shape& shape) {
  return StrCat("[", absl::StrJoin(shape, ", "), "]");
}

}  // namespace ckpt
