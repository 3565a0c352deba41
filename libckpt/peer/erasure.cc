#include "peer/erasure.h"

#include <isa-l/erasure_code.h>

#include <algorithm>
#include <cstring>
#include <optional>

#include "util/bytes.h"
#include "util/hash.h"
#include "util/strings.h"

namespace ckpt::peer {
namespace {

constexpr char kMagic[4] = {'C', 'K', 'E', 'C'};
constexpr uint8_t kVersion = 2;

}  // namespace

absl::Status CheckErasureShape(int k, int m) {
  if (k < 1 || m < 1 || k + m > kMaxErasurePieces) {
    return absl::InvalidArgumentError(StrCat("erasure coding ", k, "+", m, ": needs k >= 1 data and m >= 1 parity ",
                                             "pieces, k + m <= ", kMaxErasurePieces));
  }
  return absl::OkStatus();
}

std::string PiecePath(std::string_view path, int index) { return StrCat(path, ".ec", index); }

std::optional<int> PieceOfPath(std::string_view path, std::string_view* base) {
  const size_t dot = path.rfind(".ec");
  if (dot == std::string_view::npos || dot == 0 || path[dot - 1] == '/') return std::nullopt;
  const std::string_view digits = path.substr(dot + 3);
  if (digits.empty() || digits.size() > 2 || (digits.size() == 2 && digits[0] == '0')) return std::nullopt;
  int index = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    index = index * 10 + (c - '0');
  }
  if (index >= kMaxErasurePieces) return std::nullopt;
  if (base != nullptr) *base = path.substr(0, dot);
  return index;
}

uint64_t PieceHeader::blocks() const { return CheckBlocks(file_bytes, k); }
uint64_t PieceHeader::block_bytes() const { return CheckBlockBytes(file_bytes, k); }

uint64_t CheckBlockBytes(uint64_t file_bytes, int k) { return kCheckRows * StripeBytes(file_bytes, k); }

uint64_t CheckBlocks(uint64_t file_bytes, int k) {
  const uint64_t piece = PieceBytesOf(file_bytes, k), block = CheckBlockBytes(file_bytes, k);
  return piece / block + (piece % block != 0);
}

size_t PieceHeaderBytes(int k, int m, uint64_t file_bytes) {
  return kPieceHeaderFixed + 8 * static_cast<size_t>(k + m) * CheckBlocks(file_bytes, k) + 8;
}

bool PieceHeader::SameFile(const PieceHeader& o) const {
  return k == o.k && m == o.m && file_bytes == o.file_bytes && piece_bytes == o.piece_bytes &&
         block_xxh3 == o.block_xxh3;
}

uint64_t BlockSum(const char* payload, uint64_t len, uint64_t block_bytes, uint64_t block) {
  const uint64_t at = block * block_bytes;
  return Xxh3(payload + at, std::min(block_bytes, len - at));
}

size_t AnnouncedHeaderBytes(absl::Span<const std::byte> fixed) {
  if (fixed.size() < kPieceHeaderFixed || std::memcmp(fixed.data(), kMagic, 4) != 0) return 0;
  const int k = static_cast<int>(fixed[5]), m = static_cast<int>(fixed[6]);
  const uint64_t file_bytes = LoadLE64(fixed.data() + 16);
  if (!CheckErasureShape(k, m).ok() || CheckBlocks(file_bytes, k) > (uint64_t{1} << 32)) return 0;
  return PieceHeaderBytes(k, m, file_bytes);
}

std::string EncodePieceHeader(const PieceHeader& h) {
  std::string out(PieceHeaderBytes(h.k, h.m, h.file_bytes), '\0');
  auto* p = reinterpret_cast<std::byte*>(out.data());
  std::memcpy(p, kMagic, 4);
  p[4] = static_cast<std::byte>(kVersion);
  p[5] = static_cast<std::byte>(h.k);
  p[6] = static_cast<std::byte>(h.m);
  p[7] = static_cast<std::byte>(h.index);
  StoreLE64(p + 16, h.file_bytes);
  StoreLE64(p + 24, h.piece_bytes);
  for (size_t i = 0; i < h.block_xxh3.size(); ++i) StoreLE64(p + kPieceHeaderFixed + 8 * i, h.block_xxh3[i]);
  const size_t body = out.size() - 8;
  StoreLE64(p + body, Xxh3(out.data(), body));
  return out;
}

absl::StatusOr<PieceHeader> DecodePieceHeader(absl::Span<const std::byte> piece) {
  return DecodePieceHeader(piece, piece.size());
}

