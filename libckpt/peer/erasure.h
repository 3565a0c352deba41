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

/// The header of a piece (little-endian, 40 + 8 (k + m) bytes):
///   "CKEC" u8 version(1) u8 k u8 m u8 index u32 0 u32 0
///   u64 file_bytes u64 piece_bytes
///   u64 piece_xxh3[k + m]            of each piece's payload
///   u64 header_xxh3                  of every header byte before it
/// The payload (piece_bytes bytes) follows: data piece i holds file bytes
/// [i piece_bytes, (i + 1) piece_bytes), zero past the file's end.
struct PieceHeader {
  int k = 0;
  int m = 0;
  int index = 0;  ///< 0 .. k-1 data, k .. k+m-1 parity
  uint64_t file_bytes = 0;
  uint64_t piece_bytes = 0;
  std::vector<uint64_t> piece_xxh3;  ///< k + m

  /// Whether `o` describes the same coded file (all but the index).
  bool SameFile(const PieceHeader& o) const;
};

inline constexpr size_t kPieceHeaderFixed = 32;
inline size_t PieceHeaderBytes(int pieces) { return kPieceHeaderFixed + 8 * static_cast<size_t>(pieces) + 8; }

std::string EncodePieceHeader(const PieceHeader& h);
/// The header at the start of `piece`, checked (magic, version, shape, its
/// own checksum, lengths that fit); DataLoss naming what is wrong.
absl::StatusOr<PieceHeader> DecodePieceHeader(absl::Span<const std::byte> piece);
/// The same from the first bytes of a piece of `piece_size` bytes: `head`
/// holds at least its header (PieceHeaderBytes(kMaxErasurePieces) bytes, or
/// the whole piece when it is shorter, always do).
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
  uint64_t PieceBytes(uint64_t file_bytes) const;

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

 private:
  ErasureCoder(int k, int m);
  int k_;
  int m_;
  std::vector<unsigned char> matrix_;  ///< (k + m) x k, identity on top
  std::vector<unsigned char> tables_;  ///< ISA-L's tables for the m parity rows
};

}  // namespace ckpt::peer

#endif  // CKPT_PEER_ERASURE_H_
