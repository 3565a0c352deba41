#include <algorithm>
#include <map>
#include <mutex>

#include "absl/strings/str_join.h"
#include "ckpt/storage.h"
#include "net/uri.h"
#include "storage/backend.h"
#include "util/errors.h"
#include "util/strings.h"

namespace ckpt {
namespace {

struct Entry {
  BackendInfo info;
  StorageFactory factory;
  std::function<bool(std::string_view)> claims_path;
};

struct Registry {
  std::mutex mu;
  std::map<std::string, Entry> entries;
};

class Builtins final : public StorageBackendRegistrar {
 public:
  explicit Builtins(Registry* r) : r_(r) {}
  void Add(BackendInfo info, StorageFactory open, std::function<bool(std::string_view)> claims_path) override {
    info.origin = "built-in";
    const std::string scheme = info.scheme;
    r_->entries[scheme] = Entry{std::move(info), std::move(open), std::move(claims_path)};
  }

 private:
  Registry* r_;
};

Registry& GetRegistry() {
  static Registry* registry = [] {
    auto* r = new Registry;
    Builtins builtins(r);
    RegisterBuiltinStorageBackends(builtins);
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
  return r.entries.emplace(scheme, Entry{std::move(info), std::move(factory), nullptr}).second;
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

std::vector<StorageTier> TiersOf(Storage& storage) {
  Tiers* t = FindCapability<Tiers>(storage);
  return t == nullptr ? std::vector<StorageTier>{} : t->tiers();
}

std::string StorageUri(std::string_view scheme, std::string_view path) {
  return StrCat(scheme, "://", EncodeUriPath(path));
}

absl::StatusOr<std::string> StorageSchemeOf(std::string_view uri) {
  CKPT_ASSIGN_OR_RETURN(ParsedUri parsed, ParseUri(uri));
  if (uri.find("://") != std::string_view::npos || !parsed.params.empty()) return parsed.scheme;
  std::vector<std::pair<std::string, std::function<bool(std::string_view)>>> claims;
  {
    Registry& r = GetRegistry();
    std::lock_guard<std::mutex> lock(r.mu);
    for (const auto& [scheme, e] : r.entries) {
      if (e.claims_path) claims.emplace_back(scheme, e.claims_path);
    }
  }
  for (const auto& [scheme, claims_path] : claims) {
    if (claims_path(parsed.location)) return scheme;
  }
  return parsed.scheme;
}

absl::StatusOr<std::shared_ptr<Storage>> OpenStorage(std::string_view uri) {
  CKPT_ASSIGN_OR_RETURN(ParsedUri parsed, ParseUri(uri));
  CKPT_ASSIGN_OR_RETURN(const std::string scheme, StorageSchemeOf(uri));
  Registry& r = GetRegistry();
  StorageFactory factory;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    auto it = r.entries.find(scheme);
    if (it != r.entries.end()) factory = it->second.factory;
  }
  // A plain path a backend claims opens as SCHEME://PATH (a safetensors
  // model read in place).
  if (factory && scheme != parsed.scheme) return factory(StorageUri(scheme, parsed.location));
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
