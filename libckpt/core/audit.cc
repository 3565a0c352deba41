#include "ckpt/audit.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <cstring>
#include <future>
#include <map>

#include "ckpt/checkpointer.h"
#include "ckpt/state.h"
#include "ckpt/synthetic.h"
#include "core/root.h"
#include "format/frame_check.h"
#include "format/layout.h"
#include "pipeline/loader.h"
#include "util/errors.h"
#include "util/strings.h"

namespace ckpt {
namespace {

// A run of rows [row0, row0 + rows) of one tensor.
struct Slab {
  const TensorSpec* spec;
  int64_t row0 = 0;
  int64_t rows = 0;
  int64_t row_elems = 1;
  size_t offset = 0;  // in the batch buffer
  Box box() const {
    if (spec->shape.empty()) return Box::Whole(spec->shape);
    Box b = Box::Whole(spec->shape);
    b.offsets[0] = row0;
    b.sizes[0] = rows;
    return b;
  }
  int64_t elements() const { return rows * row_elems; }
};

// Cuts tensors into slabs of at most `budget` bytes (at least one row) and
// groups consecutive slabs into batches of about `budget` bytes.
std::vector<std::vector<Slab>> PlanBatches(const std::vector<const TensorSpec*>& specs, int64_t budget) {
  std::vector<std::vector<Slab>> batches(1);
  int64_t used = 0;
  for (const TensorSpec* spec : specs) {
    const int64_t es = static_cast<int64_t>(DTypeSize(spec->dtype));
    int64_t rows = spec->shape.empty() ? 1 : spec->shape[0];
    int64_t row_elems = 1;
    for (size_t d = 1; d < spec->shape.size(); ++d) row_elems *= spec->shape[d];
    if (spec->NumElements() == 0) rows = 0;
    const int64_t row_bytes = std::max<int64_t>(1, row_elems * es);
    const int64_t per = std::max<int64_t>(1, budget / row_bytes);
    for (int64_t r = 0; r < rows; r += per) {
      Slab s{spec, r, std::min(per, rows - r), row_elems, 0};
      const int64_t bytes = s.elements() * es;
      if (used > 0 && used + bytes > budget) {
        batches.emplace_back();
        used = 0;
      }
      s.offset = static_cast<size_t>(used);
      batches.back().push_back(s);
      used += (bytes + 63) / 64 * 64;
    }
  }
  if (batches.back().empty()) batches.pop_back();
  return batches;
}

// Loads one batch with the manifest read once per audit, not once per batch.
absl::Status LoadBatch(Storage& storage, const Manifest& m, const std::vector<Slab>& batch,
                       std::vector<std::byte>& buf) {
  size_t need = 0;
  for (const Slab& s : batch) {
    need = std::max(need, s.offset + static_cast<size_t>(s.elements()) * DTypeSize(s.spec->dtype));
  }
  if (buf.size() < need) buf.resize(need);
  State state;
  for (const Slab& s : batch) {
    CKPT_RETURN_IF_ERROR(state.AddShard(*s.spec, s.box(), buf.data() + s.offset));
  }
  return LoadFromManifest(storage, m, state, /*rank=*/0, LoadOptions{}).status();
}

absl::StatusOr<int64_t> Resolve(Storage& storage, int64_t step) {
  if (step != kLatestStep) return step;
  return LatestCommittedStep(storage);
}

template <typename F>
void ForEachValue(DType dtype, const std::byte* p, int64_t n, F&& f) {
  switch (dtype) {
    case DType::kF32: {
      for (int64_t i = 0; i < n; ++i) {
        float v;
        std::memcpy(&v, p + 4 * i, 4);
        f(i, static_cast<double>(v));
      }
      return;
    }
    case DType::kBF16: {
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        const uint32_t u = static_cast<uint32_t>(h) << 16;  // bf16 is the top half of an f32
        float v;
        std::memcpy(&v, &u, 4);
        f(i, static_cast<double>(v));
      }
      return;
    }
    case DType::kF64: {
      for (int64_t i = 0; i < n; ++i) {
        double v;
        std::memcpy(&v, p + 8 * i, 8);
        f(i, v);
      }
      return;
    }
    default: {
      const size_t es = DTypeSize(dtype);
      for (int64_t i = 0; i < n; ++i) f(i, ElementToDouble(dtype, p + es * i));
    }
  }
}

struct StatsAcc {
  int64_t elements = 0, nan = 0, inf = 0, zeros = 0, finite = 0;
  double min = std::numeric_limits<double>::infinity(), max = -std::numeric_limits<double>::infinity();
  double sum = 0, sumsq = 0;
  void Add(double v) {
    ++elements;
    if (!std::isfinite(v)) [[unlikely]] {
      if (std::isnan(v)) {
        ++nan;
      } else {
        ++inf;
      }
      return;
    }
    ++finite;
    zeros += v == 0;
    min = v < min ? v : min;
    max = v > max ? v : max;
    sum += v;
    sumsq += v * v;
  }
};

std::vector<const TensorSpec*> Selected(const Manifest& m, const std::string& glob) {
  std::vector<const TensorSpec*> out;
  for (const ManifestTensor& t : m.tensors) {
    if (glob.empty() || GlobMatch(glob, t.spec.fqn)) out.push_back(&t.spec);
  }
  return out;
}

// Per chunk: its box and the raw-byte checksums of its blocks, or nothing
// when the files cannot be indexed (the caller then compares values).
using ChunkHashes = std::vector<std::pair<std::string, std::vector<uint64_t>>>;

absl::StatusOr<std::map<std::string, ChunkHashes>> HashesOf(Storage& storage, const Manifest& m) {
  std::vector<std::vector<IndexEntry>> indexes(m.files.size());
  const std::string dir = StepDir(m.step);
  for (size_t i = 0; i < m.files.size(); ++i) {
    const std::string path = StrCat(dir, "/", m.files[i].name);
    CKPT_ASSIGN_OR_RETURN(std::unique_ptr<ReadableFile> f, storage.OpenReadable(path));
    CKPT_ASSIGN_OR_RETURN(indexes[i], ReadFileIndex(*f, m.files[i], path));
  }
  std::map<std::string, ChunkHashes> out;
  for (const ManifestTensor& t : m.tensors) {
    ChunkHashes& ch = out[t.spec.fqn];
    for (const ManifestChunk& c : t.chunks) {
      std::string key = StrCat(m.files[c.file].block_size, ":");
      for (int d = 0; d < c.box.ndim(); ++d) StrAppend(&key, c.box.offsets[d], "+", c.box.sizes[d], ",");
      std::vector<uint64_t> h;
      for (uint64_t b = 0; b < c.block_count; ++b) h.push_back(indexes[c.file][c.first_block + b].raw_hash);
      ch.emplace_back(std::move(key), std::move(h));
    }
    std::sort(ch.begin(), ch.end());
  }
  return out;
}

}  // namespace

