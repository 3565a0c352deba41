// A tensor's chunks described by their rule instead of one by one: the cells
// of a grid (cut points per dimension), each written to a file at a first
// block given by two run-length coded sequences. Sharded and ZeRO-split state
// saved over a mesh is such a grid; the manifest stores it in a few bytes
// whatever the number of ranks (docs/format.md, manifest version 4).
#ifndef CKPT_FORMAT_CHUNK_GRID_H_
#define CKPT_FORMAT_CHUNK_GRID_H_

#include <algorithm>
#include <cstdint>
#include <functional>
#include <vector>

#include "ckpt/tensor.h"
#include "util/bytes.h"

namespace ckpt {

/// A sequence of unsigned integers coded as its first value and maximal runs
/// of equal steps: {5, 9, 13, 17, 2} is first 5, runs (+4 x3), (-15 x1).
/// Canonical: every run has a count of at least 1 and two adjacent runs never
/// share a step, so a sequence has exactly one run sequence.
///
/// Runs that repeat are kept once: a group is a pattern of 2 to
/// kMaxPatternRuns runs repeated at least twice (the file numbers of a grid
/// whose boxes are cut into tiles, box after box and row after row, repeat
/// such a pattern a thousand times). The builder picks, at each run, the
/// pattern that covers the most runs (the shortest among equals); a coding
/// with groups is written only where the manifest's version allows it.
class IntRuns {
 public:
  struct Run {
    int64_t step = 0;
    uint64_t count = 0;
    bool operator==(const Run& o) const { return step == o.step && count == o.count; }
  };
  /// runs()[first, first + len) repeated `times` times; a lone run is a
  /// group of one run, once.
  struct Group {
    uint32_t first = 0;
    uint32_t len = 0;
    uint64_t times = 0;
    bool operator==(const Group& o) const { return first == o.first && len == o.len && times == o.times; }
  };
  static constexpr uint32_t kMaxPatternRuns = 64;

  IntRuns() = default;
  static IntRuns Of(const std::vector<uint64_t>& values);

  /// Codes a sequence one value at a time.
  class Builder;
  /// Walks the values in order without a call per value.
  class Reader;

  uint64_t size() const { return size_; }
  /// The runs the groups repeat, each pattern once.
  const std::vector<Run>& runs() const { return runs_; }
  const std::vector<Group>& groups() const { return groups_; }
  /// The whole run sequence, groups expanded (for tests and small codings).
  std::vector<Run> Expanded() const;
  /// Value at `i` (< size()): a binary search over the groups.
  uint64_t At(uint64_t i) const;
  /// Calls fn(value) for every element in order; stops early when fn returns
  /// false. Values that would leave [0, 2^64) make it return false too.
  bool ForEach(const std::function<bool(uint64_t)>& fn) const;

  /// With `groups` false (manifests before version 5) every run is written
  /// out; else each group once.
  void Encode(ByteWriter& w, bool groups) const;
  /// Reads a coding of exactly `n` values (n >= 1), failing `r` on a coding
  /// whose expanded runs are not canonical, a count that does not add up, or
  /// (with `groups` false) a group.
  static IntRuns Decode(ByteReader& r, uint64_t n, std::string_view field, bool groups);

  bool operator==(const IntRuns& o) const {
    return first_ == o.first_ && size_ == o.size_ && runs_ == o.runs_ && groups_ == o.groups_;
  }

 private:
  friend class Builder;
  // Fills groups_ from the canonical run sequence `flat`.
  void Compress(const std::vector<Run>& flat);
  void Index();
  uint64_t first_ = 0;
  uint64_t size_ = 0;
  std::vector<Run> runs_;
  std::vector<Group> groups_;
  std::vector<uint64_t> starts_;        ///< index of each group's first element
  std::vector<uint64_t> start_values_;  ///< the value just before each group
  std::vector<uint64_t> period_cells_;  ///< values in one pass of each group's pattern
  std::vector<uint64_t> period_delta_;  ///< what one pass adds (mod 2^64)
};

class IntRuns::Builder {
 public:
  void Add(uint64_t v);
  /// The coding of the values added so far; the builder is left empty (and
  /// keeps its memory for the next sequence).
  IntRuns Finish();

 private:
  uint64_t first_ = 0;
  uint64_t size_ = 0;
  uint64_t last_ = 0;
  std::vector<Run> flat_;
};

class IntRuns::Reader {
 public:
  explicit Reader(const IntRuns& runs) : runs_(runs) {}
  /// The next value; false at the end or where a value would leave
  /// [0, 2^64).
  bool Next(uint64_t* v);

 private:
  const IntRuns& runs_;
  uint64_t done_ = 0;  ///< values returned
  size_t group_ = 0;
  uint64_t time_ = 0;  ///< passes of the group's pattern done
  uint32_t run_ = 0;   ///< run within the pattern
  uint64_t in_run_ = 0;
  uint64_t value_ = 0;
};

/// The chunks of a tensor as the cells of a grid, in row-major order (the
/// last dimension fastest). Cell i is written to file files.At(i), from
/// block first_blocks.At(i); its block count follows from its bytes and the
/// file's block size.
struct ChunkGrid {
  /// Per dimension: cells + 1 strictly increasing cut points, 0 to the extent.
  std::vector<std::vector<int64_t>> cuts;
  IntRuns files;
  IntRuns first_blocks;

  uint64_t NumCells() const;
  /// Grid coordinates and box of cell `i`.
  Box CellBox(uint64_t i) const;
  /// Calls fn(cell) for every cell whose box meets `query` (a box of the same
  /// rank), in ascending order; binary searches on the cuts, so the cost is
  /// the number of cells met, not the number of cells.
  void ForEachCellMeeting(const Box& query, const std::function<void(uint64_t)>& fn) const;
};

/// Blocks a stream of `bytes` is cut into at `block_size` bytes per block.
inline uint64_t BlocksOf(uint64_t bytes, uint64_t block_size) {
  return block_size == 0 ? 0 : bytes / block_size + (bytes % block_size != 0);
}

}  // namespace ckpt

#endif  // CKPT_FORMAT_CHUNK_GRID_H_
