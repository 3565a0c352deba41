#include "plan/rule_manifest.h"

#include <algorithm>
#include <array>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "ckpt/version.h"
#include "format/chunk_grid.h"
#include "format/data_file.h"
#include "plan/grid.h"
#include "plan/replica_writers.h"
#include "plan/tiles.h"
#include "util/errors.h"
#include "util/strings.h"

namespace ckpt {
namespace {

// One tensor dimension as the mesh dimensions that shard it cut it: the
// non-empty intervals in order, and what each adds to its holders' rank.
struct DimSplit {
  std::vector<int64_t> cuts;  ///< intervals + 1 bounds
  std::vector<int64_t> rank_part;
};

// Every dimension's split, or nullopt where the layout is not a plain nesting
// of splits (a Shard absent from or repeated in the split order, a dimension
// out of range, boundaries that do not fit, a tensor dimension left with no
// cell): the listed path gives those their answer or their error.
std::optional<std::vector<DimSplit>> SplitsOf(const TensorLayout& layout, const Mesh& mesh,
                                              const std::vector<int64_t>& stride) {
  const Shape& shape = layout.spec.shape;
  const int nd = static_cast<int>(shape.size());
  const int np = static_cast<int>(layout.placements.size());
  if (np > mesh.ndim()) return std::nullopt;
  std::vector<int> order = layout.split_order;
  if (order.empty()) {
    for (int md = 0; md < mesh.ndim(); ++md) order.push_back(md);
  } else {
    std::vector<int> seen(mesh.ndim(), 0);
    for (int md : order) {
      if (md < 0 || md >= mesh.ndim() || ++seen[md] > 1) return std::nullopt;
    }
    for (int md = 0; md < np; ++md) {
      if (layout.placements[md].kind == Placement::Kind::kShard && seen[md] == 0) return std::nullopt;
    }
  }
  // Per tensor dimension: (lo, hi, rank part) of every interval, empty ones
  // included, in the order of the positions they cover.
  std::vector<std::vector<std::array<int64_t, 3>>> iv(nd);
  for (int d = 0; d < nd; ++d) iv[d].push_back({0, shape[d], 0});
  for (int md : order) {
    if (md >= np || layout.placements[md].kind != Placement::Kind::kShard) continue;
    const Placement& p = layout.placements[md];
    if (md == layout.owner_dim || p.dim < 0 || p.dim >= nd) return std::nullopt;
    const int64_t n = mesh.sizes[md];
    std::vector<std::array<int64_t, 3>> next;
    next.reserve(iv[p.dim].size() * static_cast<size_t>(n));
    for (const auto& [lo, hi, part] : iv[p.dim]) {
      const int64_t len = hi - lo;
      const std::vector<int64_t>& b = p.boundaries;
      if (!b.empty() && (static_cast<int64_t>(b.size()) != n + 1 || b.front() != 0 || b.back() != len ||
                         !std::is_sorted(b.begin(), b.end()))) {
        return std::nullopt;
      }
      const int64_t chunk = (len + n - 1) / n;
      for (int64_t idx = 0; idx < n; ++idx) {
        const int64_t a = b.empty() ? std::min(idx * chunk, len) : b[idx];
        const int64_t z = b.empty() ? std::min((idx + 1) * chunk, len) : b[idx + 1];
        next.push_back({lo + a, lo + z, part + idx * stride[md]});
      }
    }
    iv[p.dim] = std::move(next);
  }
  std::vector<DimSplit> out(nd);
  for (int d = 0; d < nd; ++d) {
    DimSplit& s = out[d];
    for (const auto& [lo, hi, part] : iv[d]) {
      if (hi <= lo) continue;
      if (s.cuts.empty()) s.cuts.push_back(lo);
      s.cuts.push_back(hi);
      s.rank_part.push_back(part);
    }
    if (s.rank_part.empty()) return std::nullopt;
  }
  return out;
}

// The last dimension's cuts once every box is cut into its column tiles,
// and where each box's tiles start among them; nullopt when boxes with the
// same columns would be cut differently (ColumnTiles looks at their bytes).
struct ColumnCells {
  std::vector<int64_t> cuts;
  std::vector<size_t> first;  ///< per column interval, plus the end
};

std::optional<ColumnCells> ColumnCellsOf(const TensorLayout& layout, const std::vector<DimSplit>& splits,
                                         int max_tiles) {
  const Shape& shape = layout.spec.shape;
  const int nd = static_cast<int>(shape.size());
  const uint64_t es = DTypeSize(layout.spec.dtype);
  const DimSplit& last = splits[nd - 1];
  // ColumnTiles depends on the rows only through the box's bytes (a
  // threshold) and whether another dimension is cut (the same for every
  // box): the narrowest and the widest rows bound every case.
  Box narrow, wide;
  narrow.offsets.assign(nd, 0);
  wide.offsets.assign(nd, 0);
  for (int d = 0; d + 1 < nd; ++d) {
    int64_t lo = shape[d], hi = 0;
    for (size_t i = 0; i + 1 < splits[d].cuts.size(); ++i) {
      lo = std::min(lo, splits[d].cuts[i + 1] - splits[d].cuts[i]);
      hi = std::max(hi, splits[d].cuts[i + 1] - splits[d].cuts[i]);
    }
    narrow.sizes.push_back(lo);
    wide.sizes.push_back(hi);
  }
  narrow.sizes.push_back(0);
  wide.sizes.push_back(0);
  ColumnCells out;
  out.cuts.push_back(0);
  for (size_t j = 0; j + 1 < last.cuts.size(); ++j) {
    out.first.push_back(out.cuts.size() - 1);
    narrow.offsets[nd - 1] = wide.offsets[nd - 1] = last.cuts[j];
    narrow.sizes[nd - 1] = wide.sizes[nd - 1] = last.cuts[j + 1] - last.cuts[j];
    const std::vector<Box> a = ColumnTiles(narrow, shape, es, max_tiles);
    if (nd >= 2) {
      const std::vector<Box> b = ColumnTiles(wide, shape, es, max_tiles);
      if (a.size() != b.size()) return std::nullopt;
      for (size_t k = 0; k < a.size(); ++k) {
        if (a[k].offsets[nd - 1] != b[k].offsets[nd - 1] || a[k].sizes[nd - 1] != b[k].sizes[nd - 1]) {
          return std::nullopt;
        }
      }
    }
    for (const Box& tile : a) out.cuts.push_back(tile.offsets[nd - 1] + tile.sizes[nd - 1]);
  }
  out.first.push_back(out.cuts.size() - 1);
  return out;
}

// The first dimension's cuts once every box is cut into its row slabs, and
// where each row interval's slabs start among them (as ColumnCells); only
// for layouts that cut the first dimension alone, where RowTiles cuts.
std::optional<ColumnCells> RowCellsOf(const TensorLayout& layout, const std::vector<DimSplit>& splits, int max_tiles) {
  const Shape& shape = layout.spec.shape;
  const int nd = static_cast<int>(shape.size());
  if (nd < 2 || splits[0].cuts.size() <= 2) return std::nullopt;
  for (int d = 1; d < nd; ++d) {
    if (splits[d].cuts.size() != 2) return std::nullopt;
  }
  const uint64_t es = DTypeSize(layout.spec.dtype);
  Box box;
  box.offsets.assign(nd, 0);
  box.sizes.assign(shape.begin(), shape.end());
  ColumnCells out;
  out.cuts.push_back(splits[0].cuts.front());
  bool cut = false;
  for (size_t i = 0; i + 1 < splits[0].cuts.size(); ++i) {
    out.first.push_back(out.cuts.size() - 1);
    box.offsets[0] = splits[0].cuts[i];
    box.sizes[0] = splits[0].cuts[i + 1] - splits[0].cuts[i];
    const std::vector<Box> slabs = RowTiles(box, shape, es, max_tiles);
    cut = cut || slabs.size() > 1;
    for (const Box& slab : slabs) out.cuts.push_back(slab.offsets[0] + slab.sizes[0]);
  }
  out.first.push_back(out.cuts.size() - 1);
  if (!cut) return std::nullopt;
  return out;
}

// Each rank's data file as chunks are appended to it: its next block and
// the bytes of its frames so far.
struct Files {
  Files(int64_t nranks, uint64_t bytes_per_block)
      : block_size(bytes_per_block), next_block(nranks, 0), frame_bytes(nranks, kDataHeaderSize) {}
  // Appends `raw` bytes to `writer`'s file; returns the first block.
  uint64_t Append(int64_t writer, uint64_t raw, uint64_t* blocks) {
    *blocks = BlocksOf(raw, block_size);
    const uint64_t first = next_block[writer];
    next_block[writer] += *blocks;
    frame_bytes[writer] +=
        raw / block_size * FrameLength(block_size) + (raw % block_size ? FrameLength(raw % block_size) : 0);
    return first;
  }

