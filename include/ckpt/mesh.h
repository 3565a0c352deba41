// Device meshes and DTensor-style placements: which box of each tensor a rank
// holds, for any mesh.
#ifndef CKPT_MESH_H_
#define CKPT_MESH_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "ckpt/export.h"
#include "ckpt/limits.h"
#include "ckpt/tensor.h"

namespace ckpt {

/// A named N-d device mesh, e.g. dp=4 x tp=2 x pp=2. Rank order is row-major
/// over the dimensions as listed (the last dimension varies fastest).
struct CKPT_EXPORT Mesh {
  std::vector<std::string> names;
  std::vector<int64_t> sizes;

  /// Parses "dp=4,tp=2,pp=2". Sizes must be >= 1; names unique.
  static absl::StatusOr<Mesh> Parse(std::string_view text);
  /// A mesh with a single dimension "world" of `n` ranks.
  static Mesh World(int64_t n);

  int ndim() const { return static_cast<int>(sizes.size()); }
  int64_t NumRanks() const;
  /// Index of a named dimension, or -1.
  int DimIndex(std::string_view name) const;
  /// Size of a named dimension, or 1 when the mesh has no such dimension.
  int64_t SizeOf(std::string_view name) const;
  std::vector<int64_t> Coords(int64_t rank) const;
  int64_t RankOf(const std::vector<int64_t>& coords) const;
  /// "dp=4,tp=2,pp=2".
  std::string ToString() const;
  bool operator==(const Mesh& other) const = default;
};

/// OK when `mesh` can be recorded and planned: names and sizes agree in
/// number, at most kMaxTensorRank dimensions (ckpt/limits.h), names non-empty,
/// unique and at most kMaxMeshDimNameBytes, sizes >= 1, at most 2^24 ranks
/// (checked without overflow).
CKPT_EXPORT absl::Status CheckMesh(const Mesh& mesh);

/// How one mesh dimension lays a tensor out (as DTensor's placements).
struct CKPT_EXPORT Placement {
  enum class Kind : uint8_t { kReplicate = 0, kShard = 1 };
  Kind kind = Kind::kReplicate;
  /// Tensor dimension split across the mesh dimension (kShard).
  int dim = 0;
  /// Optional explicit split points along `dim` (size = mesh size + 1,
  /// starting at 0 and ending at the extent). Empty: torch.chunk-style split,
  /// ceil(extent / n) per part, trailing parts possibly smaller or empty.
  std::vector<int64_t> boundaries;

  static Placement Replicate() { return Placement{}; }
  static Placement Shard(int dim) { return Placement{Kind::kShard, dim, {}}; }
};

/// The layout of one tensor over a mesh.
struct CKPT_EXPORT TensorLayout {
  TensorSpec spec;
  /// One placement per mesh dimension (missing trailing ones: Replicate).
  std::vector<Placement> placements;
  /// Mesh dimensions in the order they split the tensor when several shard
  /// the same tensor dimension (the first splits the whole extent, the next
  /// splits that part). Empty: mesh order.
  std::vector<int> split_order;
  /// When >= 0, only ranks whose coordinate along mesh dim `owner_dim`
  /// equals `owner_index` hold the tensor (pipeline stages own layers).
  int owner_dim = -1;
  int64_t owner_index = 0;
};

/// The box of `layout.spec` that `rank` holds, or nullopt when the rank holds
/// no part of it (another pipeline stage). The box may be empty when an
/// uneven split leaves the rank nothing. Errors on inconsistent layouts.
CKPT_EXPORT absl::StatusOr<std::optional<Box>> RankBox(const TensorLayout& layout, const Mesh& mesh, int64_t rank);

/// RankBox for explicit mesh coordinates (one per mesh dimension).
CKPT_EXPORT absl::StatusOr<std::optional<Box>> BoxAtCoords(const TensorLayout& layout, const Mesh& mesh,
                                                           const std::vector<int64_t>& coords);

/// Splits [0, extent) into `parts` torch.chunk-style: each part gets
/// ceil(extent / parts) until the extent runs out. Returns parts + 1 bounds.
CKPT_EXPORT std::vector<int64_t> ChunkBoundaries(int64_t extent, int64_t parts);

}  // namespace ckpt

#endif  // CKPT_MESH_H_
