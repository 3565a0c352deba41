// How a built-in backend joins the registry. Each lives in its own folder:
//
//   storage/roots/NAME      a root: where bytes live (file, mem, s3, ...)
//   storage/adapters/NAME   an adapter: a root wrapped (tiered, faulty)
//   format_roots/NAME       another format presented as a checkpoint root
//
// and one of its files says, at namespace ckpt scope,
//
//   CKPT_STORAGE_BACKEND(NAME) { r.Add(BackendInfo{...}, OpenNameStorage); }
//
// The build lists those folders (libckpt/CMakeLists.txt) and generates the
// one function that calls each folder's registration before the first
// lookup: a new backend is a new folder and touches no list. Tests named
// *_test.cc in the folder are built and run beside it (tests/CMakeLists.txt;
// a folder's test.cmake, when present, says how instead).
#ifndef CKPT_STORAGE_BACKEND_H_
#define CKPT_STORAGE_BACKEND_H_

#include <functional>
#include <string>
#include <string_view>

#include "ckpt/storage.h"

namespace ckpt {

class StorageBackendRegistrar {
 public:
  virtual ~StorageBackendRegistrar() = default;
  /// Serves `info.scheme` with `open`. `claims_path`, when set, is asked
  /// about a plain path (no scheme): true opens it with this backend instead
  /// of file:// (a safetensors model read in place).
  virtual void Add(BackendInfo info, StorageFactory open,
                   std::function<bool(std::string_view path)> claims_path = nullptr) = 0;
};

/// What a backend can do at best, for its BackendInfo.
inline StorageCaps BackendCaps(std::string engine, bool direct_io, bool atomic_rename, bool durable) {
  StorageCaps c;
  c.engine = std::move(engine);
  c.direct_io = direct_io;
  c.atomic_rename = atomic_rename;
  c.durable = durable;
  c.ranged_reads = true;
  return c;
}

/// Generated from the backend folders: calls every folder's registration.
void RegisterBuiltinStorageBackends(StorageBackendRegistrar& r);

}  // namespace ckpt

#define CKPT_STORAGE_BACKEND(name)                                        \
  void RegisterStorageBackend_##name(::ckpt::StorageBackendRegistrar& r); \
  void RegisterStorageBackend_##name(::ckpt::StorageBackendRegistrar& r)

#endif  // CKPT_STORAGE_BACKEND_H_
