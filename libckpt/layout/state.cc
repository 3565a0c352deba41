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

namespace {

// Everything AddShard checks but overlaps with the state's other shards.
absl::Status CheckShard(const TensorSpec& spec, const Box& box, const void* data, const std::vector<int64_t>& strides) {
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
  return absl::OkStatus();
}

}  // namespace

absl::Status State::AddShard(const TensorSpec& spec, const Box& box, void* data, std::vector<int64_t> strides) {
  CKPT_RETURN_IF_ERROR(CheckShard(spec, box, data, strides));
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
  shard_layouts_.push_back(-1);
  box_shards_ = true;
  return absl::OkStatus();
}

absl::Status State::AddTensor(const TensorSpec& spec, void* data) {
  return AddShard(spec, Box::Whole(spec.shape), data);
}

absl::Status State::SetMesh(const Mesh& mesh, int64_t rank) {
  if (!layouts_.empty()) return absl::FailedPreconditionError("SetMesh after AddLayout: the layouts have a mesh");
  CKPT_RETURN_IF_ERROR(CheckMesh(mesh));
  if (rank < 0 || rank >= mesh.NumRanks()) {
    return absl::InvalidArgumentError(StrCat("rank ", rank, " is outside mesh ", mesh.ToString()));
  }
  mesh_ = mesh;
  mesh_rank_ = rank;
  return absl::OkStatus();
}

absl::Status State::AddLayout(const TensorLayout& layout, void* data, std::vector<int64_t> strides) {
  if (!mesh_.has_value()) {
    return absl::FailedPreconditionError(
        StrCat("tensor '", layout.spec.fqn, "': AddLayout needs the mesh first (State::SetMesh)"));
  }
  if (declared_.count(layout.spec.fqn) > 0) {
    return absl::InvalidArgumentError(StrCat("tensor '", layout.spec.fqn, "': its layout is declared twice"));
  }
  CKPT_ASSIGN_OR_RETURN(std::optional<Box> box, RankBox(layout, *mesh_, mesh_rank_));
  if (box.has_value()) {
    if (box_shards_) {
      // Boxes given by AddShard may be of this tensor: checked against them.
      CKPT_RETURN_IF_ERROR(AddShard(layout.spec, *box, data, std::move(strides)));
      shard_layouts_.back() = static_cast<int32_t>(layouts_.size());
    } else {
      // The only shard of its tensor (declared once): no overlap to look for.
      CKPT_RETURN_IF_ERROR(CheckShard(layout.spec, *box, data, strides));
      shards_.push_back(Shard{layout.spec, *box, data, std::move(strides)});
      shard_layouts_.push_back(static_cast<int32_t>(layouts_.size()));
    }
  } else {
    // Held elsewhere: its spec is still checked.
    int probe = 0;
    CKPT_RETURN_IF_ERROR(CheckShard(layout.spec, Box::Whole(layout.spec.shape), &probe, {}));
  }
  declared_.insert(layout.spec.fqn);
  layouts_.push_back(layout);
  return absl::OkStatus();
}

bool State::LaidOut() const { return !layouts_.empty() && !box_shards_; }

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
