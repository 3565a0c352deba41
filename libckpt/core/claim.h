// One writer per step: the claim a save's leader creates before any rank
// writes (docs/format.md "CLAIM"), how the other ranks learn and check it,
// and the save-id tags on FAILED and ABORTED markers.
#ifndef CKPT_CORE_CLAIM_H_
#define CKPT_CORE_CLAIM_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ckpt/communicator.h"
#include "ckpt/storage.h"
#include "format/root_files.h"

namespace ckpt {

/// A random nonzero save id.
uint64_t NewSaveId();

/// "0x<16 hex>".
std::string SaveIdText(uint64_t id);

/// FAILED and ABORTED markers name the save they belong to, so that a rank
/// of one save never acts on another's: "save 0x<16 hex>: <reason>".
std::string TagMarker(uint64_t id, std::string_view why);
/// The save a marker names (0 for markers without one) and its reason.
uint64_t UntagMarker(std::string_view text, std::string* why);

/// Aborted: `step` is claimed by `other`, so this save stops without
/// writing into it.
absl::Status ClaimedByOther(Storage& storage, int64_t step, const StepClaim& other);

/// Leader: creates the CLAIM of `step` for save `id`, exclusively (or, on a
/// backend without an exclusive create, after checking it is absent). OK
/// when it is this save's; Aborted when another save holds it.
absl::Status TakeClaim(Storage& storage, int64_t step, uint64_t id, int world_size);

/// Non-leader without a communicator: waits up to `timeout_s` for the
/// leader's claim and checks it against `expected` (adopts it when 0).
absl::StatusOr<uint64_t> AwaitClaim(Storage& storage, int64_t step, uint64_t expected, int rank, int world_size,
                                    double timeout_s);

/// Whether `step` is still claimed by save `id`: OK (and the claim's bytes
/// in `*text`, if given), Aborted when the claim is gone or another save's
/// (then this save must not write into the step), or the error reading it.
absl::Status CheckOwnClaim(Storage& storage, int64_t step, uint64_t id, std::string* text = nullptr);

/// Refuses a save of `step` before anything is claimed or written: the step
/// is committed (AlreadyExists), or it is not newer than LATEST and
/// `allow_older_step` is false (FailedPrecondition).
absl::Status CheckStepIsNew(Storage& storage, int64_t step, bool allow_older_step);

/// Who saves, and how the ranks of one save learn its id.
struct ClaimRequest {
  int64_t step = 0;
  int rank = 0;
  int world_size = 1;
  bool allow_older_step = false;
  uint64_t save_id = 0;  ///< SaveOptions::save_id (0: the leader picks one)
  double claim_timeout_s = 600;
  double collective_timeout_s = 300;
};

/// Claims `step` for one save and returns its id. With a communicator the
/// leader checks and claims alone and broadcasts the id or its reason, so
/// every rank fails together; without one the leader claims and the others
/// wait for its CLAIM (AwaitClaim).
absl::StatusOr<uint64_t> ClaimForSave(Storage& storage, Communicator* comm, const ClaimRequest& request);

/// Whether a status from CheckOwnClaim means the claim is lost.
inline bool LostClaim(const absl::Status& s) { return absl::IsAborted(s); }

/// The back-off between polls of the shared storage by `world_size` ranks
/// (16k ranks at 50 ms would be 650k lookups a second).
double PollCeiling(int world_size);

}  // namespace ckpt

#endif  // CKPT_CORE_CLAIM_H_
