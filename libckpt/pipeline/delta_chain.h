// Blocks stored as deltas (docs/format.md, "Delta chains"): a delta block's
// decoded bytes are its elements' differences from the same block of its
// chunk's base step (MakeDelta), which may be a delta in turn. DeltaChain rebuilds a base block by walking
// that chain, each link checked by its own checksums, and reads only the
// blocks asked for.
#ifndef CKPT_PIPELINE_DELTA_CHAIN_H_
#define CKPT_PIPELINE_DELTA_CHAIN_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "ckpt/storage.h"
#include "format/frame_check.h"
#include "format/manifest.h"
#include "pipeline/block_stream.h"

namespace ckpt {

/// The committed manifests of base steps, as the root's rules decide them
/// (core/root.h gives one). Thread-safe.
class BaseManifests {
 public:
  virtual ~BaseManifests() = default;
  /// The manifest of committed step `step`, every chunk listed.
  virtual absl::StatusOr<std::shared_ptr<const Manifest>> Read(int64_t step) = 0;
};

/// The delta transform, element by element of `width` bytes (1, 2, 4 or
/// 8), little-endian: each element of `bytes` becomes the zig-zag coded
/// difference of its bit pattern and the base's, modulo 2^(8 width), so
/// that an element that moved by a few units in its last place becomes a
/// small number whose high bytes are zero (docs/format.md, "Delta chains").
/// Equal lengths, a multiple of `width`.
void MakeDelta(absl::Span<std::byte> bytes, absl::Span<const std::byte> base, size_t width);
/// The inverse: rebuilds the elements from their deltas and the base.
void UndoDelta(absl::Span<std::byte> bytes, absl::Span<const std::byte> base, size_t width);

/// Rebuilds base blocks for the deltas of one or more steps of a root.
/// Thread-safe: each base step is opened once and its files once.
class DeltaChain {
 public:
  DeltaChain(Storage& storage, BaseManifests* manifests) : storage_(storage), manifests_(manifests) {}

  /// The function DecodeFrame calls for block `block` (relative to the
  /// chunk) of chunk `c` of tensor `t` of the step `m` describes: it applies
  /// in the rebuilt base block. `depth` counts the links already followed.
  /// Empty when `c` names no base.
  DeltaBaseFn For(const Manifest& m, const ManifestTensor& t, const ManifestChunk& c, uint64_t block, int depth = 0);

  /// Rebuilds `bytes` (decoded deltas) from the rebuilt block `block` of the
  /// chunk of `spec` with
  /// box `box` in step `base`, whose files must be that base's save and
  /// have block size `block_size`.
  absl::Status ApplyBase(const ManifestBase& base, const TensorSpec& spec, const Box& box, uint64_t block,
                         uint64_t block_size, absl::Span<std::byte> bytes, int depth);

  /// Bytes of base frames read so far.
  int64_t bytes_read() const { return bytes_read_.load(std::memory_order_relaxed); }

 private:
  struct BaseStep {
    std::shared_ptr<const Manifest> manifest;
    std::unique_ptr<StepFiles> files;
    /// Per tensor, its chunks by box offsets.
    std::map<std::string, std::map<Dims, const ManifestChunk*>, std::less<>> chunks;
  };
  absl::StatusOr<BaseStep*> Open(const ManifestBase& base);

  Storage& storage_;
  BaseManifests* manifests_;
  std::mutex mu_;
  std::map<int64_t, std::unique_ptr<BaseStep>> steps_;
  std::atomic<int64_t> bytes_read_{0};
};

}  // namespace ckpt

#endif  // CKPT_PIPELINE_DELTA_CHAIN_H_
