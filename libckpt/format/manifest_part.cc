#include "format/manifest_part.h"

#include <algorithm>
#include <map>

#include "util/errors.h"
#include "util/hash.h"
#include "util/strings.h"

namespace ckpt {
namespace {

// Reads that a gap of fewer bytes separates are made as one.
constexpr uint64_t kMergeGap = 4096;
// The first read: the header, the head and, for most steps, the directory.
constexpr uint64_t kFirstRead = 64 << 10;

class Reader {
 public:
  Reader(const ManifestRangeReader& read, uint64_t size, std::string_view what, ManifestPartStats* stats)
      : read_(read), size_(size), what_(what), stats_(stats) {}

  absl::StatusOr<std::string> Get(uint64_t offset, uint64_t len) {
    if (offset > size_ || len > size_ - offset) {
      return absl::DataLossError(StrCat(what_, ": a read of ", len, " bytes at byte offset ", offset,
                                        " passes the end of the ", size_, "-byte manifest"));
    }
    if (offset + len <= prefix_.size()) return prefix_.substr(offset, len);
    CKPT_ASSIGN_OR_RETURN(std::string bytes, read_(offset, len));
    stats_->bytes_read += len;
    ++stats_->reads;
    if (bytes.size() != len) {
      return absl::DataLossError(StrCat(what_, ": truncated: ", bytes.size(), " of ", len, " bytes at byte offset ",
                                        offset, " could be read"));
    }
    return bytes;
  }
  std::string& prefix() { return prefix_; }

