// The one storage abstraction: an asynchronous byte-object store.
//
// The save and load pipelines talk only to this interface; backends know
// nothing about tensors. Paths are relative to the storage root and use '/'.
// Backends are chosen by URI scheme ("file://", "mem://"); a plain path means
// "file://". See docs/plugins.md for writing one.
#ifndef CKPT_STORAGE_H_
#define CKPT_STORAGE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "ckpt/export.h"

struct ckpt_storage_plugin;  // include/ckpt/plugin_abi.h

namespace ckpt {

/// What a backend can do, as reported by `ckpt plugins`.
struct CKPT_EXPORT StorageCaps {
  std::string engine;               ///< "io_uring", "threads", "memory", ...
  bool direct_io = false;           ///< writes bypass the page cache
  bool atomic_rename = false;       ///< PutAtomic is a rename on one filesystem
  bool ranged_reads = true;         ///< ReadAt reads only the requested range
  bool registered_buffers = false;  ///< RegisterBuffers avoids per-I/O mapping
  bool durable = true;              ///< Finish/PutAtomic survive power loss
};

/// Completion callback of an asynchronous I/O. Runs exactly once, on a
/// backend thread or inline before the submitting call returns; it must be
/// short and must not call back into the file that issued it.
using IoCallback = absl::AnyInvocable<void(absl::Status) &&>;

/// An optional capability of a backend beyond the Storage interface (an
/// object store's unfinished uploads, a memory store's counters): a class
/// derived from this one with a `static constexpr std::string_view kName`.
/// Found with FindCapability<T>(storage); adapters forward the question to
/// the storage they wrap, so a capability of an s3:// root works behind
/// tiered:// and faulty:// alike.
class CKPT_EXPORT StorageCapability {
 public:
  virtual ~StorageCapability() = default;
};

/// A file being written.
///
/// Thread-safety: WriteAsync may be called from several threads at once;
/// Drain and Finish must not run concurrently with WriteAsync. Callbacks run
/// on backend threads (or inline) and must not block on other writes.
class CKPT_EXPORT WritableFile {
 public:
  virtual ~WritableFile() = default;

  /// Queues a write of `data` at `offset`. The memory must stay valid and
  /// unmodified until `done` runs. Blocks while the backend queue is full.
  /// When alignment() > 1, offset, size and address must be multiples of it.
  virtual void WriteAsync(uint64_t offset, absl::Span<const std::byte> data, IoCallback done) = 0;

  /// Waits until every queued write has completed; returns the first error.
  virtual absl::Status Drain() = 0;

  /// A hint that the file will be written up to about `bytes`: a backend
  /// may allocate the space now, so that later writes do not extend the
  /// file (on ext4 and XFS, extending O_DIRECT writes serialize on the
  /// inode). Finish still sets the final length. Failures are not errors.
  virtual void Reserve(uint64_t bytes) { (void)bytes; }

  /// Drains, sets the file length to `final_size` (dropping alignment
  /// padding), makes data and length durable, and closes. After a failure
  /// the file content is unspecified; the caller removes it.
  virtual absl::Status Finish(uint64_t final_size) = 0;

  /// Required alignment of WriteAsync offsets, sizes and addresses (1: none).
  virtual size_t alignment() const = 0;

  virtual const std::string& path() const = 0;
};

/// A file open for reading. Thread-safe: every method may be called
/// concurrently.
class CKPT_EXPORT ReadableFile {
 public:
  virtual ~ReadableFile() = default;

  virtual uint64_t size() const = 0;

  /// Reads exactly dst.size() bytes at `offset`. A range past the end of the
  /// file is an OutOfRange error that says "truncated" and gives the offset.
  virtual absl::Status ReadAt(uint64_t offset, absl::Span<std::byte> dst) = 0;

  /// Asynchronous ReadAt; `dst` must stay valid until `done` runs.
  virtual void ReadAsync(uint64_t offset, absl::Span<std::byte> dst, IoCallback done) = 0;

