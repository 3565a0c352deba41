// Tensors, boxes and shards: the data model shared by save, load and plan.
#ifndef CKPT_TENSOR_H_
#define CKPT_TENSOR_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "ckpt/dtype.h"
#include "ckpt/export.h"
#include "ckpt/limits.h"

namespace ckpt {

using Shape = std::vector<int64_t>;

// Shapes and boxes are checked against kMaxTensorRank and kMaxTensorElements
// (ckpt/limits.h) where they enter (State, the C and Python APIs, manifests,
// HDF5 imports), before anything is allocated for them.

/// Per-dimension coordinates, stored inline for up to 4 dimensions: plans at
/// frontier scale hold millions of boxes.
using Dims = absl::InlinedVector<int64_t, 4>;

/// A hyper-rectangle of a global tensor: element offsets and sizes per
/// dimension. A 0-dimensional box (scalar tensor) has one element.
struct CKPT_EXPORT Box {
  Dims offsets;
  Dims sizes;

  Box() = default;
  Box(Dims offsets_in, Dims sizes_in) : offsets(std::move(offsets_in)), sizes(std::move(sizes_in)) {}
  Box(std::initializer_list<int64_t> offsets_in, std::initializer_list<int64_t> sizes_in)
      : offsets(offsets_in), sizes(sizes_in) {}
  Box(const std::vector<int64_t>& offsets_in, const std::vector<int64_t>& sizes_in)
      : offsets(offsets_in.begin(), offsets_in.end()), sizes(sizes_in.begin(), sizes_in.end()) {}
  /// The box covering a whole tensor of `shape`.
  static Box Whole(const Shape& shape);

  int ndim() const { return static_cast<int>(sizes.size()); }
  /// Number of elements (product of sizes; 1 for a scalar).
  int64_t Volume() const;
  bool Empty() const { return Volume() == 0; }
  /// "[0:4, 8:16]" (half-open ranges per dimension).
  std::string ToString() const;
  bool operator==(const Box& other) const = default;
};

/// True when `box` lies inside a tensor of `shape` (same rank, no overflow).
CKPT_EXPORT bool BoxWithin(const Box& box, const Shape& shape);

/// Intersection of two boxes of the same rank; sizes are 0 where disjoint.
CKPT_EXPORT Box Intersect(const Box& a, const Box& b);

/// Global description of a tensor: fully qualified name, dtype, shape.
struct CKPT_EXPORT TensorSpec {
  std::string fqn;
  DType dtype = DType::kF32;
  Shape shape;

  /// Product of the shape (saturating; see CheckTensorSpec).
  int64_t NumElements() const;
  bool operator==(const TensorSpec& other) const = default;
};

/// InvalidArgument naming the tensor when its name is empty, its rank is
/// above kMaxTensorRank, a dimension is negative, or it has more than
/// kMaxTensorElements elements.
CKPT_EXPORT absl::Status CheckTensorSpec(const TensorSpec& spec);

/// "[4096, 1024]".
CKPT_EXPORT std::string ShapeToString(const Shape& shape);

}  // namespace ckpt

#endif  // CKPT_TENSOR_H_
