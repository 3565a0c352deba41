// The manifest's version 4 (docs/format.md): fixed-size file records, then
// tensor records whose chunks are listed or given as a grid.
#include <algorithm>
#include <bit>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "ckpt/state.h"
#include "format/data_file.h"
#include "format/manifest_codec.h"
#include "format/root_files.h"
#include "util/bytes.h"
#include "util/errors.h"
#include "util/hash.h"
#include "util/strings.h"

namespace ckpt::manifest_codec {

namespace {

std::string StoredFileName(const ManifestFile& f) { return f.name == DataFileName(f.rank) ? std::string() : f.name; }

void WriteFileRecord(std::string& out, const ManifestFile& f, uint64_t name_offset, std::string_view stored_name,
                     Xxh3Stream& hash) {
  char rec[kFileRecordSize];
  StoreLE32(rec + 0, static_cast<uint32_t>(f.rank));
  StoreLE32(rec + 4, static_cast<uint32_t>(stored_name.size()));
  StoreLE64(rec + 8, name_offset);
  StoreLE64(rec + 16, f.size);
  StoreLE64(rec + 24, f.index_offset);
  StoreLE64(rec + 32, f.index_len);
  StoreLE64(rec + 40, f.index_hash);
  StoreLE64(rec + 48, f.block_count);
  StoreLE64(rec + 56, f.block_size);
  StoreLE64(rec + 64, f.save_id);
  StoreLE64(rec + 72, f.container_hash);
  StoreLE64(rec + 80, 0);
  hash.Reset();
  hash.Update(rec, kFileRecordHashed);
  hash.Update(stored_name.data(), stored_name.size());
  StoreLE64(rec + 88, hash.Digest());
  out.append(rec, kFileRecordSize);
}

// True when `t.grid` describes `t.chunks` exactly (a caller may have
// changed the chunks after the grid was found).
bool GridMatches(const ManifestTensor& t, const std::vector<ManifestFile>& files) {
  const ChunkGrid& g = *t.grid;
  if (g.cuts.size() != t.spec.shape.size() || g.NumCells() != t.chunks.size() || g.files.size() != t.chunks.size() ||
      g.first_blocks.size() != t.chunks.size()) {
    return false;
  }
  for (size_t d = 0; d < g.cuts.size(); ++d) {
    if (g.cuts[d].size() < 2 || g.cuts[d].front() != 0 || g.cuts[d].back() != t.spec.shape[d]) return false;
  }
  const uint64_t es = DTypeSize(t.spec.dtype);
  size_t i = 0;
  bool ok = g.files.ForEach([&](uint64_t f) {
    const ManifestChunk& c = t.chunks[i];
    if (c.file != f || f >= files.size() || c.base != 0 || !(c.box == g.CellBox(i)) ||
        c.block_count != BlocksOf(static_cast<uint64_t>(c.box.Volume()) * es, files[f].block_size)) {
      return false;
    }
    ++i;
    return true;
  });
  i = 0;
  return ok && g.first_blocks.ForEach([&](uint64_t b) { return t.chunks[i++].first_block == b; });
}

// The widths of a grid's cells along one dimension, from its cuts.
std::vector<uint64_t> CellWidths(const std::vector<int64_t>& cuts) {
  std::vector<uint64_t> widths(cuts.size() - 1);
  for (size_t i = 0; i + 1 < cuts.size(); ++i) widths[i] = static_cast<uint64_t>(cuts[i + 1] - cuts[i]);
  return widths;
}

void WriteTensorRecord(ByteWriter& w, const ManifestTensor& t, const std::vector<ManifestFile>& files,
                       uint32_t version) {
  const bool groups = version >= 5;  // runs of runs (chunk_grid.h)
  w.U8(static_cast<uint8_t>(t.spec.dtype));
  w.Var(t.spec.shape.size());
  for (int64_t d : t.spec.shape) w.Var(static_cast<uint64_t>(d));
  if (!t.grid.has_value() || (!t.GridOnly() && !GridMatches(t, files))) {
    w.U8(kChunksListed);
    WriteExplicitChunks(w, t, version);
    return;
  }
  w.U8(kChunksGrid);
  for (const std::vector<int64_t>& cuts : t.grid->cuts) {
    const std::vector<uint64_t> widths = CellWidths(cuts);
    w.Var(widths.size());
    IntRuns::Of(widths).Encode(w, groups);
  }
  t.grid->files.Encode(w, groups);
  t.grid->first_blocks.Encode(w, groups);
}

}  // namespace

std::string EncodeV4(const Manifest& m) {
  ByteWriter head;
  WritePreamble(head, m);
  WriteBlobs(head, m);
  WriteTail(head, m);

  std::string files, names;
  files.reserve(m.files.size() * kFileRecordSize);
  Xxh3Stream hash;
  for (const ManifestFile& f : m.files) {
    const std::string stored = StoredFileName(f);
    WriteFileRecord(files, f, names.size(), stored, hash);
    names += stored;
  }
  ByteWriter dir;
  std::string records;
  for (const ManifestTensor& t : m.tensors) {
    ByteWriter rec;
    WriteTensorRecord(rec, t, m.files, m.format_version);
    dir.Str(t.spec.fqn);
    dir.Var(rec.size());
    dir.U64(Xxh3(rec.str()));
    records += rec.str();
  }
  head.Var(m.files.size());
  head.Var(names.size());
  head.Var(m.tensors.size());
  head.Var(dir.size());
  head.U64(Xxh3(dir.str()));
  head.Var(records.size());
  head.U64(Xxh3(head.str()));
  const uint64_t head_len = head.size();
  std::string body = head.Take();
  body += files;
  body += names;
  body += dir.str();
  body += records;
  return WithHeader(m.format_version, body, head_len);
}

namespace {

// Checks every cell of `t.grid` (its file exists and has its blocks) and,
// when `expand`, lists the cells in `t.chunks`.
void CheckGrid(ByteReader& r, const std::vector<ManifestFile>& files, bool expand, ManifestTensor& t) {
  const ChunkGrid& g = *t.grid;
  const uint64_t n = g.NumCells();
  const uint64_t es = DTypeSize(t.spec.dtype);
  const size_t nd = g.cuts.size();
  if (expand) t.chunks.resize(n);
  // Cells in row-major order: the coordinates and the volume of each.
  std::vector<size_t> at(nd, 0);
  IntRuns::Reader file_of(g.files), first_of(g.first_blocks);
  for (uint64_t i = 0; i < n; ++i) {
    uint64_t f = 0, b = 0;
    if (!file_of.Next(&f)) {
      r.Fail(StrCat("tensor '", t.spec.fqn, "': grid file numbers leave the range of integers"));
      return;
    }
    if (!first_of.Next(&b)) {
      r.Fail(StrCat("tensor '", t.spec.fqn, "': grid block numbers leave the range of integers"));
      return;
    }
    if (f >= files.size()) {
      r.Fail(StrCat("tensor '", t.spec.fqn, "' grid cell ", i, " names file ", f, " of ", files.size()));
      return;
    }
    const ManifestFile& file = files[f];
    if (file.block_size == 0) {
      r.Fail(StrCat("tensor '", t.spec.fqn, "' grid cell ", i, ": file ", file.name, " has block size 0"));
      return;
    }
    uint64_t volume = 1;
    for (size_t d = 0; d < nd; ++d) volume *= static_cast<uint64_t>(g.cuts[d][at[d] + 1] - g.cuts[d][at[d]]);
    const uint64_t blocks = BlocksOf(volume * es, file.block_size);
    if (b + blocks < b || b + blocks > file.block_count) {
      r.Fail(
          StrCat("tensor '", t.spec.fqn, "' chunk ", g.CellBox(i).ToString(), " references blocks beyond ", file.name));
      return;
    }
    if (expand) t.chunks[i] = ManifestChunk{static_cast<uint32_t>(f), b, blocks, g.CellBox(i)};
    for (size_t d = nd; d-- > 0;) {
      if (++at[d] + 1 < g.cuts[d].size()) break;
      at[d] = 0;
    }
  }
}

}  // namespace

// Reads one tensor record (spec after the name, then its chunks): a grid is
// not expanded; listed chunks are checked against `nfiles` and the shape,
// their blocks against `files` when given.
void ReadTensorRecord(ByteReader& r, const std::vector<ManifestFile>* files, uint64_t nfiles, uint32_t version,
                      uint64_t* chunk_budget, ManifestTensor& t) {
  const bool groups = version >= 5;
  uint8_t dt = r.U8();
  if (r.ok() && !IsValidDType(dt)) r.Fail(StrCat("tensor '", t.spec.fqn, "': unknown dtype ", dt));
  t.spec.dtype = static_cast<DType>(dt);
  const uint64_t nd = r.Count(kMaxTensorRank, "tensor rank");
  for (uint64_t d = 0; d < nd && r.ok(); ++d) {
    t.spec.shape.push_back(static_cast<int64_t>(r.Count(uint64_t{1} << 48, "dimension")));
  }
  if (r.ok()) {
    if (absl::Status s = CheckTensorSpec(t.spec); !s.ok()) r.Fail(std::string(s.message()));
  }
  const uint8_t mode = r.U8();
  if (!r.ok()) return;
  if (mode == kChunksListed) {
    const uint64_t nchunks = r.Count(*chunk_budget, "chunk count");
    *chunk_budget -= nchunks;
    ReadExplicitChunks(r, files, nfiles, nchunks, version, t);
    return;
  }
  if (mode != kChunksGrid) {
    r.Fail(StrCat("tensor '", t.spec.fqn, "': unknown chunk coding ", mode));
    return;
  }
  if (nd == 0) {
    r.Fail(StrCat("tensor '", t.spec.fqn, "': a scalar has no grid"));
    return;
  }
  ChunkGrid g;
  uint64_t cells = 1;
  for (uint64_t d = 0; d < nd && r.ok(); ++d) {
    const uint64_t k = r.Count(static_cast<uint64_t>(t.spec.shape[d]), "grid cells");
    if (!r.ok()) return;
    if (k == 0 || cells > *chunk_budget / k) {
      r.Fail(StrCat("tensor '", t.spec.fqn, "': a grid of ", k, " cells along dimension ", d,
                    k == 0 ? "" : StrCat(" passes the limit of ", *chunk_budget, " chunks")));
      return;
    }
    cells *= k;
    IntRuns widths = IntRuns::Decode(r, k, "grid widths", groups);
    if (!r.ok()) return;
    std::vector<int64_t> cuts{0};
    cuts.reserve(k + 1);
    bool ok = widths.ForEach([&](uint64_t wd) {
      if (wd == 0 || wd > static_cast<uint64_t>(t.spec.shape[d]) - static_cast<uint64_t>(cuts.back())) return false;
      cuts.push_back(cuts.back() + static_cast<int64_t>(wd));
      return true;
    });
    if (!ok || cuts.back() != t.spec.shape[d]) {
      r.Fail(StrCat("tensor '", t.spec.fqn, "': grid cells along dimension ", d, " do not tile its extent ",
                    t.spec.shape[d]));
      return;
    }
    if (groups) {
      // The widths are written again from the cuts: only the writer's own
      // grouping of them has one encoding.
      if (!(IntRuns::Of(CellWidths(cuts)) == widths)) {
        r.Fail(StrCat("tensor '", t.spec.fqn, "': grid widths along dimension ", d,
                      " are not grouped as a writer groups them (not canonical)"));
        return;
      }
    }
    g.cuts.push_back(std::move(cuts));
  }
  g.files = IntRuns::Decode(r, cells, "grid files", groups);
  g.first_blocks = IntRuns::Decode(r, cells, "grid first blocks", groups);
  if (!r.ok()) return;
  *chunk_budget -= cells;
  t.grid = std::move(g);
}

absl::StatusOr<Manifest> DecodeV4(std::string_view bytes, std::string_view what, uint64_t max_chunks,
                                  GridChunks grids) {
  ManifestSections sec;
  CKPT_ASSIGN_OR_RETURN(Manifest m, DecodeManifestHead(bytes, bytes.size(), what, &sec));
  m.files.reserve(sec.file_count);
  Xxh3Stream hash;
  uint64_t next_name = 0;
  for (uint64_t i = 0; i < sec.file_count; ++i) {
    std::string_view rec = bytes.substr(sec.FileRecordAt(i), kManifestFileRecordSize);
    const FileRecordName name = PeekFileRecordName(rec, sec);
    if (name.at != sec.names_at + next_name) {
      return absl::DataLossError(StrCat(what, " at byte offset ", sec.FileRecordAt(i) + 8, ": file record ", i,
                                        " names bytes out of order in the names section"));
    }
    CKPT_ASSIGN_OR_RETURN(ManifestFile f, DecodeFileRecord(rec, bytes.substr(name.at, name.len), sec, i, what, &hash));
    next_name += name.len;
    m.files.push_back(std::move(f));
  }
  if (next_name != sec.names_len) {
    return absl::DataLossError(StrCat(what, " at byte offset ", sec.names_at + next_name, ": ",
                                      sec.names_len - next_name, " bytes of the names section belong to no file"));
  }
  for (const ManifestBlob& b : m.blobs) {
    if (b.file >= m.files.size() || b.first_block + b.block_count < b.first_block ||
        b.first_block + b.block_count > m.files[b.file].block_count) {
      return absl::DataLossError(StrCat(what, ": blob '", b.name, "' references a missing file or blocks"));
    }
  }
  CKPT_ASSIGN_OR_RETURN(std::vector<TensorEntry> dir,
                        DecodeTensorDirectory(bytes.substr(sec.directory_at, sec.directory_len), sec, what));
  uint64_t budget = max_chunks;
  m.tensors.reserve(dir.size());
  for (TensorEntry& e : dir) {
    std::string_view rec = bytes.substr(e.at, e.len);
    ManifestTensor t;
    t.spec.fqn = std::move(e.fqn);
    e.fqn = t.spec.fqn;
    CKPT_RETURN_IF_ERROR(DecodeTensorRecord(rec, e, &m.files, sec.file_count, m.format_version, &budget, what, &t));
    CKPT_RETURN_IF_ERROR(CheckChunkBases(m, t, what));
    if (t.grid.has_value()) {
      ByteReader r(rec, std::string(what), e.at);
      CheckGrid(r, m.files, grids == GridChunks::kExpandGrids, t);
      if (!r.ok()) return r.status();
    }
    m.tensors.push_back(std::move(t));
  }
  return m;
}

}  // namespace ckpt::manifest_codec
