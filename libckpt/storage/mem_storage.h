// The mem:// backend: files in process memory. The reference implementation
// of Storage and the test double. "mem://name" opens a process-wide store of
// that name, so several Checkpointers of one process share it.
#ifndef CKPT_STORAGE_MEM_STORAGE_H_
#define CKPT_STORAGE_MEM_STORAGE_H_

#include <memory>
#include <string_view>

#include "absl/status/statusor.h"
#include "ckpt/storage.h"

namespace ckpt {

absl::StatusOr<std::shared_ptr<Storage>> OpenMemStorage(std::string_view uri);

/// A fresh, unnamed in-memory store.
std::shared_ptr<Storage> NewMemStorage();

}  // namespace ckpt

#endif  // CKPT_STORAGE_MEM_STORAGE_H_