 private:
  const ManifestRangeReader& read_;
  uint64_t size_;
  std::string_view what_;
  ManifestPartStats* stats_;
  std::string prefix_;  // bytes [0, prefix_.size()) already read
};

// Reads the byte ranges [at, at + len) of `items` (sorted by position) in as
// few reads as gaps allow, and hands each item its bytes.
template <typename T, typename At, typename Len, typename Fn>
absl::Status ReadMerged(Reader& r, const std::vector<T>& items, At at, Len len, Fn fn) {
  size_t i = 0;
  while (i < items.size()) {
    size_t j = i + 1;
    uint64_t end = at(items[i]) + len(items[i]);
    while (j < items.size() && at(items[j]) >= end && at(items[j]) - end <= kMergeGap) {
      end = at(items[j]) + len(items[j]);
      ++j;
    }
    const uint64_t begin = at(items[i]);
    CKPT_ASSIGN_OR_RETURN(std::string bytes, r.Get(begin, end - begin));
    for (size_t k = i; k < j; ++k) {
      CKPT_RETURN_IF_ERROR(fn(items[k], std::string_view(bytes).substr(at(items[k]) - begin, len(items[k]))));
    }
    i = j;
  }
  return absl::OkStatus();
}

}  // namespace

ManifestRangeReader FileRangeReader(ReadableFile& file) {
  return [&file](uint64_t offset, uint64_t len) -> absl::StatusOr<std::string> {
    std::string out(len, '\0');
    CKPT_RETURN_IF_ERROR(
        file.ReadAt(offset, absl::Span<std::byte>(reinterpret_cast<std::byte*>(out.data()), out.size())));
    return out;
  };
}

absl::StatusOr<Manifest> ReadManifestPart(const ManifestRangeReader& read, uint64_t size, const ManifestWants& wants,
                                          std::string_view what, ManifestPartStats* stats) {
  ManifestPartStats local;
  Reader r(read, size, what, stats != nullptr ? stats : &local);
  if (size < kManifestHeaderSize) {
    return absl::DataLossError(
        StrCat(what, ": truncated: ", size, " bytes, a manifest header alone is ", kManifestHeaderSize));
  }
  CKPT_ASSIGN_OR_RETURN(r.prefix(), r.Get(0, std::min(size, kFirstRead)));
  CKPT_ASSIGN_OR_RETURN(const uint64_t head_end, ManifestHeadBytes(r.prefix(), what));
  if (head_end > r.prefix().size()) {
    CKPT_ASSIGN_OR_RETURN(std::string more, r.Get(r.prefix().size(), head_end - r.prefix().size()));
    r.prefix() += more;
  }
  ManifestSections sec;
  CKPT_ASSIGN_OR_RETURN(Manifest head, DecodeManifestHead(r.prefix(), size, what, &sec));
  CKPT_ASSIGN_OR_RETURN(std::string dir_bytes, r.Get(sec.directory_at, sec.directory_len));
  CKPT_ASSIGN_OR_RETURN(std::vector<TensorEntry> dir, DecodeTensorDirectory(dir_bytes, sec, what));

  // Wanted tensors in name order, which is also the order of their records.
  std::map<std::string, std::vector<const Box*>> boxes;
  for (const auto& [fqn, box] : wants.boxes) {
    auto& list = boxes[fqn];
    if (!box.Empty()) list.push_back(&box);
  }
  std::vector<const TensorEntry*> entries;
  for (const auto& [fqn, list] : boxes) {
    auto it = std::lower_bound(dir.begin(), dir.end(), fqn,
                               [](const TensorEntry& e, const std::string& f) { return e.fqn < f; });
    if (it != dir.end() && it->fqn == fqn) entries.push_back(&*it);
  }
  std::vector<ManifestTensor> tensors(entries.size());
  std::vector<std::vector<uint64_t>> hits(entries.size());
  uint64_t budget = kMaxManifestChunks;
  size_t next = 0;
  CKPT_RETURN_IF_ERROR(ReadMerged(
      r, entries, [](const TensorEntry* e) { return e->at; }, [](const TensorEntry* e) { return e->len; },
      [&](const TensorEntry* e, std::string_view rec) -> absl::Status {
        const size_t k = next++;
        ManifestTensor& t = tensors[k];
        CKPT_RETURN_IF_ERROR(
            DecodeTensorRecord(rec, *e, nullptr, sec.file_count, head.format_version, &budget, what, &t));
        CKPT_RETURN_IF_ERROR(CheckChunkBases(head, t, what));
        std::vector<uint64_t>& h = hits[k];
        for (const Box* b : boxes[e->fqn]) {
          if (b->ndim() != static_cast<int>(t.spec.shape.size())) continue;  // the loader reports it
          if (t.grid.has_value()) {
            t.grid->ForEachCellMeeting(*b, [&](uint64_t cell) { h.push_back(cell); });
          } else {
            for (size_t c = 0; c < t.chunks.size(); ++c) {
              if (!Intersect(t.chunks[c].box, *b).Empty()) h.push_back(c);
            }
          }
        }
        std::sort(h.begin(), h.end());
        h.erase(std::unique(h.begin(), h.end()), h.end());
        return absl::OkStatus();
      }));

  // The file records those chunks and the wanted blobs name.
  auto file_of = [&](size_t k, uint64_t c) -> uint64_t {
    return tensors[k].grid.has_value() ? tensors[k].grid->files.At(c) : tensors[k].chunks[c].file;
  };
  std::vector<const ManifestBlob*> blobs;
  for (const auto& [name, rank] : wants.blobs) {
    for (const ManifestBlob& b : head.blobs) {
      if (b.name == name && b.rank == rank) blobs.push_back(&b);
    }
  }
  std::vector<uint64_t> file_ids;
  for (size_t k = 0; k < tensors.size(); ++k) {
    for (uint64_t c : hits[k]) file_ids.push_back(file_of(k, c));
  }
  for (const ManifestBlob* b : blobs) file_ids.push_back(b->file);
  std::sort(file_ids.begin(), file_ids.end());
  file_ids.erase(std::unique(file_ids.begin(), file_ids.end()), file_ids.end());
  for (uint64_t f : file_ids) {
    if (f >= sec.file_count) {
      return absl::DataLossError(StrCat(what, ": a chunk or blob names file ", f, " of ", sec.file_count));
    }
  }
  std::map<uint64_t, std::string> records;
  CKPT_RETURN_IF_ERROR(ReadMerged(
      r, file_ids, [&](uint64_t f) { return sec.FileRecordAt(f); },
      [](uint64_t) { return uint64_t{kManifestFileRecordSize}; },
      [&](uint64_t f, std::string_view rec) -> absl::Status {
        records[f] = std::string(rec);
        return absl::OkStatus();
      }));
  std::vector<std::pair<uint64_t, FileRecordName>> named;
  for (const auto& [f, rec] : records) {
    const FileRecordName n = PeekFileRecordName(rec, sec);
    if (n.len > 0 || n.at > sec.names_at + sec.names_len) named.push_back({f, n});
  }
  std::map<uint64_t, std::string> names;
  for (const auto& [f, n] : named) {
    if (n.at > sec.names_at + sec.names_len) {
      return absl::DataLossError(StrCat(what, " at byte offset ", sec.FileRecordAt(f) + 4, ": file record ", f,
                                        " names bytes outside the names section"));
    }
  }
  CKPT_RETURN_IF_ERROR(ReadMerged(
      r, named, [](const auto& p) { return p.second.at; }, [](const auto& p) { return uint64_t{p.second.len}; },
      [&](const auto& p, std::string_view name) -> absl::Status {
        names[p.first] = std::string(name);
        return absl::OkStatus();
      }));
  std::map<uint64_t, ManifestFile> files;
  Xxh3Stream hash;
  for (const auto& [f, rec] : records) {
    auto it = names.find(f);
    CKPT_ASSIGN_OR_RETURN(
        files[f], DecodeFileRecord(rec, it == names.end() ? std::string_view() : it->second, sec, f, what, &hash));
  }

  // The result, in RestrictManifest's order: files numbered as the tensors
  // (by name) and then the blobs first name them.
  Manifest out = std::move(head);
  out.blobs.clear();
  std::map<uint64_t, uint32_t> file_map;
  auto file_index = [&](uint64_t f) {
    auto [it, added] = file_map.try_emplace(f, static_cast<uint32_t>(out.files.size()));
    if (added) out.files.push_back(files[f]);
    return it->second;
  };
  for (size_t k = 0; k < tensors.size(); ++k) {
    ManifestTensor& t = tensors[k];
    ManifestTensor rt;
    rt.spec = t.spec;
    if (boxes[t.spec.fqn].empty()) {
      out.tensors.push_back(std::move(rt));
      continue;
    }
    for (uint64_t c : hits[k]) {
      const uint64_t f = file_of(k, c);
      const ManifestFile& mf = files[f];
      ManifestChunk ch;
      if (t.grid.has_value()) {
        if (mf.block_size == 0) {
          return absl::DataLossError(
              StrCat(what, ": tensor '", t.spec.fqn, "' grid cell ", c, ": file ", mf.name, " has block size 0"));
        }
        ch = GridChunk(t, c, mf.block_size);
      } else {
        ch = t.chunks[c];
      }
      if (ch.first_block + ch.block_count < ch.first_block || ch.first_block + ch.block_count > mf.block_count) {
        return absl::DataLossError(StrCat(what, ": tensor '", t.spec.fqn, "' chunk ", ch.box.ToString(),
                                          " references blocks beyond ", mf.name));
      }
      ch.file = file_index(f);
      rt.chunks.push_back(std::move(ch));
    }
    out.tensors.push_back(std::move(rt));
  }
  for (const ManifestBlob* b : blobs) {
    const ManifestFile& mf = files[b->file];
    if (b->first_block + b->block_count < b->first_block || b->first_block + b->block_count > mf.block_count) {
      return absl::DataLossError(StrCat(what, ": blob '", b->name, "' references blocks beyond ", mf.name));
    }
    ManifestBlob copy = *b;
    copy.file = file_index(b->file);
    out.blobs.push_back(std::move(copy));
  }
  return out;
}

}  // namespace ckpt