absl::StatusOr<PieceHeader> DecodePieceHeader(absl::Span<const std::byte> piece, uint64_t piece_size) {
  auto bad = [](std::string_view why) { return absl::DataLossError(StrCat("erasure-coded piece: ", why)); };
  if (piece.size() < kPieceHeaderFixed) return bad(StrCat("only ", piece.size(), " bytes, shorter than a header"));
  const std::byte* p = piece.data();
  if (std::memcmp(p, kMagic, 4) != 0) return bad("no CKEC magic");
  if (static_cast<uint8_t>(p[4]) != kVersion) return bad(StrCat("version ", static_cast<int>(p[4]), ", not 2"));
  PieceHeader h;
  h.k = static_cast<int>(p[5]);
  h.m = static_cast<int>(p[6]);
  h.index = static_cast<int>(p[7]);
  if (!CheckErasureShape(h.k, h.m).ok()) return bad(StrCat("shape ", h.k, "+", h.m));
  if (h.index >= h.k + h.m) return bad(StrCat("index ", h.index, " of ", h.k + h.m, " pieces"));
  h.file_bytes = LoadLE64(p + 16);
  h.piece_bytes = LoadLE64(p + 24);
  // Before the sizes are trusted to size anything: a piece is its header
  // and its payload.
  if (h.piece_bytes > piece_size || h.piece_bytes != PieceBytesOf(h.file_bytes, h.k)) {
    return bad(StrCat("pieces of ", h.piece_bytes, " bytes for a file of ", h.file_bytes, " in ", h.k, ", in ",
                      piece_size, " bytes"));
  }
  const size_t header = PieceHeaderBytes(h.k, h.m, h.file_bytes);
  if (piece.size() < header || piece_size < header) {
    return bad(StrCat(std::min<uint64_t>(piece.size(), piece_size), " bytes, shorter than its header of ", header));
  }
  if (LoadLE64(p + header - 8) != Xxh3(p, header - 8)) return bad("the header's checksum does not match");
  if (h.piece_bytes != PieceBytesOf(h.file_bytes, h.k)) {
    return bad(StrCat("pieces of ", h.piece_bytes, " bytes for a file of ", h.file_bytes, " in ", h.k));
  }
  if (piece_size - header != h.piece_bytes) {
    return bad(StrCat("a payload of ", piece_size - header, " bytes, its header says ", h.piece_bytes));
  }
  h.block_xxh3.resize(static_cast<size_t>(h.k + h.m) * h.blocks());
  for (size_t i = 0; i < h.block_xxh3.size(); ++i) h.block_xxh3[i] = LoadLE64(p + kPieceHeaderFixed + 8 * i);
  return h;
}

ErasureCoder::ErasureCoder(int k, int m) : k_(k), m_(m) {
  matrix_.resize(static_cast<size_t>((k + m) * k));
  // Cauchy rows under the identity: every k x k submatrix is invertible,
  // so any k pieces rebuild the file.
  gf_gen_cauchy1_matrix(matrix_.data(), k + m, k);
  tables_.resize(static_cast<size_t>(32 * k * m));
  ec_init_tables(k, m, matrix_.data() + k * k, tables_.data());
}

absl::StatusOr<std::unique_ptr<ErasureCoder>> ErasureCoder::Create(int k, int m) {
  if (absl::Status s = CheckErasureShape(k, m); !s.ok()) return s;
  return std::unique_ptr<ErasureCoder>(new ErasureCoder(k, m));
}

namespace {
uint64_t CeilDiv(uint64_t a, uint64_t b) { return a / b + (a % b != 0); }
}  // namespace

uint64_t StripeBytes(uint64_t file_bytes, int k) {
  // As few rows as chunks of at most 1 MiB allow, then chunks as even as
  // those rows allow.
  const auto kk = static_cast<uint64_t>(k);
  const uint64_t rows = std::max<uint64_t>(1, CeilDiv(file_bytes, kk * kMaxStripeBytes));
  return std::max<uint64_t>(1, CeilDiv(file_bytes, kk * rows));
}

uint64_t PieceBytesOf(uint64_t file_bytes, int k) {
  const uint64_t stripe = StripeBytes(file_bytes, k);
  return CeilDiv(file_bytes, stripe * static_cast<uint64_t>(k)) * stripe;
}

void PieceRowsToFile(const char* piece, int i, uint64_t row, uint64_t rows, uint64_t stripe, int k, char* file,
                     uint64_t file_bytes) {
  for (uint64_t r = 0; r < rows; ++r) {
    const uint64_t at = ((row + r) * static_cast<uint64_t>(k) + static_cast<uint64_t>(i)) * stripe;
    if (at >= file_bytes) break;
    std::memcpy(file + at, piece + r * stripe, std::min(stripe, file_bytes - at));
  }
}

