#include "plan/coop_reads.h"

#include <algorithm>
#include <map>
#include <utility>

#include "plan/box_reads.h"
#include "plan/grid.h"
#include "util/errors.h"
#include "util/hash.h"
#include "util/strings.h"

namespace ckpt {
namespace {

// Blocks [b0, b1] of a file needed by `ranks`.
struct Need {
  uint64_t b0 = 0;
  uint64_t b1 = 0;
  std::vector<int32_t> ranks;
};

// What one file's blocks are needed by: maximal runs of blocks with the
// same needers, from a sweep over the needs' ends.
std::vector<CoopSegment> SweepFile(uint32_t file, std::vector<Need>& needs) {
  std::vector<CoopSegment> out;
  if (needs.empty()) return out;
  // Events: +ranks where a need starts, -ranks past where it ends.
  std::vector<std::pair<uint64_t, int64_t>> events;  // (block, +/- (need index + 1))
  events.reserve(needs.size() * 2);
  for (size_t i = 0; i < needs.size(); ++i) {
    events.emplace_back(needs[i].b0, static_cast<int64_t>(i) + 1);
    events.emplace_back(needs[i].b1 + 1, -(static_cast<int64_t>(i) + 1));
  }
  std::sort(events.begin(), events.end());
  std::map<int32_t, int> active;
  for (size_t e = 0; e < events.size();) {
    const uint64_t at = events[e].first;
    for (; e < events.size() && events[e].first == at; ++e) {
      const Need& n = needs[static_cast<size_t>(std::abs(events[e].second) - 1)];
      for (int32_t r : n.ranks) {
        if (events[e].second > 0) {
          ++active[r];
        } else if (--active[r] == 0) {
          active.erase(r);
        }
      }
    }
    if (active.empty() || e == events.size()) continue;
    const uint64_t next = events[e].first;  // the run [at, next) has these needers
    std::vector<int32_t> ranks;
    ranks.reserve(active.size());
    for (const auto& [r, count] : active) ranks.push_back(r);
    if (!out.empty() && out.back().last_block + 1 == at && out.back().needers == ranks) {
      out.back().last_block = next - 1;
      continue;
    }
    CoopSegment s;
    s.file = file;
    s.first_block = at;
    s.last_block = next - 1;
    s.needers = std::move(ranks);
    out.push_back(std::move(s));
  }
  return out;
}

// The order in which the needers of a run take its pieces: one rank of each
// host in turn (hosts in order of their first needer), then the next rank
// of each.
std::vector<int32_t> Turns(const std::vector<int32_t>& needers, const std::vector<size_t>& host_of) {
  std::vector<std::vector<int32_t>> by_host;
  std::map<size_t, size_t> slot;
  for (int32_t r : needers) {
    auto [it, fresh] = slot.emplace(host_of[static_cast<size_t>(r)], by_host.size());
    if (fresh) by_host.emplace_back();
    by_host[it->second].push_back(r);
  }
  std::vector<int32_t> turns;
  for (size_t round = 0; turns.size() < needers.size(); ++round) {
    for (const std::vector<int32_t>& ranks : by_host) {
      if (round < ranks.size()) turns.push_back(ranks[round]);
    }
  }
  return turns;
}

// Where a file's turns start: spread over files, the same on every rank (a
// rank's part of the manifest numbers its files its own way: the file's
// name, not its index, says which).
uint64_t Mix(uint64_t file_hash) {
  uint64_t x = file_hash * 0x9E3779B97F4A7C15ull;
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  return x;
}

}  // namespace

absl::StatusOr<CoopReadPlan> PlanCooperativeReads(const Manifest& m, const std::vector<TensorLayout>& target,
                                                  const Mesh& mesh, const std::vector<std::string>& host_of_rank,
                                                  const CoopReadOptions& options) {
  const int64_t world = mesh.NumRanks();
  if (static_cast<int64_t>(host_of_rank.size()) != world) {
    return absl::InvalidArgumentError(StrCat("cooperative load: ", host_of_rank.size(), " hosts given for the ", world,
                                             " ranks of mesh ", mesh.ToString()));
  }
  std::vector<std::vector<Need>> needs(m.files.size());
  // The last block of a chunk holds what is left of its stream: its raw
  // size, where shorter than the file's block size.
  std::vector<std::map<uint64_t, uint64_t>> short_blocks(m.files.size());
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const TensorLayout& layout : target) {
    absl::StatusOr<const ManifestTensor*> found = FindSavedTensor(m, layout.spec);
    if (options.manifest_is_part && absl::IsNotFound(found.status())) continue;
    CKPT_RETURN_IF_ERROR(found.status());
    const ManifestTensor* t = *found;
    const uint64_t es = DTypeSize(t->spec.dtype);
    ChunkFinder finder(*t, m.files);
    CKPT_RETURN_IF_ERROR(
        ForEachDistinctBox(layout, mesh, [&](Box&& box, int64_t base, const std::vector<int64_t>& replicas) {
          std::vector<int32_t> ranks;
          ranks.reserve(replicas.size());
          for (int64_t o : replicas) ranks.push_back(static_cast<int32_t>(base + o));
          std::sort(ranks.begin(), ranks.end());
          finder.ForEachMeeting(box, [&](const ManifestChunk& c) {
            const uint64_t block_size = m.files[c.file].block_size;
            const uint64_t stream = static_cast<uint64_t>(c.box.Volume()) * es;
            if (c.block_count == 0 || block_size == 0) return;
            const uint64_t tail = stream - (c.block_count - 1) * block_size;
            if (tail < block_size) short_blocks[c.file][c.first_block + c.block_count - 1] = tail;
            ranges.clear();
            BlocksToRead(c.box, box, es, block_size, &ranges);
            for (const auto& [b0, b1] : ranges) {
              needs[c.file].push_back(Need{c.first_block + b0, c.first_block + b1, ranks});
            }
          });
        }));
  }

