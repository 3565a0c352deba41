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

namespace ckpt::coord {

enum class JournalKind : uint8_t { kGeneration = 1, kEnded = 2, kCommitted = 3, kAborted = 4, kSdc = 5, kDecided = 6 };

/// "generation", "ended", "committed", "aborted", "sdc", "decided".
const char* JournalKindName(JournalKind kind);

/// A step of the memory level is booked and recorded under its number with
/// this bit set, so that one step number may be saved at both levels and
/// records from before the memory level read as durable steps.
inline constexpr int64_t kMemoryStepBit = int64_t{1} << 61;
inline int64_t StepKey(int64_t step, bool memory) { return memory ? (step | kMemoryStepBit) : step; }
inline bool IsMemoryKey(int64_t key) { return key >= 0 && (key & kMemoryStepBit) != 0; }
inline int64_t StepOfKey(int64_t key) { return key >= 0 ? (key & ~kMemoryStepBit) : key; }
/// "step 14" or "memory step 14".
std::string StepName(int64_t key);

struct RecordView {
  int64_t seq = 0;  ///< 1-based position in the log
  JournalKind kind = JournalKind::kGeneration;
  int64_t generation = -1;
  int64_t step = -1;      ///< steps and SDC alerts (the step's number, without kMemoryStepBit)
  bool memory = false;    ///< a step of the memory level
  int save_world = 0;     ///< a memory step's commit: the ranks of its save
  bool finished = false;  ///< a generation's end: every member left (the job finished)
  // A generation:
  int world = 0;
  int64_t restore_step = -1;
  struct Member {
    uint64_t id = 0;
    std::string host;
    int first_rank = 0;
    int local_ranks = 0;
  };
  std::vector<Member> members;
  // An SDC alert:
  std::string chunk, detail;
};

/// Errors start "record SEQ: " when seq > 0.
absl::StatusOr<RecordView> DecodeRecord(int64_t seq, std::string_view record);

/// The memory level as a log shows it: the memory step committed last and
/// whether the job's processes still hold it.
struct MemoryLevelView {
  enum class State : uint8_t {
    kNone,         ///< no memory step was ever committed
    kHeld,         ///< the running generation committed or restored it
    kUnconfirmed,  ///< the generation holding it ended and no other formed yet
    kDropped,      ///< a later generation did not restore it
    kGone,         ///< the job finished: every member left, its processes exited
  };
  State state = State::kNone;
  int64_t step = -1;
  int64_t generation = -1;  ///< the generation whose save committed it
  int save_world = 0;       ///< ranks of that save
  int64_t held_by = -1;     ///< the generation that held it last, or the one that dropped it
};

/// "none", "held", "unconfirmed", "dropped", "gone".
const char* MemoryLevelStateName(MemoryLevelView::State state);

/// The decisions a log holds and what contradicts in them: a step of one
/// generation both committed and aborted, or decided for commit after it
/// was aborted; a generation number that does not grow. (A step decided
/// for commit may still abort: its leader could not publish it; a step
/// aborted in one generation is saved again in the next.)
struct History {
  std::vector<RecordView> records;
  std::set<int64_t> committed, aborted, decided;  ///< durable steps, in any generation
  std::set<int64_t> memory_committed;             ///< memory steps, in any generation
  std::vector<std::string> contradictions;
  /// Each process keeps the newest committed memory step (docs/levels.md),
  /// and a generation restores it or drops it: this follows that through
  /// the log. A log cannot tell which processes survived a generation's
  /// end, so between generations the step is only kUnconfirmed.
  MemoryLevelView memory;
  void Add(RecordView r);

 private:
  std::set<std::pair<int64_t, int64_t>> committed_in_, aborted_in_;  // (StepKey, generation)
  std::map<int64_t, int64_t> committed_by_;                          // durable step -> generation
};

}  // namespace ckpt::coord

#endif  // CKPT_COORDINATOR_RECORDS_H_