std::vector<std::string> ErasureCoder::Encode(absl::Span<const std::byte> file) const {
  std::vector<std::string> pieces;
  Encode(file, &pieces);
  return pieces;
}

void ErasureCoder::Encode(absl::Span<const std::byte> file, std::vector<std::string>* pieces) const {
  const int n = k_ + m_;
  PieceHeader h;
  h.k = k_;
  h.m = m_;
  h.file_bytes = file.size();
  h.piece_bytes = PieceBytes(file.size());
  const size_t len = h.piece_bytes;
  const size_t header = PieceHeaderBytes(k_, m_, file.size());
  pieces->resize(static_cast<size_t>(n));
  std::vector<unsigned char*> data(static_cast<size_t>(k_)), parity(static_cast<size_t>(m_));
  for (int i = 0; i < n; ++i) {
    std::string& piece = (*pieces)[static_cast<size_t>(i)];
    piece.resize(header + len);  // in place when it is that size already
    auto* payload = reinterpret_cast<unsigned char*>(piece.data() + header);
    if (i < k_) {
      // Chunks i, i + k, ... of the file, zero past its end.
      const uint64_t stripe = StripeBytes(file.size(), k_);
      for (uint64_t r = 0; r * stripe < len; ++r) {
        const uint64_t at = (r * static_cast<uint64_t>(k_) + static_cast<uint64_t>(i)) * stripe;
        const uint64_t n = at < file.size() ? std::min(stripe, file.size() - at) : 0;
        if (n > 0) std::memcpy(payload + r * stripe, file.data() + at, n);
        std::memset(payload + r * stripe + n, 0, stripe - n);
      }
      data[static_cast<size_t>(i)] = payload;
    } else {
      parity[static_cast<size_t>(i - k_)] = payload;
    }
  }
  if (len > 0) {
    ec_encode_data(static_cast<int>(len), k_, m_, const_cast<unsigned char*>(tables_.data()), data.data(),
                   parity.data());
  }
  const uint64_t blocks = h.blocks();
  h.block_xxh3.resize(static_cast<size_t>(n) * blocks);
  for (int i = 0; i < n; ++i) {
    for (uint64_t b = 0; b < blocks; ++b) {
      h.block_xxh3[static_cast<size_t>(i) * blocks + b] =
          BlockSum((*pieces)[static_cast<size_t>(i)].data() + header, len, h.block_bytes(), b);
    }
  }
  for (int i = 0; i < n; ++i) {
    h.index = i;
    const std::string head = EncodePieceHeader(h);
    std::memcpy((*pieces)[static_cast<size_t>(i)].data(), head.data(), head.size());
  }
}

