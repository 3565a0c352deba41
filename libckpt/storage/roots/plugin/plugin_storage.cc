// Storage plugins: finding shared objects on the plugin path, checking their
// ABI, and adapting their C function table to the Storage interface.
#include <dirent.h>
#include <dlfcn.h>

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <cstdlib>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include "ckpt/plugin_abi.h"
#include "ckpt/storage.h"
#include "net/uri.h"
#include "storage/backend.h"
#include "util/errors.h"
#include "util/strings.h"
#include "util/task_pool.h"

#ifndef CKPT_PLUGIN_INSTALL_DIR
#define CKPT_PLUGIN_INSTALL_DIR ""
#endif

namespace ckpt {
namespace {

absl::Status FromCode(ckpt_plugin_code code, const char* err, std::string_view what) {
  std::string msg(err[0] != '\0' ? err : "no message");
  msg = StrCat(what, ": ", msg);
  switch (code) {
    case CKPT_PLUGIN_OK:
      return absl::OkStatus();
    case CKPT_PLUGIN_ERR_NOT_FOUND:
      return absl::NotFoundError(msg);
    case CKPT_PLUGIN_ERR_INVALID:
      return absl::InvalidArgumentError(msg);
    case CKPT_PLUGIN_ERR_OUT_OF_RANGE:
      return absl::OutOfRangeError(msg);
    case CKPT_PLUGIN_ERR_IO:
      return absl::DataLossError(msg);
    case CKPT_PLUGIN_ERR_NO_SPACE:
      return absl::ResourceExhaustedError(msg);
    case CKPT_PLUGIN_ERR_PERMISSION:
      return absl::PermissionDeniedError(msg);
    case CKPT_PLUGIN_ERR_UNAVAILABLE:
      return absl::UnavailableError(msg);
    case CKPT_PLUGIN_ERR_EXISTS:
      return absl::AlreadyExistsError(msg);
    default:
      return absl::InternalError(msg);
  }
}

struct PluginShared {
  const ckpt_storage_plugin* table;
  ckpt_storage* handle;
  // Runs the plugin's blocking calls, so WriteAsync and ReadAsync are
  // asynchronous for the pipeline; Submit blocks while 256 wait.
  TaskPool pool;
  PluginShared(const ckpt_storage_plugin* t, ckpt_storage* h, int threads) : table(t), handle(h), pool(threads, 256) {}
  ~PluginShared() { table->close(handle); }
};

class PluginWritable : public WritableFile {
 public:
  PluginWritable(std::shared_ptr<PluginShared> s, ckpt_wfile* f, std::string path)
      : s_(std::move(s)), f_(f), path_(std::move(path)) {}
  ~PluginWritable() override {
    if (f_ != nullptr) {
      Wait();
      s_->table->abort(f_);
    }
  }
  void WriteAsync(uint64_t offset, absl::Span<const std::byte> data, IoCallback done) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++pending_;
    }
    s_->pool.Submit([this, offset, data, done = std::move(done)]() mutable {
      char err[CKPT_PLUGIN_ERROR_BYTES] = {0};
      const ckpt_plugin_code code = s_->table->write_at(f_, offset, data.data(), data.size(), err);
      absl::Status st =
          FromCode(code, err, StrCat("write of ", data.size(), " bytes at offset ", offset, " in ", path_));
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (!st.ok() && first_error_.ok()) first_error_ = st;
      }
      std::move(done)(st);
      std::lock_guard<std::mutex> lock(mu_);
      if (--pending_ == 0) cv_.notify_all();
    });
  }
  absl::Status Drain() override {
    Wait();
    std::lock_guard<std::mutex> lock(mu_);
    return first_error_;
  }
  absl::Status Finish(uint64_t final_size) override {
    absl::Status st = Drain();
    ckpt_wfile* f = f_;
    f_ = nullptr;
    if (!st.ok()) {
      s_->table->abort(f);
      return st;
    }
    char err[CKPT_PLUGIN_ERROR_BYTES] = {0};
    return FromCode(s_->table->finish(f, final_size, err), err, StrCat("finishing ", path_));
  }
  size_t alignment() const override { return 1; }
  const std::string& path() const override { return path_; }

 private:
  void Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return pending_ == 0; });
  }
  std::shared_ptr<PluginShared> s_;
  ckpt_wfile* f_;
  std::string path_;
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t pending_ = 0;
  absl::Status first_error_;
};

