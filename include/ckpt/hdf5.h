// Writing ckpt's tensors with libhdf5 as `ckpt export` and the HDF5
// container do: the HDF5 type each dtype is stored as, attributes, and an
// owning handle. The header needs no HDF5 include: an HDF5 id (hid_t) is an
// int64_t and a close function (H5Fclose, H5Dclose, ...) returns int.
#ifndef CKPT_HDF5_H_
#define CKPT_HDF5_H_

#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "ckpt/dtype.h"
#include "ckpt/export.h"

namespace ckpt {

/// Owns an HDF5 id and closes it with the matching H5?close.
class Hid {
 public:
  using Id = int64_t;              // hid_t
  using Close = int (*)(int64_t);  // herr_t (*)(hid_t)
  Hid() = default;
  Hid(Id id, Close close) : id_(id), close_(close) {}
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
  Id get() const { return id_; }
  bool ok() const { return id_ >= 0; }

 private:
  Id id_ = -1;
  Close close_ = nullptr;
};

/// The HDF5 type a dtype is stored as: HDF5's own floats (f16 as IEEE half,
/// what h5py reads as float16) and integers; bf16, fp8 and bool as their raw
/// unsigned integers.
CKPT_EXPORT Hid Hdf5TypeOf(DType dtype);

/// A fixed-length string attribute on `obj` (an HDF5 file, group or dataset).
CKPT_EXPORT bool WriteHdf5StringAttr(int64_t obj, const char* name, std::string_view value);

/// A 1-d i64 attribute (a one-element array for single values).
CKPT_EXPORT bool WriteHdf5I64Attr(int64_t obj, const char* name, const std::vector<int64_t>& values);

}  // namespace ckpt

#endif  // CKPT_HDF5_H_