absl::StatusOr<std::string> ErasureCoder::Decode(const std::vector<const std::string*>& pieces,
                                                 ErasureDecodeStats* stats) const {
  const int n = k_ + m_;
  ErasureDecodeStats local;
  ErasureDecodeStats& st = stats != nullptr ? *stats : local;
  st = ErasureDecodeStats{};
  if (static_cast<int>(pieces.size()) != n) {
    return absl::InvalidArgumentError(StrCat("erasure decode: ", pieces.size(), " pieces given for ", k_, "+", m_));
  }
  // The file is the one most valid headers describe (a stale piece of
  // another save of the same path is refused, not mixed in).
  std::vector<std::optional<PieceHeader>> headers(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    const std::string* p = pieces[static_cast<size_t>(i)];
    if (p == nullptr) {
      ++st.pieces_missing;
      continue;
    }
    auto h = DecodePieceHeader({reinterpret_cast<const std::byte*>(p->data()), p->size()});
    if (h.ok() && h->index == i && h->k == k_ && h->m == m_) headers[static_cast<size_t>(i)] = std::move(h).value();
  }
  const PieceHeader* file = nullptr;
  int votes = 0;
  for (const auto& h : headers) {
    if (!h) continue;
    int same = 0;
    for (const auto& o : headers) same += o && o->SameFile(*h);
    if (same > votes) {
      votes = same;
      file = &*h;
    }
  }
  // The good pieces: a header of that file and a payload that matches its
  // checksum there.
  const size_t header = file != nullptr ? PieceHeaderBytes(k_, m_, file->file_bytes) : 0;
  const auto all_blocks_match = [&](const char* payload, int piece) {
    for (uint64_t b = 0; b < file->blocks(); ++b) {
      if (BlockSum(payload, file->piece_bytes, file->block_bytes(), b) != file->Sum(piece, b)) return false;
    }
    return true;
  };
  std::vector<int> good;
  for (int i = 0; i < n; ++i) {
    const std::string* p = pieces[static_cast<size_t>(i)];
    if (p == nullptr) continue;
    const auto& h = headers[static_cast<size_t>(i)];
    const bool ok = file != nullptr && h && h->SameFile(*file) && all_blocks_match(p->data() + header, i);
    if (ok) {
      good.push_back(i);
    } else {
      ++st.pieces_refused;
    }
  }
  if (static_cast<int>(good.size()) < k_) {
    return absl::UnavailableError(StrCat("erasure decode: ", good.size(), " good pieces of ", n, " (",
                                         st.pieces_missing, " missing, ", st.pieces_refused, " damaged); ", k_,
                                         " are needed"));
  }
  const size_t len = file->piece_bytes;
  const uint64_t stripe = StripeBytes(file->file_bytes, k_);
  std::string out(file->file_bytes, '\0');
  auto payload = [&](int i) { return pieces[static_cast<size_t>(i)]->data() + header; };
  // Data pieces at hand are copied to their places; the others are rebuilt
  // from the first k good pieces (data pieces first, as `good` is in index
  // order), checked, then copied.
  std::vector<int> lost;
  for (int i = 0; i < k_; ++i) {
    if (std::find(good.begin(), good.end(), i) != good.end()) {
      PieceRowsToFile(payload(i), i, 0, len / stripe, stripe, k_, out.data(), out.size());
    } else {
      lost.push_back(i);
    }
  }
  if (!lost.empty() && len > 0) {
    const std::vector<int> use(good.begin(), good.begin() + k_);
    std::vector<std::string> rebuilt(lost.size(), std::string(len, '\0'));
    std::vector<const unsigned char*> src;
    std::vector<unsigned char*> dst;
    for (int i : use) src.push_back(reinterpret_cast<const unsigned char*>(payload(i)));
    for (std::string& r : rebuilt) dst.push_back(reinterpret_cast<unsigned char*>(r.data()));
    if (absl::Status s = Rebuild(use, lost, len, src, dst); !s.ok()) return s;
    st.bytes_decoded = lost.size() * len;
    st.pieces_rebuilt = static_cast<int>(lost.size());
    for (size_t r = 0; r < lost.size(); ++r) {
      if (!all_blocks_match(rebuilt[r].data(), lost[r])) {
        return absl::DataLossError(
            StrCat("erasure decode: data piece ", lost[r], " rebuilt from parity does not match its checksum"));
      }
      PieceRowsToFile(rebuilt[r].data(), lost[r], 0, len / stripe, stripe, k_, out.data(), out.size());
    }
  }
  return out;
}

absl::Status ErasureCoder::Rebuild(const std::vector<int>& use, const std::vector<int>& lost, size_t len,
                                   const std::vector<const unsigned char*>& src,
                                   const std::vector<unsigned char*>& dst) const {
  if (static_cast<int>(use.size()) != k_ || src.size() != use.size() || dst.size() != lost.size()) {
    return absl::InvalidArgumentError(StrCat("erasure rebuild: ", use.size(), " pieces used for ", k_));
  }
  if (lost.empty() || len == 0) return absl::OkStatus();
  std::vector<unsigned char> sub(static_cast<size_t>(k_ * k_)), inverse(static_cast<size_t>(k_ * k_));
  for (int r = 0; r < k_; ++r) {
    const int u = use[static_cast<size_t>(r)];
    if (u < 0 || u >= k_ + m_) return absl::InvalidArgumentError(StrCat("erasure rebuild: piece ", u));
    std::memcpy(sub.data() + r * k_, matrix_.data() + u * k_, static_cast<size_t>(k_));
  }
  if (gf_invert_matrix(sub.data(), inverse.data(), k_) != 0) {
    return absl::InvalidArgumentError("erasure rebuild: the pieces used are not k different ones");
  }
  // Row j of the inverse rebuilds data piece j from the pieces in `use`.
  std::vector<unsigned char> rows(lost.size() * static_cast<size_t>(k_));
  for (size_t r = 0; r < lost.size(); ++r) {
    if (lost[r] < 0 || lost[r] >= k_) return absl::InvalidArgumentError(StrCat("erasure rebuild: lost ", lost[r]));
    std::memcpy(rows.data() + r * static_cast<size_t>(k_), inverse.data() + lost[r] * k_, static_cast<size_t>(k_));
  }
  std::vector<unsigned char> tables(32 * static_cast<size_t>(k_) * lost.size());
  ec_init_tables(k_, static_cast<int>(lost.size()), rows.data(), tables.data());
  std::vector<unsigned char*> in(src.size()), out(dst.begin(), dst.end());
  for (size_t i = 0; i < src.size(); ++i) in[i] = const_cast<unsigned char*>(src[i]);
  ec_encode_data(static_cast<int>(len), k_, static_cast<int>(lost.size()), tables.data(), in.data(), out.data());
  return absl::OkStatus();
}

}  // namespace ckpt::peer
