// A rank's report of a save of a laid-out state (State::AddLayout): what the
// leader cannot work out from the layouts, in a few dozen bytes. The leader
// builds the step's tensors from the layouts' rules and takes from each
// summary only its data file's size, index and timing, and its blobs.
#ifndef CKPT_FORMAT_RANK_SUMMARY_H_
#define CKPT_FORMAT_RANK_SUMMARY_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace ckpt {

/// The magic a summary starts with; a full rank report (a manifest) starts
/// otherwise, so the two share the report's file name.
constexpr char kRankSummaryMagic[4] = {'C', 'K', 'R', 'S'};

struct SummaryBlob {
  std::string name;
  bool global = false;
  uint64_t size = 0;
};

struct RankSummary {
  int32_t rank = 0;
  /// RuleBinding(step, save id, the layouts' rules hash) as the rank saw
  /// them: the leader compares it with its own.
  uint64_t binding = 0;
  // The rank's data file (the rest of its ManifestFile follows from the
  // rules).
  uint64_t size = 0;
  uint64_t index_offset = 0;
  uint64_t index_hash = 0;
  uint64_t block_count = 0;
  uint64_t container_hash = 0;
  float stall_s = 0;
  float write_s = 0;
  uint64_t bytes_stored = 0;
  /// The blobs after the shards, in file order.
  std::vector<SummaryBlob> blobs;
};

/// The binding of a summary to one save of one set of rules.
uint64_t RuleBinding(int64_t step, uint64_t save_id, uint64_t rules_hash);

std::string EncodeRankSummary(const RankSummary& s);
/// True when `bytes` starts as a summary does.
bool LooksLikeRankSummary(std::string_view bytes);
/// Decodes and checks a summary: magic, version, checksum, bounded counts,
/// no bytes left over. `what` names the object in messages (DataLoss).
absl::StatusOr<RankSummary> DecodeRankSummary(std::string_view bytes, std::string_view what);

}  // namespace ckpt

#endif  // CKPT_FORMAT_RANK_SUMMARY_H_
