// The set of shards and blobs one rank hands to Save, or wants filled by Load.
#ifndef CKPT_STATE_H_
#define CKPT_STATE_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "absl/status/status.h"
#include "ckpt/export.h"
#include "ckpt/limits.h"
#include "ckpt/mesh.h"
#include "ckpt/tensor.h"

namespace ckpt {

/// A rank's piece of a global tensor, backed by host memory the caller owns.
///
/// `strides` are in elements, one per dimension of `box`; empty means
/// row-major contiguous. For Save the memory is only read, and only during
/// the Save call (it is copied to the staging arena before Save returns). For
/// Load it is written, and must stay valid until Load returns.
struct CKPT_EXPORT Shard {
  TensorSpec spec;
  Box box;
  void* data = nullptr;
  std::vector<int64_t> strides;

  bool Contiguous() const;
  /// Bytes the box holds when packed row-major.
  int64_t PackedBytes() const;
};

/// Visibility of a blob: one per rank, or one for the whole job.
enum class BlobScope : uint8_t { kRank = 0, kGlobal = 1 };

/// A named opaque byte string (RNG state, data-loader position, config).
struct CKPT_EXPORT Blob {
  std::string name;
  BlobScope scope = BlobScope::kRank;
  /// Save: bytes to store (read during Save only).
  const void* data = nullptr;
  size_t size = 0;
  /// Load: where to put the bytes. Per-rank blobs come from `source_rank`
  /// (-1 means the loading rank).
  std::string* out = nullptr;
  int source_rank = -1;
};

/// An ordered collection of shards and blobs. Not thread-safe; cheap to
/// build per call, holds no tensor memory itself.
///
/// Shards are given either as boxes (AddShard) or by their tensor's layout
/// over a mesh (SetMesh, then AddLayout for every tensor of the model). A
/// state whose shards all come from layouts is *laid out*: a save plans
/// alone which of its boxes this rank writes and what its data file holds,
/// and its commit sends the leader a summary of the file instead of its
/// chunk list; the leader builds the manifest from the layouts
/// (docs/resharding.md). The manifest is the same either way.
class CKPT_EXPORT State {
 public:
  /// Adds a shard. Fails (InvalidArgument, naming the tensor) when the spec
  /// breaks a limit (CheckTensorSpec: rank above 32, more than 2^50
  /// elements), the box does not fit the shape, strides have the wrong rank,
  /// data is null for a non-empty box, or the same tensor already has an
  /// overlapping shard.
  absl::Status AddShard(const TensorSpec& spec, const Box& box, void* data, std::vector<int64_t> strides = {});
  /// Convenience: the whole tensor, contiguous.
  absl::Status AddTensor(const TensorSpec& spec, void* data);

  /// The mesh the layouts are over and this rank's place in it; before the
  /// first AddLayout, once. InvalidArgument for a mesh CheckMesh refuses or
  /// a rank outside it.
  absl::Status SetMesh(const Mesh& mesh, int64_t rank);
  /// Declares a tensor by its layout and adds the box this rank holds of it
  /// (RankBox): `data` holds that box, row-major unless `strides` say
  /// otherwise; it may be null when the rank holds nothing or an empty box.
  /// Every rank declares every tensor of the model in the same order, those
  /// it holds no part of too (another pipeline stage's layers): that order
  /// is the order of the tensors in each rank's data file. Fails as
  /// AddShard does, for a tensor declared twice, and for a layout RankBox
  /// refuses.
  absl::Status AddLayout(const TensorLayout& layout, void* data, std::vector<int64_t> strides = {});

  /// Every layout declared, in order.
  const std::vector<TensorLayout>& layouts() const { return layouts_; }
  /// The mesh of SetMesh, if any, and the rank given with it.
  const std::optional<Mesh>& mesh() const { return mesh_; }
  int64_t mesh_rank() const { return mesh_rank_; }
  /// Per shard: the index of the layout it came from, or -1 for AddShard's.
  const std::vector<int32_t>& shard_layouts() const { return shard_layouts_; }
  /// True when the state declares layouts and every shard came from one.
  bool LaidOut() const;

  /// Adds a blob to save.
  absl::Status AddBlob(std::string name, const void* data, size_t size, BlobScope scope = BlobScope::kRank);
  /// Asks Load to fill `out` with a blob.
  absl::Status AddBlobOut(std::string name, std::string* out, BlobScope scope = BlobScope::kRank, int source_rank = -1);

  const std::vector<Shard>& shards() const { return shards_; }
  const std::vector<Blob>& blobs() const { return blobs_; }
  bool empty() const { return shards_.empty() && blobs_.empty(); }
  /// Sum of PackedBytes over shards plus blob sizes.
  int64_t LogicalBytes() const;

 private:
  std::vector<Shard> shards_;
  std::vector<Blob> blobs_;
  std::optional<Mesh> mesh_;
  int64_t mesh_rank_ = 0;
  std::vector<TensorLayout> layouts_;
  std::vector<int32_t> shard_layouts_;        // parallel to shards_
  std::unordered_set<std::string> declared_;  // the layouts' names
  bool box_shards_ = false;                   // some shard came from AddShard
};

}  // namespace ckpt

#endif  // CKPT_STATE_H_
