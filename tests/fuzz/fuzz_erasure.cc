// libFuzzer target: the memory level's erasure-coded pieces (peer/erasure.h).
// The input is taken as a piece header (what decodes must encode back to the
// same bytes), and as pieces put in place of RS(4+2) pieces of a fixed file:
// its first byte says which pieces are replaced or dropped, the rest is cut
// into the replacements. A decode must give the file exactly or an error,
// never other bytes. The same header read from a piece's first bytes, and
// the input as a piece's name, must agree with their whole forms; and the
// input as a coordinator's assignment must give a route that holds together.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "ckpt/coordinator.h"
#include "coordinator/messages.h"
#include "peer/erasure.h"

namespace {

const std::string& File() {
  static const std::string file = [] {
    std::string f(10000, '\0');
    uint64_t x = 88172645463325252ull;
    for (auto& c : f) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      c = static_cast<char>(x);
    }
    return f;
  }();
  return file;
}

const ckpt::peer::ErasureCoder& Coder() {
  static const auto coder = std::move(ckpt::peer::ErasureCoder::Create(4, 2)).value();
  return *coder;
}

const std::vector<std::string>& Pieces() {
  static const std::vector<std::string> pieces =
      Coder().Encode({reinterpret_cast<const std::byte*>(File().data()), File().size()});
  return pieces;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::Span<const std::byte> in(reinterpret_cast<const std::byte*>(data), size);
  if (auto h = ckpt::peer::DecodePieceHeader(in); h.ok()) {
    const std::string again = ckpt::peer::EncodePieceHeader(*h);
    if (again.size() > size || again != std::string(reinterpret_cast<const char*>(data), again.size())) {
      __builtin_trap();
    }
  }
  // A header read from a piece's first bytes (as a peer's is, before the
  // payload) decodes as it does from the whole piece.
  if (size >= 8) {
    const uint64_t piece_size = data[size - 1] % 2 == 0 ? size : size + data[size - 2];
    const size_t announced = ckpt::peer::AnnouncedHeaderBytes(in);
    const size_t head = announced == 0 ? size : std::min<size_t>(size, announced);
    auto from_head = ckpt::peer::DecodePieceHeader(in.subspan(0, head), piece_size);
    if (piece_size == size) {
      auto whole = ckpt::peer::DecodePieceHeader(in);
      if (from_head.ok() != whole.ok()) __builtin_trap();
    }
    if (from_head.ok() &&
        ckpt::peer::PieceHeaderBytes(from_head->k, from_head->m, from_head->file_bytes) + from_head->piece_bytes !=
            piece_size) {
      __builtin_trap();
    }
  }
  // A piece's name: what parses is made again by PiecePath.
  {
    const std::string_view name(reinterpret_cast<const char*>(data), size);
    std::string_view base;
    if (auto j = ckpt::peer::PieceOfPath(name, &base); j && ckpt::peer::PiecePath(base, *j) != name) {
      __builtin_trap();
    }
  }
  // The input as a coordinator's assignment, placement records included:
  // what decodes encodes back the same, and the route a rank is given
  // names k + m - 1 piece holders exactly when it codes.
  if (auto a =
          ckpt::coord::Decode<ckpt::coord::AssignReply>(std::string_view(reinterpret_cast<const char*>(data), size));
      a.ok()) {
    auto again = ckpt::coord::Decode<ckpt::coord::AssignReply>(ckpt::coord::Encode(*a));
    if (!again.ok() || again->holders != a->holders || again->erasure_k != a->erasure_k ||
        again->erasure_m != a->erasure_m) {
      __builtin_trap();
    }
    ckpt::Assignment as;
    as.first_rank = static_cast<int>(a->first_rank % 64);
    as.peer_endpoints = a->endpoints;
    as.peer_holders = a->holders;
    as.restore_holders = a->restore_holders;
    as.memory_erasure_k = a->erasure_k;
    as.memory_erasure_m = a->erasure_m;
    const ckpt::PeerRoute route = as.memory_route(0);
    if (route.erasure_k != 0 && static_cast<int>(route.replicas.size()) != route.erasure_k + route.erasure_m - 1) {
      __builtin_trap();
    }
    for (int owner = -1; owner < 4; ++owner) (void)route.holders(owner < 0 ? -1 : 14, owner);
  }
  if (size == 0) return 0;
  // Bits 0-5: piece i replaced by a slice of the input; bits 6-7: the first
  // one or two pieces dropped.
  const uint8_t how = data[0];
  std::vector<std::string> pieces = Pieces();
  std::vector<const std::string*> given;
  const std::string rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  int replaced = 0;
  for (int i = 0; i < 6; ++i) replaced += (how >> i) & 1;
  size_t at = 0;
  const size_t slice = replaced > 0 ? rest.size() / static_cast<size_t>(replaced) : 0;
  for (int i = 0; i < 6; ++i) {
    if ((how >> i) & 1) {
      // The slice over the piece's own bytes: a damaged piece, not only a short one.
      std::string& p = pieces[static_cast<size_t>(i)];
      for (size_t j = 0; j < slice && j < p.size(); ++j) p[j] = rest[at + j];
      if (slice > p.size()) p += rest.substr(at + p.size(), slice - p.size());
      at += slice;
    }
    given.push_back(&pieces[static_cast<size_t>(i)]);
  }
  if (how & 0x40) given[0] = nullptr;
  if (how & 0x80) given[1] = nullptr;
  auto back = Coder().Decode(given);
  if (back.ok() && *back != File()) __builtin_trap();
  return 0;
}