class PluginReadable : public ReadableFile {
 public:
  PluginReadable(std::shared_ptr<PluginShared> s, ckpt_rfile* f, uint64_t size, std::string path)
      : s_(std::move(s)), f_(f), size_(size), path_(std::move(path)) {}
  ~PluginReadable() override {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return pending_ == 0; });
    s_->table->close_readable(f_);
  }
  uint64_t size() const override { return size_; }
  absl::Status ReadAt(uint64_t offset, absl::Span<std::byte> dst) override {
    if (offset + dst.size() > size_) {
      return absl::OutOfRangeError(StrCat(path_, " is truncated: ", dst.size(), " bytes at offset ", offset,
                                          " are past its end (", size_, " bytes)"));
    }
    char err[CKPT_PLUGIN_ERROR_BYTES] = {0};
    return FromCode(s_->table->read_at(f_, offset, dst.data(), dst.size(), err), err,
                    StrCat("read of ", dst.size(), " bytes at offset ", offset, " in ", path_));
  }
  void ReadAsync(uint64_t offset, absl::Span<std::byte> dst, IoCallback done) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++pending_;
    }
    s_->pool.Submit([this, offset, dst, done = std::move(done)]() mutable {
      std::move(done)(ReadAt(offset, dst));
      std::lock_guard<std::mutex> lock(mu_);
      if (--pending_ == 0) cv_.notify_all();
    });
  }
  size_t direct_alignment() const override { return 0; }
  const std::string& path() const override { return path_; }

 private:
  std::shared_ptr<PluginShared> s_;
  ckpt_rfile* f_;
  uint64_t size_;
  std::string path_;
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t pending_ = 0;
};

class PluginStorage : public Storage {
 public:
  PluginStorage(std::string uri, std::shared_ptr<PluginShared> s) : uri_(std::move(uri)), s_(std::move(s)) {}

  std::string uri() const override { return uri_; }
  StorageCaps caps() const override {
    StorageCaps c;
    c.engine = StrCat("plugin:", s_->table->scheme);
    c.direct_io = (s_->table->caps & CKPT_PLUGIN_CAP_DIRECT_IO) != 0;
    c.atomic_rename = (s_->table->caps & CKPT_PLUGIN_CAP_ATOMIC_RENAME) != 0;
    c.ranged_reads = (s_->table->caps & CKPT_PLUGIN_CAP_RANGED_READS) != 0;
    c.durable = (s_->table->caps & CKPT_PLUGIN_CAP_DURABLE) != 0;
    return c;
  }
  absl::StatusOr<std::unique_ptr<WritableFile>> OpenWritable(std::string_view path, const WriteOptions&) override {
    CKPT_RETURN_IF_ERROR(CheckPath(path));
    const std::string p(path);
    char err[CKPT_PLUGIN_ERROR_BYTES] = {0};
    ckpt_wfile* f = nullptr;
    CKPT_RETURN_IF_ERROR(
        FromCode(s_->table->open_writable(s_->handle, p.c_str(), &f, err), err, StrCat("creating ", p)));
    return std::unique_ptr<WritableFile>(new PluginWritable(s_, f, p));
  }
  absl::StatusOr<std::unique_ptr<ReadableFile>> OpenReadable(std::string_view path) override {
    CKPT_RETURN_IF_ERROR(CheckPath(path));
    const std::string p(path);
    char err[CKPT_PLUGIN_ERROR_BYTES] = {0};
    ckpt_rfile* f = nullptr;
    uint64_t size = 0;
    CKPT_RETURN_IF_ERROR(
        FromCode(s_->table->open_readable(s_->handle, p.c_str(), &f, &size, err), err, StrCat("opening ", p)));
    return std::unique_ptr<ReadableFile>(new PluginReadable(s_, f, size, p));
  }
  absl::Status PutAtomic(std::string_view path, absl::Span<const std::byte> data) override {
    CKPT_RETURN_IF_ERROR(CheckPath(path));
    const std::string p(path);
    char err[CKPT_PLUGIN_ERROR_BYTES] = {0};
    return FromCode(s_->table->put_atomic(s_->handle, p.c_str(), data.data(), data.size(), err), err,
                    StrCat("atomic write of ", p));
  }
  absl::Status PutIfAbsent(std::string_view path, absl::Span<const std::byte> data) override {
    CKPT_RETURN_IF_ERROR(CheckPath(path));
    const ckpt_storage_plugin* t = s_->table;
    const bool has = t->struct_size >= offsetof(ckpt_storage_plugin, put_if_absent) + sizeof(t->put_if_absent) &&
                     t->put_if_absent != nullptr;
    if (!has) return Storage::PutIfAbsent(path, data);
    const std::string p(path);
    char err[CKPT_PLUGIN_ERROR_BYTES] = {0};
    return FromCode(t->put_if_absent(s_->handle, p.c_str(), data.data(), data.size(), err), err,
                    StrCat("exclusive create of ", p));
  }
  absl::StatusOr<uint64_t> FileSize(std::string_view path) override {
    CKPT_RETURN_IF_ERROR(CheckPath(path));
    const std::string p(path);
    char err[CKPT_PLUGIN_ERROR_BYTES] = {0};
    uint64_t size = 0;
    CKPT_RETURN_IF_ERROR(FromCode(s_->table->file_size(s_->handle, p.c_str(), &size, err), err, StrCat("size of ", p)));
    return size;
  }
  absl::StatusOr<std::vector<DirEntry>> List(std::string_view dir) override {
    CKPT_RETURN_IF_ERROR(CheckPath(dir, /*allow_empty=*/true));
    const std::string p(dir);
    char err[CKPT_PLUGIN_ERROR_BYTES] = {0};
    std::vector<DirEntry> out;
    auto emit = [](void* ctx, const char* name, int is_dir) {
      static_cast<std::vector<DirEntry>*>(ctx)->push_back(DirEntry{name, is_dir != 0});
    };
    CKPT_RETURN_IF_ERROR(
        FromCode(s_->table->list(s_->handle, p.c_str(), emit, &out, err), err, StrCat("listing '", p, "'")));
    // A name the plugin lists is one entry of this directory: never a path
    // into another one, never the directory itself or its parent.
    for (const DirEntry& e : out) {
      if (e.name.empty() || e.name == "." || e.name == ".." || e.name.find('/') != std::string::npos) {
        return absl::DataLossError(StrCat("listing '", p, "': the plugin ", s_->table->scheme, " listed '",
                                          Printable(e.name), "', which is not a name in that directory"));
      }
    }
    std::sort(out.begin(), out.end(), [](const DirEntry& a, const DirEntry& b) { return a.name < b.name; });
    return out;
  }
  absl::Status Remove(std::string_view path) override {
    CKPT_RETURN_IF_ERROR(CheckPath(path));
    const std::string p(path);
    char err[CKPT_PLUGIN_ERROR_BYTES] = {0};
    return FromCode(s_->table->remove(s_->handle, p.c_str(), err), err, StrCat("removing ", p));
  }
  absl::Status RemoveAll(std::string_view dir) override {
    CKPT_RETURN_IF_ERROR(CheckPath(dir));
    const std::string p(dir);
    char err[CKPT_PLUGIN_ERROR_BYTES] = {0};
    return FromCode(s_->table->remove_all(s_->handle, p.c_str(), err), err, StrCat("removing ", p));
  }
  absl::Status SyncDir(std::string_view dir) override {
    CKPT_RETURN_IF_ERROR(CheckPath(dir, /*allow_empty=*/true));
    const std::string p(dir);
    char err[CKPT_PLUGIN_ERROR_BYTES] = {0};
    return FromCode(s_->table->sync_dir(s_->handle, p.c_str(), err), err, StrCat("syncing ", p));
  }

