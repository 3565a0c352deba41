#include "format/manifest.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "ckpt/state.h"
#include "format/data_file.h"
#include "util/bytes.h"
#include "util/hash.h"
#include "util/strings.h"

namespace ckpt {
namespace {

constexpr char kManifestMagic[8] = {'C', 'K', 'P', 'T', 'M', 'A', 'N', 'I'};

}  // namespace

const ManifestTensor* Manifest::FindTensor(std::string_view fqn) const {
  auto it = std::lower_bound(tensors.begin(), tensors.end(), fqn,
                             [](const ManifestTensor& t, std::string_view f) { return t.spec.fqn < f; });
  if (it == tensors.end() || it->spec.fqn != fqn) return nullptr;
  return &*it;
}

int64_t Manifest::LogicalBytes() const {
  int64_t total = 0;
  for (const auto& t : tensors) {
    for (const auto& c : t.chunks) {
      total += c.box.Volume() * static_cast<int64_t>(DTypeSize(t.spec.dtype));
    }
  }
  for (const auto& b : blobs) total += static_cast<int64_t>(b.size);
  return total;
}

std::string EncodeManifest(const Manifest& m) {
  ByteWriter w;
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
    w.Var(t.chunks.size());
    for (const ManifestChunk& c : t.chunks) {
      w.Var(c.file);
      w.Var(c.first_block);
      w.Var(c.block_count);
      for (int64_t o : c.box.offsets) w.Var(static_cast<uint64_t>(o));
      for (int64_t s : c.box.sizes) w.Var(static_cast<uint64_t>(s));
    }
  }
  w.Var(m.blobs.size());
  for (const ManifestBlob& b : m.blobs) {
    w.Str(b.name);
    w.SVar(b.rank);
    w.Var(b.size);
    w.Var(b.file);
    w.Var(b.first_block);
    w.Var(b.block_count);
  }
  w.U64(std::bit_cast<uint64_t>(m.stall_s));
  w.U64(std::bit_cast<uint64_t>(m.write_s));
  w.SVar(m.bytes_logical);
  w.SVar(m.bytes_stored);
  if (m.format_version >= 3) w.Str(m.claim);
  std::string body = w.Take();

  std::string out(kManifestHeaderSize, '\0');
  std::memcpy(out.data(), kManifestMagic, 8);
  StoreLE32(out.data() + 8, m.format_version);
  StoreLE32(out.data() + 12, 0);
  StoreLE64(out.data() + 16, body.size());
  StoreLE64(out.data() + 24, Xxh3(body));
  StoreLE64(out.data() + 32, 0);
  StoreLE64(out.data() + 40, Xxh3(out.data(), 40));
  out += body;
  return out;
}

absl::StatusOr<Manifest> DecodeManifest(std::string_view bytes, std::string_view what) {
  if (bytes.size() < kManifestHeaderSize) {
    return absl::DataLossError(
        StrCat(what, ": truncated: ", bytes.size(), " bytes, a manifest header alone is ", kManifestHeaderSize));
  }
  const char* h = bytes.data();
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
  if (LoadLE32(h + 12) != 0 || LoadLE64(h + 32) != 0) {
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

  ByteReader r(body, std::string(what), kManifestHeaderSize);
  Manifest m;
  m.format_version = version;
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
    uint64_t nchunks = r.Count(kMaxManifestCount, "chunk count");
    for (uint64_t c = 0; c < nchunks && r.ok(); ++c) {
      ManifestChunk ch;
      ch.file = static_cast<uint32_t>(r.Count(nfiles, "chunk file"));
      ch.first_block = r.Var();
      ch.block_count = r.Var();
      ch.box.offsets.resize(nd);
      ch.box.sizes.resize(nd);
      for (uint64_t d = 0; d < nd; ++d) ch.box.offsets[d] = static_cast<int64_t>(r.Count(uint64_t{1} << 48, "offset"));
      for (uint64_t d = 0; d < nd; ++d) ch.box.sizes[d] = static_cast<int64_t>(r.Count(uint64_t{1} << 48, "size"));
      if (!r.ok()) break;
      if (ch.file >= nfiles) {
        r.Fail(StrCat("tensor '", t.spec.fqn, "' chunk ", c, " names file ", ch.file, " of ", nfiles));
      } else if (!BoxWithin(ch.box, t.spec.shape)) {
        r.Fail(StrCat("tensor '", t.spec.fqn, "' chunk ", ch.box.ToString(), " lies outside shape ",
                      ShapeToString(t.spec.shape)));
      } else if (ch.first_block + ch.block_count < ch.first_block ||
                 ch.first_block + ch.block_count > m.files[ch.file].block_count) {
        r.Fail(StrCat("tensor '", t.spec.fqn, "' chunk ", ch.box.ToString(), " references blocks beyond ",
                      m.files[ch.file].name));
      }
      t.chunks.push_back(std::move(ch));
    }
    if (r.ok() && !m.tensors.empty() && !(m.tensors.back().spec.fqn < t.spec.fqn)) {
      r.Fail(StrCat("tensor '", t.spec.fqn, "' out of order or repeated"));
    }
    m.tensors.push_back(std::move(t));
  }
  uint64_t nblobs = r.Count(kMaxManifestCount, "blob count");
  for (uint64_t i = 0; i < nblobs && r.ok(); ++i) {
    ManifestBlob b;
    b.name = r.Str(kMaxNameBytes);
    b.rank = static_cast<int32_t>(r.SVar());
    b.size = r.Count(kMaxBlobBytes, "blob size");
    b.file = static_cast<uint32_t>(r.Count(nfiles, "blob file"));
    b.first_block = r.Var();
    b.block_count = r.Var();
    if (r.ok() && (b.file >= nfiles || b.first_block + b.block_count > m.files[b.file].block_count)) {
      r.Fail(StrCat("blob '", b.name, "' references a missing file or blocks"));
    }
    m.blobs.push_back(std::move(b));
  }
  m.stall_s = std::bit_cast<double>(r.U64());
  m.write_s = std::bit_cast<double>(r.U64());
  m.bytes_logical = r.SVar();
  m.bytes_stored = r.SVar();
  if (version >= 3) m.claim = r.Str(kMaxClaimBytes);
  if (r.ok() && !r.AtEnd()) r.Fail("trailing bytes after the manifest body");
  if (!r.ok()) return r.status();
  return m;
}

}  // namespace ckpt
