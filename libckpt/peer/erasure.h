// Reed-Solomon erasure coding for the memory level's files: a file is cut
// into k data pieces and m parity pieces (ISA-L's Cauchy matrices over
// GF(2^8)), any k of which rebuild it. Every piece starts with a header that
// names the file's length and the xxh3 of every piece, so that any valid
// piece can check all the others, and each data piece rebuilt from parity
// is checked against its own checksum.
#ifndef CKPT_PEER_ERASURE_H_
#define CKPT_PEER_ERASURE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace ckpt::peer {

/// k + m at most: the pieces of one file go to this many failure domains.
inline constexpr int kMaxErasurePieces = 32;

/// OK when k data and m parity pieces are a shape the coder takes: k >= 1,
/// m >= 1, k + m <= kMaxErasurePieces.
absl::Status CheckErasureShape(int k, int m);

/// The header of a piece (little-endian, 40 + 8 (k + m) B bytes):
///   "CKEC" u8 version(2) u8 k u8 m u8 index u32 0 u32 0
///   u64 file_bytes u64 piece_bytes
///   u64 block_xxh3[(k + m) B]   of each piece's payload in blocks of
///                               kCheckRows rows (B = CheckBlocks(...)),
///                               piece p's block b at p B + b
///   u64 header_xxh3             of every header byte before it
/// The payload (piece_bytes bytes) follows. The file is striped: cut into
/// chunks of S = StripeBytes(file_bytes, k) bytes (at most 1 MiB, and as
/// even as they can be: a file pads its pieces by less than k bytes a
/// row), row r of the file (bytes
/// [r k S, (r + 1) k S)) is chunk r of each data piece in turn, so data
/// piece i holds file chunks i, i + k, i + 2k, ... one after the other
/// (zero past the file's end), and parity piece j's bytes [r S, (r + 1) S)
/// are coded from row r alone: a reader rebuilds a file row by row, in the
/// order it reads it.
struct PieceHeader {
  int k = 0;
  int m = 0;
  int index = 0;  ///< 0 .. k-1 data, k .. k+m-1 parity
  uint64_t file_bytes = 0;
  uint64_t piece_bytes = 0;
  std::vector<uint64_t> block_xxh3;  ///< (k + m) blocks()

  uint64_t blocks() const;
  uint64_t block_bytes() const;
  uint64_t Sum(int piece, uint64_t block) const { return block_xxh3[static_cast<size_t>(piece) * blocks() + block]; }
  /// Whether `o` describes the same coded file (all but the index).
  bool SameFile(const PieceHeader& o) const;
};

inline constexpr size_t kPieceHeaderFixed = 32;
/// A piece's payload is checked in blocks of this many rows (the last may
/// be shorter), so that a reader checks each part as it arrives.
inline constexpr uint64_t kCheckRows = 4;
/// Bytes of a piece's check block, and how many blocks it has.
uint64_t CheckBlockBytes(uint64_t file_bytes, int k);
uint64_t CheckBlocks(uint64_t file_bytes, int k);
size_t PieceHeaderBytes(int k, int m, uint64_t file_bytes);
/// The xxh3 of block `block` (of `block_bytes`) of a payload of `len` bytes.
uint64_t BlockSum(const char* payload, uint64_t len, uint64_t block_bytes, uint64_t block);
/// The header size a piece's first kPieceHeaderFixed bytes announce (0
/// when they are too short or not a header).
size_t AnnouncedHeaderBytes(absl::Span<const std::byte> fixed);
/// The chunk size of a file's stripes: 1 MiB, or the file's k-th part
/// (at least 1 byte) when that is smaller.
inline constexpr uint64_t kMaxStripeBytes = uint64_t{1} << 20;
uint64_t StripeBytes(uint64_t file_bytes, int k);
/// Payload bytes of each piece: whole rows of StripeBytes each.
uint64_t PieceBytesOf(uint64_t file_bytes, int k);
/// Copies `rows` rows of data piece `i`, starting with row `row`, from
/// `piece` (those rows' bytes of its payload) to their places in `file`
/// (`file_bytes` long); bytes past the file's end are left out.
void PieceRowsToFile(const char* piece, int i, uint64_t row, uint64_t rows, uint64_t stripe, int k, char* file,
                     uint64_t file_bytes);

std::string EncodePieceHeader(const PieceHeader& h);
/// The header at the start of `piece`, checked (magic, version, shape, its
/// own checksum, lengths that fit); DataLoss naming what is wrong.
absl::StatusOr<PieceHeader> DecodePieceHeader(absl::Span<const std::byte> piece);
/// The same from the first bytes of a piece of `piece_size` bytes: `head`
/// holds at least its header (AnnouncedHeaderBytes of its first bytes).
absl::StatusOr<PieceHeader> DecodePieceHeader(absl::Span<const std::byte> head, uint64_t piece_size);

/// The name under which piece `index` of the file `path` is held:
/// "<path>.ec<index>".
std::string PiecePath(std::string_view path, int index);
/// The piece index of a name PiecePath made, with `*base` set to the file's
/// path; nullopt for any other name.
std::optional<int> PieceOfPath(std::string_view path, std::string_view* base = nullptr);

/// What a Decode found.
struct ErasureDecodeStats {
  int pieces_missing = 0;      ///< of the k + m, not given
  int pieces_refused = 0;      ///< given but damaged (header, checksum, another file's)
  uint64_t bytes_decoded = 0;  ///< file bytes rebuilt from parity (0: every data piece was there)
  int pieces_rebuilt = 0;      ///< data pieces rebuilt from parity
};

class ErasureCoder {
 public:
  static absl::StatusOr<std::unique_ptr<ErasureCoder>> Create(int k, int m);
  int k() const { return k_; }
  int m() const { return m_; }
  /// Payload bytes of each piece of a file of `file_bytes`.
  uint64_t PieceBytes(uint64_t file_bytes) const { return PieceBytesOf(file_bytes, k_); }

  /// The k + m pieces of `file`, headers included, data pieces first.
  std::vector<std::string> Encode(absl::Span<const std::byte> file) const;
  /// The same into `pieces`, whose strings are reused where they are of the
  /// size already (no new memory to map for a file like the last one).
  void Encode(absl::Span<const std::byte> file, std::vector<std::string>* pieces) const;

  /// The file from its pieces: `pieces[i]` is piece i or null when it is
  /// missing (pieces.size() == k + m). Damaged pieces are passed over;
  /// Unavailable when fewer than k good ones are left, DataLoss when a data
  /// piece rebuilt from parity does not match its checksum.
  absl::StatusOr<std::string> Decode(const std::vector<const std::string*>& pieces,
                                     ErasureDecodeStats* stats = nullptr) const;

  /// Rebuilds `lost` data pieces' bytes from the same `len` bytes of the k
  /// pieces `use` (indexes, ascending; src[j] the bytes of piece use[j]),
  /// into dst[j] for lost[j]: any row range of a striped file.
  absl::Status Rebuild(const std::vector<int>& use, const std::vector<int>& lost, size_t len,
                       const std::vector<const unsigned char*>& src, const std::vector<unsigned char*>& dst) const;

 private:
  ErasureCoder(int k, int m);
  int k_;
  int m_;
  std::vector<unsigned char> matrix_;  ///< (k + m) x k, identity on top
  std::vector<unsigned char> tables_;  ///< ISA-L's tables for the m parity rows
};

}  // namespace ckpt::peer

#endif  // CKPT_PEER_ERASURE_H_
