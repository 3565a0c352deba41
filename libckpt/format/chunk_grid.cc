#include "format/chunk_grid.h"

#include <algorithm>
#include <string>
#include <utility>

namespace ckpt {

IntRuns IntRuns::Of(const std::vector<uint64_t>& values) {
  Builder b;
  for (uint64_t v : values) b.Add(v);
  return b.Finish();
}

void IntRuns::Builder::Add(uint64_t v) {
  if (size_++ == 0) {
    first_ = v;
  } else {
    const int64_t step = static_cast<int64_t>(v - last_);
    if (!flat_.empty() && flat_.back().step == step) {
      ++flat_.back().count;
    } else {
      flat_.push_back(Run{step, 1});
    }
  }
  last_ = v;
}

IntRuns IntRuns::Builder::Finish() {
  IntRuns out;
  out.first_ = first_;
  out.size_ = size_;
  out.Compress(flat_);
  out.Index();
  first_ = size_ = last_ = 0;
  flat_.clear();
  return out;
}

void IntRuns::Compress(const std::vector<Run>& flat) {
  runs_.clear();
  groups_.clear();
  const size_t n = flat.size();
  std::vector<std::pair<uint32_t, uint64_t>> found;  // periods that repeat at i, and the runs they cover
  size_t i = 0;
  while (i < n) {
    uint32_t best_p = 0;
    uint64_t best_times = 0, best_cover = 0;
    found.clear();
    const size_t max_p = std::min<size_t>(kMaxPatternRuns, (n - i) / 2);
    for (uint32_t p = 2; p <= max_p; ++p) {
      if (!(flat[i + p] == flat[i])) continue;
      // A multiple of a period q that repeats over at least twice the
      // multiple's length cannot cover more than q does.
      bool multiple = false;
      for (const auto& [q, cover] : found) multiple = multiple || (p % q == 0 && cover >= 2 * uint64_t{p});
      if (multiple) continue;
      uint64_t times = 1;
      while (i + (times + 1) * p <= n &&
             std::equal(flat.begin() + i, flat.begin() + i + p, flat.begin() + i + times * p)) {
        ++times;
      }
      if (times < 2) continue;
      found.emplace_back(p, times * p);
      if (times * p > best_cover) {
        best_p = p;
        best_times = times;
        best_cover = times * p;
      }
    }
    const uint32_t len = best_p == 0 ? 1 : best_p;
    groups_.push_back(Group{static_cast<uint32_t>(runs_.size()), len, best_p == 0 ? 1 : best_times});
    runs_.insert(runs_.end(), flat.begin() + i, flat.begin() + i + len);
    i += best_p == 0 ? 1 : best_cover;
  }
  runs_.shrink_to_fit();
  groups_.shrink_to_fit();
}

std::vector<IntRuns::Run> IntRuns::Expanded() const {
  std::vector<Run> out;
  for (const Group& g : groups_) {
    for (uint64_t t = 0; t < g.times; ++t)
      out.insert(out.end(), runs_.begin() + g.first, runs_.begin() + g.first + g.len);
  }
  return out;
}

bool IntRuns::Reader::Next(uint64_t* v) {
  if (done_ >= runs_.size_) return false;
  if (done_ == 0) {
    value_ = runs_.first_;
  } else {
    const std::vector<Group>& groups = runs_.groups_;
    while (group_ < groups.size() && in_run_ == runs_.runs_[groups[group_].first + run_].count) {
      in_run_ = 0;
      if (++run_ == groups[group_].len) {
        run_ = 0;
        if (++time_ == groups[group_].times) {
          time_ = 0;
          ++group_;
        }
      }
    }
    if (group_ == groups.size()) return false;
    const int64_t step = runs_.runs_[groups[group_].first + run_].step;
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
  const size_t n = groups_.size();
  starts_.resize(n);
  start_values_.resize(n);
  period_cells_.resize(n);
  period_delta_.resize(n);
  uint64_t at = 1, v = first_;
  for (size_t k = 0; k < n; ++k) {
    const Group& g = groups_[k];
    uint64_t cells = 0, delta = 0;
    for (uint32_t j = 0; j < g.len; ++j) {
      const Run& run = runs_[g.first + j];
      cells += run.count;
      delta += static_cast<uint64_t>(run.step) * run.count;
    }
    starts_[k] = at;
    start_values_[k] = v;
    period_cells_[k] = cells;
    period_delta_[k] = delta;
    at += cells * g.times;
    v += delta * g.times;
  }
}

uint64_t IntRuns::At(uint64_t i) const {
  if (i == 0 || groups_.empty()) return first_;
  // The last group starting at or before i, from the value before its first.
  const size_t k = static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), i) - starts_.begin()) - 1;
  const Group& g = groups_[k];
  const uint64_t off = i - starts_[k];
  uint64_t r = off % period_cells_[k];
  uint64_t v = start_values_[k] + (off / period_cells_[k]) * period_delta_[k];
  for (uint32_t j = 0; j < g.len; ++j) {
    const Run& run = runs_[g.first + j];
    if (r < run.count) return v + static_cast<uint64_t>(run.step) * (r + 1);
    v += static_cast<uint64_t>(run.step) * run.count;
    r -= run.count;
  }
  return v;  // not reached: off < the group's values
}

