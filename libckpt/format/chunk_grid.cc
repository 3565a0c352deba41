#include "format/chunk_grid.h"

#include <algorithm>

namespace ckpt {

IntRuns IntRuns::Of(const std::vector<uint64_t>& values) {
  Builder b;
  for (uint64_t v : values) b.Add(v);
  return b.Finish();
}

void IntRuns::Builder::Add(uint64_t v) {
  if (r_.size_++ == 0) {
    r_.first_ = v;
  } else {
    const int64_t step = static_cast<int64_t>(v - last_);
    if (!r_.runs_.empty() && r_.runs_.back().step == step) {
      ++r_.runs_.back().count;
    } else {
      r_.runs_.push_back(Run{step, 1});
    }
  }
  last_ = v;
}

IntRuns IntRuns::Builder::Finish() {
  IntRuns out = std::move(r_);
  r_ = IntRuns();
  last_ = 0;
  out.Index();
  return out;
}

bool IntRuns::Reader::Next(uint64_t* v) {
  if (done_ >= runs_.size_) return false;
  if (done_ == 0) {
    value_ = runs_.first_;
  } else {
    while (run_ < runs_.runs_.size() && in_run_ == runs_.runs_[run_].count) {
      ++run_;
      in_run_ = 0;
    }
    if (run_ == runs_.runs_.size()) return false;
    const int64_t step = runs_.runs_[run_].step;
    const uint64_t next = value_ + static_cast<uint64_t>(step);
    if ((step > 0 && next < value_) || (step < 0 && next > value_)) return false;
    value_ = next;
    ++in_run_;
  }
  ++done_;
  *v = value_;
  return true;
}

void IntRuns::Index() {
  starts_.clear();
  start_values_.clear();
  starts_.reserve(runs_.size());
  start_values_.reserve(runs_.size());
  uint64_t at = 1, v = first_;
  for (const Run& run : runs_) {
    starts_.push_back(at);
    start_values_.push_back(v);
    at += run.count;
    v += static_cast<uint64_t>(run.step) * run.count;
  }
}

uint64_t IntRuns::At(uint64_t i) const {
  if (i == 0 || runs_.empty()) return first_;
  // The last run starting at or before i, from the value before its first.
  const size_t k = static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), i) - starts_.begin()) - 1;
  return start_values_[k] + static_cast<uint64_t>(runs_[k].step) * (i - starts_[k] + 1);
}

bool IntRuns::ForEach(const std::function<bool(uint64_t)>& fn) const {
  if (size_ == 0) return true;
  uint64_t v = first_;
  if (!fn(v)) return false;
  for (const Run& run : runs_) {
    for (uint64_t c = 0; c < run.count; ++c) {
      const uint64_t next = v + static_cast<uint64_t>(run.step);
      // Wrapping past either end of the unsigned range is not a value.
      if ((run.step > 0 && next < v) || (run.step < 0 && next > v)) return false;
      v = next;
      if (!fn(v)) return false;
    }
  }
  return true;
}

void IntRuns::Encode(ByteWriter& w) const {
  w.Var(first_);
  w.Var(runs_.size());
  for (const Run& run : runs_) {
    w.SVar(run.step);
    w.Var(run.count);
  }
}

IntRuns IntRuns::Decode(ByteReader& r, uint64_t n, std::string_view field) {
  IntRuns out;
  out.size_ = n;
  out.first_ = r.Var();
  const uint64_t pos = r.pos();
  const uint64_t nruns = r.Count(n == 0 ? 0 : n - 1, StrCat(field, " run count"));
  const std::string length_field = StrCat(field, " run length");  // once, not per run
  out.runs_.reserve(nruns);
  uint64_t total = 0;
  for (uint64_t i = 0; i < nruns && r.ok(); ++i) {
    Run run;
    run.step = r.SVar();
    run.count = r.Count(n - 1 - total, length_field);
    if (!r.ok()) break;
    if (run.count == 0) {
      r.Fail(StrCat(field, ": a run of length 0"));
    } else if (!out.runs_.empty() && out.runs_.back().step == run.step) {
      r.Fail(StrCat(field, ": two adjacent runs with step ", run.step, " (not canonical)"));
    }
    total += run.count;
    out.runs_.push_back(run);
  }
  if (r.ok() && n > 0 && total != n - 1) {
    r.FailAt(pos, StrCat(field, ": runs give ", total + 1, " values, the grid has ", n, " cells"));
  }
  out.Index();
  return out;
}

uint64_t ChunkGrid::NumCells() const {
  uint64_t n = 1;
  for (const auto& c : cuts) n *= c.size() - 1;
  return n;
}

Box ChunkGrid::CellBox(uint64_t i) const {
  const size_t nd = cuts.size();
  Box box;
  box.offsets.resize(nd);
  box.sizes.resize(nd);
  for (size_t d = nd; d-- > 0;) {
    const uint64_t k = cuts[d].size() - 1;
    const uint64_t c = i % k;
    i /= k;
    box.offsets[d] = cuts[d][c];
    box.sizes[d] = cuts[d][c + 1] - cuts[d][c];
  }
  return box;
}

void ChunkGrid::ForEachCellMeeting(const Box& query, const std::function<void(uint64_t)>& fn) const {
  const size_t nd = cuts.size();
  if (query.ndim() != static_cast<int>(nd)) return;
  std::vector<uint64_t> lo(nd), hi(nd), cur(nd);
  for (size_t d = 0; d < nd; ++d) {
    const int64_t q0 = query.offsets[d], q1 = q0 + query.sizes[d];
    if (query.sizes[d] <= 0) return;
    const auto& c = cuts[d];
    // Cells [lo, hi): cell j spans [c[j], c[j+1]).
    lo[d] = static_cast<uint64_t>(std::upper_bound(c.begin(), c.end(), q0) - c.begin());
    lo[d] = lo[d] == 0 ? 0 : lo[d] - 1;
    hi[d] = static_cast<uint64_t>(std::lower_bound(c.begin(), c.end(), q1) - c.begin());
    hi[d] = std::min<uint64_t>(hi[d], c.size() - 1);
    if (lo[d] >= hi[d]) return;
    cur[d] = lo[d];
  }
  while (true) {
    uint64_t idx = 0;
    for (size_t d = 0; d < nd; ++d) idx = idx * (cuts[d].size() - 1) + cur[d];
    fn(idx);
    size_t d = nd;
    while (d-- > 0) {
      if (++cur[d] < hi[d]) break;
      cur[d] = lo[d];
    }
    if (d == static_cast<size_t>(-1)) break;
  }
}

}  // namespace ckpt
