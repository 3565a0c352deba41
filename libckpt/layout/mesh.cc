#include "ckpt/mesh.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "util/errors.h"
#include "util/strings.h"

namespace ckpt {

absl::StatusOr<Mesh> Mesh::Parse(std::string_view text_in) {
  Mesh mesh;
  absl::string_view text = absl::StripAsciiWhitespace(AV(text_in));
  if (text.empty()) {
    return absl::InvalidArgumentError("empty mesh; expected e.g. \"dp=2,tp=4,pp=1\"");
  }
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    part = absl::StripAsciiWhitespace(part);
    std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(part, absl::MaxSplits('=', 1));
    int64_t size = 0;
    if (kv.first.empty() || !absl::SimpleAtoi(kv.second, &size) || size < 1) {
      return absl::InvalidArgumentError(StrCat("bad mesh dimension '", part, "' in '", text,
                                               "'; expected name=size with size >= 1, e.g. \"dp=2,tp=4\""));
    }
    if (mesh.DimIndex(SV(kv.first)) >= 0) {
      return absl::InvalidArgumentError(StrCat("mesh dimension '", kv.first, "' appears twice in '", text, "'"));
    }
    mesh.names.emplace_back(kv.first);
    mesh.sizes.push_back(size);
  }
  if (absl::Status s = CheckMesh(mesh); !s.ok()) {
    return absl::InvalidArgumentError(StrCat("mesh '", text, "': ", s.message()));
  }
  return mesh;
}

absl::Status CheckMesh(const Mesh& mesh) {
  if (mesh.names.size() != mesh.sizes.size()) {
    return absl::InvalidArgumentError(
        StrCat("mesh has ", mesh.names.size(), " dimension names but ", mesh.sizes.size(), " sizes"));
  }
  if (mesh.sizes.empty()) return absl::InvalidArgumentError("mesh has no dimensions");
  if (mesh.sizes.size() > static_cast<size_t>(kMaxTensorRank)) {
    return absl::InvalidArgumentError(
        StrCat("mesh has ", mesh.sizes.size(), " dimensions; the limit is ", kMaxTensorRank));
  }
  int64_t ranks = 1;
  for (size_t i = 0; i < mesh.sizes.size(); ++i) {
    const std::string& name = mesh.names[i];
    if (name.empty()) return absl::InvalidArgumentError(StrCat("mesh dimension ", i, " has no name"));
    if (name.size() > kMaxMeshDimNameBytes) {
      return absl::InvalidArgumentError(
          StrCat("mesh dimension ", i, ": its name is ", name.size(), " bytes; the limit is ", kMaxMeshDimNameBytes));
    }
    for (size_t j = 0; j < i; ++j) {
      if (mesh.names[j] == name) {
        return absl::InvalidArgumentError(StrCat("mesh dimension '", name, "' appears twice"));
      }
    }
    if (mesh.sizes[i] < 1) {
      return absl::InvalidArgumentError(StrCat("mesh dimension '", name, "' has size ", mesh.sizes[i]));
    }
    if (__builtin_mul_overflow(ranks, mesh.sizes[i], &ranks) || ranks > (int64_t{1} << 24)) {
      return absl::InvalidArgumentError("mesh has more than 16M ranks");
    }
  }
  return absl::OkStatus();
}

Mesh Mesh::World(int64_t n) { return Mesh{{"world"}, {n}}; }

int64_t Mesh::NumRanks() const {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

int Mesh::DimIndex(std::string_view name) const {
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i] == name) return static_cast<int>(i);
  }
  return -1;
}

int64_t Mesh::SizeOf(std::string_view name) const {
  int i = DimIndex(name);
  return i < 0 ? 1 : sizes[i];
}

std::vector<int64_t> Mesh::Coords(int64_t rank) const {
  std::vector<int64_t> coords(sizes.size());
  for (int i = ndim() - 1; i >= 0; --i) {
    coords[i] = rank % sizes[i];
    rank /= sizes[i];
  }
  return coords;
}

int64_t Mesh::RankOf(const std::vector<int64_t>& coords) const {
  int64_t rank = 0;
  for (int i = 0; i < ndim(); ++i) rank = rank * sizes[i] + coords[i];
  return rank;
}

