#include <map>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "util/strings.h"
#include "absl/strings/str_join.h"
#include "ckpt/storage.h"
#include "storage/file_storage.h"
#include "storage/mem_storage.h"
#include "storage/uri.h"
#include "util/errors.h"

namespace ckpt {
namespace {

struct Registry {
  std::mutex mu;
  std::map<std::string, StorageFactory> factories;
};

Registry& GetRegistry() {
  static Registry* registry = [] {
    auto* r = new Registry;
    r->factories["file"] = OpenFileStorage;
    r->factories["posix"] = OpenPosixStorage;
    r->factories["mem"] = OpenMemStorage;
    return r;
  }();
  return *registry;
}

}  // namespace

absl::StatusOr<std::string> Storage::GetAll(std::string_view path) {
  CKPT_ASSIGN_OR_RETURN(std::unique_ptr<ReadableFile> f, OpenReadable(path));
  std::string out(f->size(), '\0');
  CKPT_RETURN_IF_ERROR(f->ReadAt(
      0, absl::Span<std::byte>(reinterpret_cast<std::byte*>(out.data()), out.size())));
  return out;
}

bool RegisterStorageScheme(const std::string& scheme, StorageFactory factory) {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  return r.factories.emplace(scheme, std::move(factory)).second;
}

std::vector<std::string> RegisteredStorageSchemes() {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<std::string> out;
  for (const auto& [k, v] : r.factories) out.push_back(k);
  return out;
}

absl::StatusOr<std::shared_ptr<Storage>> OpenStorage(std::string_view uri) {
  CKPT_ASSIGN_OR_RETURN(ParsedUri parsed, ParseUri(uri));
  StorageFactory factory;
  {
    Registry& r = GetRegistry();
    std::lock_guard<std::mutex> lock(r.mu);
    auto it = r.factories.find(parsed.scheme);
    if (it == r.factories.end()) {
      std::vector<std::string> known;
      for (const auto& [k, v] : r.factories) known.push_back(k);
      return absl::NotFoundError(StrCat(
          "no storage backend for scheme '", parsed.scheme, "' in '", uri,
          "' (known: ", absl::StrJoin(known, ", "), ")"));
    }
    factory = it->second;
  }
  return factory(uri);
}

}  // namespace ckpt
