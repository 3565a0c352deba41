#include <algorithm>
#include <map>
#include <mutex>

#include "absl/strings/str_join.h"
#include "ckpt/storage.h"
#include "net/uri.h"
#include "storage/faulty_storage.h"
#include "storage/file_storage.h"
#include "storage/mem_storage.h"
#include "storage/s3_storage.h"
#include "storage/safetensors_storage.h"
#include "storage/tiered_storage.h"
#include "util/errors.h"
#include "util/strings.h"

namespace ckpt {
namespace {

// hdf5:///path: files as file:// (buffered). The URI also tells the
// Checkpointer to write HDF5 data files (DataContainer::kAuto resolves from
// the scheme; format/hdf5_container.h).
class Hdf5Storage : public ForwardingStorage {
 public:
  Hdf5Storage(std::shared_ptr<Storage> base, std::string uri)
      : ForwardingStorage(std::move(base)), uri_(std::move(uri)) {}
  std::string uri() const override { return uri_; }
  StorageCaps caps() const override {
    StorageCaps c = ForwardingStorage::caps();
    c.engine = StrCat("hdf5(", c.engine, ")");
    c.direct_io = false;
    return c;
  }

 private:
  std::string uri_;
};

absl::StatusOr<std::shared_ptr<Storage>> OpenHdf5Storage(std::string_view uri) {
  CKPT_ASSIGN_OR_RETURN(ParsedUri parsed, ParseUri(uri));
  std::string inner = StrCat("file://", EncodeUriPath(parsed.Path()), "?direct=0");
  for (const auto& [k, v] : parsed.params) {
    if (k != "direct") inner += StrCat("&", EncodeUriValue(k), "=", EncodeUriValue(v));
  }
  CKPT_ASSIGN_OR_RETURN(std::shared_ptr<Storage> base, OpenFileStorage(inner));
  return std::shared_ptr<Storage>(new Hdf5Storage(std::move(base), std::string(uri)));
}

struct Entry {
  BackendInfo info;
  StorageFactory factory;
};

struct Registry {
  std::mutex mu;
  std::map<std::string, Entry> entries;
};

StorageCaps Caps(std::string engine, bool direct, bool rename, bool durable) {
  StorageCaps c;
  c.engine = std::move(engine);
  c.direct_io = direct;
  c.atomic_rename = rename;
  c.durable = durable;
  c.ranged_reads = true;
  return c;
}

Registry& GetRegistry() {
  static Registry* registry = [] {
    auto* r = new Registry;
    auto add = [&](const char* scheme, const char* what, StorageCaps caps, StorageFactory f) {
      r->entries[scheme] = Entry{BackendInfo{scheme, "built-in", what, std::move(caps)}, std::move(f)};
    };
    StorageCaps file = Caps("io_uring", true, true, true);
    file.registered_buffers = true;
    add("file", "local or shared filesystem through io_uring (threads where io_uring is refused)", file,
        OpenFileStorage);
    add("posix", "local or shared filesystem through pread/pwrite threads", Caps("threads", true, true, true),
        OpenPosixStorage);
    add("mem", "process memory, shared by name within the process", Caps("memory", false, true, false), OpenMemStorage);
    add("tiered", "commit on a fast local tier, drain to a durable tier in the background",
        Caps("tiered", true, true, true), OpenTieredStorage);
    StorageCaps h5 = Caps("hdf5", false, true, true);
    add("hdf5", "files as file://, each rank's data an HDF5 file that h5py and h5dump read", h5, OpenHdf5Storage);
    add("safetensors",
        "a Hugging Face safetensors model (directory or file) read in place as a read-only root of one step",
        Caps("safetensors", false, false, true), OpenSafetensorsStorage);
    StorageCaps s3 = Caps("s3", false, false, true);
    add("s3",
        "objects in an S3 bucket (AWS, Ceph RGW, MinIO): multipart uploads, ranged GETs, "
        "If-None-Match claims, SigV4",
        s3, OpenS3Storage);
    add("faulty", "wraps another backend and injects errors, latency, bit flips and crashes",
        Caps("faulty", false, true, true), OpenFaultyStorage);
    return r;
  }();
  return *registry;
}

}  // namespace

absl::Status Storage::PutIfAbsent(std::string_view path, absl::Span<const std::byte> data) {
  (void)data;
  return absl::UnimplementedError(
      StrCat(uri(), ": this backend cannot create ", path, " only if it is absent (an atomic create-if-absent)"));
}

absl::StatusOr<std::string> Storage::GetAll(std::string_view path) {
  CKPT_ASSIGN_OR_RETURN(std::unique_ptr<ReadableFile> f, OpenReadable(path));
  std::string out(f->size(), '\0');
  CKPT_RETURN_IF_ERROR(f->ReadAt(0, absl::Span<std::byte>(reinterpret_cast<std::byte*>(out.data()), out.size())));
  return out;
}

bool RegisterStorageScheme(BackendInfo info, StorageFactory factory) {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  const std::string scheme = info.scheme;
  return r.entries.emplace(scheme, Entry{std::move(info), std::move(factory)}).second;
}

bool RegisterStorageScheme(const std::string& scheme, StorageFactory factory) {
  return RegisterStorageScheme(BackendInfo{scheme, "registered", "", StorageCaps{}}, std::move(factory));
}

std::vector<std::string> RegisteredStorageSchemes() {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<std::string> out;
  for (const auto& [k, v] : r.entries) out.push_back(k);
  return out;
}

std::vector<BackendInfo> ListStorageBackends() {
  std::vector<BackendInfo> out;
  {
    Registry& r = GetRegistry();
    std::lock_guard<std::mutex> lock(r.mu);
    for (const auto& [k, v] : r.entries) out.push_back(v.info);
  }
  for (const PluginInfo& p : DiscoverStoragePlugins()) {
    if (!p.error.empty()) continue;
    const bool shown = std::any_of(out.begin(), out.end(),
                                   [&](const BackendInfo& b) { return b.scheme == p.scheme && b.origin == p.file; });
    if (!shown) out.push_back(BackendInfo{p.scheme, p.file, p.description, p.caps});
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const BackendInfo& a, const BackendInfo& b) { return a.scheme < b.scheme; });
  return out;
}

