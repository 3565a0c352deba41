// Where an epoch-based run stands in its data, saved with each step and
// restored at any data-parallel size (docs/integrations.md, "Where the data
// stands"): the epoch, the seed and the number of samples the whole job
// consumed in the epoch. Each epoch's order is a pseudo-random permutation
// of [0, size) drawn from the seed and the epoch, computed index by index
// (no table: a dataset of billions of samples costs nothing to shuffle). A
// step consumes the next world x batch_size positions of the order (fewer
// at the epoch's end) in `world` contiguous parts, rank r taking part r, so
// the global order does not depend on the number of ranks: every epoch
// covers each index exactly once across restarts on other sizes.
//
//   ckpt::DataPosition pos(dataset_size, /*batch_size=*/32, /*seed=*/0);
//   state.AddBlob("data.position", pos.Encode(), /*global=*/true);   // saved with the step
//   ...
//   CKPT_RETURN_IF_ERROR(pos.Restore(loaded_blob));                  // any world size
//   for (int64_t i : pos.Batch(rank, world)) Train(dataset[i]);
//   pos.Advance(world);
// ckpt.torch.DataPosition is the same object in Python.
#ifndef CKPT_DATA_POSITION_H_
#define CKPT_DATA_POSITION_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "ckpt/export.h"

namespace ckpt {

class CKPT_EXPORT DataPosition {
 public:
  /// size >= 1 samples, batch_size >= 1 per rank and step; with shuffle
  /// false every epoch's order is 0, 1, ..., size - 1.
  DataPosition(int64_t size, int64_t batch_size, uint64_t seed = 0, bool shuffle = true);

  int64_t size() const { return size_; }
  int64_t batch_size() const { return batch_size_; }
  uint64_t seed() const { return seed_; }
  bool shuffle() const { return shuffle_; }
  int64_t epoch() const { return epoch_; }
  /// Samples the whole job consumed in this epoch.
  int64_t consumed() const { return consumed_; }

  /// The index at `position` of `epoch`'s order (0 <= position < size).
  int64_t IndexAt(int64_t epoch, int64_t position) const;
  /// `count` indices of the current epoch's order from `position` on.
  std::vector<int64_t> Slice(int64_t position, int64_t count) const;

  /// Positions [begin, end) of the current epoch that rank `rank` of
  /// `world` takes in the global batch starting at `consumed`.
  static void PartOf(int64_t size, int64_t batch_size, int64_t consumed, int rank, int world, int64_t* begin,
                     int64_t* end);
  /// This rank's indices of the next global batch (empty for a rank
  /// outside [0, world)).
  std::vector<int64_t> Batch(int rank, int world) const;
  /// One global batch of `world` ranks was trained on; the epoch rolls
  /// over once every sample was consumed.
  void Advance(int world);

  /// A short text record ("ckpt-data-position 1 ..."), and back. Restore
  /// refuses a record of another dataset (size), seed or shuffle.
  std::string Encode() const;
  absl::Status Restore(std::string_view encoded);

 private:
  int64_t size_, batch_size_;
  uint64_t seed_;
  bool shuffle_;
  int64_t epoch_ = 0, consumed_ = 0;
};

}  // namespace ckpt

#endif  // CKPT_DATA_POSITION_H_
