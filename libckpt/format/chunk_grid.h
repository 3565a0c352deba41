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
/// share a step, so a sequence has exactly one coding.
class IntRuns {
 public:
  struct Run {
    int64_t step = 0;
    uint64_t count = 0;
  };

  IntRuns() = default;
  static IntRuns Of(const std::vector<uint64_t>& values);

  /// Codes a sequence one value at a time, holding only its runs.
  class Builder;
  /// Walks the values in order without a call per value.
  class Reader;

  uint64_t size() const { return size_; }
  const std::vector<Run>& runs() const { return runs_; }
  /// Value at `i` (< size()): a binary search over the runs.
  uint64_t At(uint64_t i) const;
  /// Calls fn(value) for every element in order; stops early when fn returns
  /// false. Values that would leave [0, 2^64) make it return false too.
  bool ForEach(const std::function<bool(uint64_t)>& fn) const;

  void Encode(ByteWriter& w) const;
  /// Reads a coding of exactly `n` values (n >= 1), failing `r` on a
  /// non-canonical coding or a count that does not add up.
  static IntRuns Decode(ByteReader& r, uint64_t n, std::string_view field);

  bool operator==(const IntRuns& o) const {
    return first_ == o.first_ && size_ == o.size_ && runs_.size() == o.runs_.size() &&
           std::equal(runs_.begin(), runs_.end(), o.runs_.begin(),
                      [](const Run& a, const Run& b) { return a.step == b.step && a.count == b.count; });
  }

 private:
  void Index();
  uint64_t first_ = 0;
  uint64_t size_ = 0;
  std::vector<Run> runs_;
  std::vector<uint64_t> starts_;        ///< index of each run's first element
  std::vector<uint64_t> start_values_;  ///< the value just before each run
};

class IntRuns::Builder {
 public:
  void Add(uint64_t v);
  /// The coding of the values added so far; the builder is left empty.
  IntRuns Finish();

 private:
  IntRuns r_;
  uint64_t last_ = 0;
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
  size_t run_ = 0;
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