bool IntRuns::ForEach(const std::function<bool(uint64_t)>& fn) const {
  if (size_ == 0) return true;
  uint64_t v = first_;
  if (!fn(v)) return false;
  for (const Group& g : groups_) {
    for (uint64_t t = 0; t < g.times; ++t) {
      for (uint32_t j = 0; j < g.len; ++j) {
        const Run& run = runs_[g.first + j];
        for (uint64_t c = 0; c < run.count; ++c) {
          const uint64_t next = v + static_cast<uint64_t>(run.step);
          // Wrapping past either end of the unsigned range is not a value.
          if ((run.step > 0 && next < v) || (run.step < 0 && next > v)) return false;
          v = next;
          if (!fn(v)) return false;
        }
      }
    }
  }
  return true;
}

void IntRuns::Encode(ByteWriter& w, bool groups) const {
  w.Var(first_);
  if (!groups) {
    const std::vector<Run> flat = Expanded();
    w.Var(flat.size());
    for (const Run& run : flat) {
      w.SVar(run.step);
      w.Var(run.count);
    }
    return;
  }
  w.Var(groups_.size());
  for (const Group& g : groups_) {
    w.Var(g.len);
    if (g.len > 1) w.Var(g.times);
    for (uint32_t j = 0; j < g.len; ++j) {
      w.SVar(runs_[g.first + j].step);
      w.Var(runs_[g.first + j].count);
    }
  }
}

IntRuns IntRuns::Decode(ByteReader& r, uint64_t n, std::string_view field, bool groups) {
  IntRuns out;
  out.size_ = n;
  out.first_ = r.Var();
  const uint64_t pos = r.pos();
  const uint64_t values = n == 0 ? 0 : n - 1;  // what the runs add
  const uint64_t ngroups = r.Count(values, StrCat(field, groups ? " group count" : " run count"));
  // Field names built once, not per run.
  const std::string length_field = StrCat(field, " run length");
  const std::string pattern_field = StrCat(field, " pattern length");
  const std::string times_field = StrCat(field, " repeat count");
  uint64_t total = 0;
  bool any = false;
  Run prev;  // the last run of the expanded sequence so far
  for (uint64_t i = 0; i < ngroups && r.ok(); ++i) {
    Group g;
    g.first = static_cast<uint32_t>(out.runs_.size());
    g.len = groups ? static_cast<uint32_t>(r.Count(kMaxPatternRuns, pattern_field)) : 1;
    g.times = g.len > 1 ? r.Count(values - total, times_field) : 1;
    if (!r.ok()) break;
    if (g.len == 0) {
      r.Fail(StrCat(field, ": a pattern of no runs"));
      break;
    }
    if (g.len > 1 && g.times < 2) {
      r.Fail(StrCat(field, ": a pattern repeated ", g.times, " times (not canonical)"));
      break;
    }
    uint64_t cells = 0;
    for (uint32_t j = 0; j < g.len && r.ok(); ++j) {
      Run run;
      run.step = r.SVar();
      run.count = r.Count((values - total) / g.times - cells, length_field);
      if (!r.ok()) break;
      if (run.count == 0) {
        r.Fail(StrCat(field, ": a run of length 0"));
      } else if (any && prev.step == run.step) {
        r.Fail(StrCat(field, ": two adjacent runs with step ", run.step, " (not canonical)"));
      }
      cells += run.count;
      out.runs_.push_back(run);
      prev = run;
      any = true;
    }
    if (!r.ok()) break;
    if (g.times > 1 && out.runs_[g.first].step == out.runs_.back().step) {
      r.Fail(StrCat(field, ": a pattern that ends with the step it starts with (not canonical)"));
      break;
    }
    total += cells * g.times;
    out.groups_.push_back(g);
  }
  if (r.ok() && n > 0 && total != values) {
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
