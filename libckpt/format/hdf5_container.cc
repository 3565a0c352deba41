#include "format/hdf5_container.h"

#include <hdf5.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <type_traits>

#include "ckpt/dtype.h"
#include "ckpt/hdf5.h"
#include "util/errors.h"
#include "util/hash.h"
#include "util/strings.h"

namespace ckpt {
static_assert(std::is_same_v<hid_t, Hid::Id> && std::is_same_v<herr_t, int>,
              "ckpt/hdf5.h spells hid_t as int64_t and herr_t as int");
namespace {

absl::Status Fail(const std::string& path, std::string_view what) {
  return absl::InternalError(StrCat("HDF5 container ", path, ": ", what));
}

}  // namespace

Hid Hdf5TypeOf(DType d) {
  switch (d) {
    case DType::kF64:
      return Hid(H5Tcopy(H5T_IEEE_F64LE), H5Tclose);
    case DType::kF32:
      return Hid(H5Tcopy(H5T_IEEE_F32LE), H5Tclose);
    case DType::kF16: {
      hid_t t = H5Tcopy(H5T_IEEE_F32LE);
      H5Tset_fields(t, 15, 10, 5, 0, 10);
      H5Tset_size(t, 2);
      H5Tset_ebias(t, 15);
      return Hid(t, H5Tclose);
    }
    case DType::kI64:
      return Hid(H5Tcopy(H5T_STD_I64LE), H5Tclose);
    case DType::kI32:
      return Hid(H5Tcopy(H5T_STD_I32LE), H5Tclose);
    case DType::kI16:
      return Hid(H5Tcopy(H5T_STD_I16LE), H5Tclose);
    case DType::kI8:
      return Hid(H5Tcopy(H5T_STD_I8LE), H5Tclose);
    case DType::kBF16:
      return Hid(H5Tcopy(H5T_STD_U16LE), H5Tclose);
    default:
      return Hid(H5Tcopy(H5T_STD_U8LE), H5Tclose);  // u8, bool, fp8
  }
}

bool WriteHdf5I64Attr(int64_t obj, const char* name, const std::vector<int64_t>& v) {
  const hsize_t n = v.size();
  Hid space(v.empty() ? H5Screate(H5S_NULL) : H5Screate_simple(1, &n, nullptr), H5Sclose);
  Hid attr(H5Acreate2(obj, name, H5T_STD_I64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  return attr.ok() && (v.empty() || H5Awrite(attr.get(), H5T_NATIVE_INT64, v.data()) >= 0);
}

bool WriteHdf5StringAttr(int64_t obj, const char* name, std::string_view value) {
  Hid type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(type.get(), std::max<size_t>(1, value.size()));
  Hid space(H5Screate(H5S_SCALAR), H5Sclose);
  Hid attr(H5Acreate2(obj, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  std::string v(value);
  return attr.ok() && H5Awrite(attr.get(), type.get(), v.c_str()) >= 0;
}

std::string Hdf5ChunkPath(std::string_view fqn, const Box& box) {
  std::string p = StrCat("/", fqn, "/chunk");
  for (int64_t o : box.offsets) StrAppend(&p, "_", o);
  return p;
}

std::string Hdf5BlobPath(std::string_view name, int rank) {
  return rank < 0 ? StrCat("/_ckpt_blobs/", name) : StrCat("/_ckpt_blobs/rank-", rank, "/", name);
}

bool IsHdf5DataFile(std::string_view name) { return name.ends_with(".h5"); }

std::vector<std::pair<uint64_t, uint64_t>> Hdf5MetadataRanges(std::vector<std::pair<uint64_t, uint64_t>> used,
                                                              uint64_t file_size) {
  std::sort(used.begin(), used.end());
  std::vector<std::pair<uint64_t, uint64_t>> gaps;
  uint64_t at = 0;
  for (const auto& [offset, length] : used) {
    if (length == 0) continue;
    if (offset > at) gaps.push_back({at, std::min(offset, file_size) - at});
    at = std::max(at, offset + length);
    if (at >= file_size) break;
  }
  if (at < file_size) gaps.push_back({at, file_size - at});
  return gaps;
}

absl::StatusOr<uint64_t> Hdf5MetadataHash(const std::vector<std::pair<uint64_t, uint64_t>>& ranges,
                                          const std::function<absl::Status(uint64_t, uint64_t, char*)>& read) {
  uint64_t total = 0;
  for (const auto& r : ranges) total += r.second;
  if (total > (uint64_t{1} << 32)) {
    return absl::DataLossError(
        StrCat("the container's own structures span ", total, " bytes; that is not a ckpt container"));
  }
  std::string bytes(static_cast<size_t>(total), '\0');
  size_t at = 0;
  for (const auto& [offset, length] : ranges) {
    CKPT_RETURN_IF_ERROR(read(offset, length, bytes.data() + at));
    at += static_cast<size_t>(length);
  }
  return Xxh3(bytes);
}

std::string Hdf5DataFileName(int rank) {
  char b[32];
  std::snprintf(b, sizeof(b), "rank-%06d.h5", rank);
  return b;
}

absl::StatusOr<Hdf5Container> CreateHdf5Container(const std::string& local_path, const std::vector<Hdf5Chunk>& chunks,
                                                  uint64_t index_bytes, int64_t step, int rank) {
  // Debian's libhdf5 is built without thread safety: one caller at a time
  // (ranks of one process save concurrently).
  static std::mutex* hdf5_mu = new std::mutex;
  std::lock_guard<std::mutex> lock(*hdf5_mu);
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // errors come back as statuses
  Hid fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  // Large datasets start on 4 KiB boundaries.
  H5Pset_alignment(fapl.get(), 64 << 10, 4096);
  Hdf5Container out;
  {
    Hid file(H5Fcreate(local_path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()), H5Fclose);
    if (!file.ok()) return Fail(local_path, "cannot create the file");
    if (!WriteHdf5I64Attr(file.get(), "ckpt_step", {step}) || !WriteHdf5I64Attr(file.get(), "ckpt_rank", {rank})) {
      return Fail(local_path, "cannot write the file attributes");
    }
    Hid lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
    H5Pset_create_intermediate_group(lcpl.get(), 1);
    Hid dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
    H5Pset_layout(dcpl.get(), H5D_CONTIGUOUS);
    H5Pset_alloc_time(dcpl.get(), H5D_ALLOC_TIME_EARLY);
    H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER);

    auto create = [&](const std::string& path, hid_t type, const std::vector<hsize_t>& dims,
                      uint64_t* offset) -> absl::StatusOr<hid_t> {
      Hid space(
          dims.empty() ? H5Screate(H5S_SCALAR) : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
          H5Sclose);
      hid_t ds = H5Dcreate2(file.get(), path.c_str(), type, space.get(), lcpl.get(), dcpl.get(), H5P_DEFAULT);
      if (ds < 0) return Fail(local_path, StrCat("cannot create dataset ", path));
      const haddr_t at = H5Dget_offset(ds);
      if (at == HADDR_UNDEF) {
        H5Dclose(ds);
        return Fail(local_path, StrCat("dataset ", path, " has no contiguous storage"));
      }
      *offset = at;
      return ds;
    };
    for (const Hdf5Chunk& c : chunks) {
      uint64_t offset = 0;
      if (c.is_blob) {
        auto ds = create(c.path, H5T_STD_U8LE, {static_cast<hsize_t>(c.bytes)}, &offset);
        if (!ds.ok()) return ds.status();
        H5Dclose(*ds);
      } else {
        Hid type = Hdf5TypeOf(c.dtype);
        std::vector<hsize_t> dims(c.box.sizes.begin(), c.box.sizes.end());
        auto ds = create(c.path, type.get(), dims, &offset);
        if (!ds.ok()) return ds.status();
        Hid d(*ds, H5Dclose);
        std::vector<int64_t> shape(c.global_shape.begin(), c.global_shape.end());
        std::vector<int64_t> offs(c.box.offsets.begin(), c.box.offsets.end());
        if (!WriteHdf5I64Attr(d.get(), "global_shape", shape) || !WriteHdf5I64Attr(d.get(), "offsets", offs) ||
            !WriteHdf5StringAttr(d.get(), "ckpt_dtype", DTypeName(c.dtype))) {
          return Fail(local_path, StrCat("cannot write the attributes of ", c.path));
        }
      }
      out.offsets.push_back(offset);
    }
    {
      auto ds = create("/_ckpt_index", H5T_STD_U8LE, {static_cast<hsize_t>(index_bytes)}, &out.index_offset);
      if (!ds.ok()) return ds.status();
      H5Dclose(*ds);
    }
  }  // closing the file writes the HDF5 metadata
  struct stat st;
  if (stat(local_path.c_str(), &st) != 0) return Fail(local_path, "cannot stat after closing");
  out.file_size = static_cast<uint64_t>(st.st_size);
  if (out.index_offset + index_bytes > out.file_size) {
    return Fail(local_path, "the index dataset ends past the end of the file");
  }
  return out;
}

}  // namespace ckpt
