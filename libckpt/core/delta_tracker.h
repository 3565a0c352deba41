// Which chunks one rank saves as deltas, against which base, and the base
// bytes it keeps for them (CheckpointerOptions::delta). A chunk is a saved
// box of a tensor (a save piece): its first save is whole and kept as its
// base; later saves store deltas against it while they pay, for at most
// `chain` saves, then it is saved whole again. Only a committed save becomes
// a base.
#ifndef CKPT_CORE_DELTA_TRACKER_H_
#define CKPT_CORE_DELTA_TRACKER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ckpt/options.h"
#include "core/save_pieces.h"
#include "format/manifest.h"
#include "util/aligned_buffer.h"

namespace ckpt {

/// Thread-safe.
class DeltaTracker {
 public:
  explicit DeltaTracker(const DeltaOptions& options) : options_(options) {}

  bool enabled() const {
    std::lock_guard<std::mutex> lock(mu_);
    return options_.chain > 0;
  }
  /// From the next Plan on.
  void SetOptions(const DeltaOptions& options) {
    std::lock_guard<std::mutex> lock(mu_);
    options_ = options;
  }

  /// Plans the save of `step`: sets each tensor piece's delta_reference or
  /// delta_capture (blobs are always whole), keeps the buffers alive in
  /// `keep_alive`, and returns the base of each tile (nullopt: whole).
  absl::StatusOr<std::vector<std::optional<ManifestBase>>> Plan(int64_t step, SavePieces& pieces,
                                                                std::vector<std::shared_ptr<const void>>* keep_alive);

  /// The save's data file is durable: `stored[i]` is tile i's stored bytes.
  /// Measures each delta against its base's whole size.
  void Written(int64_t step, uint64_t save_id, const std::vector<uint64_t>& stored);

  /// The save committed (its captures become bases) or failed (they are
  /// dropped, and so are the bases of its deltas: those chunks are saved
  /// whole next).
  void Outcome(int64_t step, bool committed);

  /// Bytes of base copies held now.
  uint64_t held_bytes() const;

 private:
  struct Key {
    std::string fqn;
    Box box;
    bool operator<(const Key& o) const {
      if (fqn != o.fqn) return fqn < o.fqn;
      if (box.offsets != o.box.offsets) return box.offsets < o.box.offsets;
      return box.sizes < o.box.sizes;
    }
  };
  struct Chunk {
    std::shared_ptr<AlignedBuffer> base;  ///< a committed save's bytes
    ManifestBase base_id;
    uint64_t base_stored = 0;
    /// Stored bytes of the base and of every delta written against it.
    uint64_t cycle_stored = 0;
    int cycle_saves = 0;
    int links = 0;        ///< deltas planned against `base`
    bool rebase = false;  ///< the last delta stopped paying
    int whole_left = 0;   ///< saves left to store whole, keeping nothing
    // A whole save in flight that becomes the base once committed.
    std::shared_ptr<AlignedBuffer> pending;
    int64_t pending_step = -1;
    uint64_t pending_save_id = 0;
    uint64_t pending_stored = 0;
  };
  enum class Kind : uint8_t { kWhole, kCapture, kDelta };
  struct Planned {
    Key key;
    Kind kind = Kind::kWhole;
  };

  mutable std::mutex mu_;
  DeltaOptions options_;  // REQUIRES: mu_
  std::map<Key, Chunk> chunks_;
  std::map<int64_t, std::vector<Planned>> inflight_;
};

}  // namespace ckpt

#endif  // CKPT_CORE_DELTA_TRACKER_H_
