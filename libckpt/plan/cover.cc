#include "plan/cover.h"

#include <algorithm>
#include <numeric>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "util/strings.h"

namespace ckpt {
namespace {

// Checks that the parts of `boxes` inside `region` tile it exactly.
class CoverChecker {
 public:
  CoverChecker(const TensorSpec& spec, const Box& region) : spec_(spec), region_(region) {}

  absl::Status Check(std::vector<const Box*> boxes, int d) {
    const int nd = static_cast<int>(spec_.shape.size());
    if (d == nd) {
      if (boxes.size() == 1) return absl::OkStatus();
      if (boxes.empty()) {
        return absl::DataLossError(StrCat("tensor '", spec_.fqn, "' ", ShapeToString(spec_.shape), ": elements ",
                                          Region(), " are not covered by any chunk"));
      }
      return absl::DataLossError(StrCat("tensor '", spec_.fqn, "' ", ShapeToString(spec_.shape), ": elements ",
                                        Region(), " are covered twice, by chunks ", boxes[0]->ToString(), " and ",
                                        boxes[1]->ToString()));
    }
    const int64_t lo = region_.offsets[d], hi = lo + region_.sizes[d];
    std::vector<int64_t> cuts = {lo, hi};
    for (const Box* b : boxes) {
      cuts.push_back(std::clamp(b->offsets[d], lo, hi));
      cuts.push_back(std::clamp(b->offsets[d] + b->sizes[d], lo, hi));
    }
    std::sort(cuts.begin(), cuts.end());
    cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
    std::sort(boxes.begin(), boxes.end(), [d](const Box* a, const Box* b) { return a->offsets[d] < b->offsets[d]; });
    std::vector<const Box*> active;
    std::vector<const Box*> checked;  // active set of the last recursion
    bool have_checked = false;
    size_t next = 0;
    for (size_t i = 0; i + 1 < cuts.size(); ++i) {
      const int64_t a = cuts[i], b = cuts[i + 1];
      std::erase_if(active, [&](const Box* x) { return x->offsets[d] + x->sizes[d] <= a; });
      while (next < boxes.size() && boxes[next]->offsets[d] <= a) {
        if (boxes[next]->offsets[d] + boxes[next]->sizes[d] > a) {
          active.push_back(boxes[next]);
        }
        ++next;
      }
      std::vector<const Box*> sorted = active;
      std::sort(sorted.begin(), sorted.end());
      if (have_checked && sorted == checked) continue;
      prefix_.push_back({a, b});
      absl::Status s = Check(active, d + 1);
      prefix_.pop_back();
      if (!s.ok()) return s;
      checked = std::move(sorted);
      have_checked = true;
    }
    return absl::OkStatus();
  }

 private:
  std::string Region() const {
    std::string out = "[";
    const size_t nd = spec_.shape.size();
    for (size_t i = 0; i < nd; ++i) {
      if (i) out += ", ";
      if (i < prefix_.size()) {
        StrAppend(&out, prefix_[i].first, ":", prefix_[i].second);
      } else {
        StrAppend(&out, region_.offsets[i], ":", region_.offsets[i] + region_.sizes[i]);
      }
    }
    return out + "]";
  }

  const TensorSpec& spec_;
  const Box& region_;
  std::vector<std::pair<int64_t, int64_t>> prefix_;
};

}  // namespace

absl::Status CheckExactCover(const TensorSpec& spec, const std::vector<Box>& boxes) {
  std::vector<const Box*> live;
  for (const Box& b : boxes) {
    if (b.ndim() != static_cast<int>(spec.shape.size()) || !BoxWithin(b, spec.shape)) {
      return absl::DataLossError(StrCat("tensor '", spec.fqn, "' ", ShapeToString(spec.shape), ": chunk ", b.ToString(),
                                        " lies outside the tensor"));
    }
    if (!b.Empty()) live.push_back(&b);
  }
  if (spec.NumElements() == 0) {
    return absl::OkStatus();  // nothing to cover; empty chunks only
  }
  const Box whole = Box::Whole(spec.shape);
  return CoverChecker(spec, whole).Check(std::move(live), 0);
}

absl::Status CheckExactCoverOf(const TensorSpec& spec, const Box& region, const std::vector<const Box*>& boxes) {
  if (region.Empty()) return absl::OkStatus();
  std::vector<const Box*> live;
  for (const Box* b : boxes) {
    if (b->ndim() != region.ndim()) {
      return absl::DataLossError(StrCat("tensor '", spec.fqn, "' ", ShapeToString(spec.shape), ": chunk ",
                                        b->ToString(), " has another rank than the tensor"));
    }
    if (!Intersect(*b, region).Empty()) live.push_back(b);
  }
  return CoverChecker(spec, region).Check(std::move(live), 0);
}

ChunkIndex::ChunkIndex(const std::vector<Box>& boxes) : boxes_(&boxes) {
  if (boxes.empty() || boxes.front().ndim() == 0) return;
  const int nd = boxes.front().ndim();
  // Sweep along the dimension with the most distinct offsets.
  size_t best = 0;
  for (int d = 0; d < nd; ++d) {
    absl::flat_hash_set<int64_t> distinct;
    for (const Box& b : boxes) distinct.insert(b.offsets[d]);
    if (distinct.size() > best) {
      best = distinct.size();
      dim_ = d;
    }
  }
  order_.resize(boxes.size());
  std::iota(order_.begin(), order_.end(), 0);
  std::sort(order_.begin(), order_.end(),
            [&](int64_t a, int64_t b) { return boxes[a].offsets[dim_] < boxes[b].offsets[dim_]; });
  starts_.reserve(order_.size());
  for (int64_t id : order_) {
    starts_.push_back(boxes[id].offsets[dim_]);
    max_len_ = std::max(max_len_, boxes[id].sizes[dim_]);
  }
}

std::vector<int64_t> ChunkIndex::Query(const Box& query) const {
  std::vector<int64_t> out;
  const std::vector<Box>& boxes = *boxes_;
  if (dim_ < 0) {
    for (size_t i = 0; i < boxes.size(); ++i) {
      if (!Intersect(boxes[i], query).Empty()) out.push_back(static_cast<int64_t>(i));
    }
    return out;
  }
  if (query.Empty()) return out;
  const int64_t lo = query.offsets[dim_] - max_len_ + 1;
  const int64_t hi = query.offsets[dim_] + query.sizes[dim_];
  auto it = std::lower_bound(starts_.begin(), starts_.end(), lo);
  for (size_t k = static_cast<size_t>(it - starts_.begin()); k < starts_.size() && starts_[k] < hi; ++k) {
    const int64_t id = order_[k];
    if (!boxes[id].Empty() && !Intersect(boxes[id], query).Empty()) out.push_back(id);
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace ckpt
