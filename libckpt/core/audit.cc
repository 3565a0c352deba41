#include "ckpt/audit.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <future>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "absl/strings/match.h"
#include "ckpt/checkpointer.h"
#include "ckpt/state.h"
#include "ckpt/synthetic.h"
#include "core/root.h"
#include "core/value_tally.h"
#include "format/frame_check.h"
#include "format/root_files.h"
#include "pipeline/block_stream.h"
#include "pipeline/loader.h"
#include "plan/cover.h"
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
  RootBaseManifests bases(storage);
  return LoadFromManifest(storage, m, state, /*rank=*/0, LoadOptions{}, nullptr, &bases).status();
}

absl::StatusOr<int64_t> Resolve(Storage& storage, int64_t step) {
  if (step != kLatestStep) return step;
  return LatestCommittedStep(storage);
}

std::vector<const ManifestTensor*> Selected(const Manifest& m, const std::string& glob) {
  std::vector<const ManifestTensor*> out;
  for (const ManifestTensor& t : m.tensors) {
    if (glob.empty() || GlobMatch(glob, t.spec.fqn)) out.push_back(&t);
  }
  return out;
}

std::string BoxKey(const Box& box) {
  std::string key;
  for (int d = 0; d < box.ndim(); ++d) StrAppend(&key, box.offsets[d], "+", box.sizes[d], ",");
  return key;
}

// Row-major index in a tensor of `shape` of element `local` of the
// row-major stream of `box`.
int64_t GlobalIndex(const Shape& shape, const Box& box, int64_t local) {
  int64_t g = 0, stride = 1;
  for (int d = box.ndim() - 1; d >= 0; --d) {
    const int64_t i = local % box.sizes[d];
    local /= box.sizes[d];
    g += (box.offsets[d] + i) * stride;
    stride *= shape[d];
  }
  return g;
}

// Folds per-block results into per-tensor ones in stream order, whatever
// order the workers finish in, so that sums come out the same every run.
// Holds at most the blocks in flight. Thread-safe.
template <typename Partial>
class OrderedFold {
 public:
  template <typename F>
  void Add(size_t sequence, const ManifestTensor* tensor, Partial p, F&& fold) {
    std::lock_guard<std::mutex> lock(mu_);
    pending_.emplace(sequence, std::make_pair(tensor, std::move(p)));
    while (!pending_.empty() && pending_.begin()->first == next_) {
      fold(pending_.begin()->second.first, pending_.begin()->second.second);
      pending_.erase(pending_.begin());
      ++next_;
    }
  }

 private:
  std::mutex mu_;
  std::map<size_t, std::pair<const ManifestTensor*, Partial>> pending_;
  size_t next_ = 0;
};

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

const char* DiffKindName(TensorDiff::Kind kind) {
  switch (kind) {
    case TensorDiff::Kind::kIdentical:
      return "identical";
    case TensorDiff::Kind::kChanged:
      return "changed";
    case TensorDiff::Kind::kOnlyInA:
      return "only in A";
    case TensorDiff::Kind::kOnlyInB:
      return "only in B";
    case TensorDiff::Kind::kMismatch:
      return "mismatch";
  }
  return "?";
}

