#include "plan/box_reads.h"

#include "plan/block_ranges.h"
#include "util/strings.h"

namespace ckpt {

absl::StatusOr<const ManifestTensor*> FindSavedTensor(const Manifest& m, const TensorSpec& want) {
  const ManifestTensor* t = m.FindTensor(want.fqn);
  if (t == nullptr) return absl::NotFoundError(StrCat("tensor '", want.fqn, "' is not in step ", m.step));
  if (!(t->spec == want)) {
    return absl::InvalidArgumentError(StrCat(
        "tensor '", want.fqn, "': step ", m.step, " has ", DTypeName(t->spec.dtype), " ", ShapeToString(t->spec.shape),
        ", the target asks for ", DTypeName(want.dtype), " ", ShapeToString(want.shape)));
  }
  return t;
}

ChunkFinder::ChunkFinder(const ManifestTensor& t, const std::vector<ManifestFile>& files) : t_(t), files_(files) {}

void ChunkFinder::ForEachMeeting(const Box& box, const std::function<void(const ManifestChunk&)>& fn) {
  if (t_.GridOnly()) {
    t_.grid->ForEachCellMeeting(
        box, [&](uint64_t cell) { fn(GridChunk(t_, cell, files_[t_.grid->files.At(cell)].block_size)); });
    return;
  }
  if (index_ == nullptr) {
    boxes_.reserve(t_.chunks.size());
    for (const ManifestChunk& c : t_.chunks) boxes_.push_back(c.box);
    index_ = std::make_unique<ChunkIndex>(boxes_);
  }
  for (int64_t ci : index_->Query(box)) fn(t_.chunks[static_cast<size_t>(ci)]);
}

void ChunkFinder::ForEachBoxMeeting(const Box& box, const std::function<void(const Box&, uint32_t)>& fn) {
  if (t_.GridOnly()) {
    t_.grid->ForEachCellMeeting(
        box, [&](uint64_t cell) { fn(t_.grid->CellBox(cell), static_cast<uint32_t>(t_.grid->files.At(cell))); });
    return;
  }
  ForEachMeeting(box, [&](const ManifestChunk& c) { fn(c.box, c.file); });
}

void BlocksToRead(const Box& chunk, const Box& box, uint64_t elem_size, uint64_t block_size,
                  std::vector<std::pair<uint64_t, uint64_t>>* ranges) {
  NeededBlocks(chunk, Intersect(chunk, box), elem_size, block_size, ranges);
}

}  // namespace ckpt