  /// When offset, size and address are multiples of this, the backend may
  /// bypass caches (O_DIRECT). 0 when it never does.
  virtual size_t direct_alignment() const = 0;

  virtual const std::string& path() const = 0;
};

struct CKPT_EXPORT WriteOptions {
  /// Try to bypass the page cache; silently buffered where unsupported.
  bool direct = true;
  /// Empty an existing file first. False keeps its bytes (and length until
  /// Finish), for writing into a file another library laid out.
  bool truncate = true;
};

/// An entry of List().
struct CKPT_EXPORT DirEntry {
  std::string name;
  bool is_dir = false;
};

/// An asynchronous byte-object store rooted at one location.
/// Thread-safety: every method may be called concurrently.
class CKPT_EXPORT Storage {
 public:
  virtual ~Storage() = default;

  /// The URI this storage was opened with (normalized).
  virtual std::string uri() const = 0;
  virtual StorageCaps caps() const = 0;

  /// Creates (or truncates) a file, creating parent directories.
  virtual absl::StatusOr<std::unique_ptr<WritableFile>> OpenWritable(std::string_view path,
                                                                     const WriteOptions& options = {}) = 0;

  /// Opens an existing file. NotFound when it does not exist.
  virtual absl::StatusOr<std::unique_ptr<ReadableFile>> OpenReadable(std::string_view path) = 0;

  /// Replaces `path` with `data` atomically and durably: readers see the old
  /// content or the whole new content, never a mix, also after power loss.
  virtual absl::Status PutAtomic(std::string_view path, absl::Span<const std::byte> data) = 0;

  /// Creates `path` with `data` only if no file of that name exists,
  /// atomically and durably: of several callers racing for one name exactly
  /// one succeeds, the others get AlreadyExists and the file keeps the
  /// winner's bytes. (The claim a save will make on its step.) Backends
  /// that cannot do this return Unimplemented (the default).
  virtual absl::Status PutIfAbsent(std::string_view path, absl::Span<const std::byte> data);

  /// Reads a whole (small) file.
  virtual absl::StatusOr<std::string> GetAll(std::string_view path);

  /// Size of a file; NotFound when absent.
  virtual absl::StatusOr<uint64_t> FileSize(std::string_view path) = 0;

  /// Entries of a directory ("" is the root), sorted by name. NotFound when
  /// the directory does not exist.
  virtual absl::StatusOr<std::vector<DirEntry>> List(std::string_view dir) = 0;

  /// Removes one file. NotFound when absent.
  virtual absl::Status Remove(std::string_view path) = 0;

  /// Removes a directory and everything below it; OK when absent.
  virtual absl::Status RemoveAll(std::string_view dir) = 0;

  /// Makes the directory's entries (creations, renames, removals) durable.
  virtual absl::Status SyncDir(std::string_view dir) = 0;

