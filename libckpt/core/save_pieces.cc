#include "core/save_pieces.h"

#include <map>
#include <string>
#include <utility>

#include "ckpt/limits.h"
#include "ckpt/version.h"
#include "format/root_files.h"
#include "layout/box_copy.h"
#include "plan/tiles.h"
#include "util/clock.h"
#include "util/strings.h"

namespace ckpt {

SavePieces BuildSavePieces(const State& state, const std::vector<bool>& writes, int max_column_tiles, int rank) {
  SavePieces out;
  for (size_t si = 0; si < state.shards().size(); ++si) {
    const Shard& s = state.shards()[si];
    if (s.box.Empty() || !writes[si]) continue;
    std::vector<Shard> cut = TileShard(s, max_column_tiles);
    // Column tiles are staged together in passes over the shard's rows; row
    // slabs are runs of its rows, each staged as a shard of its own.
    const int nd = s.box.ndim();
    const bool columns = cut.size() > 1 && cut.front().box.sizes[nd - 1] != s.box.sizes[nd - 1];
    for (Shard& t : cut) {
      out.tiles.push_back(std::move(t));
      out.parents.push_back(columns ? &s : nullptr);
    }
  }
  for (size_t ti = 0; ti < out.tiles.size(); ++ti) {
    const Shard& t = out.tiles[ti];
    SavePiece p;
    p.shard = &t;
    p.parent = out.parents[ti];
    p.dtype = t.spec.dtype;
    p.bytes = static_cast<uint64_t>(t.PackedBytes());
    out.pieces.push_back(p);
  }
  for (const Blob& b : state.blobs()) {
    if (b.out != nullptr && b.data == nullptr) continue;  // a load target
    SavePiece p;
    p.blob = static_cast<const std::byte*>(b.data);
    p.blob_name = b.name;
    p.blob_rank = b.scope == BlobScope::kGlobal ? -1 : rank;
    p.dtype = DType::kU8;
    p.bytes = b.size;
    out.pieces.push_back(p);
    out.blobs.push_back(&b);
  }
  return out;
}

void FillReport(const SavePieces& pieces, const State& state, int rank, Manifest* report,
                const std::vector<std::optional<ManifestBase>>* bases) {
  std::map<std::string, ManifestTensor> tensors;
  size_t pi = 0;
  for (const Shard& t : pieces.tiles) {
    const size_t tile = pi;
    const SavePiece& p = pieces.pieces[pi++];
    ManifestTensor& mt = tensors[t.spec.fqn];
    mt.spec = t.spec;
    ManifestChunk c;
    c.file = 0;
    c.first_block = p.first_block;
    c.block_count = p.block_count;
    c.box = t.box;
    if (bases != nullptr && tile < bases->size() && (*bases)[tile].has_value())
      c.base = report->AddBase(*(*bases)[tile]);
    mt.chunks.push_back(std::move(c));
  }
  for (const Shard& s : state.shards()) {
    if (s.box.Empty() && !tensors.count(s.spec.fqn) && s.spec.NumElements() == 0) {
      tensors[s.spec.fqn].spec = s.spec;
    }
  }
  for (auto& [fqn, t] : tensors) report->tensors.push_back(std::move(t));
  for (const Blob* b : pieces.blobs) {
    const SavePiece& p = pieces.pieces[pi++];
    ManifestBlob mb;
    mb.name = b->name;
    mb.rank = b->scope == BlobScope::kGlobal ? -1 : rank;
    mb.size = b->size;
    mb.first_block = p.first_block;
    mb.block_count = p.block_count;
    report->blobs.push_back(std::move(mb));
  }
}

absl::Status CheckSaveRequest(int64_t step, const SaveOptions& options) {
  if (step < 0) return absl::InvalidArgumentError(StrCat("step ", step, " is negative"));
  for (const auto& [key, value] : options.metadata) {
    if (key.size() > kMaxMetadataBytes || value.size() > kMaxMetadataBytes) {
      return absl::InvalidArgumentError(StrCat("metadata '", key.substr(0, 64), "': key and value are limited to ",
                                               kMaxMetadataBytes, " bytes each (", key.size(), " and ", value.size(),
                                               " given)"));
    }
  }
  return absl::OkStatus();
}

Manifest NewRankReport(int64_t step, int world_size, Codec codec, const std::optional<Mesh>& mesh,
                       const SaveOptions& options) {
  Manifest report;
  report.kind = Manifest::Kind::kRankReport;
  report.step = step;
  report.world_size = world_size;
  report.created_unix_ns = UnixNanos();
  report.library_version = LibraryVersion();
  report.codec = codec;
  report.mesh = mesh;
  report.metadata = options.metadata;
  return report;
}

void CompleteReport(const SaveJob& j, double write_s, Manifest* report) {
  report->files = {DataFileEntry(j)};
  report->write_s = write_s;
  report->bytes_logical = j.bytes_logical;
  report->bytes_stored = j.bytes_stored;
}

ManifestFile DataFileEntry(const SaveJob& j) {
  ManifestFile f;
  const size_t slash = j.data_path.rfind('/');
  f.name = slash == std::string::npos ? j.data_path : j.data_path.substr(slash + 1);
  f.rank = j.rank;
  f.size = j.file_size;
  f.index_offset = j.index_offset;
  f.index_len = j.index_len;
  f.index_hash = j.index_hash;
  f.block_count = j.index.size();
  f.block_size = j.block_size;
  f.save_id = j.save_id;
  f.container_hash = j.container_hash;
  return f;
}

std::vector<ReplicaHash> HashReplicas(const State& state, const std::vector<bool>& writes) {
  std::vector<ReplicaHash> out;
  for (size_t si = 0; si < state.shards().size(); ++si) {
    const Shard& s = state.shards()[si];
    if (s.box.Empty()) continue;
    out.push_back(ReplicaHash{StrCat(s.spec.fqn, s.box.ToString()), HashPacked(s), writes[si]});
  }
  return out;
}

}  // namespace ckpt