namespace {

// Every tensor's chunks must tile it before a byte of it is summarised or
// compared: overlapping or gapped chunks would count some elements twice
// and others never.
absl::Status CheckGeometry(const Manifest& m) {
  for (const ManifestTensor& t : m.tensors) {
    std::vector<Box> boxes;
    boxes.reserve(t.chunks.size());
    for (const ManifestChunk& c : t.chunks) boxes.push_back(c.box);
    if (absl::Status s = CheckExactCover(t.spec, boxes); !s.ok()) {
      return absl::DataLossError(StrCat("step ", m.step, ": ", s.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<TensorStats>> ComputeStats(Storage& storage, int64_t step, const AuditOptions& options) {
  CKPT_ASSIGN_OR_RETURN(step, Resolve(storage, step));
  CKPT_ASSIGN_OR_RETURN(Manifest m, ReadManifest(storage, step));
  CKPT_RETURN_IF_ERROR(CheckGeometry(m));
  const std::vector<const ManifestTensor*> tensors = Selected(m, options.tensor_glob);
  std::map<const ManifestTensor*, ValueTally> acc;
  int64_t total = 0, done = 0;
  for (const ManifestTensor* t : tensors)
    total += t->spec.NumElements() * static_cast<int64_t>(DTypeSize(t->spec.dtype));
  // Every block is summarised where it was decoded; the per-block results
  // are folded in file order.
  StepFiles files(storage, m);
  RootBaseManifests bases(storage);
  DeltaChain chain(storage, &bases);
  files.set_chain(&chain);
  FrameReaderOptions fo;
  fo.buffer_bytes = static_cast<size_t>(std::max<int64_t>(options.slab_bytes, 1));
  OrderedFold<ValueTally> fold;
  CKPT_RETURN_IF_ERROR(StreamTensorBlocks(files, tensors, fo, [&](const StreamedBlock& b) {
    const DType dtype = b.tensor->spec.dtype;
    ValueTally t;
    TallyValues(dtype, b.raw.data(), static_cast<int64_t>(b.raw.size() / DTypeSize(dtype)), t);
    fold.Add(b.sequence, b.tensor, t, [&](const ManifestTensor* tensor, const ValueTally& part) {
      acc[tensor].Merge(part);
      done += static_cast<int64_t>(part.elements * DTypeSize(tensor->spec.dtype));
      if (options.progress) options.progress(done, total);
    });
    return absl::OkStatus();
  }));
  std::vector<TensorStats> out;
  for (const ManifestTensor* s : tensors) {
    const ValueTally& a = acc[s];
    TensorStats t;
    t.fqn = s->spec.fqn;
    t.dtype = s->spec.dtype;
    t.shape = s->spec.shape;
    t.elements = s->spec.NumElements();
    t.nan = a.nan;
    t.inf = a.inf;
    t.zeros = a.zeros;
    if (a.finite > 0) {
      t.min = a.min;
      t.max = a.max;
      t.mean = a.sum / static_cast<double>(a.finite);
    }
    t.l2 = std::sqrt(a.sumsq);
    t.bytes_logical = t.elements * static_cast<int64_t>(DTypeSize(t.dtype));
    std::set<int64_t> bases;
    for (const ManifestChunk& c : s->chunks) {
      if (const ManifestBase* b = m.BaseOf(c)) {
        ++t.delta_chunks;
        bases.insert(b->step);
      }
      for (uint64_t k = 0; k < c.block_count; ++k) {
        CKPT_ASSIGN_OR_RETURN(const IndexEntry* e, files.Entry(*s, c, k));
        t.bytes_stored += e->stored_len;
      }
    }
    t.delta_bases.assign(bases.begin(), bases.end());
    out.push_back(std::move(t));
  }
  return out;
}

std::vector<std::string> GateProblems(const std::vector<TensorStats>& current, const std::vector<TensorStats>* previous,
                                      const GateOptions& options) {
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
  CKPT_RETURN_IF_ERROR(CheckGeometry(ma));
  CKPT_RETURN_IF_ERROR(CheckGeometry(mb));
  auto ha = HashesOf(a, ma);
  auto hb = HashesOf(b, mb);

  std::map<std::string, TensorDiff> diffs;
  // Tensors whose values must be compared: cut the same way in both steps
  // (streamed block by block), or differently (loaded in slabs of rows).
  std::vector<const ManifestTensor*> aligned, recut;
  std::map<const ManifestTensor*, std::map<std::string, const ManifestChunk*>> b_chunks;
  for (const ManifestTensor* t : Selected(ma, options.tensor_glob)) {
    const TensorSpec* s = &t->spec;
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
    std::map<std::string, const ManifestChunk*>& by_box = b_chunks[t];
    for (const ManifestChunk& c : other->chunks) by_box[BoxKey(c.box)] = &c;
    bool same_cut = by_box.size() == t->chunks.size();
    for (const ManifestChunk& c : t->chunks) same_cut = same_cut && by_box.count(BoxKey(c.box)) > 0;
    (same_cut ? aligned : recut).push_back(t);
  }
  for (const ManifestTensor* t : Selected(mb, options.tensor_glob)) {
    if (ma.FindTensor(t->spec.fqn) == nullptr) {
      TensorDiff& d = diffs[t->spec.fqn];
      d.fqn = t->spec.fqn;
      d.kind = TensorDiff::Kind::kOnlyInB;
      d.elements = t->spec.NumElements();
    }
  }

  struct TensorComparison {
    ValueComparison c;
    int64_t first = -1;  // row-major index in the tensor
    int64_t bytes = 0;   // of A compared
  };
  std::map<std::string, TensorComparison> acc;
  int64_t total = 0, done = 0;
  for (const auto* list : {&aligned, &recut}) {
    for (const ManifestTensor* t : *list) {
      total += t->spec.NumElements() * static_cast<int64_t>(DTypeSize(t->spec.dtype));
      acc[t->spec.fqn];
    }
  }
  auto note_first = [](TensorComparison& x, int64_t index) {
    if (index >= 0 && (x.first < 0 || index < x.first)) x.first = index;
  };

  // Same cut: stream A's blocks; each worker reads the matching bytes of B
  // block by block, keeping B's last block for A's next one.
  {
    StepFiles files_a(a, ma), files_b(b, mb);
    RootBaseManifests bases_a(a), bases_b(b);
    DeltaChain chain_a(a, &bases_a), chain_b(b, &bases_b);
    files_a.set_chain(&chain_a);
    files_b.set_chain(&chain_b);
    std::mutex fetchers_mu;
    std::map<std::thread::id, std::unique_ptr<BlockFetcher>> fetchers;
    FrameReaderOptions fo;
    fo.buffer_bytes = static_cast<size_t>(std::max<int64_t>(options.slab_bytes / 2, 1));
    fo.worker_threads = 4;  // B is read synchronously on the workers: keep several reads in flight
    OrderedFold<TensorComparison> fold;
    absl::Status s = StreamTensorBlocks(files_a, aligned, fo, [&](const StreamedBlock& blk) -> absl::Status {
      BlockFetcher* fetcher;
      {
        std::lock_guard<std::mutex> lock(fetchers_mu);
        std::unique_ptr<BlockFetcher>& f = fetchers[std::this_thread::get_id()];
        if (!f) f = std::make_unique<BlockFetcher>(files_b);
        fetcher = f.get();
      }
      const ManifestTensor& ta = *blk.tensor;
      const ManifestTensor& tb = *mb.FindTensor(ta.spec.fqn);
      const ManifestChunk& cb = *b_chunks.at(&ta).at(BoxKey(blk.chunk->box));  // read-only on workers
      const DType dtype = ta.spec.dtype;
      const int64_t es = static_cast<int64_t>(DTypeSize(dtype));
      const int64_t bs_b = static_cast<int64_t>(mb.files[cb.file].block_size);
      const int64_t end = blk.first_element + static_cast<int64_t>(blk.raw.size()) / es;
      TensorComparison part;
      part.bytes = static_cast<int64_t>(blk.raw.size());
      for (int64_t pos = blk.first_element; pos < end;) {
        const uint64_t block_b = static_cast<uint64_t>(pos * es / bs_b);
        auto raw_b = fetcher->Fetch(tb, cb, block_b);
        if (!raw_b.ok()) return Annotate(raw_b.status(), "B");
        const int64_t start_b = static_cast<int64_t>(block_b) * bs_b / es;
        const int64_t stop = std::min(end, start_b + static_cast<int64_t>(raw_b->size()) / es);
        if (stop <= pos) return absl::DataLossError(StrCat("B: tensor '", ta.spec.fqn, "' ends early"));
        ValueComparison c;
        CompareValues(dtype, blk.raw.data() + (pos - blk.first_element) * es, raw_b->data() + (pos - start_b) * es,
                      stop - pos, c);
        if (c.first >= 0) note_first(part, GlobalIndex(ta.spec.shape, blk.chunk->box, pos + c.first));
        part.c.Merge(c);
        pos = stop;
      }
      fold.Add(blk.sequence, &ta, part, [&](const ManifestTensor* t, const TensorComparison& p) {
        TensorComparison& x = acc[t->spec.fqn];
        x.c.Merge(p.c);
        note_first(x, p.first);
        done += p.bytes;
        if (options.progress) options.progress(done, total);
      });
      return absl::OkStatus();
    });
    if (!s.ok()) return absl::StartsWith(s.message(), "B: ") ? s : Annotate(s, "A");
  }

  // Different cuts: both sides load the same slabs of rows, in parallel, one
  // batch ahead of the comparison.
  std::vector<const TensorSpec*> recut_specs;
  for (const ManifestTensor* t : recut) recut_specs.push_back(&t->spec);
  const std::vector<std::vector<Slab>> batches = PlanBatches(recut_specs, std::max<int64_t>(1, options.slab_bytes / 4));
  std::vector<std::byte> bufs_a[2], bufs_b[2];
  auto launch = [&](size_t bi) {
    return std::make_pair(std::async(std::launch::async,
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
    for (const Slab& s : batches[bi]) {
      TensorComparison& x = acc[s.spec->fqn];
      ValueComparison c;
      CompareValues(s.spec->dtype, bufs_a[bi % 2].data() + s.offset, bufs_b[bi % 2].data() + s.offset, s.elements(), c);
      if (c.first >= 0) note_first(x, s.row0 * s.row_elems + c.first);
      x.c.Merge(c);
      done += s.elements() * static_cast<int64_t>(DTypeSize(s.spec->dtype));
    }
    if (options.progress) options.progress(done, total);
  }

  std::vector<TensorDiff> out;
  for (auto& [fqn, d] : diffs) {
    auto it = acc.find(fqn);
    if (it != acc.end()) {
      const ValueComparison& x = it->second.c;
      d.kind = x.differing > 0 ? TensorDiff::Kind::kChanged : TensorDiff::Kind::kIdentical;
      d.differing = x.differing;
      d.first_index = it->second.first;
      d.max_abs = x.max_abs;
      d.rel_l2 = x.sum_sq_a > 0 ? std::sqrt(x.sum_sq_diff / x.sum_sq_a) : std::sqrt(x.sum_sq_diff);
    }
    out.push_back(std::move(d));
  }
  return out;
}

namespace {

std::string BlobLabel(const ManifestBlob& b) {
  return StrCat("blob '", b.name, "' (", b.rank < 0 ? std::string("global") : StrCat("rank ", b.rank), ")");
}

absl::StatusOr<std::string> ReadBlob(Storage& storage, const Manifest& m, const ManifestBlob& b) {
  std::string value;
  State target;
  CKPT_RETURN_IF_ERROR(target.AddBlobOut(b.name, &value, b.rank < 0 ? BlobScope::kGlobal : BlobScope::kRank));
  RootBaseManifests bases(storage);
  CKPT_RETURN_IF_ERROR(
      LoadFromManifest(storage, m, target, std::max(0, b.rank), LoadOptions{}, nullptr, &bases).status());
  return value;
}

}  // namespace

absl::StatusOr<std::vector<ItemDiff>> DiffBlobsAndMetadata(Storage& a, int64_t step_a, Storage& b, int64_t step_b) {
  CKPT_ASSIGN_OR_RETURN(step_a, Resolve(a, step_a));
  CKPT_ASSIGN_OR_RETURN(step_b, Resolve(b, step_b));
  CKPT_ASSIGN_OR_RETURN(Manifest ma, ReadManifest(a, step_a));
  CKPT_ASSIGN_OR_RETURN(Manifest mb, ReadManifest(b, step_b));
  std::vector<ItemDiff> out;
  std::map<std::pair<std::string, int32_t>, const ManifestBlob*> blobs_a, blobs_b;
  for (const ManifestBlob& x : ma.blobs) blobs_a[{x.name, x.rank}] = &x;
  for (const ManifestBlob& x : mb.blobs) blobs_b[{x.name, x.rank}] = &x;
  for (const auto& [key, x] : blobs_a) {
    ItemDiff d;
    d.what = BlobLabel(*x);
    auto other = blobs_b.find(key);
    if (other == blobs_b.end()) {
      d.kind = ItemDiff::Kind::kOnlyInA;
    } else {
      CKPT_ASSIGN_OR_RETURN(std::string va, ReadBlob(a, ma, *x));
      CKPT_ASSIGN_OR_RETURN(std::string vb, ReadBlob(b, mb, *other->second));
      if (va != vb) {
        d.kind = ItemDiff::Kind::kChanged;
        if (va.size() != vb.size()) {
          d.note = StrCat(va.size(), " bytes in A, ", vb.size(), " in B");
        } else {
          const auto at = std::mismatch(va.begin(), va.end(), vb.begin()).first - va.begin();
          d.note = StrCat(va.size(), " bytes, first difference at byte ", at);
        }
      }
    }
    out.push_back(std::move(d));
  }
  for (const auto& [key, x] : blobs_b) {
    if (!blobs_a.count(key)) out.push_back(ItemDiff{BlobLabel(*x), ItemDiff::Kind::kOnlyInB, ""});
  }
  for (const auto& [key, value] : ma.metadata) {
    ItemDiff d{StrCat("metadata '", key, "'"), ItemDiff::Kind::kIdentical, ""};
    auto other = mb.metadata.find(key);
    if (other == mb.metadata.end()) {
      d.kind = ItemDiff::Kind::kOnlyInA;
    } else if (other->second != value) {
      d.kind = ItemDiff::Kind::kChanged;
      d.note = value.size() + other->second.size() <= 160
                   ? StrCat("'", value, "' in A, '", other->second, "' in B")
                   : StrCat(value.size(), " bytes in A, ", other->second.size(), " in B");
    }
    out.push_back(std::move(d));
  }
  for (const auto& [key, value] : mb.metadata) {
    if (!ma.metadata.count(key)) out.push_back(ItemDiff{StrCat("metadata '", key, "'"), ItemDiff::Kind::kOnlyInB, ""});
  }
  return out;
}

}  // namespace ckpt
