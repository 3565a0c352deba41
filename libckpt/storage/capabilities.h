// Capabilities some backends offer beyond the Storage interface
// (StorageCapability, FindCapability in include/ckpt/storage.h), for the
// layers above storage that use them without naming a backend.
#ifndef CKPT_STORAGE_CAPABILITIES_H_
#define CKPT_STORAGE_CAPABILITIES_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "ckpt/storage.h"

namespace ckpt {

/// A multipart upload nobody completed or aborted (object stores): its
/// parts take space and never show in a listing.
struct PendingUpload {
  std::string path;  ///< relative to the root
  std::string upload_id;
  int64_t age_s = -1;  ///< since it was initiated; -1 when the server did not say
};

/// An object store's unfinished multipart uploads under the root (s3://).
class PendingUploads : public StorageCapability {
 public:
  static constexpr std::string_view kName = "pending-uploads";
  virtual absl::StatusOr<std::vector<PendingUpload>> ListPending() = 0;
  /// Aborts one (its parts stop taking space); one already gone is OK.
  virtual absl::Status AbortPending(const PendingUpload& upload) = 0;
};

/// A store that keeps copies of directories on a fast tier and may drop
/// them once they are safe elsewhere (tiered:// with keep_local=N): which
/// directories are complete is the caller's to say, by the file that
/// completes one (a step's manifest). Until told, it drops none.
class TierEviction : public StorageCapability {
 public:
  static constexpr std::string_view kName = "tier-eviction";
  /// A top-level directory is complete once `file` in it has reached the
  /// durable tier.
  virtual void CompleteWhenHolding(std::string_view file) = 0;
};

}  // namespace ckpt

#endif  // CKPT_STORAGE_CAPABILITIES_H_
