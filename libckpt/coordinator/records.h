// The records of the coordinator's state log (journal file or etcd), decoded
// for reading back: `ckpt coordinator history` and the failover tests use
// them to show every decision made and to check that none contradicts
// another.
#ifndef CKPT_COORDINATOR_RECORDS_H_
#define CKPT_COORDINATOR_RECORDS_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "ckpt/coordinator.h"

namespace ckpt::coord {

using JournalKind = CoordinatorRecordKind;

/// "generation", "ended", "committed", "aborted", "sdc", "decided".
inline const char* JournalKindName(JournalKind kind) { return CoordinatorRecordKindName(kind); }

/// A step of the memory level is booked and recorded under its number with
/// this bit set, so that one step number may be saved at both levels and
/// records from before the memory level read as durable steps.
inline constexpr int64_t kMemoryStepBit = int64_t{1} << 61;
inline int64_t StepKey(int64_t step, bool memory) { return memory ? (step | kMemoryStepBit) : step; }
inline bool IsMemoryKey(int64_t key) { return key >= 0 && (key & kMemoryStepBit) != 0; }
inline int64_t StepOfKey(int64_t key) { return key >= 0 ? (key & ~kMemoryStepBit) : key; }
/// "step 14" or "memory step 14".
std::string StepName(int64_t key);

using RecordView = CoordinatorRecord;

/// Errors start "record SEQ: " when seq > 0.
absl::StatusOr<RecordView> DecodeRecord(int64_t seq, std::string_view record);

using MemoryLevelView = CoordinatorMemoryLevel;

/// "none", "held", "unconfirmed", "dropped", "gone".
inline const char* MemoryLevelStateName(MemoryLevelView::State state) { return CoordinatorMemoryStateName(state); }

/// A log's history (the public CoordinatorHistory), built record by record.
struct History : CoordinatorHistory {
  void Add(RecordView r);

 private:
  std::set<std::pair<int64_t, int64_t>> committed_in_, aborted_in_;  // (StepKey, generation)
  std::map<int64_t, int64_t> committed_by_;                          // durable step -> generation
};

}  // namespace ckpt::coord

#endif  // CKPT_COORDINATOR_RECORDS_H_
