#include "core/claim.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <random>
#include <thread>

#include "absl/strings/numbers.h"
#include "core/root.h"
#include "util/bytes.h"
#include "util/clock.h"
#include "util/errors.h"
#include "util/hash.h"
#include "util/log.h"
#include "util/status_wire.h"
#include "util/strings.h"

namespace ckpt {

uint64_t NewSaveId() {
  static thread_local std::mt19937_64 rng(std::random_device{}() ^ static_cast<uint64_t>(UnixNanos()));
  uint64_t id = 0;
  while (id == 0) id = rng();
  return id;
}

std::string SaveIdText(uint64_t id) {
  char hex[19];
  return std::string(HexHashTo(id, hex));
}

std::string TagMarker(uint64_t id, std::string_view why) { return StrCat("save ", SaveIdText(id), ": ", why); }

uint64_t UntagMarker(std::string_view text, std::string* why) {
  std::string_view rest = text;
  uint64_t id = 0;
  if (!ConsumePrefix(&rest, "save ") || rest.size() < 20 || rest.substr(18, 2) != ": " ||
      !ParseHex64(rest.substr(0, 18), &id)) {
    id = 0;
  }
  *why = std::string(id != 0 ? rest.substr(20) : text);
  return id;
}

double PollCeiling(int world_size) { return std::clamp(0.05 * world_size / 256.0, 0.05, 2.0); }

absl::Status ClaimedByOther(Storage& storage, int64_t step, const StepClaim& other) {
  return absl::AbortedError(
      StrCat("step ", step, " under ", storage.uri(), " is claimed by another ", DescribeClaim(other, UnixNanos()),
             "; a step has one writer, so this save stops without writing into it. If that save is no longer "
             "running, its leftovers are removed when the next job opens the root (or by `ckpt gc`)"));
}

absl::Status TakeClaim(Storage& storage, int64_t step, uint64_t id, int world_size) {
  StepClaim claim;
  claim.save_id = id;
  claim.world_size = world_size;
  claim.host = ThisHostName();
  claim.pid = getpid();
  claim.pid_start = ProcessStartTicks(claim.pid);
  claim.claimed_unix_ns = UnixNanos();
  const std::string text = EncodeClaim(claim);
  const std::string path = StrCat(StepDir(step), "/", kClaimName);
  absl::Status s = storage.PutIfAbsent(path, AsBytesView(text));
  // The step directory removed under the claim (a job opening the root
  // collected it as a leftover): claim again, in a new directory.
  for (int retry = 0; retry < 3 && absl::IsNotFound(s); ++retry) s = storage.PutIfAbsent(path, AsBytesView(text));
  if (absl::IsUnimplemented(s)) {
    // A backend without an atomic create-if-absent: check, then write. Two
    // saves starting together may both get here; the re-reads of the claim
    // before each report and before the commit stop all but one.
    static std::once_flag warned;
    std::call_once(warned, [&] {
      LogWarning(StrCat(storage.uri(),
                        " cannot create a file only if it is absent; one writer per step is checked "
                        "before each commit, not proven at the claim (docs/plugins.md)"));
    });
    auto size = storage.FileSize(path);
    if (size.ok()) {
      s = absl::AlreadyExistsError(path);
    } else if (absl::IsNotFound(size.status())) {
      s = storage.PutAtomic(path, AsBytesView(text));
    } else {
      s = size.status();
    }
  }
  if (s.ok()) return s;
  if (!absl::IsAlreadyExists(s)) return Annotate(s, StrCat("claiming step ", step));
  auto other = ReadStepClaim(storage, step);
  if (!other.ok()) {
    return absl::AbortedError(StrCat("step ", step, " under ", storage.uri(),
                                     " is claimed by another save whose claim does not read (",
                                     other.status().message(), "); this save stops without writing"));
  }
  if (other->save_id == id) return absl::OkStatus();  // this save's own claim
  return ClaimedByOther(storage, step, *other);
}

absl::StatusOr<uint64_t> AwaitClaim(Storage& storage, int64_t step, uint64_t expected, int rank, int world_size,
                                    double timeout_s) {
  const double deadline = NowSeconds() + timeout_s;
  const double max_delay = PollCeiling(world_size);
  double delay = 0.001;
  while (true) {
    auto claim = ReadStepClaim(storage, step);
    if (claim.ok()) {
      if (expected != 0 && claim->save_id != expected) return ClaimedByOther(storage, step, *claim);
      return claim->save_id;
    }
    if (!absl::IsNotFound(claim.status())) {
      return Annotate(claim.status(), StrCat("rank ", rank, ": reading the claim of step ", step));
    }
    if (NowSeconds() > deadline) {
      return absl::DeadlineExceededError(StrCat("rank ", rank, ": the leader (rank 0) did not claim step ", step,
                                                " within ", timeout_s, " s; nothing was written"));
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(delay));
    delay = std::min(delay * 2, max_delay);
  }
}

absl::Status CheckOwnClaim(Storage& storage, int64_t step, uint64_t id, std::string* text) {
  const std::string path = StrCat(StepDir(step), "/", kClaimName);
  auto bytes = storage.GetAll(path);
  absl::StatusOr<StepClaim> claim = bytes.ok() ? DecodeClaim(*bytes, path) : bytes.status();
  if (claim.ok() && claim->save_id == id) {
    if (text != nullptr) *text = std::move(bytes).value();
    return absl::OkStatus();
  }
  if (claim.ok()) {
    return absl::AbortedError(StrCat("step ", step, ": another ", DescribeClaim(*claim, UnixNanos()),
                                     " claimed the step while this save (save ", SaveIdText(id),
                                     ") was writing it; nothing of this save is committed"));
  }
  if (absl::IsNotFound(claim.status())) {
    return absl::AbortedError(StrCat("step ", step, ": the claim of this save (save ", SaveIdText(id),
                                     ") was removed while it was writing (a job opening the root removes "
                                     "uncommitted steps of saves it cannot see running); nothing of this save "
                                     "is committed"));
  }
  return Annotate(claim.status(), StrCat("re-reading the claim of step ", step));
}

absl::Status CheckStepIsNew(Storage& storage, int64_t step, bool allow_older_step) {
  const std::string dir = StepDir(step);
  for (std::string_view name : {kManifestName, kManifestCopyName}) {
    auto size = storage.FileSize(StrCat(dir, "/", name));
    if (size.ok()) {
      return absl::AlreadyExistsError(
          StrCat("step ", step, " is already committed under ", storage.uri(), " (", dir, "/", name, " exists)"));
    }
    // Not knowing is no answer: the save stops, with the storage's reason.
    if (!absl::IsNotFound(size.status())) {
      return Annotate(size.status(), StrCat("cannot tell whether step ", step, " is already committed"));
    }
  }
  // A step at or below the latest is usually a second job, or a restart
  // counting from the wrong place; it must be asked for.
  if (!allow_older_step) {
    if (auto text = storage.GetAll(kLatestName); text.ok()) {
      if (auto latest = DecodeLatest(*text); latest.ok() && *latest >= step) {
        return absl::FailedPreconditionError(
            StrCat("step ", step, " is not newer than the latest committed step ", *latest, " under ", storage.uri(),
                   "; to save it anyway (a branch from an older step), pass SaveOptions::allow_older_step "
                   "(ckpt synth --allow-older)"));
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> ClaimForSave(Storage& storage, Communicator* comm, const ClaimRequest& q) {
  const uint64_t mine = q.save_id != 0 ? q.save_id : NewSaveId();
  if (comm == nullptr) {
    CKPT_RETURN_IF_ERROR(CheckStepIsNew(storage, q.step, q.allow_older_step));
    if (q.rank != 0) return AwaitClaim(storage, q.step, q.save_id, q.rank, q.world_size, q.claim_timeout_s);
    CKPT_RETURN_IF_ERROR(TakeClaim(storage, q.step, mine, q.world_size));
    return mine;
  }
  // The leader decides alone (ranks reading LATEST at different moments
  // could disagree) and tells everyone the save id or its reason.
  std::string verdict;
  if (comm->rank() == 0) {
    absl::Status s = CheckStepIsNew(storage, q.step, q.allow_older_step);
    if (s.ok()) s = TakeClaim(storage, q.step, mine, q.world_size);
    verdict = EncodeOutcome(s.ok() ? absl::StatusOr<std::string>(StrCat(mine)) : s);
  }
  CKPT_ASSIGN_OR_RETURN(verdict, comm->Broadcast(verdict, q.collective_timeout_s));
  CKPT_ASSIGN_OR_RETURN(verdict, DecodeOutcome(verdict, StrCat("the leader's claim of step ", q.step)));
  uint64_t id = 0;
  if (!absl::SimpleAtoi(verdict, &id) || id == 0) {
    return absl::InternalError(StrCat("step ", q.step, ": malformed claim verdict from the leader"));
  }
  return id;
}

}  // namespace ckpt
