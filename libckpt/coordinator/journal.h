// The coordinator's durable state: an append-only log of records, each
// length-prefixed and checksummed and fsynced before the coordinator acts
// on it. Replay stops at a torn tail (a crash mid-append), which is cut off.
#ifndef CKPT_COORDINATOR_JOURNAL_H_
#define CKPT_COORDINATOR_JOURNAL_H_

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace ckpt::coord {

class Journal {
 public:
  ~Journal();
  /// Opens (creating) `dir`/journal and calls `replay` for every intact
  /// record in order. A record that fails its checksum ends the replay; it
  /// and what follows are truncated away, and `torn` reports how many bytes.
  absl::Status Open(const std::string& dir, const std::function<absl::Status(std::string_view)>& replay,
                    uint64_t* torn);
  /// Calls `replay` for the intact records of `dir`/journal without
  /// changing it; `torn`: bytes after the last intact one.
  static absl::Status Read(const std::string& dir, const std::function<absl::Status(std::string_view)>& replay,
                           uint64_t* torn);
  /// Appends one record and fsyncs. REQUIRES: one thread at a time.
  absl::Status Append(std::string_view record);
  const std::string& path() const { return path_; }

 private:
  static absl::Status Parse(const std::string& path, std::string_view all,
                            const std::function<absl::Status(std::string_view)>& replay, size_t* end);
  std::string path_;
  int fd_ = -1;
};

}  // namespace ckpt::coord

#endif  // CKPT_COORDINATOR_JOURNAL_H_
