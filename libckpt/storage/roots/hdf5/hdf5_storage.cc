// hdf5:///path: a file root whose steps' data files are HDF5 files.
#include <memory>
#include <string>
#include <string_view>

#include "ckpt/storage.h"
#include "net/uri.h"
#include "storage/backend.h"
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
  CKPT_ASSIGN_OR_RETURN(std::shared_ptr<Storage> base, OpenStorage(inner));
  return std::shared_ptr<Storage>(new Hdf5Storage(std::move(base), std::string(uri)));
}

}  // namespace

CKPT_STORAGE_BACKEND(hdf5) {
  r.Add({"hdf5", "", "files as file://, each rank's data an HDF5 file that h5py and h5dump read",
         BackendCaps("hdf5", false, true, true)},
        OpenHdf5Storage);
}

}  // namespace ckpt
