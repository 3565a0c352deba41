#include "format/data_file.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "util/bytes.h"
#include "util/hash.h"
#include "util/strings.h"

namespace ckpt {

std::string DataFileName(int rank) { return absl::StrFormat("rank-%06d.ckd", rank); }
namespace {

constexpr char kHeaderMagic[8] = {'C', 'K', 'P', 'T', 'D', 'A', 'T', 'A'};
constexpr char kIndexMagic[8] = {'C', 'K', 'P', 'T', 'I', 'N', 'D', 'X'};
constexpr char kFooterMagic[8] = {'C', 'K', 'P', 'T', 'F', 'O', 'O', 'T'};
constexpr uint32_t kTrailerMagic = 0x46424b43;  // "CKBF"

absl::Status Corrupt(std::string_view file, uint64_t offset, std::string_view what) {
  return absl::DataLossError(StrCat(file, " at byte offset ", offset, ": ", what));
}

absl::Status UnknownVersion(std::string_view file, uint64_t offset, std::string_view what, uint32_t version) {
  return absl::FailedPreconditionError(StrCat(file, " at byte offset ", offset, ": unknown ", what, " version ",
                                              version, " (this library reads up to ", kDataFormatVersion,
                                              "; upgrade ckpt)"));
}

}  // namespace

void EncodeDataHeader(const DataFileHeader& h, std::byte* out) {
  std::memset(out, 0, kDataHeaderSize);
  std::memcpy(out, kHeaderMagic, 8);
  StoreLE32(out + 8, h.version);
  StoreLE32(out + 12, 0);
  StoreLE64(out + 16, static_cast<uint64_t>(h.step));
  StoreLE32(out + 24, h.rank);
  StoreLE32(out + 28, 0);
  StoreLE64(out + 32, h.save_id);
  StoreLE64(out + 40, Xxh3(out, 40));
}

absl::StatusOr<DataFileHeader> DecodeDataHeader(const std::byte* in, std::string_view file) {
  if (std::memcmp(in, kHeaderMagic, 8) != 0) {
    return Corrupt(file, 0, "not a ckpt data file (bad header magic)");
  }
  if (LoadLE64(in + 40) != Xxh3(in, 40)) {
    return Corrupt(file, 0, "header checksum mismatch");
  }
  DataFileHeader h;
  h.version = LoadLE32(in + 8);
  if (h.version == 0 || h.version > kDataFormatVersion) {
    return UnknownVersion(file, 8, "data file", h.version);
  }
  h.step = static_cast<int64_t>(LoadLE64(in + 16));
  h.rank = LoadLE32(in + 24);
  h.save_id = LoadLE64(in + 32);
  if (LoadLE32(in + 12) != 0 || LoadLE32(in + 28) != 0) {
    return Corrupt(file, 12, "reserved header field is not zero");
  }
  for (size_t i = 48; i < kDataHeaderSize; ++i) {
    if (in[i] != std::byte{0}) {
      return Corrupt(file, i, "header padding is not zero");
    }
  }
  return h;
}

void EncodeTrailer(const FrameTrailer& t, std::byte* out) {
  StoreLE32(out, kTrailerMagic);
  out[4] = std::byte{t.codec};
  out[5] = std::byte{t.elem_width};
  StoreLE16(out + 6, t.flags);
  StoreLE32(out + 8, t.raw_len);
  StoreLE32(out + 12, t.stored_len);
  StoreLE32(out + 16, t.block_id);
  StoreLE32(out + 20, 0);
  StoreLE64(out + 24, t.raw_hash);
  StoreLE64(out + 32, t.stored_hash);
  StoreLE64(out + 40, Xxh3(out, 40));
}

absl::StatusOr<FrameTrailer> DecodeTrailer(const std::byte* in, std::string_view file, uint64_t offset) {
  if (LoadLE32(in) != kTrailerMagic) {
    return Corrupt(file, offset, "bad block trailer magic");
  }
  if (LoadLE64(in + 40) != Xxh3(in, 40)) {
    return Corrupt(file, offset, "block trailer checksum mismatch");
  }
  FrameTrailer t;
  t.codec = static_cast<uint8_t>(in[4]);
  t.elem_width = static_cast<uint8_t>(in[5]);
  t.flags = LoadLE16(in + 6);
  t.raw_len = LoadLE32(in + 8);
  t.stored_len = LoadLE32(in + 12);
  t.block_id = LoadLE32(in + 16);
  t.raw_hash = LoadLE64(in + 24);
  t.stored_hash = LoadLE64(in + 32);
  if (LoadLE32(in + 20) != 0) {
    return Corrupt(file, offset + 20, "reserved trailer field is not zero");
  }
  return t;
}

std::string EncodeIndex(const std::vector<IndexEntry>& entries) {
  ByteWriter w;
  w.Raw(kIndexMagic, 8);
  w.U32(kDataFormatVersion);
  w.U32(static_cast<uint32_t>(entries.size()));
  for (const IndexEntry& e : entries) {
    w.U64(e.offset);
    w.U32(e.raw_len);
    w.U32(e.stored_len);
    w.U64(e.raw_hash);
    w.U64(e.stored_hash);
    w.U8(e.codec);
    w.U8(e.elem_width);
    w.U16(e.flags);
    w.U32(e.frame_len);
  }
  return w.Take();
}

absl::StatusOr<std::vector<IndexEntry>> DecodeIndex(std::string_view bytes, std::string_view file, uint64_t offset) {
  if (bytes.size() < kIndexHeaderSize || std::memcmp(bytes.data(), kIndexMagic, 8) != 0) {
    return Corrupt(file, offset, "bad block index magic");
  }
  ByteReader r(bytes, StrCat(file, " block index"), offset);
  r.Bytes(8);
  uint32_t version = r.U32();
  if (version == 0 || version > kDataFormatVersion) {
    return UnknownVersion(file, offset + 8, "block index", version);
  }
  uint32_t count = r.U32();
  if (static_cast<uint64_t>(count) * kIndexEntrySize != r.remaining()) {
    return Corrupt(file, offset + 12,
                   StrCat("block index claims ", count, " entries but ", r.remaining(), " bytes follow"));
  }
  std::vector<IndexEntry> entries(count);
  for (IndexEntry& e : entries) {
    e.offset = r.U64();
    e.raw_len = r.U32();
    e.stored_len = r.U32();
    e.raw_hash = r.U64();
    e.stored_hash = r.U64();
    e.codec = r.U8();
    e.elem_width = r.U8();
    e.flags = r.U16();
    e.frame_len = r.U32();
  }
  if (!r.ok()) return r.status();
  return entries;
}

void EncodeFooter(const DataFileFooter& f, std::byte* out) {
  std::memcpy(out, kFooterMagic, 8);
  StoreLE32(out + 8, f.version);
  StoreLE32(out + 12, 0);
  StoreLE64(out + 16, f.index_offset);
  StoreLE64(out + 24, f.index_len);
  StoreLE64(out + 32, f.block_count);
  StoreLE64(out + 40, f.index_hash);
  StoreLE64(out + 48, f.save_id);
  StoreLE64(out + 56, Xxh3(out, 56));
}

absl::StatusOr<DataFileFooter> DecodeFooter(const std::byte* in, std::string_view file, uint64_t offset) {
  if (std::memcmp(in, kFooterMagic, 8) != 0) {
    return Corrupt(file, offset, "bad footer magic (file truncated or not finished)");
  }
  if (LoadLE64(in + 56) != Xxh3(in, 56)) {
    return Corrupt(file, offset, "footer checksum mismatch");
  }
  DataFileFooter f;
  f.version = LoadLE32(in + 8);
  if (f.version == 0 || f.version > kDataFormatVersion) {
    return UnknownVersion(file, offset + 8, "footer", f.version);
  }
  if (LoadLE32(in + 12) != 0) {
    return Corrupt(file, offset + 12, "reserved footer field is not zero");
  }
  f.index_offset = LoadLE64(in + 16);
  f.index_len = LoadLE64(in + 24);
  f.block_count = LoadLE64(in + 32);
  f.index_hash = LoadLE64(in + 40);
  f.save_id = LoadLE64(in + 48);
  return f;
}

}  // namespace ckpt