  CoopReadPlan plan;
  for (uint32_t f = 0; f < m.files.size(); ++f) {
    const uint64_t block_size = m.files[f].block_size;
    const uint64_t per_piece = std::max<uint64_t>(1, options.max_segment_bytes / std::max<uint64_t>(block_size, 1));
    for (CoopSegment& run : SweepFile(f, needs[f])) {
      // Pieces lie on a grid of per_piece blocks over the whole file, the
      // same whatever part of the manifest a rank knows.
      for (uint64_t b = run.first_block; b <= run.last_block;) {
        const uint64_t cell_end = (b / per_piece + 1) * per_piece - 1;
        CoopSegment piece = run;
        piece.first_block = b;
        piece.last_block = std::min(run.last_block, cell_end);
        b = piece.last_block + 1;
        piece.raw_bytes = (piece.last_block - piece.first_block + 1) * block_size;
        const auto& shorts = short_blocks[f];
        for (auto it = shorts.lower_bound(piece.first_block); it != shorts.end() && it->first <= piece.last_block;
             ++it) {
          piece.raw_bytes -= block_size - it->second;
        }
        plan.bytes_once += piece.raw_bytes;
        plan.bytes_every_needer += piece.raw_bytes * piece.needers.size();
        plan.segments.push_back(std::move(piece));
      }
    }
  }

  // Hosts, in name order, and each rank's.
  std::map<std::string, size_t> host_index;
  for (const std::string& h : host_of_rank) host_index.emplace(h, 0);
  for (auto& [h, i] : host_index) {
    i = plan.hosts.size();
    plan.hosts.push_back(h);
  }
  std::vector<size_t> host_of(static_cast<size_t>(world));
  for (int64_t r = 0; r < world; ++r)
    host_of[static_cast<size_t>(r)] = host_index[host_of_rank[static_cast<size_t>(r)]];
  plan.bytes_by_host.assign(plan.hosts.size(), 0);
  plan.bytes_by_reader.assign(static_cast<size_t>(world), 0);
  for (CoopSegment& s : plan.segments) {
    const std::vector<int32_t> turns = Turns(s.needers, host_of);
    const uint64_t per_piece =
        std::max<uint64_t>(1, options.max_segment_bytes / std::max<uint64_t>(m.files[s.file].block_size, 1));
    // The piece's cell on the file's grid, and where the file's turns
    // start: the same on every rank that needs the piece. Consecutive cells
    // go to the next needer in turn.
    const uint64_t cell = s.first_block / per_piece;
    s.reader = turns[(Mix(Xxh3(m.files[s.file].name)) + cell) % turns.size()];
    plan.bytes_by_host[host_of[static_cast<size_t>(s.reader)]] += s.raw_bytes;
    plan.bytes_by_reader[static_cast<size_t>(s.reader)] += s.raw_bytes;
  }
  return plan;
}

}  // namespace ckpt
