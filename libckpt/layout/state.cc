#include "ckpt/state.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "util/errors.h"
#include "util/strings.h"

namespace ckpt {

bool Shard::Contiguous() const {
  if (strides.empty()) return true;
  int64_t expect = 1;
  for (int i = box.ndim() - 1; i >= 0; --i) {
    if (box.sizes[i] != 1 && strides[i] != expect) return false;
    expect *= box.sizes[i];
  }
  return true;
}

int64_t Shard::PackedBytes() const { return box.Volume() * static_cast<int64_t>(DTypeSize(spec.dtype)); }

absl::Status State::AddShard(const TensorSpec& spec, const Box& box, void* data, std::vector<int64_t> strides) {
  if (spec.fqn.empty()) {
    return absl::InvalidArgumentError("tensor name (fqn) is empty");
  }
  if (!IsValidDType(static_cast<uint8_t>(spec.dtype)) || DTypeSize(spec.dtype) == 0) {
    return absl::InvalidArgumentError(StrCat("tensor '", spec.fqn, "': invalid dtype ", static_cast<int>(spec.dtype)));
  }
  if (absl::Status s = CheckTensorSpec(spec); !s.ok()) return s;
  if (!BoxWithin(box, spec.shape)) {
    return absl::InvalidArgumentError(
        StrCat("tensor '", spec.fqn, "': box ", box.ToString(), " does not fit shape ", ShapeToString(spec.shape)));
  }
  if (!strides.empty() && strides.size() != spec.shape.size()) {
    return absl::InvalidArgumentError(
        StrCat("tensor '", spec.fqn, "': ", strides.size(), " strides for a ", spec.shape.size(), "-d tensor"));
  }
  for (int64_t s : strides) {
    if (s < 0) {
      return absl::InvalidArgumentError(StrCat("tensor '", spec.fqn, "': negative strides are not supported"));
    }
  }
  if (data == nullptr && !box.Empty()) {
    return absl::InvalidArgumentError(StrCat("tensor '", spec.fqn, "': null data for box ", box.ToString()));
  }
  for (const Shard& other : shards_) {
    if (other.spec.fqn != spec.fqn) continue;
    if (!(other.spec == spec)) {
      return absl::InvalidArgumentError(StrCat(
          "tensor '", spec.fqn, "': added with dtype ", DTypeName(spec.dtype), " shape ", ShapeToString(spec.shape),
          " but earlier with dtype ", DTypeName(other.spec.dtype), " shape ", ShapeToString(other.spec.shape)));
    }
    if (!Intersect(other.box, box).Empty()) {
      return absl::InvalidArgumentError(
          StrCat("tensor '", spec.fqn, "': box ", box.ToString(), " overlaps box ", other.box.ToString()));
    }
  }
  shards_.push_back(Shard{spec, box, data, std::move(strides)});
  return absl::OkStatus();
}

absl::Status State::AddTensor(const TensorSpec& spec, void* data) {
  return AddShard(spec, Box::Whole(spec.shape), data);
}

namespace {

absl::Status CheckBlobName(const std::string& name) {
  if (name.empty()) return absl::InvalidArgumentError("blob name is empty");
  if (name.size() > kMaxNameBytes) {
    return absl::InvalidArgumentError(StrCat("blob '", name.substr(0, 64), "...': its name is ", name.size(),
                                             " bytes; the limit is ", kMaxNameBytes));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status State::AddBlob(std::string name, const void* data, size_t size, BlobScope scope) {
  CKPT_RETURN_IF_ERROR(CheckBlobName(name));
  if (data == nullptr && size > 0) {
    return absl::InvalidArgumentError(StrCat("blob '", name, "': null data"));
  }
  if (size > kMaxBlobBytes) {
    return absl::InvalidArgumentError(
        StrCat("blob '", name, "': ", size, " bytes exceeds the limit of ", kMaxBlobBytes));
  }
  for (const Blob& b : blobs_) {
    if (b.name == name) {
      return absl::InvalidArgumentError(StrCat("blob '", name, "' added twice"));
    }
  }
  Blob blob;
  blob.name = std::move(name);
  blob.scope = scope;
  blob.data = data;
  blob.size = size;
  blobs_.push_back(std::move(blob));
  return absl::OkStatus();
}

absl::Status State::AddBlobOut(std::string name, std::string* out, BlobScope scope, int source_rank) {
  CKPT_RETURN_IF_ERROR(CheckBlobName(name));
  if (out == nullptr) {
    return absl::InvalidArgumentError(StrCat("blob '", name, "': null output"));
  }
  Blob blob;
  blob.name = std::move(name);
  blob.scope = scope;
  blob.out = out;
  blob.source_rank = source_rank;
  blobs_.push_back(std::move(blob));
  return absl::OkStatus();
}

int64_t State::LogicalBytes() const {
  int64_t total = 0;
  for (const Shard& s : shards_) total += s.PackedBytes();
  for (const Blob& b : blobs_) total += static_cast<int64_t>(b.size);
  return total;
}

}  // namespace ckpt
