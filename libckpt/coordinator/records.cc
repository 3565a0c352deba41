#include "coordinator/records.h"

#include "coordinator/membership.h"
#include "peer/erasure.h"
#include "util/bytes.h"
#include "util/strings.h"

namespace ckpt {

using coord::JournalKind;
using coord::MemoryLevelView;

const char* CoordinatorRecordKindName(JournalKind kind) {
  switch (kind) {
    case JournalKind::kGeneration:
      return "generation";
    case JournalKind::kEnded:
      return "ended";
    case JournalKind::kCommitted:
      return "committed";
    case JournalKind::kAborted:
      return "aborted";
    case JournalKind::kSdc:
      return "sdc";
    case JournalKind::kDecided:
      return "decided";
  }
  return "?";
}

const char* CoordinatorMemoryStateName(MemoryLevelView::State state) {
  switch (state) {
    case MemoryLevelView::State::kNone:
      return "none";
    case MemoryLevelView::State::kHeld:
      return "held";
    case MemoryLevelView::State::kUnconfirmed:
      return "unconfirmed";
    case MemoryLevelView::State::kDropped:
      return "dropped";
    case MemoryLevelView::State::kGone:
      return "gone";
  }
  return "?";
}

}  // namespace ckpt

namespace ckpt::coord {

namespace {
// "record N: " when the caller numbers records (history); a replaying
// coordinator's log names the key or byte offset itself.
std::string Where(int64_t seq) { return seq > 0 ? StrCat("record ", seq, ": ") : std::string(); }
}  // namespace

std::string StepName(int64_t key) {
  return IsMemoryKey(key) ? StrCat("memory step ", StepOfKey(key)) : StrCat("step ", key);
}

absl::StatusOr<RecordView> DecodeRecord(int64_t seq, std::string_view record) {
  ByteReader r(record, "journal record");
  RecordView v;
  v.seq = seq;
  const uint8_t kind = r.U8();
  v.kind = static_cast<JournalKind>(kind);
  switch (v.kind) {
    case JournalKind::kGeneration: {
      Membership m;
      if (absl::Status s = m.ReplayGeneration(r); !s.ok()) return s;
      v.generation = m.generation();
      v.world = m.world();
      v.restore_step = m.restore_step();
      for (const Member* p : m.Members()) v.members.push_back({p->id, p->host, p->first_rank, p->local_ranks});
      break;
    }
    case JournalKind::kEnded:
      v.generation = r.SVar();
      if (r.ok() && !r.AtEnd()) v.finished = r.U8() != 0;
      break;
    case JournalKind::kCommitted:
    case JournalKind::kAborted:
    case JournalKind::kDecided:
      v.step = r.SVar();
      v.generation = r.SVar();
      v.memory = IsMemoryKey(v.step);
      v.step = StepOfKey(v.step);
      if (r.ok() && !r.AtEnd()) v.save_world = static_cast<int>(r.Count(uint64_t{1} << 30, "save world"));
      if (r.ok() && !r.AtEnd()) {  // a memory commit's erasure coding (appended)
        v.erasure_k = r.U8();
        v.erasure_m = r.U8();
        if (r.ok() && !peer::CheckErasureShape(v.erasure_k, v.erasure_m).ok()) {
          r.Fail(StrCat("erasure coding ", v.erasure_k, "+", v.erasure_m));
        }
      }
      break;
    case JournalKind::kSdc:
      v.step = r.SVar();
      v.chunk = r.Str();
      v.detail = r.Str();
      break;
    default:
      return absl::DataLossError(StrCat(Where(seq), "unknown journal record kind ", static_cast<int>(kind)));
  }
  if (!r.ok()) return absl::DataLossError(StrCat(Where(seq), r.status().message()));
  return v;
}

void History::Add(RecordView r) {
  const int64_t key = StepKey(r.step, r.memory);
  switch (r.kind) {
    case JournalKind::kGeneration:
      for (auto it = records.rbegin(); it != records.rend(); ++it) {
        if (it->kind == JournalKind::kGeneration) {
          if (r.generation <= it->generation) {
            contradictions.push_back(StrCat("record ", r.seq, ": generation ", r.generation, " after generation ",
                                            it->generation, " (record ", it->seq, ")"));
          }
          break;
        }
      }
      // A generation restores a memory step only when it is newer than
      // every durable one; otherwise its members drop their memory steps.
      if (memory.state == MemoryLevelView::State::kHeld || memory.state == MemoryLevelView::State::kUnconfirmed) {
        const bool restored = r.restore_step == memory.step && committed.count(memory.step) == 0;
        memory.state = restored ? MemoryLevelView::State::kHeld : MemoryLevelView::State::kDropped;
        memory.held_by = r.generation;
      }
      break;
    case JournalKind::kEnded:
      if (memory.state == MemoryLevelView::State::kHeld && memory.held_by == r.generation) {
        memory.state = r.finished ? MemoryLevelView::State::kGone : MemoryLevelView::State::kUnconfirmed;
      }
      break;
    case JournalKind::kCommitted:
      if (aborted_in_.count({key, r.generation})) {
        contradictions.push_back(StrCat("record ", r.seq, ": ", StepName(key), " of generation ", r.generation,
                                        " committed after it was aborted"));
      }
      if (!r.memory) {
        // A generation restores the newest committed step or a newer one:
        // a durable step committed again by another generation was written
        // twice.
        auto [at, first] = committed_by_.emplace(r.step, r.generation);
        if (!first && at->second != r.generation) {
          contradictions.push_back(StrCat("record ", r.seq, ": ", StepName(key), " committed by generation ",
                                          r.generation, " after generation ", at->second, " committed it"));
        }
      }
      (r.memory ? memory_committed : committed).insert(r.step);
      if (r.memory) {
        memory.state = MemoryLevelView::State::kHeld;
        memory.step = r.step;
        memory.generation = memory.held_by = r.generation;
        memory.save_world = r.save_world;
        memory.erasure_k = r.erasure_k;
        memory.erasure_m = r.erasure_m;
      }
      committed_in_.insert({key, r.generation});
      break;
    case JournalKind::kDecided:
      if (aborted_in_.count({key, r.generation})) {
        contradictions.push_back(StrCat("record ", r.seq, ": ", StepName(key), " of generation ", r.generation,
                                        " decided for commit after it was aborted"));
      }
      if (!r.memory) decided.insert(r.step);
      break;
    case JournalKind::kAborted:
      // A step decided for commit may still abort (its leader could not
      // publish it); one committed may not.
      if (committed_in_.count({key, r.generation})) {
        contradictions.push_back(StrCat("record ", r.seq, ": ", StepName(key), " of generation ", r.generation,
                                        " aborted after it was committed"));
      }
      if (!r.memory) aborted.insert(r.step);
      aborted_in_.insert({key, r.generation});
      break;
    default:
      break;
  }
  records.push_back(std::move(r));
}

}  // namespace ckpt::coord
