// The mem:// backend: files in process memory. The reference implementation
// of Storage and the test double. "mem://name" opens a process-wide store of
// that name, so several Checkpointers of one process share it.
// "mem://name?spare=BYTES" keeps up to BYTES of removed files' memory (in
// buffers of 4 MiB and more) for new files, so saving into a store whose old
// steps are removed reuses memory already faulted in.
#ifndef CKPT_STORAGE_ROOTS_MEM_MEM_STORAGE_H_
#define CKPT_STORAGE_ROOTS_MEM_MEM_STORAGE_H_

#include <cstdint>
#include <memory>
#include <string_view>

#include "absl/status/statusor.h"
#include "ckpt/storage.h"

namespace ckpt {

absl::StatusOr<std::shared_ptr<Storage>> OpenMemStorage(std::string_view uri);

/// A fresh, unnamed in-memory store keeping up to `spare_bytes` of removed
/// files' memory.
std::shared_ptr<Storage> NewMemStorage(int64_t spare_bytes = 0);

namespace internal {
/// Bytes of removed files' memory a mem:// store keeps now; -1 for another
/// backend (tests).
int64_t MemSpareBytesHeld(Storage& storage);
}  // namespace internal

}  // namespace ckpt

#endif  // CKPT_STORAGE_ROOTS_MEM_MEM_STORAGE_H_