  /// The capability named `name` (StorageCapability), or nullptr: the
  /// default, a backend with no capability beyond this interface.
  virtual StorageCapability* Capability(std::string_view name) {
    (void)name;
    return nullptr;
  }
};

/// The capability T of `storage` (through any adapters), or nullptr.
template <typename T>
T* FindCapability(Storage& storage) {
  return static_cast<T*>(storage.Capability(T::kName));
}

/// Capability: I/O memory pinned once (io_uring fixed buffers, file://).
class CKPT_EXPORT BufferRegistry : public StorageCapability {
 public:
  static constexpr std::string_view kName = "buffer-registry";
  /// Hints that I/O will use these memory regions, so the backend may pin
  /// them once. Returns a token for UnregisterBuffers; 0 when it declines.
  /// Regions must stay valid until unregistered and no I/O on them is in
  /// flight then.
  virtual uint64_t RegisterBuffers(const std::vector<absl::Span<std::byte>>& regions) = 0;
  virtual void UnregisterBuffers(uint64_t token) = 0;
};

/// Capability: a store with a more durable tier it fills in the background
/// (tiered://).
class CKPT_EXPORT Replication : public StorageCapability {
 public:
  static constexpr std::string_view kName = "replication";
  /// Blocks until every file finished or put so far has reached the most
  /// durable tier, and returns the first error met on the way.
  virtual absl::Status WaitReplicated() = 0;
};

/// Capability: files that are files of the local filesystem, for libraries
/// that must open them themselves (libhdf5).
class CKPT_EXPORT LocalFiles : public StorageCapability {
 public:
  static constexpr std::string_view kName = "local-files";
  /// The local path of `path`; empty when this file has none.
  virtual std::string LocalPath(std::string_view path) = 0;
};

/// Bytes read so far that came from host memory rather than storage: this
/// process's (`own`) and other processes' (`peers`).
struct CKPT_EXPORT MemoryReads {
  int64_t own = 0;
  int64_t peers = 0;
  /// Erasure-coded files: bytes rebuilt from parity, data pieces lost.
  int64_t rebuilt = 0;
  int64_t pieces_lost = 0;
};

/// Capability: reads served from host memory (the memory level's peer
/// storage), counted.
class CKPT_EXPORT MemoryReadCounter : public StorageCapability {
 public:
  static constexpr std::string_view kName = "memory-reads";
  virtual MemoryReads memory_reads() const = 0;
};

/// One whole copy of a store that keeps several (a tier of tiered://).
struct CKPT_EXPORT StorageTier {
  std::string name;  ///< "local", "durable"
  std::shared_ptr<Storage> storage;
};

/// Capability: a store made of tiers that each hold a whole copy of what
/// they keep (tiered://: the local tier, then the durable one), for tools
/// that list, verify or repair each copy on its own.
class CKPT_EXPORT Tiers : public StorageCapability {
 public:
  static constexpr std::string_view kName = "tiers";
  virtual std::vector<StorageTier> tiers() = 0;
};

/// Tiers::tiers of `storage`, or empty when it keeps one copy.
CKPT_EXPORT std::vector<StorageTier> TiersOf(Storage& storage);

/// Replication::WaitReplicated of `storage`, or OK at once when it has no
/// slower tier to wait for.
CKPT_EXPORT absl::Status WaitReplicated(Storage& storage);
/// LocalFiles::LocalPath of `storage`, or empty when its files are not
/// local files.
CKPT_EXPORT std::string LocalPath(Storage& storage, std::string_view path);
/// MemoryReadCounter::memory_reads of `storage`, or zeros.
CKPT_EXPORT MemoryReads MemoryReadsOf(Storage& storage);

/// Forwards every call to another storage; decorators (fault injection,
/// tiering, accounting) override only what they change. Thread-safety is
/// that of the wrapped storage.
class CKPT_EXPORT ForwardingStorage : public Storage {
 public:
  explicit ForwardingStorage(std::shared_ptr<Storage> base) : base_(std::move(base)) {}

  std::string uri() const override { return base_->uri(); }
  StorageCaps caps() const override { return base_->caps(); }
  absl::StatusOr<std::unique_ptr<WritableFile>> OpenWritable(std::string_view path,
                                                             const WriteOptions& options = {}) override {
    return base_->OpenWritable(path, options);
  }
  absl::StatusOr<std::unique_ptr<ReadableFile>> OpenReadable(std::string_view path) override {
    return base_->OpenReadable(path);
  }
  absl::Status PutAtomic(std::string_view path, absl::Span<const std::byte> data) override {
    return base_->PutAtomic(path, data);
  }
  absl::Status PutIfAbsent(std::string_view path, absl::Span<const std::byte> data) override {
    return base_->PutIfAbsent(path, data);
  }
  absl::StatusOr<std::string> GetAll(std::string_view path) override { return base_->GetAll(path); }
  absl::StatusOr<uint64_t> FileSize(std::string_view path) override { return base_->FileSize(path); }
  absl::StatusOr<std::vector<DirEntry>> List(std::string_view dir) override { return base_->List(dir); }
  absl::Status Remove(std::string_view path) override { return base_->Remove(path); }
  absl::Status RemoveAll(std::string_view dir) override { return base_->RemoveAll(dir); }
  absl::Status SyncDir(std::string_view dir) override { return base_->SyncDir(dir); }
  StorageCapability* Capability(std::string_view name) override { return base_->Capability(name); }

