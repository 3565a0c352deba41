// Shared helpers for the test suite.
#ifndef CKPT_TESTS_TEST_UTIL_H_
#define CKPT_TESTS_TEST_UTIL_H_

#include <sys/resource.h>
#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "ckpt/checkpointer.h"
#include "ckpt/mesh.h"
#include "ckpt/state.h"
#include "gtest/gtest.h"

namespace ckpt::testing {

// True in a build under AddressSanitizer or ThreadSanitizer (gcc defines
// __SANITIZE_*__; clang 14 answers __has_feature only).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif
#else
inline constexpr bool kSanitized = false;
#endif

/// A fresh directory under $TMPDIR (or /tmp), removed with its contents.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }
  std::string Join(const std::string& rel) const { return path_ + "/" + rel; }

 private:
  std::string path_;
};

/// Owns the memory of one synthetic shard.
struct OwnedShard {
  TensorSpec spec;
  Box box;
  std::vector<std::byte> data;
};

/// Fills `box` of `spec` with the synthetic generator (seed).
OwnedShard MakeShard(const TensorSpec& spec, const Box& box, uint64_t seed);
/// Zero-filled buffer for `box`.
OwnedShard EmptyShard(const TensorSpec& spec, const Box& box);

/// Adds all shards to a State.
State StateOf(std::vector<OwnedShard>& shards);

/// Number of elements differing from the generator.
int64_t Mismatches(const OwnedShard& s, uint64_t seed);

/// Reads a whole file; writes a whole file.
std::string ReadFile(const std::string& path);
void WriteFile(const std::string& path, const std::string& data);
/// Flips bit `bit` of byte `offset` in a file.
void FlipBit(const std::string& path, uint64_t offset, int bit);

struct CommandResult {
  int code;         ///< exit status; -1 when killed by a signal
  std::string out;  ///< stdout and stderr together
};
/// Runs a shell command line and captures its output.
CommandResult RunCommand(const std::string& command);

/// Starts `args` (args[0] a path) with stdout and stderr appended to `out`;
/// with `max_descriptors` > 0 the child's soft and hard RLIMIT_NOFILE are set
/// to it; `env` ("NAME=value") is added to the child's environment.
pid_t Spawn(const std::vector<std::string>& args, const std::string& out, rlim_t max_descriptors = 0,
            const std::vector<std::string>& env = {});
/// Waits for `pid`: its exit status, or 128 + the signal that ended it.
int WaitExit(pid_t pid);

/// A line of /proc/PID/status ("VmHWM", "VmRSS") in KiB; -1 if missing.
int64_t ProcStatusKib(pid_t pid, const std::string& key);
/// User + system CPU seconds the process has used so far.
double ProcCpuSeconds(pid_t pid);

#define ASSERT_OK(expr)                                             \
  do {                                                              \
    const ::absl::Status ckpt_s_ = ::ckpt::testing::AsStatus(expr); \
    ASSERT_TRUE(ckpt_s_.ok()) << ckpt_s_;                           \
  } while (0)
#define EXPECT_OK(expr)                                             \
  do {                                                              \
    const ::absl::Status ckpt_s_ = ::ckpt::testing::AsStatus(expr); \
    EXPECT_TRUE(ckpt_s_.ok()) << ckpt_s_;                           \
  } while (0)

inline absl::Status AsStatus(const absl::Status& s) { return s; }
template <typename T>
absl::Status AsStatus(const absl::StatusOr<T>& s) {
  return s.status();
}

}  // namespace ckpt::testing

#endif  // CKPT_TESTS_TEST_UTIL_H_
