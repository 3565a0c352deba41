// Reed-Solomon pieces of the memory level (peer/erasure.h): any k of k + m
// pieces rebuild a file bit-exactly, damaged pieces are refused by their
// checksums, too few good pieces is a clear error, and a piece's header
// checks itself; and the memory level coded that way, through the
// Checkpointer, over six processes' memories on loopback.
#include "peer/erasure.h"

#include <map>
#include <random>
#include <set>
#include <thread>

#include "ckpt/checkpointer.h"
#include "ckpt/peer.h"
#include "gtest/gtest.h"
#include "testutil/test_util.h"
#include "util/errors.h"
#include "util/strings.h"

namespace ckpt::peer {
namespace {

using ::ckpt::testing::EmptyShard;
using ::ckpt::testing::MakeShard;
using ::ckpt::testing::Mismatches;
using ::ckpt::testing::OwnedShard;
using ::ckpt::testing::StateOf;
using ::ckpt::testing::TempDir;

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
  // Up to 4 MiB a file is one row (a quarter in each data piece); 9 MiB + 5
  // bytes is three rows of 1 MiB chunks, the last one mostly padding; 17 MiB
  // + 1 five rows, its pieces checked in two blocks.
  for (size_t n : {size_t{0}, size_t{1}, size_t{4}, size_t{1000}, size_t{1} << 20, (size_t{1} << 20) + 3,
                   (size_t{9} << 20) + 5, (size_t{17} << 20) + 1}) {
    const std::string file = RandomFile(n, n + 1);
    const std::vector<std::string> pieces = (*coder)->Encode(Bytes(file));
    ASSERT_EQ(pieces.size(), 6u);
    const uint64_t piece_bytes = (*coder)->PieceBytes(n);
    // Padding: less than k bytes a row of at most k MiB.
    EXPECT_GE(4 * piece_bytes, n);
    EXPECT_LT(4 * piece_bytes - n, 4 * (n / (size_t{4} << 20) + 1)) << n;
    for (const std::string& p : pieces) EXPECT_EQ(p.size(), PieceHeaderBytes(4, 2, n) + piece_bytes);
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

// Data piece i of a striped file holds its chunks i, i + k, ... in order,
// each StripeBytes long; a row range of a piece copies to the file's
// places.
TEST(Erasure, DataPiecesHoldTheFilesChunksInTurn) {
  auto coder = ErasureCoder::Create(4, 2);
  ASSERT_OK(coder);
  // Three rows of chunks of S = 786433 bytes; the last chunk (11) is 7
  // bytes short.
  const size_t n = (size_t{9} << 20) + 5;
  const std::string file = RandomFile(n, 11);
  const std::vector<std::string> pieces = (*coder)->Encode(Bytes(file));
  const size_t s = StripeBytes(n, 4), header = PieceHeaderBytes(4, 2, n);
  ASSERT_EQ(s, 786433u);
  ASSERT_EQ(PieceBytesOf(n, 4), 3 * s);
  EXPECT_EQ(pieces[1].compare(header + s, s, file, 5 * s, s), 0);      // row 1, chunk 5
  EXPECT_EQ(pieces[0].compare(header + 2 * s, s, file, 8 * s, s), 0);  // row 2, chunk 8
  const size_t tail = n - 11 * s;
  EXPECT_EQ(pieces[3].compare(header + 2 * s, tail, file, 11 * s, tail), 0);            // chunk 11: the file's end
  EXPECT_TRUE(pieces[3].substr(header + 2 * s + tail) == std::string(s - tail, '\0'));  // past it: zeros
  // Rows 1 and 2 of data piece 2 (chunks 6 and 10).
  std::string back(n, 'x');
  PieceRowsToFile(pieces[2].data() + header + s, 2, 1, 2, s, 4, back.data(), n);
  EXPECT_EQ(back.compare(6 * s, s, file, 6 * s, s), 0);
  EXPECT_EQ(back.compare(10 * s, s, file, 10 * s, s), 0);
  EXPECT_TRUE(back.substr(0, 6 * s) == std::string(6 * s, 'x'));
  // Rows rebuilt from parity alone: row 1 of pieces 0 and 1 from 2..5.
  std::vector<const unsigned char*> src;
  for (int i = 2; i < 6; ++i) src.push_back(reinterpret_cast<const unsigned char*>(pieces[i].data() + header + s));
  std::string r0(s, '\0'), r1(s, '\0');
  ASSERT_OK(
      (*coder)->Rebuild({2, 3, 4, 5}, {0, 1}, s, src,
                        {reinterpret_cast<unsigned char*>(r0.data()), reinterpret_cast<unsigned char*>(r1.data())}));
  EXPECT_TRUE(r0 == file.substr(4 * s, s));
  EXPECT_TRUE(r1 == file.substr(5 * s, s));
  EXPECT_FALSE((*coder)->Rebuild({2, 2, 4, 5}, {0}, s, src, {reinterpret_cast<unsigned char*>(r0.data())}).ok());
}

// Only the pieces' own payload bytes and the data pieces' order matter:
// the data pieces hold the file as it is.
TEST(Erasure, DataPiecesHoldTheFileInOrder) {
  auto coder = ErasureCoder::Create(3, 2);
  ASSERT_OK(coder);
  const std::string file = RandomFile(3000, 7);
  const std::vector<std::string> pieces = (*coder)->Encode(Bytes(file));
  std::string joined;
  for (int i = 0; i < 3; ++i) joined += pieces[static_cast<size_t>(i)].substr(PieceHeaderBytes(3, 2, 3000));
  EXPECT_EQ(joined.substr(0, file.size()), file);
}

TEST(Erasure, DamagedPiecesAreRefusedAndTooFewGoodOnesIsUnavailable) {
  auto coder = ErasureCoder::Create(4, 2);
  ASSERT_OK(coder);
  const std::string file = RandomFile(100000, 3);
  std::vector<std::string> pieces = (*coder)->Encode(Bytes(file));
  // A flipped payload byte in a data piece and in a parity piece: both are
  // refused, and the other four still rebuild the file.
  pieces[1][PieceHeaderBytes(4, 2, 100000) + 10] ^= 1;
  pieces[5][PieceHeaderBytes(4, 2, 100000) + 99] ^= 1;
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
  EXPECT_EQ(EncodePieceHeader(*h), pieces[2].substr(0, PieceHeaderBytes(2, 1, 64)));
  // Every single-byte change of the header is caught; so is a truncation.
  for (size_t i = 0; i < PieceHeaderBytes(2, 1, 64); ++i) {
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

TEST(Erasure, PieceNamesAreTheFileWithItsIndex) {
  std::string_view base;
  const std::string name = PiecePath("step-1/rank-3.ckd", 5);
  EXPECT_EQ(name, "step-1/rank-3.ckd.ec5");
  EXPECT_EQ(PieceOfPath(name, &base), 5);
  EXPECT_EQ(base, "step-1/rank-3.ckd");
  EXPECT_EQ(PieceOfPath("LATEST.ec31"), 31);
  for (const char* other : {"step-1/rank-3.ckd", "x.ec", "x.ec32", "x.ec05", "x.ec1a", ".ec1", "d/.ec1", "x.ec-1"}) {
    EXPECT_EQ(PieceOfPath(other), std::nullopt) << other;
  }
}

const std::string kToken = "erasure-test-token-0123456789";
constexpr int kHosts = 6;
const TensorSpec kWeights{"w", DType::kF32, {kHosts * 64, 1024}};
const TensorSpec kEmbed{"emb", DType::kBF16, {kHosts * 32, 768}};
constexpr int64_t kStep = 5;

std::vector<OwnedShard> RankShards(int r) {
  std::vector<OwnedShard> out;
  out.push_back(MakeShard(kWeights, Box({r * 64, 0}, {64, 1024}), 7));
  out.push_back(MakeShard(kEmbed, Box({r * 32, 0}, {32, 768}), 9));
  return out;
}

// Six hosts, one process (and rank) each, that saved step kStep at the
// memory level coded RS(4+2) as PlaceErasure places it.
class ErasureMemoryLevel : public ::testing::Test {
 protected:
  void SetUp() override {
    std::vector<std::string> domains;
    for (int h = 0; h < kHosts; ++h) {
      PeerMemoryOptions o;
      o.token = kToken;
      o.domain = "host-" + std::to_string(h);
      o.io_timeout_s = 5;
      o.log = [](const std::string&) {};
      auto m = PeerMemory::Start(o);
      ASSERT_OK(m);
      mem_.push_back(*m);
      eps_.push_back((*m)->endpoint());
      domains.push_back(o.domain);
    }
    auto placement = PlaceErasure(domains, 4, 2);
    ASSERT_OK(placement);
    placement_ = *placement;
    auto comms = CreateLocalCommunicators(kHosts);
    std::vector<std::thread> threads;
    std::vector<absl::Status> results(kHosts);
    for (int r = 0; r < kHosts; ++r) {
      threads.emplace_back([&, r] {
        results[static_cast<size_t>(r)] = [&]() -> absl::Status {
          PeerRoute route = RouteOf(r, {});
          route.erasure_k = 4;
          route.erasure_m = 2;
          for (size_t j = 1; j < placement_[static_cast<size_t>(r)].size(); ++j) {
            route.replicas.push_back(eps_[static_cast<size_t>(placement_[static_cast<size_t>(r)][j])]);
          }
          CKPT_ASSIGN_OR_RETURN(auto storage, OpenPeerStorage(mem_[static_cast<size_t>(r)], route));
          CheckpointerOptions o;
          o.uri = dir_.Join("root");
          o.rank = r;
          o.world_size = kHosts;
          o.communicator = comms[static_cast<size_t>(r)];
          o.engine_options.block_size = 64 << 10;
          o.engine_options.staging_bytes = 4 << 20;  // the state is 300 KiB a rank
          o.memory_storage = storage;
          CKPT_ASSIGN_OR_RETURN(auto cp, Checkpointer::Open(o));
          std::vector<OwnedShard> shards = RankShards(r);
          CKPT_ASSIGN_OR_RETURN(SaveHandle h, cp->Save(kStep, StateOf(shards), {.level = SaveLevel::kMemory}));
          return h.Wait();
        }();
      });
    }
    for (auto& t : threads) t.join();
    for (auto& s : results) ASSERT_OK(s);
  }

  // The route of a rank of the saving world with the hosts in `lost` gone
  // from the coordinator's view: piece j of rank o's files at
  // placement_[o][j].
  PeerRoute RouteOf(int /*rank*/, std::set<int> lost) {
    PeerRoute route;
    route.holders = [this, lost](int64_t, int owner) {
      std::vector<std::string> out;
      for (int h : placement_[static_cast<size_t>(std::max(owner, 0))]) {
        if (lost.count(h) == 0) out.push_back(eps_[static_cast<size_t>(h)]);
      }
      return out;
    };
    for (int h = 0; h < kHosts; ++h) {
      if (lost.count(h) == 0) route.peers.push_back(eps_[static_cast<size_t>(h)]);
    }
    return route;
  }

  // Loads the whole of step kStep through host `reader`'s memory, the hosts
  // in `lost` gone (or dead), and checks it bit for bit.
  absl::StatusOr<LoadStats> LoadWhole(int reader, std::set<int> lost) {
    PeerRoute route = RouteOf(reader, lost);
    CKPT_ASSIGN_OR_RETURN(auto storage, OpenPeerStorage(mem_[static_cast<size_t>(reader)], route));
    CheckpointerOptions o;
    o.uri = dir_.Join("root");
    o.memory_storage = storage;
    o.engine_options.staging_bytes = 1;  // loads only
    o.gc_on_open = false;
    CKPT_ASSIGN_OR_RETURN(auto cp, Checkpointer::Open(o));
    std::vector<OwnedShard> out = {EmptyShard(kWeights, Box::Whole(kWeights.shape)),
                                   EmptyShard(kEmbed, Box::Whole(kEmbed.shape))};
    LoadOptions lo;
    lo.level = SaveLevel::kMemory;
    CKPT_ASSIGN_OR_RETURN(LoadStats stats, cp->Load(StateOf(out), kStep, lo));
    if (Mismatches(out[0], 7) != 0 || Mismatches(out[1], 9) != 0) {
      return absl::DataLossError(StrCat(Mismatches(out[0], 7), " + ", Mismatches(out[1], 9), " elements differ"));
    }
    return stats;
  }

  TempDir dir_;
  std::vector<std::shared_ptr<PeerMemory>> mem_;
  std::vector<std::string> eps_;
  std::vector<std::vector<int>> placement_;
};

TEST_F(ErasureMemoryLevel, CopiesTakeOneAndAHalfTimesTheFilesInMemory) {
  // The files as a reader sees them (whole), and what the six memories hold.
  auto storage = OpenPeerStorage(mem_[0], RouteOf(0, {}));
  ASSERT_OK(storage);
  int64_t files = 0, expected = 0;
  int data_files = 0;
  for (const std::string dir : {"", "step-0000000005"}) {  // LATEST, and the step's files
    auto names = (*storage)->List(dir);
    ASSERT_OK(names);
    for (const DirEntry& e : *names) {
      if (e.is_dir) continue;
      EXPECT_EQ(PieceOfPath(e.name), std::nullopt) << e.name;  // pieces are listed as their file
      auto size = (*storage)->FileSize(dir.empty() ? e.name : StrCat(dir, "/", e.name));
      ASSERT_OK(size);
      files += static_cast<int64_t>(*size);
      expected += 6 * static_cast<int64_t>(PieceHeaderBytes(4, 2, *size) + PieceBytesOf(*size, 4));
      data_files += e.name.ends_with(".ckd");
    }
  }
  EXPECT_EQ(data_files, kHosts);
  int64_t held = 0;
  for (auto& m : mem_) held += m->Stats().held_bytes;
  EXPECT_EQ(held, expected);  // k + m pieces of every file, nothing else
  EXPECT_LE(static_cast<double>(held), 1.51 * static_cast<double>(files))
      << held << " bytes held for " << files << " bytes of files";
  // Each memory holds one piece of every rank's files.
  for (size_t h = 0; h < mem_.size(); ++h) {
    auto held_steps = mem_[h]->Holdings();
    ASSERT_EQ(held_steps.size(), 1u);
    EXPECT_EQ(held_steps[0].owners.size(), static_cast<size_t>(kHosts)) << h;
  }
}

TEST_F(ErasureMemoryLevel, EveryPairOfLostHostsRestoresBitExactFromMemory) {
  LoadStats none;
  {
    auto s = LoadWhole(0, {});
    ASSERT_OK(s);
    none = *s;
  }
  EXPECT_EQ(none.bytes_from_storage, 0);
  EXPECT_EQ(none.bytes_rebuilt_from_parity, 0);  // every data piece was there
  EXPECT_EQ(none.memory_pieces_lost, 0);
  int pairs = 0;
  for (int a = 0; a < kHosts; ++a) {
    for (int b = a + 1; b < kHosts; ++b) {
      int reader = 0;
      while (reader == a || reader == b) ++reader;
      auto s = LoadWhole(reader, {a, b});
      ASSERT_TRUE(s.ok()) << "hosts " << a << " and " << b << " lost: " << s.status();
      EXPECT_EQ(s->level, SaveLevel::kMemory);
      EXPECT_EQ(s->bytes_from_storage, 0);
      // Some rank had a data piece on a lost host: rebuilt from parity.
      EXPECT_GT(s->bytes_rebuilt_from_parity, 0) << a << "," << b;
      EXPECT_GE(s->memory_pieces_lost, 2) << a << "," << b;
      ++pairs;
    }
  }
  EXPECT_EQ(pairs, 15);
  // Three hosts lost is one too many: a clear error, not other bytes.
  auto three = LoadWhole(0, {1, 2, 3});
  ASSERT_FALSE(three.ok());
  EXPECT_TRUE(absl::IsUnavailable(three.status())) << three.status();
  EXPECT_NE(three.status().message().find("4 are needed"), std::string::npos) << three.status();
}

// A damaged piece and a dead host are two lost pieces: read around. A
// third lost host is one too many: a clear error naming the damage.
TEST_F(ErasureMemoryLevel, DeadHostsAndADamagedPieceAreReadAround) {
  // Data piece 1 of rank 2's data file gets other bytes of the same length
  // where it lives (a faulty DIMM), through that memory's own storage.
  const std::string data = "step-0000000005/rank-000002.ckd";
  const int damaged_host = placement_[2][1];
  ASSERT_NE(damaged_host, 0);
  auto there = OpenPeerStorage(mem_[static_cast<size_t>(damaged_host)], PeerRoute{});
  ASSERT_OK(there);
  auto piece = (*there)->OpenReadable(PiecePath(data, 1));
  ASSERT_OK(piece);
  std::string bytes((*piece)->size(), '\0');
  ASSERT_OK((*piece)->ReadAt(0, {reinterpret_cast<std::byte*>(bytes.data()), bytes.size()}));
  bytes[bytes.size() / 2] ^= 0x10;
  ASSERT_OK((*there)->PutAtomic(PiecePath(data, 1), {reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()}));
  // Hosts that die: neither the reader (0) nor the damaged one. The route
  // still names them; their connections fail and the reads go on.
  std::vector<int> doomed;
  for (int h = 1; h < kHosts; ++h) {
    if (h != damaged_host) doomed.push_back(h);
  }
  mem_[static_cast<size_t>(doomed[0])].reset();
  auto s = LoadWhole(0, {});
  ASSERT_OK(s);
  EXPECT_EQ(s->bytes_from_storage, 0);
  EXPECT_GE(s->memory_pieces_lost, 2);  // rank 2's damaged piece, and at least one on the dead host
  mem_[static_cast<size_t>(doomed[1])].reset();
  auto three = LoadWhole(0, {});
  ASSERT_FALSE(three.ok());
  EXPECT_TRUE(absl::IsUnavailable(three.status())) << three.status();
  EXPECT_NE(three.status().message().find("rank-000002.ckd"), std::string::npos) << three.status();
  EXPECT_NE(three.status().message().find("1 damaged"), std::string::npos) << three.status();
}

}  // namespace
}  // namespace ckpt::peer