std::string Mesh::ToString() const {
  std::string out;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (i) out += ",";
    StrAppend(&out, names[i], "=", sizes[i]);
  }
  return out;
}

std::vector<int64_t> ChunkBoundaries(int64_t extent, int64_t parts) {
  std::vector<int64_t> bounds(parts + 1, 0);
  if (parts <= 0) return {0};
  const int64_t chunk = (extent + parts - 1) / parts;
  for (int64_t i = 0; i <= parts; ++i) bounds[i] = std::min(i * chunk, extent);
  return bounds;
}

absl::StatusOr<std::optional<Box>> BoxAtCoords(const TensorLayout& layout, const Mesh& mesh,
                                               const std::vector<int64_t>& coords) {
  const TensorSpec& spec = layout.spec;
  if (layout.placements.size() > mesh.sizes.size()) {
    return absl::InvalidArgumentError(
        StrCat("tensor '", spec.fqn, "': ", layout.placements.size(), " placements for a ", mesh.ndim(), "-d mesh"));
  }
  if (layout.owner_dim >= 0) {
    if (layout.owner_dim >= mesh.ndim()) {
      return absl::InvalidArgumentError(
          StrCat("tensor '", spec.fqn, "': owner mesh dim ", layout.owner_dim, " outside mesh ", mesh.ToString()));
    }
    if (coords[layout.owner_dim] != layout.owner_index) return std::nullopt;
  }
  Box box = Box::Whole(spec.shape);
  auto apply = [&](int md) -> absl::Status {
    if (md < 0 || md >= mesh.ndim()) {
      return absl::InvalidArgumentError(
          StrCat("tensor '", spec.fqn, "': split order names mesh dim ", md, " outside mesh ", mesh.ToString()));
    }
    if (md >= static_cast<int>(layout.placements.size())) return absl::OkStatus();
    const Placement& p = layout.placements[md];
    if (p.kind != Placement::Kind::kShard) return absl::OkStatus();
    if (p.dim < 0 || p.dim >= static_cast<int>(spec.shape.size())) {
      return absl::InvalidArgumentError(StrCat("tensor '", spec.fqn, "' of shape ", ShapeToString(spec.shape),
                                               ": Shard(", p.dim, ") names no dimension"));
    }
    const int64_t n = mesh.sizes[md];
    const int64_t len = box.sizes[p.dim];
    const int64_t idx = coords[md];
    int64_t lo, hi;
    if (p.boundaries.empty()) {
      const int64_t chunk = n > 0 ? (len + n - 1) / n : 0;
      lo = std::min(idx * chunk, len);
      hi = std::min((idx + 1) * chunk, len);
    } else {
      const std::vector<int64_t>& b = p.boundaries;
      bool ok = static_cast<int64_t>(b.size()) == n + 1 && b.front() == 0 && b.back() == len &&
                std::is_sorted(b.begin(), b.end());
      if (!ok) {
        return absl::InvalidArgumentError(StrCat("tensor '", spec.fqn, "': explicit boundaries along dim ", p.dim,
                                                 " must be ", n + 1, " non-decreasing values from 0 to ", len));
      }
      lo = b[idx];
      hi = b[idx + 1];
    }
    box.offsets[p.dim] += lo;
    box.sizes[p.dim] = hi - lo;
    return absl::OkStatus();
  };
  if (layout.split_order.empty()) {
    for (int md = 0; md < mesh.ndim(); ++md) CKPT_RETURN_IF_ERROR(apply(md));
  } else {
    for (int md : layout.split_order) CKPT_RETURN_IF_ERROR(apply(md));
  }
  return box;
}

absl::StatusOr<std::optional<Box>> RankBox(const TensorLayout& layout, const Mesh& mesh, int64_t rank) {
  if (rank < 0 || rank >= mesh.NumRanks()) {
    return absl::InvalidArgumentError(StrCat("rank ", rank, " is outside mesh ", mesh.ToString()));
  }
  return BoxAtCoords(layout, mesh, mesh.Coords(rank));
}

}  // namespace ckpt
