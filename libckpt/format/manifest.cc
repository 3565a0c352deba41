#include "format/manifest.h"

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

namespace ckpt {

std::string ManifestFilePath(const Manifest& m, const ManifestFile& f) { return StrCat(StepDir(m.step), "/", f.name); }
namespace manifest_codec {

constexpr char kManifestMagic[8] = {'C', 'K', 'P', 'T', 'M', 'A', 'N', 'I'};

std::string WithHeader(uint32_t version, const std::string& body, uint64_t head_len) {
  std::string out(kManifestHeaderSize, '\0');
  std::memcpy(out.data(), kManifestMagic, 8);
  StoreLE32(out.data() + 8, version);
  StoreLE32(out.data() + 12, 0);
  StoreLE64(out.data() + 16, body.size());
  StoreLE64(out.data() + 24, Xxh3(body));
  StoreLE64(out.data() + 32, head_len);
  StoreLE64(out.data() + 40, Xxh3(out.data(), 40));
  out += body;
  return out;
}

// The header's magic, checksum and version (known to this reader).
absl::StatusOr<uint32_t> CheckHeader(std::string_view header, std::string_view what) {
  if (header.size() < kManifestHeaderSize) {
    return absl::DataLossError(
        StrCat(what, ": truncated: ", header.size(), " bytes, a manifest header alone is ", kManifestHeaderSize));
  }
  const char* h = header.data();
  if (std::memcmp(h, kManifestMagic, 8) != 0) {
    return absl::DataLossError(StrCat(what, " at byte offset 0: bad manifest magic"));
  }
  if (LoadLE64(h + 40) != Xxh3(h, 40)) {
    return absl::DataLossError(StrCat(what, " at byte offset 0: manifest header checksum mismatch"));
  }
  const uint32_t version = LoadLE32(h + 8);
  if (version == 0 || version > kManifestVersion) {
    return absl::FailedPreconditionError(StrCat(what, ": unknown manifest version ", version,
                                                " (this library reads up to ", kManifestVersion, "; upgrade ckpt)"));
  }
  return version;
}

// ---- Pieces every version shares ----

void WritePreamble(ByteWriter& w, const Manifest& m) {
  w.U8(static_cast<uint8_t>(m.kind));
  w.SVar(m.step);
  w.Var(static_cast<uint64_t>(m.world_size));
  w.U64(static_cast<uint64_t>(m.created_unix_ns));
  w.Str(m.library_version);
  w.U8(static_cast<uint8_t>(m.codec));
  w.U8(m.mesh.has_value() ? 1 : 0);
  if (m.mesh.has_value()) {
    w.Var(m.mesh->sizes.size());
    for (size_t i = 0; i < m.mesh->sizes.size(); ++i) {
      w.Str(m.mesh->names[i]);
      w.Var(static_cast<uint64_t>(m.mesh->sizes[i]));
    }
  }
  w.Var(m.metadata.size());
  for (const auto& [k, v] : m.metadata) {
    w.Str(k);
    w.Str(v);
  }
}

void ReadPreamble(ByteReader& r, Manifest& m) {
  uint8_t kind = r.U8();
  if (kind > 1) r.Fail(StrCat("unknown manifest kind ", kind));
  m.kind = static_cast<Manifest::Kind>(kind);
  m.step = r.SVar();
  m.world_size = static_cast<int32_t>(r.Count(1u << 24, "world size"));
  m.created_unix_ns = static_cast<int64_t>(r.U64());
  m.library_version = r.Str(kMaxVersionBytes);
  uint8_t codec = r.U8();
  if (codec > static_cast<uint8_t>(Codec::kAuto)) r.Fail(StrCat("unknown codec ", codec));
  m.codec = static_cast<Codec>(codec);
  if (r.U8() != 0) {
    Mesh mesh;
    uint64_t nd = r.Count(kMaxTensorRank, "mesh dimensions");
    for (uint64_t i = 0; i < nd && r.ok(); ++i) {
      mesh.names.push_back(r.Str(kMaxMeshDimNameBytes));
      mesh.sizes.push_back(static_cast<int64_t>(r.Count(1u << 24, "mesh size")));
    }
    m.mesh = std::move(mesh);
  }
  uint64_t nmeta = r.Count(kMaxManifestCount, "metadata count");
  for (uint64_t i = 0; i < nmeta && r.ok(); ++i) {
    std::string k = r.Str(kMaxMetadataBytes);
    m.metadata[k] = r.Str(kMaxMetadataBytes);
  }
}

void WriteBlobs(ByteWriter& w, const Manifest& m) {
  w.Var(m.blobs.size());
  for (const ManifestBlob& b : m.blobs) {
    w.Str(b.name);
    w.SVar(b.rank);
    w.Var(b.size);
    w.Var(b.file);
    w.Var(b.first_block);
    w.Var(b.block_count);
  }
}

// Blobs refer to files by index; `files` may be empty when the files come
// later in the encoding (version 4), which then checks the references.
void ReadBlobs(ByteReader& r, Manifest& m, uint64_t nfiles, bool check_blocks) {
  uint64_t nblobs = r.Count(kMaxManifestCount, "blob count");
  for (uint64_t i = 0; i < nblobs && r.ok(); ++i) {
    ManifestBlob b;
    b.name = r.Str(kMaxNameBytes);
    b.rank = static_cast<int32_t>(r.SVar());
    b.size = r.Count(kMaxBlobBytes, "blob size");
    b.file = static_cast<uint32_t>(r.Count(nfiles, "blob file"));
    b.first_block = r.Var();
    b.block_count = r.Var();
    if (r.ok() &&
        (b.file >= nfiles || (check_blocks && (b.first_block + b.block_count < b.first_block ||
                                               b.first_block + b.block_count > m.files[b.file].block_count)))) {
      r.Fail(StrCat("blob '", b.name, "' references a missing file or blocks"));
    }
    m.blobs.push_back(std::move(b));
  }
}

void WriteTail(ByteWriter& w, const Manifest& m) {
  w.U64(std::bit_cast<uint64_t>(m.stall_s));
  w.U64(std::bit_cast<uint64_t>(m.write_s));
  w.SVar(m.bytes_logical);
  w.SVar(m.bytes_stored);
  if (m.format_version >= 3) w.Str(m.claim);
  if (m.format_version >= 6) {
    w.Var(m.bases.size());
    for (const ManifestBase& b : m.bases) {
      w.SVar(b.step);
      w.U64(b.save_id);
    }
  }
}

void ReadTail(ByteReader& r, Manifest& m) {
  m.stall_s = std::bit_cast<double>(r.U64());
  m.write_s = std::bit_cast<double>(r.U64());
  m.bytes_logical = r.SVar();
  m.bytes_stored = r.SVar();
  if (m.format_version >= 3) m.claim = r.Str(kMaxClaimBytes);
  if (m.format_version >= 6) {
    const uint64_t n = r.Count(kMaxDeltaBases, "delta base count");
    for (uint64_t i = 0; i < n && r.ok(); ++i) {
      ManifestBase b;
      b.step = r.SVar();
      b.save_id = r.U64();
      if (!r.ok()) break;
      if (b.step < 0 || b.step >= m.step || b.save_id == 0) {
        r.Fail(StrCat("delta base ", i, " (step ", b.step, ") is not an earlier step of a save"));
      }
      for (const ManifestBase& o : m.bases) {
        if (o.step == b.step) r.Fail(StrCat("delta base step ", b.step, " is listed twice"));
      }
      m.bases.push_back(b);
    }
  }
}

void WriteExplicitChunks(ByteWriter& w, const ManifestTensor& t, uint32_t version) {
  w.Var(t.chunks.size());
  for (const ManifestChunk& c : t.chunks) {
    w.Var(c.file);
    w.Var(c.first_block);
    w.Var(c.block_count);
    for (int64_t o : c.box.offsets) w.Var(static_cast<uint64_t>(o));
    for (int64_t s : c.box.sizes) w.Var(static_cast<uint64_t>(s));
    if (version >= 6) w.Var(c.base);
  }
}

// Reads `nchunks` explicitly listed chunks of `t` (its spec already read).
void ReadExplicitChunks(ByteReader& r, const std::vector<ManifestFile>* files, uint64_t nfiles, uint64_t nchunks,
                        uint32_t version, ManifestTensor& t) {
  const size_t nd = t.spec.shape.size();
  t.chunks.reserve(std::min<uint64_t>(nchunks, r.remaining()));
  for (uint64_t c = 0; c < nchunks && r.ok(); ++c) {
    ManifestChunk ch;
    ch.file = static_cast<uint32_t>(r.Count(nfiles, "chunk file"));
    ch.first_block = r.Var();
    ch.block_count = r.Var();
    ch.box.offsets.resize(nd);
    ch.box.sizes.resize(nd);
    for (size_t d = 0; d < nd; ++d) ch.box.offsets[d] = static_cast<int64_t>(r.Count(uint64_t{1} << 48, "offset"));
    for (size_t d = 0; d < nd; ++d) ch.box.sizes[d] = static_cast<int64_t>(r.Count(uint64_t{1} << 48, "size"));
    if (version >= 6) ch.base = static_cast<uint32_t>(r.Count(kMaxDeltaBases, "chunk base"));
    if (!r.ok()) break;
    if (ch.file >= nfiles) {
      r.Fail(StrCat("tensor '", t.spec.fqn, "' chunk ", c, " names file ", ch.file, " of ", nfiles));
    } else if (!BoxWithin(ch.box, t.spec.shape)) {
      r.Fail(StrCat("tensor '", t.spec.fqn, "' chunk ", ch.box.ToString(), " lies outside shape ",
                    ShapeToString(t.spec.shape)));
    } else if (ch.first_block + ch.block_count < ch.first_block ||
               (files != nullptr && ch.first_block + ch.block_count > (*files)[ch.file].block_count)) {
      r.Fail(StrCat("tensor '", t.spec.fqn, "' chunk ", ch.box.ToString(), " references blocks beyond ",
                    files != nullptr ? (*files)[ch.file].name : StrCat("file ", ch.file)));
    }
    t.chunks.push_back(std::move(ch));
  }
}

}  // namespace manifest_codec

namespace {

using manifest_codec::CheckHeader;
using manifest_codec::DecodeV4;
using manifest_codec::EncodeV4;
using manifest_codec::kFileRecordHashed;
using manifest_codec::kFileRecordSize;
using manifest_codec::ReadBlobs;
using manifest_codec::ReadExplicitChunks;
using manifest_codec::ReadPreamble;
using manifest_codec::ReadTail;
using manifest_codec::ReadTensorRecord;
using manifest_codec::WithHeader;
using manifest_codec::WriteBlobs;
using manifest_codec::WriteExplicitChunks;
using manifest_codec::WritePreamble;
using manifest_codec::WriteTail;

// ---- Versions 1 to 3: one varint-coded body ----

std::string EncodeLegacy(const Manifest& m) {
  ByteWriter w;
  WritePreamble(w, m);
  w.Var(m.files.size());
  for (const ManifestFile& f : m.files) {
    w.Str(f.name);
    w.Var(static_cast<uint64_t>(f.rank));
    w.Var(f.size);
    w.Var(f.index_offset);
    w.Var(f.index_len);
    w.U64(f.index_hash);
    w.Var(f.block_count);
    w.Var(f.block_size);
    w.U64(f.save_id);
    if (m.format_version >= 2) w.U64(f.container_hash);
  }
  w.Var(m.tensors.size());
  for (const ManifestTensor& t : m.tensors) {
    w.Str(t.spec.fqn);
    w.U8(static_cast<uint8_t>(t.spec.dtype));
    w.Var(t.spec.shape.size());
    for (int64_t d : t.spec.shape) w.Var(static_cast<uint64_t>(d));
    WriteExplicitChunks(w, t, m.format_version);
  }
  WriteBlobs(w, m);
  WriteTail(w, m);
  std::string body = w.Take();

  return WithHeader(m.format_version, body, 0);
}

absl::StatusOr<Manifest> DecodeLegacy(std::string_view body, uint32_t version, std::string_view what,
                                      uint64_t max_chunks) {
  ByteReader r(body, std::string(what), kManifestHeaderSize);
  Manifest m;
  m.format_version = version;
  ReadPreamble(r, m);
  uint64_t nfiles = r.Count(kMaxManifestCount, "file count");
  for (uint64_t i = 0; i < nfiles && r.ok(); ++i) {
    ManifestFile f;
    f.name = r.Str(kMaxFileNameBytes);
    f.rank = static_cast<int32_t>(r.Count(1u << 24, "file rank"));
    f.size = r.Var();
    f.index_offset = r.Var();
    f.index_len = r.Var();
    f.index_hash = r.U64();
    f.block_count = r.Count(kMaxManifestCount, "block count");
    f.block_size = r.Count(kMaxBlockBytes, "block size");
    f.save_id = r.U64();
    if (version >= 2) f.container_hash = r.U64();
    m.files.push_back(std::move(f));
  }
  uint64_t ntensors = r.Count(kMaxManifestCount, "tensor count");
  uint64_t total_chunks = 0;
  for (uint64_t i = 0; i < ntensors && r.ok(); ++i) {
    ManifestTensor t;
    t.spec.fqn = r.Str(kMaxNameBytes);
    uint8_t dt = r.U8();
    if (r.ok() && !IsValidDType(dt)) {
      r.Fail(StrCat("tensor '", t.spec.fqn, "': unknown dtype ", dt));
    }
    t.spec.dtype = static_cast<DType>(dt);
    uint64_t nd = r.Count(kMaxTensorRank, "tensor rank");
    for (uint64_t d = 0; d < nd && r.ok(); ++d) {
      t.spec.shape.push_back(static_cast<int64_t>(r.Count(uint64_t{1} << 48, "dimension")));
    }
    if (r.ok()) {
      if (absl::Status s = CheckTensorSpec(t.spec); !s.ok()) r.Fail(std::string(s.message()));
    }
    uint64_t nchunks = r.Count(max_chunks - total_chunks, "chunk count");
    total_chunks += nchunks;
    ReadExplicitChunks(r, &m.files, m.files.size(), nchunks, version, t);
    if (r.ok() && !m.tensors.empty() && !(m.tensors.back().spec.fqn < t.spec.fqn)) {
      r.Fail(StrCat("tensor '", t.spec.fqn, "' out of order or repeated"));
    }
    m.tensors.push_back(std::move(t));
  }
  ReadBlobs(r, m, nfiles, true);
  ReadTail(r, m);
  if (r.ok() && !r.AtEnd()) r.Fail("trailing bytes after the manifest body");
  if (!r.ok()) return r.status();
  return m;
}

}  // namespace

absl::Status CheckChunkBases(const Manifest& m, const ManifestTensor& t, std::string_view what) {
  for (const ManifestChunk& c : t.chunks) {
    if (c.base > m.bases.size()) {
      return absl::DataLossError(StrCat(what, ": tensor '", t.spec.fqn, "' chunk ", c.box.ToString(),
                                        " names delta base ", c.base, " of ", m.bases.size()));
    }
  }
  return absl::OkStatus();
}

uint32_t Manifest::AddBase(const ManifestBase& b) {
  for (size_t i = 0; i < bases.size(); ++i) {
    if (bases[i].step == b.step) return static_cast<uint32_t>(i + 1);
  }
  bases.push_back(b);
  return static_cast<uint32_t>(bases.size());
}

const ManifestTensor* Manifest::FindTensor(std::string_view fqn) const {
  auto it = std::lower_bound(tensors.begin(), tensors.end(), fqn,
                             [](const ManifestTensor& t, std::string_view f) { return t.spec.fqn < f; });
  if (it == tensors.end() || it->spec.fqn != fqn) return nullptr;
  return &*it;
}

int64_t Manifest::LogicalBytes() const {
  int64_t total = 0;
  for (const auto& t : tensors) {
    // A grid covers its tensor exactly.
    if (t.GridOnly()) total += t.spec.NumElements() * static_cast<int64_t>(DTypeSize(t.spec.dtype));
    for (const auto& c : t.chunks) {
      total += c.box.Volume() * static_cast<int64_t>(DTypeSize(t.spec.dtype));
    }
  }
  for (const auto& b : blobs) total += static_cast<int64_t>(b.size);
  return total;
}

std::string EncodeManifest(const Manifest& m) { return m.format_version >= 4 ? EncodeV4(m) : EncodeLegacy(m); }

absl::StatusOr<Manifest> DecodeManifest(std::string_view bytes, std::string_view what, uint64_t max_chunks,
                                        GridChunks grids) {
  CKPT_ASSIGN_OR_RETURN(const uint32_t version, CheckHeader(bytes, what));
  const char* h = bytes.data();
  if (LoadLE32(h + 12) != 0 || (version < 4 && LoadLE64(h + 32) != 0)) {
    return absl::DataLossError(StrCat(what, " at byte offset 12: reserved field is not zero"));
  }
  const uint64_t body_len = LoadLE64(h + 16);
  if (body_len != bytes.size() - kManifestHeaderSize) {
    return absl::DataLossError(StrCat(what, ": truncated or padded: header says ", body_len, " body bytes, file has ",
                                      bytes.size() - kManifestHeaderSize));
  }
  std::string_view body = bytes.substr(kManifestHeaderSize);
  if (LoadLE64(h + 24) != Xxh3(body)) {
    return absl::DataLossError(
        StrCat(what, " at byte offset ", kManifestHeaderSize, ": manifest body checksum mismatch"));
  }

  if (version >= 4) return DecodeV4(bytes, what, max_chunks, grids);
  return DecodeLegacy(body, version, what, max_chunks);
}

absl::StatusOr<uint64_t> ManifestHeadBytes(std::string_view header, std::string_view what) {
  CKPT_ASSIGN_OR_RETURN(const uint32_t version, CheckHeader(header, what));
  const char* h = header.data();
  if (version < 4) {
    return absl::FailedPreconditionError(
        StrCat(what, ": manifest version ", version, " has no sections: read it whole"));
  }
  const uint64_t head_len = LoadLE64(h + 32);
  const uint64_t body_len = LoadLE64(h + 16);
  if (LoadLE32(h + 12) != 0) return absl::DataLossError(StrCat(what, " at byte offset 12: reserved field is not zero"));
  if (head_len < 8 || head_len > body_len) {
    return absl::DataLossError(
        StrCat(what, " at byte offset 32: head length ", head_len, " outside the body of ", body_len, " bytes"));
  }
  return kManifestHeaderSize + head_len;
}

absl::StatusOr<Manifest> DecodeManifestHead(std::string_view prefix, uint64_t size, std::string_view what,
                                            ManifestSections* sec) {
  CKPT_ASSIGN_OR_RETURN(const uint64_t head_end, ManifestHeadBytes(prefix, what));
  const uint64_t body_len = LoadLE64(prefix.data() + 16);
  if (body_len != size - kManifestHeaderSize) {
    return absl::DataLossError(StrCat(what, ": truncated or padded: header says ", body_len, " body bytes, file has ",
                                      size - kManifestHeaderSize));
  }
  if (prefix.size() < head_end) {
    return absl::DataLossError(
        StrCat(what, ": truncated: the head ends at byte ", head_end, ", only ", prefix.size(), " bytes were read"));
  }
  std::string_view head = prefix.substr(kManifestHeaderSize, head_end - kManifestHeaderSize);
  if (LoadLE64(head.data() + head.size() - 8) != Xxh3(head.data(), head.size() - 8)) {
    return absl::DataLossError(StrCat(what, " at byte offset ", head_end - 8, ": manifest head checksum mismatch"));
  }
  Manifest m;
  m.format_version = LoadLE32(prefix.data() + 8);
  ByteReader r(head.substr(0, head.size() - 8), std::string(what), kManifestHeaderSize);
  ReadPreamble(r, m);
  ReadBlobs(r, m, kMaxManifestCount, false);
  ReadTail(r, m);
  sec->size = size;
  sec->file_count = r.Count(kMaxManifestCount, "file count");
  sec->names_len = r.Var();
  sec->tensor_count = r.Count(kMaxManifestCount, "tensor count");
  sec->directory_len = r.Var();
  sec->directory_hash = r.U64();
  sec->tensors_len = r.Var();
  if (r.ok() && !r.AtEnd()) r.Fail("trailing bytes in the manifest head");
  if (!r.ok()) return r.status();
  // The sections follow the head in this order and fill the body exactly.
  const uint64_t rest = size - head_end;
  if (sec->file_count > rest / kFileRecordSize || sec->names_len > rest - sec->file_count * kFileRecordSize ||
      sec->directory_len > rest - sec->file_count * kFileRecordSize - sec->names_len ||
      sec->tensors_len != rest - sec->file_count * kFileRecordSize - sec->names_len - sec->directory_len) {
    return absl::DataLossError(StrCat(what, ": manifest sections (", sec->file_count, " file records, ", sec->names_len,
                                      " bytes of names, ", sec->directory_len, " of directory, ", sec->tensors_len,
                                      " of tensors) do not fill the ", size - kManifestHeaderSize, "-byte body"));
  }
  sec->files_at = head_end;
  sec->names_at = sec->files_at + sec->file_count * kFileRecordSize;
  sec->directory_at = sec->names_at + sec->names_len;
  sec->tensors_at = sec->directory_at + sec->directory_len;
  return m;
}

FileRecordName PeekFileRecordName(std::string_view record, const ManifestSections& sec) {
  FileRecordName n;
  if (record.size() < kFileRecordSize) return n;
  const uint32_t len = LoadLE32(record.data() + 4);
  const uint64_t off = LoadLE64(record.data() + 8);
  // Out of range: a position past the section, which DecodeFileRecord refuses.
  if (len > kMaxFileNameBytes || off > sec.names_len || len > sec.names_len - off) {
    n.at = sec.names_at + sec.names_len + 1;
    return n;
  }
  n.at = sec.names_at + off;
  n.len = len;
  return n;
}

absl::StatusOr<ManifestFile> DecodeFileRecord(std::string_view record, std::string_view name,
                                              const ManifestSections& sec, uint64_t index, std::string_view what,
                                              Xxh3Stream* hash) {
  const uint64_t off = sec.FileRecordAt(index);
  const FileRecordName where = PeekFileRecordName(record, sec);
  if (record.size() != kFileRecordSize || where.at > sec.names_at + sec.names_len || name.size() != where.len) {
    return absl::DataLossError(
        StrCat(what, " at byte offset ", off + 4, ": file record ", index, " names bytes outside the names section"));
  }
  const char* rec = record.data();
  Xxh3Stream local;
  Xxh3Stream& h = hash != nullptr ? *hash : local;
  h.Reset();
  h.Update(rec, kFileRecordHashed);
  h.Update(name.data(), name.size());
  if (LoadLE64(rec + 88) != h.Digest()) {
    return absl::DataLossError(StrCat(what, " at byte offset ", off, ": file record ", index, " checksum mismatch"));
  }
  if (LoadLE32(rec) >= (1u << 24) || LoadLE64(rec + 48) > kMaxManifestCount || LoadLE64(rec + 56) > kMaxBlockBytes ||
      LoadLE64(rec + 80) != 0) {
    return absl::DataLossError(StrCat(what, " at byte offset ", off, ": file record ", index,
                                      " has a rank, block count or block size past its limit, or a reserved "
                                      "field that is not zero"));
  }
  ManifestFile f;
  f.rank = static_cast<int32_t>(LoadLE32(rec));
  f.name = name.empty() ? DataFileName(f.rank) : std::string(name);
  if (!name.empty() && f.name == DataFileName(f.rank)) {
    return absl::DataLossError(
        StrCat(what, " at byte offset ", off, ": file record ", index, " stores the default name (not canonical)"));
  }
  f.size = LoadLE64(rec + 16);
  f.index_offset = LoadLE64(rec + 24);
  f.index_len = LoadLE64(rec + 32);
  f.index_hash = LoadLE64(rec + 40);
  f.block_count = LoadLE64(rec + 48);
  f.block_size = LoadLE64(rec + 56);
  f.save_id = LoadLE64(rec + 64);
  f.container_hash = LoadLE64(rec + 72);
  return f;
}

absl::StatusOr<std::vector<TensorEntry>> DecodeTensorDirectory(std::string_view dir, const ManifestSections& sec,
                                                               std::string_view what) {
  if (dir.size() != sec.directory_len || Xxh3(dir) != sec.directory_hash) {
    return absl::DataLossError(
        StrCat(what, " at byte offset ", sec.directory_at, ": tensor directory checksum mismatch"));
  }
  ByteReader r(dir, std::string(what), sec.directory_at);
  std::vector<TensorEntry> out;
  out.reserve(std::min<uint64_t>(sec.tensor_count, dir.size()));
  uint64_t at = 0;
  for (uint64_t i = 0; i < sec.tensor_count && r.ok(); ++i) {
    TensorEntry e;
    e.fqn = r.Str(kMaxNameBytes);
    e.len = r.Var();
    e.hash = r.U64();
    if (!r.ok()) break;
    if (e.len > sec.tensors_len - at) {
      r.Fail(StrCat("tensor '", e.fqn, "' record runs past the tensors section"));
    } else if (!out.empty() && !(out.back().fqn < e.fqn)) {
      r.Fail(StrCat("tensor '", e.fqn, "' out of order or repeated"));
    }
    e.at = sec.tensors_at + at;
    at += e.len;
    out.push_back(std::move(e));
  }
  if (r.ok() && !r.AtEnd()) r.Fail("trailing bytes after the tensor directory");
  if (!r.ok()) return r.status();
  if (at != sec.tensors_len) {
    return absl::DataLossError(StrCat(what, " at byte offset ", sec.tensors_at + at, ": ", sec.tensors_len - at,
                                      " bytes of the tensors section belong to no tensor"));
  }
  return out;
}

absl::Status DecodeTensorRecord(std::string_view record, const TensorEntry& entry,
                                const std::vector<ManifestFile>* files, uint64_t file_count, uint32_t version,
                                uint64_t* chunk_budget, std::string_view what, ManifestTensor* t) {
  if (record.size() != entry.len || Xxh3(record) != entry.hash) {
    return absl::DataLossError(
        StrCat(what, " at byte offset ", entry.at, ": record of tensor '", entry.fqn, "' checksum mismatch"));
  }
  t->spec.fqn = entry.fqn;
  ByteReader r(record, std::string(what), entry.at);
  ReadTensorRecord(r, files, file_count, version, chunk_budget, *t);
  if (r.ok() && !r.AtEnd()) r.Fail(StrCat("trailing bytes in the record of tensor '", entry.fqn, "'"));
  return r.status();
}

ManifestChunk GridChunk(const ManifestTensor& t, uint64_t cell, uint64_t block_size) {
  ManifestChunk c;
  c.file = static_cast<uint32_t>(t.grid->files.At(cell));
  c.first_block = t.grid->first_blocks.At(cell);
  c.box = t.grid->CellBox(cell);
  c.block_count = BlocksOf(static_cast<uint64_t>(c.box.Volume()) * DTypeSize(t.spec.dtype), block_size);
  return c;
}

std::optional<ChunkGrid> DetectGrid(const ManifestTensor& t, const std::vector<ManifestFile>& files) {
  const size_t nd = t.spec.shape.size();
  const size_t n = t.chunks.size();
  if (nd == 0 || n == 0) return std::nullopt;
  // A grid has no room for bases: a tensor with deltas is listed.
  for (const ManifestChunk& c : t.chunks) {
    if (c.base != 0) return std::nullopt;
  }
  ChunkGrid g;
  g.cuts.resize(nd);
  uint64_t cells = 1;
  for (size_t d = 0; d < nd; ++d) {
    std::vector<int64_t>& cuts = g.cuts[d];
    // The distinct offsets; every chunk is checked against the grid below.
    cuts.reserve(n);
    for (const ManifestChunk& c : t.chunks) {
      if (c.box.ndim() != static_cast<int>(nd)) return std::nullopt;
      cuts.push_back(c.box.offsets[d]);
    }
    std::sort(cuts.begin(), cuts.end());
    cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
    if (cuts.front() != 0 || cuts.back() >= t.spec.shape[d]) return std::nullopt;
    cells *= cuts.size();
    if (cells > n) return std::nullopt;
    cuts.push_back(t.spec.shape[d]);
  }
  if (cells != n) return std::nullopt;
  const uint64_t es = DTypeSize(t.spec.dtype);
  std::vector<uint64_t> file_of(n), first_of(n);
  std::vector<size_t> at(nd, 0);
  for (size_t i = 0; i < n; ++i) {
    const ManifestChunk& c = t.chunks[i];
    for (size_t d = 0; d < nd; ++d) {
      if (c.box.offsets[d] != g.cuts[d][at[d]] || c.box.sizes[d] != g.cuts[d][at[d] + 1] - g.cuts[d][at[d]]) {
        return std::nullopt;
      }
    }
    if (c.file >= files.size() || files[c.file].block_size == 0 ||
        c.block_count != BlocksOf(static_cast<uint64_t>(c.box.Volume()) * es, files[c.file].block_size)) {
      return std::nullopt;
    }
    file_of[i] = c.file;
    first_of[i] = c.first_block;
    for (size_t d = nd; d-- > 0;) {
      if (++at[d] + 1 < g.cuts[d].size()) break;
      at[d] = 0;
    }
  }
  g.files = IntRuns::Of(file_of);
  g.first_blocks = IntRuns::Of(first_of);
  return g;
}

void DescribeTensorByRules(ManifestTensor& t, const std::vector<ManifestFile>& files) {
  auto row_major = [](const ManifestChunk& a, const ManifestChunk& b) {
    return std::lexicographical_compare(a.box.offsets.begin(), a.box.offsets.end(), b.box.offsets.begin(),
                                        b.box.offsets.end());
  };
  if (!std::is_sorted(t.chunks.begin(), t.chunks.end(), row_major)) {
    std::stable_sort(t.chunks.begin(), t.chunks.end(), row_major);
  }
  t.grid = DetectGrid(t, files);
}

void DescribeByRules(Manifest& m) {
  if (m.kind != Manifest::Kind::kManifest || m.format_version < 4) return;
  for (ManifestTensor& t : m.tensors) DescribeTensorByRules(t, m.files);
}

}  // namespace ckpt
