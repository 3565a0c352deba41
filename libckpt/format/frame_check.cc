#include "format/frame_check.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "codec/codec.h"
#include "format/hdf5_container.h"
#include "format/safetensors.h"
#include "util/errors.h"
#include "util/hash.h"
#include "util/strings.h"

namespace ckpt {
namespace {

std::string Hex(uint64_t v) {
  char buf[19];
  return std::string(HexHashTo(v, buf));
}

}  // namespace

absl::Status CheckFrame(absl::Span<const std::byte> frame, const IndexEntry& e, uint64_t block_id,
                        std::string_view file) {
  auto corrupt = [&](uint64_t at, std::string_view why) {
    return absl::DataLossError(StrCat(file, " at byte offset ", e.offset + at, ": block ", block_id, ": ", why));
  };
  if ((e.flags & kFlagBareBlock) != 0) {
    // HDF5 container: the raw bytes alone, checked against the index.
    if (e.frame_len != e.stored_len || frame.size() != e.frame_len || e.codec != 0 || e.raw_len != e.stored_len) {
      return corrupt(0, "bare block does not match the index");
    }
    if ((e.flags & kFlagUnchecked) != 0) return absl::OkStatus();  // a safetensors file: no checksum to check
    const uint64_t h = Xxh3(frame.data(), e.stored_len);
    if (h != e.stored_hash) {
      return corrupt(0, StrCat("checksum mismatch (xxh3 ", Hex(h), ", expected ", Hex(e.stored_hash), ")"));
    }
    return absl::OkStatus();
  }
  if (e.frame_len != FrameLength(e.stored_len) || frame.size() != e.frame_len) {
    return corrupt(0, StrCat("frame length ", frame.size(), " does not match the index (stored ", e.stored_len,
                             ", frame ", e.frame_len, ")"));
  }
  auto t = DecodeTrailer(frame.data() + e.stored_len, file, e.offset + e.stored_len);
  if (!t.ok()) {
    return corrupt(e.stored_len, StrCat(t.status().message(), " (block trailer)"));
  }
  if (t->block_id != block_id || t->raw_len != e.raw_len || t->stored_len != e.stored_len || t->codec != e.codec ||
      t->elem_width != e.elem_width || t->flags != e.flags || t->raw_hash != e.raw_hash ||
      t->stored_hash != e.stored_hash) {
    return corrupt(e.stored_len, "block trailer disagrees with the block index");
  }
  for (size_t i = e.stored_len + kTrailerSize; i < frame.size(); ++i) {
    if (frame[i] != std::byte{0}) return corrupt(i, "frame padding is not zero");
  }
  const uint64_t h = Xxh3(frame.data(), e.stored_len);
  if (h != e.stored_hash) {
    return corrupt(0,
                   StrCat("checksum mismatch in stored bytes (xxh3 ", Hex(h), ", expected ", Hex(e.stored_hash), ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<absl::Span<const std::byte>> DecodeFrame(BlockCodec& codec, absl::Span<const std::byte> frame,
                                                        const IndexEntry& e, std::vector<std::byte>& scratch,
                                                        std::string_view file, const DeltaBaseFn* base) {
  const std::string where = StrCat(file, " at byte offset ", e.offset);
  absl::Span<const std::byte> payload = frame.subspan(0, e.stored_len);
  if (e.codec > 2) {
    return absl::DataLossError(StrCat(where, ": unknown codec ", e.codec));
  }
  const bool delta = (e.flags & kFlagDelta) != 0;
  if (delta && (base == nullptr || !*base)) {
    return absl::DataLossError(StrCat(where, ": the block is a delta, and its chunk names no base to rebuild it from"));
  }
  if (static_cast<Codec>(e.codec) == Codec::kNone) {
    if (e.raw_len != e.stored_len || (!delta && e.raw_hash != e.stored_hash)) {
      return absl::DataLossError(StrCat(where, ": uncompressed block with inconsistent sizes or checksums"));
    }
    if (!delta) return payload;
    scratch.assign(payload.begin(), payload.end());
  } else {
    scratch.resize(e.raw_len);
    absl::Status s = codec.Decode(static_cast<Codec>(e.codec), e.elem_width, e.flags, payload,
                                  absl::Span<std::byte>(scratch), where);
    if (!s.ok()) return s;
  }
  if (delta) CKPT_RETURN_IF_ERROR((*base)(absl::Span<std::byte>(scratch)));
  const uint64_t h = Xxh3(scratch.data(), scratch.size());
  if (h != e.raw_hash) {
    return absl::DataLossError(StrCat(where, ": checksum mismatch in ", delta ? "rebuilt" : "decoded", " bytes (xxh3 ",
                                      Hex(h), ", expected ", Hex(e.raw_hash), ")"));
  }
  return absl::Span<const std::byte>(scratch);
}

absl::StatusOr<std::vector<IndexEntry>> ReadFileIndex(ReadableFile& f, const ManifestFile& mf, std::string_view file) {
  if (f.size() != mf.size) {
    return absl::DataLossError(StrCat(file, ": ", f.size() < mf.size ? "truncated" : "grew", ": ", f.size(),
                                      " bytes, the manifest records ", mf.size));
  }
  const bool unchecked = IsSafetensorsDataFile(mf.name);
  const bool bare = IsHdf5DataFile(mf.name) || unchecked;
  if ((!bare && mf.index_offset < kDataHeaderSize) || mf.index_offset > mf.size ||
      mf.index_len > mf.size - mf.index_offset || (!bare && mf.index_offset + mf.index_len + kFooterSize != mf.size)) {
    return absl::DataLossError(StrCat(file, ": manifest gives an impossible index range ", mf.index_offset, "+",
                                      mf.index_len, " for a file of ", mf.size, " bytes"));
  }
  // A ckpt data file's footer follows its index: read both at once, so the
  // file is tied to the save the manifest names, not only to its index.
  std::string bytes(mf.index_len + (bare ? 0 : kFooterSize), '\0');
  absl::Status s =
      f.ReadAt(mf.index_offset, absl::Span<std::byte>(reinterpret_cast<std::byte*>(bytes.data()), bytes.size()));
  if (!s.ok()) return s;
  if (!bare) {
    const uint64_t at = mf.index_offset + mf.index_len;
    auto footer = DecodeFooter(reinterpret_cast<const std::byte*>(bytes.data()) + mf.index_len, file, at);
    if (!footer.ok()) return footer.status();
    if (footer->save_id != mf.save_id || footer->index_offset != mf.index_offset || footer->index_len != mf.index_len ||
        footer->index_hash != mf.index_hash || footer->block_count != mf.block_count) {
      return absl::DataLossError(StrCat(file, " at byte offset ", at, ": footer disagrees with the manifest (",
                                        footer->save_id != mf.save_id ? "a file of another save" : "another index",
                                        ")"));
    }
    bytes.resize(mf.index_len);
  }
  const uint64_t h = Xxh3(bytes);
  if (h != mf.index_hash) {
    return absl::DataLossError(StrCat(file, " at byte offset ", mf.index_offset,
                                      ": block index checksum mismatch (xxh3 ", Hex(h), ", expected ",
                                      Hex(mf.index_hash), ")"));
  }
  auto entries = DecodeIndex(bytes, file, mf.index_offset);
  if (!entries.ok()) return entries.status();
  if (entries->size() != mf.block_count) {
    return absl::DataLossError(StrCat(file, " at byte offset ", mf.index_offset, ": index has ", entries->size(),
                                      " blocks, the manifest records ", mf.block_count));
  }
  if (bare) {
    // HDF5 container or safetensors file: bare blocks inside the file,
    // apart from each other and from the index (libhdf5's own metadata, or
    // the safetensors header, is in between).
    std::vector<std::pair<uint64_t, uint64_t>> spans = {{mf.index_offset, mf.index_offset + mf.index_len}};
    for (size_t i = 0; i < entries->size(); ++i) {
      const IndexEntry& e = (*entries)[i];
      if ((e.flags & kFlagBareBlock) == 0 || ((e.flags & kFlagUnchecked) != 0) != unchecked ||
          (e.flags & kFlagDelta) != 0 || e.codec != 0 || e.frame_len != e.stored_len || e.raw_len != e.stored_len ||
          e.raw_len > kMaxBlockBytes || e.offset > mf.size || e.frame_len > mf.size - e.offset) {
        return absl::DataLossError(StrCat(file, " at byte offset ",
                                          mf.index_offset + kIndexHeaderSize + i * kIndexEntrySize,
                                          ": index entry of block ", i, " is malformed"));
      }
      spans.push_back({e.offset, e.offset + e.frame_len});
    }
    std::sort(spans.begin(), spans.end());
    for (size_t i = 1; i < spans.size(); ++i) {
      if (spans[i].first < spans[i - 1].second) {
        return absl::DataLossError(StrCat(file, " at byte offset ", spans[i].first, ": blocks overlap"));
      }
    }
    return entries;
  }
  // Frames must tile [header, index) exactly.
  std::vector<std::pair<uint64_t, uint64_t>> spans;
  spans.reserve(entries->size());
  for (size_t i = 0; i < entries->size(); ++i) {
    const IndexEntry& e = (*entries)[i];
    if (e.frame_len != FrameLength(e.stored_len) || e.raw_len > kMaxBlockBytes || e.offset % kFrameAlign != 0 ||
        (e.flags & (kFlagBareBlock | kFlagUnchecked)) != 0) {
      return absl::DataLossError(StrCat(file, " at byte offset ",
                                        mf.index_offset + kIndexHeaderSize + i * kIndexEntrySize,
                                        ": index entry of block ", i, " is malformed"));
    }
    spans.push_back({e.offset, e.offset + e.frame_len});
  }
  std::sort(spans.begin(), spans.end());
  uint64_t pos = kDataHeaderSize;
  for (const auto& [b, e] : spans) {
    if (b != pos) {
      return absl::DataLossError(StrCat(file, " at byte offset ", std::min(b, pos), ": frames ",
                                        b < pos ? "overlap" : "leave a gap", " in the block index"));
    }
    pos = e;
  }
  if (pos != mf.index_offset) {
    return absl::DataLossError(
        StrCat(file, " at byte offset ", pos, ": frames end before the index at ", mf.index_offset));
  }
  return std::move(entries).value();
}

}  // namespace ckpt
