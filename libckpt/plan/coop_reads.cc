#include "plan/coop_reads.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <utility>

#include "plan/box_reads.h"
#include "plan/grid.h"
#include "util/errors.h"
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
    CKPT_ASSIGN_OR_RETURN(const ManifestTensor* t, FindSavedTensor(m, layout.spec));
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
      for (uint64_t b = run.first_block; b <= run.last_block; b += per_piece) {
        CoopSegment piece = run;
        piece.first_block = b;
        piece.last_block = std::min(run.last_block, b + per_piece - 1);
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

  // Readers: the largest pieces first, each to the needer whose host has
  // read least so far, then the needer that has, then the lowest rank.
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
  std::vector<size_t> order(plan.segments.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return plan.segments[a].raw_bytes > plan.segments[b].raw_bytes; });
  for (size_t i : order) {
    CoopSegment& s = plan.segments[i];
    int32_t best = s.needers.front();
    for (int32_t r : s.needers) {
      const auto key = [&](int32_t x) {
        const size_t ux = static_cast<size_t>(x);
        return std::make_tuple(plan.bytes_by_host[host_of[ux]], plan.bytes_by_reader[ux], x);
      };
      if (key(r) < key(best)) best = r;
    }
    s.reader = best;
    plan.bytes_by_host[host_of[static_cast<size_t>(best)]] += s.raw_bytes;
    plan.bytes_by_reader[static_cast<size_t>(best)] += s.raw_bytes;
  }
  return plan;
}

}  // namespace ckpt
