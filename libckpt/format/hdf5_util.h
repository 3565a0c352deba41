// Small helpers over the libhdf5 C API shared by the HDF5 container writer
// and ckpt export/import: an owning handle, the HDF5 type of each dtype,
// and attributes.
#ifndef CKPT_FORMAT_HDF5_UTIL_H_
#define CKPT_FORMAT_HDF5_UTIL_H_

#include <hdf5.h>

#include <string_view>
#include <utility>
#include <vector>

#include "ckpt/dtype.h"

namespace ckpt {

/// Owns an HDF5 id and closes it with the matching H5?close.
class Hid {
 public:
  Hid() = default;
  Hid(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  Hid(Hid&& o) noexcept : id_(o.id_), close_(o.close_) { o.id_ = -1; }
  Hid& operator=(Hid&& o) noexcept {
    std::swap(id_, o.id_);
    std::swap(close_, o.close_);
    return *this;
  }
  Hid(const Hid&) = delete;
  Hid& operator=(const Hid&) = delete;
  ~Hid() {
    if (id_ >= 0 && close_ != nullptr) close_(id_);
  }
  hid_t get() const { return id_; }
  bool ok() const { return id_ >= 0; }

 private:
  hid_t id_ = -1;
  herr_t (*close_)(hid_t) = nullptr;
};

/// The HDF5 type a dtype is stored as: HDF5's own floats (f16 as IEEE half,
/// what h5py reads as float16) and integers; bf16, fp8 and bool as their raw
/// unsigned integers.
Hid Hdf5TypeOf(DType dtype);

/// A fixed-length string attribute.
bool WriteHdf5StringAttr(hid_t obj, const char* name, std::string_view value);

/// A 1-d i64 attribute (a one-element array for single values).
bool WriteHdf5I64Attr(hid_t obj, const char* name, const std::vector<int64_t>& values);

}  // namespace ckpt

#endif  // CKPT_FORMAT_HDF5_UTIL_H_
