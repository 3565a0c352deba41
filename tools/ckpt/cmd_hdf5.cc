// The HDF5 side of ckpt export / ckpt import (cmd_export.cc, cmd_import.cc
// choose the format): a checkpoint step as one HDF5 file with every tensor
// whole (its global shape), so h5py and h5dump users can open a checkpoint
// without ckpt, and back.
//
// Layout of the HDF5 file:
//   /                       attributes ckpt_step (i64), ckpt_version (string)
//   /<tensor fqn>           dataset of the global shape; attribute ckpt_dtype
//                           ("bf16", ...). f64/f32/f16 and the integer types
//                           are HDF5's own types; bf16, fp8 and bool are
//                           stored as their raw unsigned integers.
//   /_ckpt_blobs/<name>     global blobs, u8 datasets
//   /_ckpt_blobs/rank-N/<name>  per-rank blobs
// A '/' in a tensor name makes groups, as in HDF5 paths.
#include <hdf5.h>
#include <unistd.h>

#include <cstdio>
#include <deque>
#include <map>
#include <memory>
#include <vector>

#include "ckpt/checkpointer.h"
#include "ckpt/hdf5.h"
#include "ckpt/storage.h"
#include "ckpt/verify.h"
#include "ckpt/version.h"
#include "commands.h"
#include "common/cli.h"
#include "common/synth_job.h"
#include "util/strings.h"