  uint64_t block_size;
  std::vector<uint64_t> next_block;
  std::vector<uint64_t> frame_bytes;
};

// What SplitsOf and ColumnCellsOf depend on: shape, element size,
// placements, split order and which mesh dimension owns the tensor.
std::string GeometryKey(const TensorLayout& layout) {
  std::string key = StrCat(DTypeSize(layout.spec.dtype), "|", layout.owner_dim, "|");
  for (int64_t d : layout.spec.shape) StrAppend(&key, d, ",");
  key += "|";
  for (const Placement& p : layout.placements) {
    StrAppend(&key, static_cast<int>(p.kind), ":", p.dim, ":");
    for (int64_t b : p.boundaries) StrAppend(&key, b, ",");
    key += ";";
  }
  key += "|";
  for (int md : layout.split_order) StrAppend(&key, md, ",");
  return key;
}

}  // namespace

absl::StatusOr<Manifest> SaveManifestByRules(const std::vector<TensorLayout>& layouts, const Mesh& mesh,
                                             uint64_t block_size, int max_tiles, RuleManifestStats* stats) {
  CKPT_RETURN_IF_ERROR(CheckMesh(mesh));
  if (block_size == 0) return absl::InvalidArgumentError("block size 0");
  const int64_t nranks = mesh.NumRanks();
  const std::vector<int64_t> stride = RankStrides(mesh);
  RuleManifestStats local;
  RuleManifestStats& st = stats ? *stats : local;
  st = RuleManifestStats();
  st.bytes_by_rank.assign(nranks, 0);

  Manifest m;
  m.step = 1;
  m.world_size = static_cast<int32_t>(nranks);
  m.library_version = LibraryVersion();
  m.mesh = mesh;
  m.files.resize(nranks);
  for (int64_t r = 0; r < nranks; ++r) m.files[r].block_size = block_size;
  Files files(nranks, block_size);
  std::vector<ManifestTensor> tensors(layouts.size());

  // Pass 1: each tensor's form (grid or listed) and the boxes held by
  // several ranks, whose writers the replica-group rule chooses.
  struct Geometry {
    std::optional<std::vector<DimSplit>> splits;
    std::optional<ColumnCells> columns;
    /// Row slabs, where the save cuts them (its columns are then not cut).
    std::optional<ColumnCells> rows;
  };
  // Layers repeat the same shapes and placements: each geometry is worked
  // out once (the holders' rank parts exclude the owner's coordinate).
  std::map<std::string, std::unique_ptr<Geometry>> geometries;
  struct Form {
    const Geometry* geometry = nullptr;
    uint32_t mask = 0;
    std::vector<int64_t> offsets;
    size_t first_replicated = 0;  ///< its boxes' place in `replicated`
  };
  std::vector<Form> forms(layouts.size());
  const std::vector<int32_t> name_order = NameOrder(layouts);
  std::vector<ReplicatedBox> replicated;
  for (size_t ti = 0; ti < layouts.size(); ++ti) {
    const TensorLayout& layout = layouts[ti];
    Form& f = forms[ti];
    const int nd = static_cast<int>(layout.spec.shape.size());
    const int64_t es = static_cast<int64_t>(DTypeSize(layout.spec.dtype));
    f.mask = ReplicaMask(layout, mesh);
    const bool owned = layout.owner_dim < 0 || (layout.owner_dim < mesh.ndim() && layout.owner_index >= 0 &&
                                                layout.owner_index < mesh.sizes[layout.owner_dim]);
    std::unique_ptr<Geometry>& geometry = geometries[GeometryKey(layout)];
    if (geometry == nullptr) {
      geometry = std::make_unique<Geometry>();
      if (nd > 0) geometry->splits = SplitsOf(layout, mesh, stride);
      if (geometry->splits.has_value()) {
        geometry->columns = ColumnCellsOf(layout, *geometry->splits, max_tiles);
        geometry->rows = RowCellsOf(layout, *geometry->splits, max_tiles);
        // SaveTiles cuts rows only where it cuts no columns.
        if (geometry->rows.has_value() && (!geometry->columns.has_value() ||
                                           geometry->columns->cuts.size() != geometry->splits->back().cuts.size())) {
          geometry->rows.reset();
        }
      }
    }
    f.geometry = owned ? geometry.get() : nullptr;
    f.first_replicated = replicated.size();
    if (f.geometry == nullptr || !f.geometry->columns.has_value()) {
      bool first = true;
      CKPT_RETURN_IF_ERROR(
          ForEachDistinctBox(layout, mesh, [&](Box&& box, int64_t base, const std::vector<int64_t>& offsets) {
            if (first) f.offsets = offsets;
            first = false;
            if (offsets.size() > 1) {
              replicated.push_back(ReplicatedBox{box.Volume() * es, name_order[ti], f.mask, base, &f.offsets, -1});
            }
          }));
      continue;
    }
    f.offsets = ReplicaOffsets(f.mask, mesh);
    if (f.offsets.size() <= 1) continue;
    const int64_t owner_part = layout.owner_dim >= 0 ? layout.owner_index * stride[layout.owner_dim] : 0;
    const std::vector<DimSplit>& splits = *f.geometry->splits;
    std::vector<size_t> at(nd, 0);
    while (true) {
      int64_t base = owner_part, volume = 1;
      for (int d = 0; d < nd; ++d) {
        const DimSplit& ds = splits[d];
        base += ds.rank_part[at[d]];
        volume *= ds.cuts[at[d] + 1] - ds.cuts[at[d]];
      }
      replicated.push_back(ReplicatedBox{volume * es, name_order[ti], f.mask, base, &f.offsets, -1});
      int d = nd - 1;
      for (; d >= 0; --d) {
        if (++at[d] + 1 < splits[d].cuts.size()) break;
        at[d] = 0;
      }
      if (d < 0) break;
    }
  }
  ChooseReplicaWriters(replicated);

  // Pass 2: every tensor's chunks, each appended to its writer's file in
  // tensor order.
  IntRuns::Builder file_of, first_of;  // reused: each keeps its memory from tensor to tensor
  for (size_t ti = 0; ti < layouts.size(); ++ti) {
    const TensorLayout& layout = layouts[ti];
    const Form& f = forms[ti];
    ManifestTensor& t = tensors[ti];
    t.spec = layout.spec;
    const int nd = static_cast<int>(layout.spec.shape.size());
    const uint64_t es = DTypeSize(layout.spec.dtype);
    size_t next_replicated = f.first_replicated;
    auto writer_of = [&](int64_t base, const std::vector<int64_t>& offsets) {
      return offsets.size() > 1 ? replicated[next_replicated++].writer : base + offsets.front();
    };

    if (f.geometry == nullptr || !f.geometry->columns.has_value()) {
      // Box by box, as a leader merging the ranks' reports would.
      CKPT_RETURN_IF_ERROR(
          ForEachDistinctBox(layout, mesh, [&](Box&& box, int64_t base, const std::vector<int64_t>& offsets) {
            const int64_t writer = writer_of(base, offsets);
            st.bytes_by_rank[writer] += box.Volume() * static_cast<int64_t>(es);
            for (Box& tile : SaveTiles(box, layout.spec.shape, es, max_tiles)) {
              uint64_t blocks = 0;
              const uint64_t first = files.Append(writer, static_cast<uint64_t>(tile.Volume()) * es, &blocks);
              t.chunks.push_back(ManifestChunk{static_cast<uint32_t>(writer), first, blocks, std::move(tile)});
            }
          }));
      DescribeTensorByRules(t, m.files);
      st.chunks += static_cast<int64_t>(t.chunks.size());
      st.listed_chunks += t.grid.has_value() ? 0 : static_cast<int64_t>(t.chunks.size());
      if (t.grid.has_value()) {
        t.chunks.clear();
        t.chunks.shrink_to_fit();
        ++st.grid_tensors;
      }
      continue;
    }

    // The grid: boxes in row-major order, each cut into its tiles.
    const std::vector<DimSplit>& splits = *f.geometry->splits;
    const ColumnCells& columns = *f.geometry->columns;
    const int64_t owner_part = layout.owner_dim >= 0 ? layout.owner_index * stride[layout.owner_dim] : 0;
    // With row slabs every other dimension is one interval, so a box's
    // slabs follow each other in the grid's row-major order too.
    const std::optional<ColumnCells>& slabs = f.geometry->rows;
    ChunkGrid g;
    for (int d = 0; d + 1 < nd; ++d) g.cuts.push_back(d == 0 && slabs ? slabs->cuts : splits[d].cuts);
    g.cuts.push_back(columns.cuts);
    std::vector<size_t> at(nd, 0);
    while (true) {
      int64_t base = owner_part, rows = 1;
      for (int d = 0; d < nd; ++d) base += splits[d].rank_part[at[d]];
      for (int d = 1; d + 1 < nd; ++d) rows *= splits[d].cuts[at[d] + 1] - splits[d].cuts[at[d]];
      const std::vector<int64_t>& last = splits[nd - 1].cuts;
      const int64_t writer = writer_of(base, f.offsets);
      const int64_t height = nd > 1 ? splits[0].cuts[at[0] + 1] - splits[0].cuts[at[0]] : 1;
      st.bytes_by_rank[writer] += height * rows * (last[at[nd - 1] + 1] - last[at[nd - 1]]) * static_cast<int64_t>(es);
      const size_t s0 = slabs ? slabs->first[at[0]] : 0, s1 = slabs ? slabs->first[at[0] + 1] : 1;
      for (size_t r = s0; r < s1; ++r) {
        const int64_t slab_rows = slabs ? slabs->cuts[r + 1] - slabs->cuts[r] : height;
        for (size_t c = columns.first[at[nd - 1]]; c < columns.first[at[nd - 1] + 1]; ++c) {
          const uint64_t raw = static_cast<uint64_t>(slab_rows * rows * (columns.cuts[c + 1] - columns.cuts[c])) * es;
          uint64_t blocks = 0;
          file_of.Add(static_cast<uint64_t>(writer));
          first_of.Add(files.Append(writer, raw, &blocks));
          ++st.chunks;
        }
      }
      int d = nd - 1;
      for (; d >= 0; --d) {
        if (++at[d] + 1 < splits[d].cuts.size()) break;
        at[d] = 0;
      }
      if (d < 0) break;
    }
    g.files = file_of.Finish();
    g.first_blocks = first_of.Finish();
    t.grid = std::move(g);
    ++st.grid_tensors;
  }

  for (int64_t r = 0; r < nranks; ++r) {
    ManifestFile& f = m.files[r];
    f.name = DataFileName(static_cast<int>(r));
    f.rank = static_cast<int32_t>(r);
    f.block_count = files.next_block[r];
    f.index_offset = files.frame_bytes[r];
    f.index_len = kIndexHeaderSize + files.next_block[r] * kIndexEntrySize;
    f.size = f.index_offset + f.index_len + kFooterSize;
  }
  std::sort(tensors.begin(), tensors.end(),
            [](const ManifestTensor& a, const ManifestTensor& b) { return a.spec.fqn < b.spec.fqn; });
  m.tensors = std::move(tensors);
  return m;
}

}  // namespace ckpt