 private:
  // Plugins are promised relative, '..'-free paths.
  static absl::Status CheckPath(std::string_view path, bool allow_empty = false) {
    if (path.empty() && allow_empty) return absl::OkStatus();
    if (path.empty() || path.front() == '/' || path == ".." || path.starts_with("../") || path.ends_with("/..") ||
        path.find("/../") != std::string_view::npos) {
      return absl::InvalidArgumentError(StrCat("path '", path, "' escapes the storage root"));
    }
    return absl::OkStatus();
  }
  std::string uri_;
  std::shared_ptr<PluginShared> s_;
};

struct PluginRegistry {
  std::mutex mu;
  std::map<std::string, PluginInfo> by_file;  // every file tried
  bool scanned = false;
};

PluginRegistry& Plugins() {
  static PluginRegistry* r = new PluginRegistry;
  return *r;
}

// Required entries of an ABI-1 table.
bool TableComplete(const ckpt_storage_plugin* t) {
  return t->open && t->close && t->open_writable && t->write_at && t->finish && t->abort && t->open_readable &&
         t->read_at && t->close_readable && t->put_atomic && t->file_size && t->list && t->remove && t->remove_all &&
         t->sync_dir && t->scheme != nullptr;
}

PluginInfo LoadLocked(const std::string& file) {
  PluginInfo info;
  info.file = file;
  // RTLD_LOCAL: plugins do not see each other's symbols. Handles are never
  // closed: tables and threads may outlive any single storage.
  void* handle = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* e = dlerror();
    info.error = StrCat("cannot load ", file, ": ", e != nullptr ? e : "unknown dlopen error");
    return info;
  }
  dlerror();
  void* sym = dlsym(handle, CKPT_PLUGIN_ENTRY);
  if (sym == nullptr) {
    info.error = StrCat(file, " is not a ckpt storage plugin: it does not export ", CKPT_PLUGIN_ENTRY);
    return info;
  }
  auto entry = reinterpret_cast<ckpt_storage_plugin_entry_fn>(sym);
  const ckpt_storage_plugin* table = entry(CKPT_PLUGIN_ABI_VERSION);
  if (table == nullptr) {
    info.error = StrCat(file, " refused plugin ABI version ", CKPT_PLUGIN_ABI_VERSION);
    return info;
  }
  info.abi_version = table->abi_version;
  if (table->abi_version != CKPT_PLUGIN_ABI_VERSION) {
    info.error = StrCat(file, " was built for plugin ABI version ", table->abi_version,
                        "; this libckpt speaks version ", CKPT_PLUGIN_ABI_VERSION);
    return info;
  }
  if (table->struct_size < CKPT_PLUGIN_REQUIRED_SIZE) {
    info.error = StrCat(file, ": its function table is ", table->struct_size, " bytes, ABI version ",
                        CKPT_PLUGIN_ABI_VERSION, " needs ", CKPT_PLUGIN_REQUIRED_SIZE);
    return info;
  }
  if (!TableComplete(table)) {
    info.error = StrCat(file, ": its function table has empty entries or no scheme");
    return info;
  }
  info.scheme = table->scheme;
  info.description = table->description != nullptr ? table->description : "";
  info.version = table->version != nullptr ? table->version : "";
  info.caps.engine = StrCat("plugin:", info.scheme);
  info.caps.direct_io = (table->caps & CKPT_PLUGIN_CAP_DIRECT_IO) != 0;
  info.caps.atomic_rename = (table->caps & CKPT_PLUGIN_CAP_ATOMIC_RENAME) != 0;
  info.caps.ranged_reads = (table->caps & CKPT_PLUGIN_CAP_RANGED_READS) != 0;
  info.caps.durable = (table->caps & CKPT_PLUGIN_CAP_DURABLE) != 0;
  info.table = table;
  return info;
}

}  // namespace

