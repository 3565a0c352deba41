// Reed-Solomon pieces of the memory level (peer/erasure.h): any k of k + m
// pieces rebuild a file bit-exactly, damaged pieces are refused by their
// checksums, too few good pieces is a clear error, and a piece's header
// checks itself.
#include "peer/erasure.h"

#include <map>
#include <random>
#include <set>

#include "ckpt/peer.h"
#include "gtest/gtest.h"
#include "testutil/test_util.h"

namespace ckpt::peer {
namespace {

std::string RandomFile(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng());
  return s;
}

absl::Span<const std::byte> Bytes(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

std::vector<const std::string*> Pointers(const std::vector<std::string>& pieces) {
  std::vector<const std::string*> out;
  for (const std::string& p : pieces) out.push_back(&p);
  return out;
}

// RS(4+2): every pair of lost pieces (15 pairs), and every single one, and
// none, rebuilds the file exactly; bytes are decoded only when a data piece
// is among those lost.
TEST(Erasure, AnyFourOfSixPiecesRebuildTheFile) {
  auto coder = ErasureCoder::Create(4, 2);
  ASSERT_OK(coder);
  for (size_t n : {size_t{0}, size_t{1}, size_t{4}, size_t{1000}, size_t{1} << 20, (size_t{1} << 20) + 3}) {
    const std::string file = RandomFile(n, n + 1);
    const std::vector<std::string> pieces = (*coder)->Encode(Bytes(file));
    ASSERT_EQ(pieces.size(), 6u);
    const uint64_t piece_bytes = (*coder)->PieceBytes(n);
    EXPECT_EQ(piece_bytes, (n + 3) / 4);
    for (const std::string& p : pieces) EXPECT_EQ(p.size(), PieceHeaderBytes(6) + piece_bytes);
    int cases = 0;
    for (int a = -1; a < 6; ++a) {
      for (int b = a; b < 6; ++b) {
        if (a == -1 && b != -1) continue;
        std::vector<const std::string*> given = Pointers(pieces);
        if (a >= 0) given[static_cast<size_t>(a)] = nullptr;
        if (b >= 0) given[static_cast<size_t>(b)] = nullptr;
        ErasureDecodeStats st;
        auto back = (*coder)->Decode(given, &st);
        ASSERT_OK(back);
        EXPECT_TRUE(*back == file) << "lost " << a << " and " << b << " of a file of " << n;
        const int lost_data = (a >= 0 && a < 4) + (b >= 0 && b < 4 && b != a);
        EXPECT_EQ(st.bytes_decoded, static_cast<uint64_t>(lost_data) * piece_bytes) << a << " " << b;
        EXPECT_EQ(st.pieces_missing, (a >= 0) + (b >= 0 && b != a));
        ++cases;
      }
    }
    EXPECT_EQ(cases, 1 + 6 + 15);
  }
}

// Pieces reused for another file (of the same size, or shorter, so that old
// bytes lie where the new file's padding goes) come out as fresh ones.
TEST(Erasure, ReusedPiecesEncodeAsFreshOnes) {
  auto coder = ErasureCoder::Create(4, 2);
  ASSERT_OK(coder);
  std::vector<std::string> pieces;
  for (size_t n : {size_t{4000}, size_t{4000}, size_t{3999}, size_t{3001}}) {
    const std::string file = RandomFile(n, n * 7);
    (*coder)->Encode(Bytes(file), &pieces);
    EXPECT_EQ(pieces, (*coder)->Encode(Bytes(file))) << n;
  }
}

// Only the pieces' own payload bytes and the data pieces' order matter:
// the data pieces hold the file as it is.
TEST(Erasure, DataPiecesHoldTheFileInOrder) {
  auto coder = ErasureCoder::Create(3, 2);
  ASSERT_OK(coder);
  const std::string file = RandomFile(3000, 7);
  const std::vector<std::string> pieces = (*coder)->Encode(Bytes(file));
  std::string joined;
  for (int i = 0; i < 3; ++i) joined += pieces[static_cast<size_t>(i)].substr(PieceHeaderBytes(5));
  EXPECT_EQ(joined.substr(0, file.size()), file);
}

TEST(Erasure, DamagedPiecesAreRefusedAndTooFewGoodOnesIsUnavailable) {
  auto coder = ErasureCoder::Create(4, 2);
  ASSERT_OK(coder);
  const std::string file = RandomFile(100000, 3);
  std::vector<std::string> pieces = (*coder)->Encode(Bytes(file));
  // A flipped payload byte in a data piece and in a parity piece: both are
  // refused, and the other four still rebuild the file.
  pieces[1][PieceHeaderBytes(6) + 10] ^= 1;
  pieces[5][PieceHeaderBytes(6) + 99] ^= 1;
  ErasureDecodeStats st;
  auto back = (*coder)->Decode(Pointers(pieces), &st);
  ASSERT_OK(back);
  EXPECT_TRUE(*back == file);
  EXPECT_EQ(st.pieces_refused, 2);
  EXPECT_GT(st.bytes_decoded, 0u);
  // A third damaged piece (its header this time): 3 good of 6.
  pieces[0][5] ^= 1;
  auto none = (*coder)->Decode(Pointers(pieces), &st);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kUnavailable) << none.status();
  EXPECT_NE(none.status().message().find("3 good pieces of 6"), std::string_view::npos) << none.status();
}

// A piece of another save of the same file (a stale copy) is not mixed in:
// the file most pieces describe wins, and the stale piece is refused.
TEST(Erasure, APieceOfAnotherFileIsRefused) {
  auto coder = ErasureCoder::Create(4, 2);
  ASSERT_OK(coder);
  const std::string file = RandomFile(5000, 11);
  const std::string other = RandomFile(5000, 12);
  std::vector<std::string> pieces = (*coder)->Encode(Bytes(file));
  pieces[2] = (*coder)->Encode(Bytes(other))[2];
  ErasureDecodeStats st;
  auto back = (*coder)->Decode(Pointers(pieces), &st);
  ASSERT_OK(back);
  EXPECT_TRUE(*back == file);
  EXPECT_EQ(st.pieces_refused, 1);
}

TEST(Erasure, HeadersCheckThemselvesAndShapesAreBounded) {
  EXPECT_FALSE(CheckErasureShape(0, 2).ok());
  EXPECT_FALSE(CheckErasureShape(4, 0).ok());
  EXPECT_FALSE(CheckErasureShape(30, 3).ok());
  EXPECT_OK(CheckErasureShape(4, 2));
  EXPECT_FALSE(ErasureCoder::Create(0, 1).ok());
  auto coder = ErasureCoder::Create(2, 1);
  ASSERT_OK(coder);
  const std::string file = RandomFile(64, 5);
  const std::vector<std::string> pieces = (*coder)->Encode(Bytes(file));
  auto h = DecodePieceHeader(Bytes(pieces[2]));
  ASSERT_OK(h);
  EXPECT_EQ(h->k, 2);
  EXPECT_EQ(h->m, 1);
  EXPECT_EQ(h->index, 2);
  EXPECT_EQ(h->file_bytes, 64u);
  EXPECT_EQ(h->piece_bytes, 32u);
  EXPECT_EQ(EncodePieceHeader(*h), pieces[2].substr(0, PieceHeaderBytes(3)));
  // Every single-byte change of the header is caught; so is a truncation.
  for (size_t i = 0; i < PieceHeaderBytes(3); ++i) {
    std::string bad = pieces[2];
    bad[i] ^= 0x40;
    EXPECT_FALSE(DecodePieceHeader(Bytes(bad)).ok()) << "byte " << i;
  }
  EXPECT_FALSE(DecodePieceHeader(Bytes(pieces[2].substr(0, pieces[2].size() - 1))).ok());
  EXPECT_FALSE(DecodePieceHeader(Bytes(std::string(10, 'x'))).ok());
  // The wrong number of pieces is a usage error.
  EXPECT_EQ((*coder)->Decode({&pieces[0]}).status().code(), absl::StatusCode::kInvalidArgument);
}

// RS(4+2) over 6 hosts of 2 ranks each: each rank's 6 pieces are in 6
// different hosts, piece 0 its own, every rank holds 6 pieces, and for each
// of the 15 pairs of lost hosts every rank keeps at least 4 of its pieces.
TEST(Erasure, PlacementPutsEachPieceInAnotherDomain) {
  std::vector<std::string> domains;
  for (int h = 0; h < 6; ++h) {
    domains.push_back("host-" + std::to_string(h));
    domains.push_back("host-" + std::to_string(h));
  }
  auto p = PlaceErasure(domains, 4, 2);
  ASSERT_OK(p);
  std::map<int, int> holds;
  for (size_t i = 0; i < domains.size(); ++i) {
    const std::vector<int>& holders = (*p)[i];
    ASSERT_EQ(holders.size(), 6u);
    EXPECT_EQ(holders[0], static_cast<int>(i));
    std::set<std::string> hosts;
    for (int h : holders) {
      hosts.insert(domains[static_cast<size_t>(h)]);
      ++holds[h];
    }
    EXPECT_EQ(hosts.size(), 6u) << "rank " << i;
  }
  for (const auto& [rank, n] : holds) EXPECT_EQ(n, 6) << "rank " << rank;
  for (int a = 0; a < 6; ++a) {
    for (int b = a + 1; b < 6; ++b) {
      const std::set<std::string> lost = {"host-" + std::to_string(a), "host-" + std::to_string(b)};
      for (size_t i = 0; i < domains.size(); ++i) {
        int left = 0;
        for (int h : (*p)[i]) left += lost.count(domains[static_cast<size_t>(h)]) == 0;
        EXPECT_GE(left, 4) << "rank " << i << " with hosts " << a << " and " << b << " lost";
      }
    }
  }
  auto few = PlaceErasure({"a", "b", "c", "d", "e"}, 4, 2);
  EXPECT_TRUE(absl::IsFailedPrecondition(few.status())) << few.status();
  EXPECT_NE(few.status().message().find("needs 6 failure domains; the ranks are in 5 (a, b, c, d, e)"),
            std::string::npos)
      << few.status();
  EXPECT_TRUE(absl::IsInvalidArgument(PlaceErasure(domains, 0, 2).status()));
}

}  // namespace
}  // namespace ckpt::peer
