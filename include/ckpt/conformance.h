// The storage conformance suite: what every backend must do for checkpoints
// to be safe on it (ranged and asynchronous reads, aligned writes, atomic
// replacement, create-if-absent under racing callers, listing and removal,
// concurrent writers, paths that cannot leave the root).
//
// The library's own backends pass it in its tests; `ckpt plugins check
// FILE.so` runs it against a storage plugin; a backend registered with
// RegisterStorageScheme can run it from its own tests:
//
//   for (const ckpt::ConformanceCase& c : ckpt::StorageConformanceCases()) {
//     absl::Status s = ckpt::RunStorageConformanceCase(c.name, [&] { return ckpt::OpenStorage(FreshRoot()); });
//     EXPECT_TRUE(s.ok()) << c.name << ": " << s;
//   }
#ifndef CKPT_CONFORMANCE_H_
#define CKPT_CONFORMANCE_H_

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ckpt/export.h"
#include "ckpt/storage.h"

namespace ckpt {

/// One case of the suite.
struct CKPT_EXPORT ConformanceCase {
  std::string name;  ///< e.g. "PutIfAbsentCreatesOnceAcrossRacingCallers"
  std::string what;  ///< one line: what the backend must do
};

/// Every case, in the order `ckpt plugins check` runs them.
CKPT_EXPORT std::vector<ConformanceCase> StorageConformanceCases();

/// Opens an empty root of the backend under test. Each case opens one.
using StorageOpener = std::function<absl::StatusOr<std::shared_ptr<Storage>>()>;

/// Runs case `name` on a root from `open`: OK, or the first thing the
/// backend did wrong (kInternal naming the check), or the opener's error;
/// kNotFound for a name no case has.
CKPT_EXPORT absl::Status RunStorageConformanceCase(std::string_view name, const StorageOpener& open);

}  // namespace ckpt

#endif  // CKPT_CONFORMANCE_H_
