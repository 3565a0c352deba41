// The tiered:// backend: saves land on a fast local tier and are copied to a
// durable tier in the background.
//
// URI: tiered://?local=URI&durable=URI[&keep_local=N]
// (inner URIs with their own query are percent-encoded, see ParseUri).
//
// - Every file finished or atomically put on the local tier is queued for
//   the durable tier. One drain thread copies the queue in order, so a
//   step's data files reach the durable tier before its MANIFEST, and the
//   MANIFEST before LATEST: the durable tier on its own is always a
//   consistent checkpoint root, just possibly an older one.
// - Reads prefer the local tier and fall back to the durable tier; List
//   shows both. Losing the local tier loses nothing that had drained.
// - Remove and RemoveAll act on both tiers (retention set by the
//   checkpointer). keep_local=N additionally keeps only the N newest drained
//   top-level directories (steps) on the local tier.
// - WaitReplicated blocks until the queue is empty and reports the first
//   drain error. Destroying the storage drains what is queued first.
//
// Several processes sharing one tiered root (one per node) each drain their
// own files; the durable MANIFEST can then precede another node's data
// files, so tiered roots are for one process per root.
#ifndef CKPT_STORAGE_ADAPTERS_TIERED_TIERED_STORAGE_H_
#define CKPT_STORAGE_ADAPTERS_TIERED_TIERED_STORAGE_H_

#include <memory>
#include <string_view>

#include "absl/status/statusor.h"
#include "ckpt/storage.h"

namespace ckpt {

absl::StatusOr<std::shared_ptr<Storage>> OpenTieredStorage(std::string_view uri);

/// The same with storages already open.
std::shared_ptr<Storage> MakeTieredStorage(std::shared_ptr<Storage> local, std::shared_ptr<Storage> durable,
                                           int64_t keep_local, std::string uri);

}  // namespace ckpt

#endif  // CKPT_STORAGE_ADAPTERS_TIERED_TIERED_STORAGE_H_
