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
  /// The journal `dir`/journal; nothing is opened yet.
  explicit Journal(std::string dir);
  ~Journal();
  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;
  /// Opens (creating) the journal and calls `replay` for every intact
  /// record in order. A record that fails its checksum ends the replay; it
  /// and what follows are truncated away, and `torn` reports how many bytes.
  absl::Status Open(const std::function<absl::Status(std::string_view)>& replay, uint64_t* torn);
  /// Calls `replay` for the intact records of `dir`/journal without
  /// changing it; `torn`: bytes after the last intact one.
  static absl::Status Read(const std::string& dir, const std::function<absl::Status(std::string_view)>& replay,
                           uint64_t* torn);
  /// Appends one record and fsyncs. REQUIRES: one thread at a time.
  absl::Status Append(std::string_view record);
  /// The journal's file in `dir`.
  static std::string PathIn(const std::string& dir) { return dir + "/journal"; }
  /// Fixed at construction: safe to read from any thread, also while
  /// Open runs on another.
  const std::string& path() const { return path_; }

 private:
  static absl::Status Parse(const std::string& path, std::string_view all,
                            const std::function<absl::Status(std::string_view)>& replay, size_t* end);
  const std::string dir_;
  const std::string path_;
  int fd_ = -1;
};

}  // namespace ckpt::coord

#endif  // CKPT_COORDINATOR_JOURNAL_H_
