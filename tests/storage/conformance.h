// The storage conformance suite (include/ckpt/conformance.h, what every
// backend must do) as gtest cases, one per case of the suite. Included by
// storage_test.cc (the built-ins, decorators and a plugin), s3_test.cc
// (s3:// on the suite's S3 server) and others, each instantiating it for
// its backends.
#ifndef CKPT_TESTS_STORAGE_CONFORMANCE_H_
#define CKPT_TESTS_STORAGE_CONFORMANCE_H_

#include <functional>
#include <string>
#include <vector>

#include "ckpt/conformance.h"
#include "ckpt/storage.h"
#include "testutil/test_util.h"

namespace ckpt::testing {

struct BackendCase {
  std::string name;
  std::string scheme;  // "file", "posix", "mem", "tiered", "faulty", "localfs", or "" with make_uri
  std::string query;
  /// Builds the root URI for a test (given a fresh number) where the scheme
  /// alone cannot (s3:// roots on the suite's server).
  std::function<std::string(int)> make_uri;
};

inline void PrintTo(const BackendCase& c, std::ostream* os) { *os << c.name; }

class StorageConformance : public ::testing::TestWithParam<BackendCase> {
 protected:
  void SetUp() override {
#ifdef CKPT_TEST_PLUGIN_DIR
    setenv("CKPT_PLUGIN_PATH", CKPT_TEST_PLUGIN_DIR, 1);
#endif
    std::string uri;
    if (GetParam().make_uri) {
      uri = GetParam().make_uri(++counter_);
    } else if (GetParam().scheme == "mem") {
      uri = "mem://conformance-" + std::to_string(++counter_) + GetParam().name + GetParam().query;
    } else if (GetParam().scheme == "tiered") {
      uri = "tiered://?local=" + dir_.path() + "/local&durable=" + dir_.path() + "/durable" + GetParam().query;
    } else if (GetParam().scheme == "faulty-mem") {
      uri = "faulty://mem://conformance-" + std::to_string(++counter_) + GetParam().name + GetParam().query;
    } else {
      uri = GetParam().scheme + "://" + dir_.path() + "/root" + GetParam().query;
    }
    auto s = OpenStorage(uri);
    ASSERT_OK(s);
    storage_ = *s;
  }

  // Runs the suite's case `name` (include/ckpt/conformance.h) on this
  // test's root.
  void Conform(const std::string& name) {
    EXPECT_OK(
        RunStorageConformanceCase(name, [this]() -> absl::StatusOr<std::shared_ptr<Storage>> { return storage_; }));
  }

  TempDir dir_;
  std::shared_ptr<Storage> storage_;
  static inline int counter_ = 0;
};

TEST_P(StorageConformance, WriteThenRangedRead) { Conform("WriteThenRangedRead"); }
TEST_P(StorageConformance, AlignedDirectWritesAndFinishTruncates) { Conform("AlignedDirectWritesAndFinishTruncates"); }
TEST_P(StorageConformance, UnalignedWritesFollowTheAlignmentRule) { Conform("UnalignedWritesFollowTheAlignmentRule"); }
TEST_P(StorageConformance, PutAtomicReplacesWhole) { Conform("PutAtomicReplacesWhole"); }
TEST_P(StorageConformance, PutIfAbsentCreatesOnceAcrossRacingCallers) {
  Conform("PutIfAbsentCreatesOnceAcrossRacingCallers");
}
TEST_P(StorageConformance, ListRemoveAndMissing) { Conform("ListRemoveAndMissing"); }
TEST_P(StorageConformance, ConcurrentWritersToOneFile) { Conform("ConcurrentWritersToOneFile"); }
TEST_P(StorageConformance, RejectsEscapingPaths) { Conform("RejectsEscapingPaths"); }

}  // namespace ckpt::testing

#endif  // CKPT_TESTS_STORAGE_CONFORMANCE_H_