namespace ckpt::tools {
namespace {

constexpr const char* kBlobGroup = "_ckpt_blobs";
// The step's metadata: datasets "0", "1", ... holding each value as bytes,
// with the key in a string attribute "key" (keys may hold any character).
constexpr const char* kMetadataGroup = "_ckpt_metadata";

// Physical memory: export and import hold one whole tensor (or blob) at a
// time and refuse one larger than this before allocating it.
uint64_t MachineMemoryBytes() {
  return static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

// The dtype of a dataset written by something other than ckpt export.
std::optional<DType> InferDType(hid_t type) {
  const H5T_class_t cls = H5Tget_class(type);
  const size_t size = H5Tget_size(type);
  if (cls == H5T_FLOAT) {
    if (size == 8) return DType::kF64;
    if (size == 4) return DType::kF32;
    if (size == 2) return DType::kF16;
  } else if (cls == H5T_INTEGER) {
    const bool is_signed = H5Tget_sign(type) == H5T_SGN_2;
    if (size == 8 && is_signed) return DType::kI64;
    if (size == 4 && is_signed) return DType::kI32;
    if (size == 2 && is_signed) return DType::kI16;
    if (size == 1) return is_signed ? DType::kI8 : DType::kU8;
  } else if (cls == H5T_ENUM && size == 1) {
    return DType::kBool;  // h5py's bool
  }
  return std::nullopt;
}

std::optional<std::string> ReadStringAttr(hid_t obj, const char* name) {
  if (H5Aexists(obj, name) <= 0) return std::nullopt;
  Hid attr(H5Aopen(obj, name, H5P_DEFAULT), H5Aclose);
  Hid type(H5Aget_type(attr.get()), H5Tclose);
  if (H5Tget_class(type.get()) != H5T_STRING || H5Tis_variable_str(type.get()) > 0) return std::nullopt;
  std::string s(H5Tget_size(type.get()), '\0');
  if (H5Aread(attr.get(), type.get(), s.data()) < 0) return std::nullopt;
  while (!s.empty() && s.back() == '\0') s.pop_back();
  return s;
}

bool WriteDataset(hid_t file, const std::string& name, hid_t type, const std::vector<hsize_t>& dims, const void* data,
                  const std::string& dtype_attr, int64_t rank_attr = -2) {
  Hid lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(lcpl.get(), 1);
  Hid space(
      dims.empty() ? H5Screate(H5S_SCALAR) : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
      H5Sclose);
  Hid ds(H5Dcreate2(file, name.c_str(), type, space.get(), lcpl.get(), H5P_DEFAULT, H5P_DEFAULT), H5Dclose);
  if (!ds.ok()) return false;
  bool empty = false;
  for (hsize_t d : dims) empty = empty || d == 0;
  if (!empty && H5Dwrite(ds.get(), type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0) return false;
  if (!dtype_attr.empty() && !WriteHdf5StringAttr(ds.get(), "ckpt_dtype", dtype_attr)) return false;
  if (rank_attr >= -1 && !WriteHdf5I64Attr(ds.get(), "ckpt_rank", {rank_attr})) return false;
  return true;
}

}  // namespace

int ExportHdf5Main(int argc, char** argv, int first) {
  int64_t step = kLatestStep;
  std::string format = "hdf5";
  std::string to, dir;
  Args args("export", "DIR [--step S] --to out.h5",
            "Writes one committed step as a single HDF5 file with every tensor whole (its\n"
            "global shape), readable by h5py and h5dump without ckpt. Every block is\n"
            "verified on the way. Tensors are loaded one at a time, so memory peaks at the\n"
            "largest tensor.");
  args.Positional("DIR", &dir, "checkpoint root (path or storage URI)");
  args.Int("step", &step, "step to export (default: the latest committed)");
  args.String("to", &to, "HDF5 file to write (replaced)");
  args.String("format", &format,
              "hdf5 (this), or safetensors for the Hugging Face layout (ckpt export --format safetensors --help)");
  int exit = 0;
  if (!args.Parse(argc, argv, first, &exit)) return exit;
  auto usage = [](const std::string& m) {
    std::fprintf(stderr, "ckpt export: %s\n", m.c_str());
    return kExitUsage;
  };
  if (format != "hdf5") return usage(StrCat("--format must be hdf5 or safetensors, not '", format, "'"));
  if (to.empty()) return usage("give --to FILE (see --help)");
  // The manifest is read once; each tensor and blob is loaded against it.
  auto opened = OpenStepToRead(dir, step, "export");
  if (!opened.ok()) return usage(std::string(opened.status().message()));
  step = opened->step;
  const CheckpointSummary* const summary = &opened->summary;
  const StepReader& reader = *opened->reader;

  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // errors are reported here, by name
  Hid file(H5Fcreate(to.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
  if (!file.ok()) return usage(StrCat("cannot create ", to));
  WriteHdf5I64Attr(file.get(), "ckpt_step", {step});
  WriteHdf5StringAttr(file.get(), "ckpt_version", CKPT_VERSION_STRING);

  int64_t bytes = 0;
  for (const TensorSummary& t : summary->tensors) {
    const TensorSpec spec{t.fqn, t.dtype, t.shape};
    const uint64_t need = static_cast<uint64_t>(spec.NumElements()) * DTypeSize(t.dtype);
    const uint64_t memory = MachineMemoryBytes();
    if (need > memory) {
      return usage(StrCat("tensor '", t.fqn, "' ", ShapeToString(t.shape), " needs ", need,
                          " bytes, more than this machine's memory (", memory, "); export holds one tensor at a time"));
    }
    std::vector<char> buf(static_cast<size_t>(need));
    State target;
    if (absl::Status st = target.AddTensor(spec, buf.data()); !st.ok()) {
      std::fprintf(stderr, "ckpt export: %s\n", std::string(st.message()).c_str());
      return kExitProblem;
    }
    auto loaded = reader.Load(target, /*rank=*/0);
    if (!loaded.ok()) {
      std::fprintf(stderr, "ckpt export: %s\n", std::string(loaded.status().message()).c_str());
      return kExitProblem;
    }
    std::vector<hsize_t> dims(t.shape.begin(), t.shape.end());
    Hid type = Hdf5TypeOf(t.dtype);
    if (!WriteDataset(file.get(), t.fqn, type.get(), dims, buf.data(), std::string(DTypeName(t.dtype)))) {
      std::fprintf(stderr, "ckpt export: cannot write dataset '%s' to %s\n", t.fqn.c_str(), to.c_str());
      return kExitProblem;
    }
    bytes += static_cast<int64_t>(buf.size());
  }
  for (const BlobSummary& b : summary->blobs) {
    std::string value;
    State target;
    (void)target.AddBlobOut(b.name, &value, b.rank < 0 ? BlobScope::kGlobal : BlobScope::kRank, b.rank);
    auto loaded = reader.Load(target, std::max(0, b.rank));
    if (!loaded.ok()) {
      std::fprintf(stderr, "ckpt export: %s\n", std::string(loaded.status().message()).c_str());
      return kExitProblem;
    }
    const std::string name =
        b.rank < 0 ? StrCat(kBlobGroup, "/", b.name) : StrCat(kBlobGroup, "/rank-", b.rank, "/", b.name);
    if (!WriteDataset(file.get(), name, H5T_STD_U8LE, {static_cast<hsize_t>(value.size())}, value.data(), "", b.rank)) {
      std::fprintf(stderr, "ckpt export: cannot write blob '%s' to %s\n", b.name.c_str(), to.c_str());
      return kExitProblem;
    }
  }
  int index = 0;
  for (const auto& [key, value] : reader.metadata()) {
    const std::string name = StrCat(kMetadataGroup, "/", index++);
    if (!WriteDataset(file.get(), name, H5T_STD_U8LE, {static_cast<hsize_t>(value.size())}, value.data(), "")) {
      return usage(StrCat("cannot write metadata '", key, "' to ", to));
    }
    Hid ds(H5Dopen2(file.get(), name.c_str(), H5P_DEFAULT), H5Dclose);
    if (!ds.ok() || !WriteHdf5StringAttr(ds.get(), "key", key)) {
      return usage(StrCat("cannot write metadata '", key, "' to ", to));
    }
  }
  if (H5Fflush(file.get(), H5F_SCOPE_GLOBAL) < 0) return usage(StrCat("cannot flush ", to));
  std::printf("exported step %lld: %zu tensors (%s), %zu blobs, %zu metadata entries to %s\n",
              static_cast<long long>(step), summary->tensors.size(), HumanBytes(static_cast<double>(bytes)).c_str(),
              summary->blobs.size(), reader.metadata().size(), to.c_str());
  return kExitOk;
}

namespace {

struct Found {
  std::vector<std::string> datasets;
};

herr_t Collect(hid_t, const char* name, const H5O_info_t* info, void* data) {
  if (info->type == H5O_TYPE_DATASET) static_cast<Found*>(data)->datasets.push_back(name);
  return 0;
}

// The dtype a dataset imports as: its ckpt_dtype tag (written by export,
// checked against what is stored), else inferred from its HDF5 type.
absl::StatusOr<DType> DatasetDType(hid_t ds, hid_t type, const std::string& name, const std::string& in) {
  if (auto attr = ReadStringAttr(ds, "ckpt_dtype")) {
    const std::optional<DType> dtype = ParseDType(*attr);
    if (!dtype)
      return absl::InvalidArgumentError(StrCat(in, ": dataset '", name, "' has unknown ckpt_dtype '", *attr, "'"));
    // The tag must describe what is stored: export writes each dtype as
    // one HDF5 type (bool also as h5py's enum).
    Hid expect = Hdf5TypeOf(*dtype);
    const bool h5py_bool = *dtype == DType::kBool && H5Tget_class(type) == H5T_ENUM && H5Tget_size(type) == 1;
    if (!h5py_bool && H5Tequal(type, expect.get()) <= 0) {
      return absl::InvalidArgumentError(StrCat(
          in, ": dataset '", name, "' is tagged ckpt_dtype=", *attr, " but stored as ", H5Tget_size(type), "-byte ",
          H5Tget_class(type) == H5T_FLOAT ? "floats" : "values of another type", "; refusing to reinterpret it"));
    }
    return *dtype;
  }
  const std::optional<DType> dtype = InferDType(type);
  if (!dtype) return absl::InvalidArgumentError(StrCat(in, ": dataset '", name, "' has a type ckpt cannot import"));
  return *dtype;
}

}  // namespace

int ImportHdf5Main(int argc, char** argv, int first) {
  int64_t step = -1;
  std::string out, in;
  Args args("import", "in.h5 --out DIR [--step S]",
            "Saves the datasets of an HDF5 file as a ckpt checkpoint (one rank, whole\n"
            "tensors): the reverse of ckpt export, and a way in for weights from other\n"
            "tools. Dataset paths become tensor names; numeric types map to ckpt dtypes,\n"
            "and a ckpt_dtype attribute (written by export) restores bf16 and fp8.\n"
            "A safetensors model (its directory or file) is imported instead: see\n"
            "`ckpt import MODEL_DIR --help`.");
  args.Positional("in.h5", &in, "HDF5 file to read");
  args.String("out", &out, "checkpoint root (path or storage URI)");
  args.Int("step", &step, "step to save as (default: the file's ckpt_step, else 0)");
  int exit = 0;
  if (!args.Parse(argc, argv, first, &exit)) return exit;
  auto usage = [](const std::string& m) {
    std::fprintf(stderr, "ckpt import: %s\n", m.c_str());
    return kExitUsage;
  };
  if (out.empty()) return usage("give --out DIR (see --help)");
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  Hid file(H5Fopen(in.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (!file.ok()) return usage(StrCat(in, " is not a readable HDF5 file"));
  if (step < 0) {
    step = 0;
    if (H5Aexists(file.get(), "ckpt_step") > 0) {
      Hid attr(H5Aopen(file.get(), "ckpt_step", H5P_DEFAULT), H5Aclose);
      H5Aread(attr.get(), H5T_NATIVE_INT64, &step);
    }
  }
  Found found;
  if (H5Ovisit2(file.get(), H5_INDEX_NAME, H5_ITER_INC, Collect, &found, H5O_INFO_BASIC) < 0) {
    return usage(StrCat("cannot list the datasets of ", in));
  }

  std::vector<std::vector<char>> buffers;
  std::deque<std::string> blob_values;  // stable addresses for the states
  // Rank 0 saves the tensors, the global blobs and its own; rank r > 0 its
  // per-rank blobs: the checkpoint has as many ranks as the export had blob
  // owners.
  std::map<int, State> states;
  states[0];
  std::map<std::string, std::string> metadata;
  buffers.reserve(found.datasets.size());
  for (const std::string& name : found.datasets) {
    Hid ds(H5Dopen2(file.get(), name.c_str(), H5P_DEFAULT), H5Dclose);
    Hid type(H5Dget_type(ds.get()), H5Tclose);
    Hid space(H5Dget_space(ds.get()), H5Sclose);
    const int rank = H5Sget_simple_extent_ndims(space.get());
    std::vector<hsize_t> dims(static_cast<size_t>(std::max(rank, 0)));
    if (rank < 0 || (rank > 0 && H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr) < 0)) {
      return usage(StrCat(in, ": dataset '", name, "' has no simple shape"));
    }
    // Sizes are checked before anything is allocated for them.
    Shape shape;
    for (hsize_t d : dims) {
      if (d > static_cast<hsize_t>(kMaxTensorElements)) {
        return usage(StrCat(in, ": dataset '", name, "' has a dimension of ", d, " elements, beyond the limit of ",
                            kMaxTensorElements));
      }
      shape.push_back(static_cast<int64_t>(d));
    }
    if (absl::Status st = CheckTensorSpec(TensorSpec{name, DType::kU8, shape}); !st.ok()) {
      return usage(StrCat(in, ": ", st.message()));
    }
    const int64_t count = TensorSpec{name, DType::kU8, shape}.NumElements();
    if (name.starts_with(std::string(kMetadataGroup) + "/")) {
      auto key = ReadStringAttr(ds.get(), "key");
      if (!key || dims.size() != 1 || count > (int64_t{1} << 30)) {
        return usage(StrCat(in, ": metadata dataset '", name, "' needs a 'key' attribute and at most 1 GiB of bytes"));
      }
      std::string value(static_cast<size_t>(count), '\0');
      if (count > 0 && H5Dread(ds.get(), H5T_STD_U8LE, H5S_ALL, H5S_ALL, H5P_DEFAULT, value.data()) < 0) {
        return usage(StrCat(in, ": cannot read metadata dataset '", name, "'"));
      }
      metadata[*key] = std::move(value);
      continue;
    }
    if (name.starts_with(std::string(kBlobGroup) + "/")) {
      const uint64_t memory = MachineMemoryBytes();
      if (dims.size() != 1 || static_cast<uint64_t>(count) > std::min<uint64_t>(kMaxBlobBytes, memory)) {
        return usage(StrCat(in, ": blob dataset '", name, "' must be 1-d bytes, at most ",
                            std::min<uint64_t>(kMaxBlobBytes, memory), " (it declares ", count, ")"));
      }
      std::string value(static_cast<size_t>(count), '\0');
      if (count > 0 && H5Dread(ds.get(), H5T_STD_U8LE, H5S_ALL, H5S_ALL, H5P_DEFAULT, value.data()) < 0) {
        return usage(StrCat(in, ": cannot read blob dataset '", name, "'"));
      }
      const std::string rest = name.substr(std::string(kBlobGroup).size() + 1);
      blob_values.push_back(std::move(value));
      const std::string& v = blob_values.back();
      absl::Status added;
      if (rest.starts_with("rank-")) {
        const size_t slash = rest.find('/');
        int64_t rank = -1;
        if (slash == std::string::npos || !ParseInt64(rest.substr(5, slash - 5), &rank) || rank < 0 ||
            rank >= (1 << 20)) {
          return usage(StrCat(in, ": blob dataset '", name, "' is not under ", kBlobGroup, "/rank-N/"));
        }
        added = states[static_cast<int>(rank)].AddBlob(rest.substr(slash + 1), v.data(), v.size(), BlobScope::kRank);
      } else {
        added = states[0].AddBlob(rest, v.data(), v.size(), BlobScope::kGlobal);
      }
      if (!added.ok()) return usage(StrCat(in, ": ", added.message()));
      continue;
    }
    auto dtype = DatasetDType(ds.get(), type.get(), name, in);
    if (!dtype.ok()) return usage(std::string(dtype.status().message()));
    Hid mem = Hdf5TypeOf(*dtype);
    if (*dtype == DType::kBool && H5Tget_class(type.get()) == H5T_ENUM) mem = Hid(H5Tcopy(type.get()), H5Tclose);
    const TensorSpec spec{name, *dtype, shape};
    // A dataset is read whole: one larger than this machine's memory is
    // refused before the buffer is made (an HDF5 header may declare any
    // size and let fill values stand in for the rest).
    const uint64_t bytes = static_cast<uint64_t>(count) * DTypeSize(*dtype);
    const uint64_t memory = MachineMemoryBytes();
    if (bytes > memory) {
      return usage(StrCat(in, ": dataset '", name, "' ", ShapeToString(shape), " ", DTypeName(*dtype), " needs ", bytes,
                          " bytes, more than this machine's memory (", memory, ")"));
    }
    buffers.emplace_back(static_cast<size_t>(bytes));
    if (count > 0 && H5Dread(ds.get(), mem.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, buffers.back().data()) < 0) {
      return usage(StrCat(in, ": cannot read dataset '", name, "' as ", DTypeName(*dtype)));
    }
    if (absl::Status st = states[0].AddTensor(spec, buffers.back().data()); !st.ok()) {
      return usage(StrCat(in, ": ", st.message()));
    }
  }
  const int world = states.rbegin()->first + 1;
  std::vector<State> by_rank(static_cast<size_t>(world));
  for (auto& [r, state] : states) by_rank[static_cast<size_t>(r)] = std::move(state);
  SaveOptions so;
  so.metadata = metadata;
  const absl::Status st = SaveAsRanks(out, step, by_rank, so, Codec::kNone);
  if (!st.ok()) {
    std::fprintf(stderr, "ckpt import: %s\n", std::string(st.message()).c_str());
    return kExitProblem;
  }
  std::printf("imported %zu datasets from %s as step %lld of %s (%d rank(s), %zu metadata entries)\n",
              found.datasets.size(), in.c_str(), static_cast<long long>(step), out.c_str(), world, metadata.size());
  return kExitOk;
}

}  // namespace ckpt::tools