  Storage& base() { return *base_; }

 private:
  std::shared_ptr<Storage> base_;
};

/// Creates a storage for a URI whose scheme it was registered under.
using StorageFactory = std::function<absl::StatusOr<std::shared_ptr<Storage>>(std::string_view uri)>;

/// A backend as `ckpt plugins` shows it.
struct CKPT_EXPORT BackendInfo {
  std::string scheme;
  std::string origin;  ///< "built-in", "registered", or the plugin's file
  std::string description;
  StorageCaps caps;  ///< what the backend can do at best (per URI it may do less)
};

/// Registers a backend for `scheme` ("file", "mem", ...). Returns false when
/// the scheme is taken. Thread-safe.
CKPT_EXPORT bool RegisterStorageScheme(const std::string& scheme, StorageFactory factory);
CKPT_EXPORT bool RegisterStorageScheme(BackendInfo info, StorageFactory factory);

/// Schemes currently registered, sorted.
CKPT_EXPORT std::vector<std::string> RegisteredStorageSchemes();

/// Every registered backend, then every plugin found on the plugin path
/// (loading them), sorted by scheme.
CKPT_EXPORT std::vector<BackendInfo> ListStorageBackends();

/// A storage plugin: a shared object exporting `ckpt_storage_plugin_entry`
/// (include/ckpt/plugin_abi.h).
struct CKPT_EXPORT PluginInfo {
  std::string file;
  std::string scheme;
  std::string description;
  std::string version;
  uint32_t abi_version = 0;
  StorageCaps caps;
  /// Why the plugin cannot be used (empty when it loaded): the file does not
  /// load, lacks the entry symbol, speaks another ABI version, or has an
  /// incomplete table.
  std::string error;
  const ::ckpt_storage_plugin* table = nullptr;
};

/// Directories searched for plugins: $CKPT_PLUGIN_PATH (':'-separated), then
/// the install directory (<libdir>/ckpt/plugins).
CKPT_EXPORT std::vector<std::string> StoragePluginPath();

/// Loads one plugin file (once; later calls return the same result). Never
/// throws or aborts: problems are in PluginInfo::error.
CKPT_EXPORT PluginInfo LoadStoragePlugin(const std::string& file);

/// Loads every "*.so" in the plugin path, in path order.
CKPT_EXPORT std::vector<PluginInfo> DiscoverStoragePlugins();

/// Opens `uri` with a plugin that loaded without error (LoadStoragePlugin),
/// whether or not it is on the plugin path. The "io_threads" query
/// parameter (default 4) sizes the host threads that run the plugin's
/// blocking calls; the whole URI is passed to the plugin.
CKPT_EXPORT absl::StatusOr<std::shared_ptr<Storage>> OpenPluginStorage(const PluginInfo& plugin, std::string_view uri);

/// Opens storage for `uri`: "scheme://rest"; a plain path means file://.
/// Options ride in the query ("file:///data/ckpt?direct=0&engine=threads").
/// A scheme no built-in serves is looked up among the plugins on the plugin
/// path; the error for an unknown scheme lists the plugins that failed.
/// The scheme OpenStorage would serve `uri` with: the URI's own, or for a
/// plain path the backend that claims it (a safetensors model directory or
/// file: "safetensors"), else "file".
CKPT_EXPORT absl::StatusOr<std::string> StorageSchemeOf(std::string_view uri);

CKPT_EXPORT absl::StatusOr<std::shared_ptr<Storage>> OpenStorage(std::string_view uri);

/// The URI that opens the local path `path` with the backend of `scheme`
/// (its characters escaped as the URI needs): StorageUri("safetensors",
/// "/models/llama 3") is "safetensors:///models/llama%203".
CKPT_EXPORT std::string StorageUri(std::string_view scheme, std::string_view path);

}  // namespace ckpt

#endif  // CKPT_STORAGE_H_