std::vector<std::string> StoragePluginPath() {
  std::vector<std::string> out;
  if (const char* env = std::getenv("CKPT_PLUGIN_PATH"); env != nullptr) {
    std::string_view rest = env;
    while (!rest.empty()) {
      const size_t colon = rest.find(':');
      const std::string_view d = rest.substr(0, colon);
      if (!d.empty()) out.emplace_back(d);
      if (colon == std::string_view::npos) break;
      rest.remove_prefix(colon + 1);
    }
  }
  const std::string install = CKPT_PLUGIN_INSTALL_DIR;
  if (!install.empty() && std::find(out.begin(), out.end(), install) == out.end()) {
    out.push_back(install);
  }
  return out;
}

PluginInfo LoadStoragePlugin(const std::string& file) {
  PluginRegistry& r = Plugins();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.by_file.find(file);
  if (it != r.by_file.end()) return it->second;
  PluginInfo info = LoadLocked(file);
  r.by_file[file] = info;
  return info;
}

std::vector<PluginInfo> DiscoverStoragePlugins() {
  std::vector<std::string> files;
  for (const std::string& dir : StoragePluginPath()) {
    DIR* d = opendir(dir.c_str());
    if (d == nullptr) continue;
    std::vector<std::string> names;
    while (dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      if (name.size() > 3 && name.ends_with(".so")) names.push_back(name);
    }
    closedir(d);
    std::sort(names.begin(), names.end());
    for (const std::string& n : names) files.push_back(dir + "/" + n);
  }
  std::vector<PluginInfo> out;
  for (const std::string& f : files) out.push_back(LoadStoragePlugin(f));
  return out;
}

absl::StatusOr<std::shared_ptr<Storage>> OpenPluginStorage(const PluginInfo& plugin, std::string_view uri) {
  if (plugin.table == nullptr) return absl::FailedPreconditionError(plugin.error);
  CKPT_ASSIGN_OR_RETURN(ParsedUri parsed, ParseUri(uri));
  CKPT_ASSIGN_OR_RETURN(int64_t threads, parsed.Int("io_threads", 4));
  if (threads < 1 || threads > 256) {
    return absl::InvalidArgumentError(StrCat("storage URI '", uri, "': io_threads must be 1..256"));
  }
  const std::string u(uri);
  char err[CKPT_PLUGIN_ERROR_BYTES] = {0};
  ckpt_storage* handle = nullptr;
  CKPT_RETURN_IF_ERROR(FromCode(plugin.table->open(u.c_str(), &handle, err), err,
                                StrCat("opening '", u, "' with plugin ", plugin.file)));
  auto shared = std::make_shared<PluginShared>(plugin.table, handle, static_cast<int>(threads));
  return std::shared_ptr<Storage>(new PluginStorage(u, std::move(shared)));
}

// Plugins register no scheme up front: OpenStorage finds the first plugin on
// the plugin path that serves a scheme nothing built in serves (registry.cc).
CKPT_STORAGE_BACKEND(plugin) {}

}  // namespace ckpt