bool GlobMatch(std::string_view pattern, std::string_view text) {
  size_t p = 0, t = 0, star = std::string_view::npos, mark = 0;
  while (t < text.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == text[t])) {
      ++p;
      ++t;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      mark = t;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      t = ++mark;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

const char* DiffKindName(TensorDiff::Kind kind) {
  switch (kind) {
    case TensorDiff::Kind::kIdentical: return "identical";
    case TensorDiff::Kind::kChanged: return "changed";
    case TensorDiff::Kind::kOnlyInA: return "only in A";
    case TensorDiff::Kind::kOnlyInB: return "only in B";
    case TensorDiff::Kind::kMismatch: return "mismatch";
  }
  return "?";
}

absl::StatusOr<std::vector<TensorStats>> ComputeStats(Storage& storage, int64_t step, const AuditOptions& options) {
  CKPT_ASSIGN_OR_RETURN(step, Resolve(storage, step));
  CKPT_ASSIGN_OR_RETURN(Manifest m, ReadManifest(storage, step));
  std::vector<const TensorSpec*> specs = Selected(m, options.tensor_glob);
  std::map<std::string, StatsAcc> acc;
  int64_t total = 0, done = 0;
  for (const TensorSpec* s : specs) total += s->NumElements() * static_cast<int64_t>(DTypeSize(s->dtype));
  // Two buffers: the next batch loads while this one is summarised.
  const std::vector<std::vector<Slab>> batches = PlanBatches(specs, std::max<int64_t>(1, options.slab_bytes / 2));
  std::vector<std::byte> bufs[2];
  std::future<absl::Status> next;
  if (!batches.empty()) {
    next = std::async(std::launch::async, [&] { return LoadBatch(storage, m, batches[0], bufs[0]); });
  }
  for (size_t bi = 0; bi < batches.size(); ++bi) {
    CKPT_RETURN_IF_ERROR(next.get());
    if (bi + 1 < batches.size()) {
      next = std::async(std::launch::async,
                        [&, bi] { return LoadBatch(storage, m, batches[bi + 1], bufs[(bi + 1) % 2]); });
    }
    const std::vector<std::byte>& buf = bufs[bi % 2];
    for (const Slab& s : batches[bi]) {
      StatsAcc& a = acc[s.spec->fqn];
      ForEachValue(s.spec->dtype, buf.data() + s.offset, s.elements(), [&](int64_t, double v) { a.Add(v); });
      done += s.elements() * static_cast<int64_t>(DTypeSize(s.spec->dtype));
    }
    if (options.progress) options.progress(done, total);
  }
  std::vector<TensorStats> out;
  for (const TensorSpec* s : specs) {
    const StatsAcc& a = acc[s->fqn];
    TensorStats t;
    t.fqn = s->fqn;
    t.dtype = s->dtype;
    t.shape = s->shape;
    t.elements = s->NumElements();
    t.nan = a.nan;
    t.inf = a.inf;
    t.zeros = a.zeros;
    if (a.finite > 0) {
      t.min = a.min;
      t.max = a.max;
      t.mean = a.sum / static_cast<double>(a.finite);
    }
    t.l2 = std::sqrt(a.sumsq);
    out.push_back(std::move(t));
  }
  return out;
}

std::vector<std::string> GateProblems(const std::vector<TensorStats>& current,
                                      const std::vector<TensorStats>* previous, const GateOptions& options) {
  std::vector<std::string> problems;
  std::map<std::string, const TensorStats*> before;
  if (previous != nullptr) {
    for (const TensorStats& t : *previous) before[t.fqn] = &t;
  }
  for (const TensorStats& t : current) {
    if (t.nan > 0 || t.inf > 0) {
      problems.push_back(StrCat(t.fqn, ": ", t.nan, " NaN and ", t.inf, " Inf of ", t.elements, " elements"));
    }
    if (!options.allow_all_zero && t.elements > 0 && t.zeros == t.elements) {
      problems.push_back(StrCat(t.fqn, ": all ", t.elements, " elements are zero"));
    }
    auto it = before.find(t.fqn);
    if (it != before.end() && it->second->l2 > 0) {
      const double change = std::fabs(t.l2 - it->second->l2) / it->second->l2;
      if (change > options.max_norm_change) {
        char buf[160];
        std::snprintf(buf, sizeof(buf), ": L2 norm moved %.1f%% (%.6g -> %.6g), more than %.1f%%", 100 * change,
                      it->second->l2, t.l2, 100 * options.max_norm_change);
        problems.push_back(t.fqn + buf);
      }
    }
  }
  return problems;
}

absl::StatusOr<std::vector<TensorDiff>> DiffSteps(Storage& a, int64_t step_a, Storage& b, int64_t step_b,
                                                  const AuditOptions& options) {
  CKPT_ASSIGN_OR_RETURN(step_a, Resolve(a, step_a));
  CKPT_ASSIGN_OR_RETURN(step_b, Resolve(b, step_b));
  CKPT_ASSIGN_OR_RETURN(Manifest ma, ReadManifest(a, step_a));
  CKPT_ASSIGN_OR_RETURN(Manifest mb, ReadManifest(b, step_b));
  auto ha = HashesOf(a, ma);
  auto hb = HashesOf(b, mb);

  std::map<std::string, TensorDiff> diffs;
  std::vector<const TensorSpec*> compare;
  for (const TensorSpec* s : Selected(ma, options.tensor_glob)) {
    TensorDiff& d = diffs[s->fqn];
    d.fqn = s->fqn;
    d.elements = s->NumElements();
    const ManifestTensor* other = mb.FindTensor(s->fqn);
    if (other == nullptr) {
      d.kind = TensorDiff::Kind::kOnlyInA;
      continue;
    }
    if (other->spec.dtype != s->dtype || other->spec.shape != s->shape) {
      d.kind = TensorDiff::Kind::kMismatch;
      d.note = StrCat(DTypeName(s->dtype), " ", ShapeToString(s->shape), " vs ", DTypeName(other->spec.dtype), " ",
                      ShapeToString(other->spec.shape));
      continue;
    }
    if (ha.ok() && hb.ok() && (*ha)[s->fqn] == (*hb)[s->fqn]) {
      d.by_checksum = true;  // same cut, same block checksums
      continue;
    }
    compare.push_back(s);
  }
  for (const TensorSpec* s : Selected(mb, options.tensor_glob)) {
    if (ma.FindTensor(s->fqn) == nullptr) {
      TensorDiff& d = diffs[s->fqn];
      d.fqn = s->fqn;
      d.kind = TensorDiff::Kind::kOnlyInB;
      d.elements = s->NumElements();
    }
  }

  struct DiffAcc {
    double sum_sq_diff = 0, sum_sq_a = 0;
  };
  std::map<std::string, DiffAcc> acc;
  int64_t total = 0, done = 0;
  for (const TensorSpec* s : compare) total += s->NumElements() * static_cast<int64_t>(DTypeSize(s->dtype));
  // Both sides load in parallel, one batch ahead of the comparison.
  const std::vector<std::vector<Slab>> batches =
      PlanBatches(compare, std::max<int64_t>(1, options.slab_bytes / 4));
  std::vector<std::byte> bufs_a[2], bufs_b[2];
  auto launch = [&](size_t bi) {
    return std::make_pair(
        std::async(std::launch::async,
                   [&, bi] { return Annotate(LoadBatch(a, ma, batches[bi], bufs_a[bi % 2]), "A"); }),
        std::async(std::launch::async,
                   [&, bi] { return Annotate(LoadBatch(b, mb, batches[bi], bufs_b[bi % 2]), "B"); }));
  };
  std::pair<std::future<absl::Status>, std::future<absl::Status>> next;
  if (!batches.empty()) next = launch(0);
  for (size_t bi = 0; bi < batches.size(); ++bi) {
    const absl::Status la = next.first.get();
    const absl::Status lb = next.second.get();
    CKPT_RETURN_IF_ERROR(la);
    CKPT_RETURN_IF_ERROR(lb);
    if (bi + 1 < batches.size()) next = launch(bi + 1);
    const std::vector<std::byte>& buf_a = bufs_a[bi % 2];
    const std::vector<std::byte>& buf_b = bufs_b[bi % 2];
    for (const Slab& s : batches[bi]) {
      TensorDiff& d = diffs[s.spec->fqn];
      DiffAcc& x = acc[s.spec->fqn];
      const size_t es = DTypeSize(s.spec->dtype);
      const std::byte* pa = buf_a.data() + s.offset;
      const std::byte* pb = buf_b.data() + s.offset;
      const int64_t base = s.row0 * s.row_elems;
      const int64_t n = s.elements();
      if (std::memcmp(pa, pb, static_cast<size_t>(n) * es) == 0) {
        ForEachValue(s.spec->dtype, pa, n, [&](int64_t, double v) {
          if (std::isfinite(v)) x.sum_sq_a += v * v;
        });
      } else {
        for (int64_t i = 0; i < n; ++i) {
          const double va = ElementToDouble(s.spec->dtype, pa + es * i);
          const double vb = ElementToDouble(s.spec->dtype, pb + es * i);
          if (std::isfinite(va)) x.sum_sq_a += va * va;
          const bool same = va == vb || (std::isnan(va) && std::isnan(vb));
          if (same) continue;
          if (d.differing++ == 0) d.first_index = base + i;
          if (std::isfinite(va) && std::isfinite(vb)) {
            const double diff = va - vb;
            d.max_abs = std::max(d.max_abs, std::fabs(diff));
            x.sum_sq_diff += diff * diff;
          }
        }
      }
      done += n * static_cast<int64_t>(es);
    }
    if (options.progress) options.progress(done, total);
  }
  std::vector<TensorDiff> out;
  for (auto& [fqn, d] : diffs) {
    if (acc.count(fqn)) {
      const DiffAcc& x = acc[fqn];
      d.kind = d.differing > 0 ? TensorDiff::Kind::kChanged : TensorDiff::Kind::kIdentical;
      d.rel_l2 = x.sum_sq_a > 0 ? std::sqrt(x.sum_sq_diff / x.sum_sq_a) : std::sqrt(x.sum_sq_diff);
    }
    out.push_back(std::move(d));
  }
  return out;
}

}  // namespace ckpt