absl::Status WaitReplicated(Storage& storage) {
  Replication* r = FindCapability<Replication>(storage);
  return r == nullptr ? absl::OkStatus() : r->WaitReplicated();
}

std::string LocalPath(Storage& storage, std::string_view path) {
  LocalFiles* l = FindCapability<LocalFiles>(storage);
  return l == nullptr ? std::string() : l->LocalPath(path);
}

MemoryReads MemoryReadsOf(Storage& storage) {
  MemoryReadCounter* m = FindCapability<MemoryReadCounter>(storage);
  return m == nullptr ? MemoryReads{} : m->memory_reads();
}

absl::StatusOr<std::shared_ptr<Storage>> OpenStorage(std::string_view uri) {
  CKPT_ASSIGN_OR_RETURN(ParsedUri parsed, ParseUri(uri));
  // A plain path to a safetensors model (and not to a ckpt root) reads it in
  // place, as safetensors:// would.
  if (uri.find("://") == std::string_view::npos && parsed.params.empty() && IsSafetensorsModelPath(parsed.location)) {
    return OpenSafetensorsStorage(StrCat("safetensors://", EncodeUriPath(parsed.location)));
  }
  Registry& r = GetRegistry();
  StorageFactory factory;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    auto it = r.entries.find(parsed.scheme);
    if (it != r.entries.end()) factory = it->second.factory;
  }
  if (factory) return factory(uri);

  // Not built in: the first plugin on the path serving the scheme.
  std::vector<std::string> failed;
  for (const PluginInfo& p : DiscoverStoragePlugins()) {
    if (!p.error.empty()) {
      failed.push_back(p.error);
      continue;
    }
    if (p.scheme != parsed.scheme) continue;
    PluginInfo plugin = p;
    RegisterStorageScheme(BackendInfo{p.scheme, p.file, p.description, p.caps},
                          [plugin](std::string_view u) { return OpenPluginStorage(plugin, u); });
    return OpenPluginStorage(plugin, uri);
  }
  std::vector<std::string> known = RegisteredStorageSchemes();
  std::string msg = StrCat("no storage backend for scheme '", parsed.scheme, "' in '", uri,
                           "' (built in or registered: ", absl::StrJoin(known, ", "),
                           "; plugin path: ", absl::StrJoin(StoragePluginPath(), ":"), ")");
  if (!failed.empty()) msg = StrCat(msg, "; plugins that failed to load: ", absl::StrJoin(failed, "; "));
  return absl::NotFoundError(msg);
}

}  // namespace ckpt
