// ckpt export --format safetensors: a committed step in the Hugging Face
// layout, model-0000K-of-0000N.safetensors shards and
// model.safetensors.index.json (or one model.safetensors), each tensor whole.
//
// Streaming: a tensor is loaded in row-major slabs of at most --budget bytes
// and each slab is written at its place in the shard, so memory stays near
// the budget whatever the model's size. Small tensors share one load. Each
// shard is written under a temporary name, made durable and renamed; the
// index comes last.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "ckpt/checkpointer.h"
#include "ckpt/dtype.h"
#include "ckpt/safetensors.h"
#include "ckpt/verify.h"
#include "commands.h"
#include "common/cli.h"
#include "common/synth_job.h"
#include "util/aligned_buffer.h"
#include "util/errors.h"
#include "util/json.h"
#include "util/json_reader.h"
#include "util/sha256.h"
#include "util/strings.h"

namespace ckpt::tools {
namespace {

std::vector<std::string> SplitGlobs(const std::string& list) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= list.size()) {
    const size_t comma = std::min(list.find(',', start), list.size());
    const std::string_view g = Trim(std::string_view(list).substr(start, comma - start));
    if (!g.empty()) out.emplace_back(g);
    start = comma + 1;
  }
  return out;
}

// Hugging Face's size syntax: GB, MB, KB are powers of 1000, GiB, MiB, KiB
// powers of 1024; a bare number is bytes.
std::optional<int64_t> ParseShardSize(std::string_view text) {
  std::string_view t = Trim(text);
  const bool binary = t.size() > 2 && (t.substr(t.size() - 2) == "iB" || t.substr(t.size() - 2) == "ib" ||
                                       t.substr(t.size() - 2) == "IB");
  return ParseByteCount(t, binary);
}

// --rename FILE: one rule a line; '#' starts a comment. "OLD NEW" renames
// the tensor named OLD; "re:PATTERN REPLACEMENT" rewrites the first match of
// an ECMAScript regular expression ($1.. refer to its groups). Exact rules
// win; otherwise the first regex rule that matches applies.
struct Renamer {
  std::map<std::string, std::string> exact;
  std::vector<std::pair<std::regex, std::string>> rules;
  std::string Apply(const std::string& name) const {
    if (auto it = exact.find(name); it != exact.end()) return it->second;
    for (const auto& [re, repl] : rules) {
      if (std::regex_search(name, re))
        return std::regex_replace(name, re, repl, std::regex_constants::format_first_only);
    }
    return name;
  }
};

absl::StatusOr<Renamer> ReadRenames(const std::string& path) {
  Renamer r;
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(StrCat("--rename: cannot read ", path));
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (const size_t hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    std::istringstream fields(line);
    std::string from, to, extra;
    if (!(fields >> from)) continue;
    if (!(fields >> to) || (fields >> extra)) {
      return absl::InvalidArgumentError(StrCat(path, ":", n, ": want two columns, OLD NEW or re:PATTERN REPLACEMENT"));
    }
    if (from.rfind("re:", 0) == 0) {
      try {
        r.rules.emplace_back(std::regex(from.substr(3), std::regex::ECMAScript), to);
      } catch (const std::regex_error& e) {
        return absl::InvalidArgumentError(StrCat(path, ":", n, ": bad regular expression: ", e.what()));
      }
    } else if (!r.exact.emplace(from, to).second) {
      return absl::InvalidArgumentError(StrCat(path, ":", n, ": '", from, "' is renamed twice"));
    }
  }
  return r;
}

// Element conversion for --dtype (floating-point tensors only).
void Convert(DType from, const std::byte* in, DType to, std::byte* out, int64_t n) {
  const size_t ie = DTypeSize(from), oe = DTypeSize(to);
  if (from == DType::kF64 && to == DType::kF32) {
    for (int64_t i = 0; i < n; ++i) {
      double v;
      std::memcpy(&v, in + i * ie, 8);
      const float f = static_cast<float>(v);
      std::memcpy(out + i * oe, &f, 4);
    }
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    const float f = static_cast<float>(ElementToDouble(from, in + i * ie));
    if (to == DType::kF32) {
      std::memcpy(out + i * oe, &f, 4);
    } else {
      const uint16_t h = to == DType::kBF16 ? FloatToBF16(f) : FloatToF16(f);
      std::memcpy(out + i * oe, &h, 2);
    }
  }
}

struct OutTensor {
  const TensorSummary* src = nullptr;
  std::string name;  // after --rename
  DType out_dtype = DType::kU8;
  uint64_t bytes = 0;  // in the output
  size_t shard = 0;
  uint64_t begin = 0;  // in the shard's buffer
};

// One contiguous part of a tensor: a box whose row-major elements are
// consecutive in the whole tensor, starting at element `first`.
struct Slab {
  const OutTensor* t = nullptr;
  Box box;
  int64_t first = 0;
  int64_t count = 0;
};

std::vector<Slab> CutIntoSlabs(const OutTensor& t, int64_t max_elems) {
  const Shape& s = t.src->shape;
  const int n = static_cast<int>(s.size());
  std::vector<Slab> out;
  const int64_t total = TensorSpec{t.src->fqn, t.src->dtype, s}.NumElements();
  if (total == 0) return out;
  if (n == 0) {
    out.push_back(Slab{&t, Box::Whole(s), 0, 1});
    return out;
  }
  std::vector<int64_t> trailing(n, 1);
  for (int d = n - 2; d >= 0; --d) trailing[d] = trailing[d + 1] * s[d + 1];
  int d = 0;
  while (d < n - 1 && trailing[d] > max_elems) ++d;
  const int64_t step = std::max<int64_t>(1, max_elems / trailing[d]);
  std::vector<int64_t> outer(d, 0);  // index over dims < d
  while (true) {
    for (int64_t start = 0; start < s[d]; start += step) {
      Slab slab;
      slab.t = &t;
      slab.box = Box::Whole(s);
      int64_t first = 0;
      for (int k = 0; k < d; ++k) {
        slab.box.offsets[k] = outer[k];
        slab.box.sizes[k] = 1;
        first += outer[k] * trailing[k];
      }
      slab.box.offsets[d] = start;
      slab.box.sizes[d] = std::min(step, s[d] - start);
      slab.first = first + start * trailing[d];
      slab.count = slab.box.sizes[d] * trailing[d];
      out.push_back(std::move(slab));
    }
    int k = d - 1;
    while (k >= 0 && ++outer[k] == s[k]) outer[k--] = 0;
    if (k < 0) break;
  }
  return out;
}

std::string ShardName(size_t i, size_t n) {
  if (n == 1) return "model.safetensors";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "model-%05zu-of-%05zu.safetensors", i + 1, n);
  return buf;
}

// A shard being written, front to back: bytes are gathered in an aligned
// buffer and written with O_DIRECT in whole 4 KiB pages (buffered writes of
// a multi-GB shard and its fsync run at a fraction of the disk's speed);
// the last page is padded and the file cut to its length. Filesystems that
// refuse O_DIRECT get buffered writes. Fed in order to SHA-256.
class ShardWriter {
 public:
  static constexpr size_t kPage = 4096;
  static constexpr size_t kBuffer = size_t{8} << 20;

  ~ShardWriter() {
    if (fd_ >= 0) ::close(fd_);
  }
  absl::Status Open(const std::string& path, bool hash) {
    path_ = path;
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_DIRECT, 0644);
    if (fd_ < 0) fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) return absl::InternalError(StrCat("cannot create ", path, ": ", std::strerror(errno)));
    CKPT_ASSIGN_OR_RETURN(buf_, AlignedBuffer::Allocate(kBuffer, false));
    if (hash) sha_.emplace();
    return absl::OkStatus();
  }
  absl::Status Write(uint64_t offset, const std::byte* data, size_t n) {
    if (offset != written_) return absl::InternalError(StrCat(path_, ": out-of-order write at byte offset ", offset));
    if (sha_) sha_->Update(data, n);
    written_ += n;
    while (n > 0) {
      const size_t take = std::min(n, kBuffer - fill_);
      std::memcpy(buf_.data() + fill_, data, take);
      fill_ += take;
      data += take;
      n -= take;
      if (fill_ == kBuffer) CKPT_RETURN_IF_ERROR(Flush(kBuffer));
    }
    return absl::OkStatus();
  }
  absl::Status Finish(const std::string& final_path, std::string* sha256_hex) {
    // The last, partial page goes out padded; the file is then cut to size.
    const size_t padded = (fill_ + kPage - 1) / kPage * kPage;
    std::memset(buf_.data() + fill_, 0, padded - fill_);
    CKPT_RETURN_IF_ERROR(Flush(padded));
    if (::ftruncate(fd_, static_cast<off_t>(written_)) != 0) {
      return absl::InternalError(StrCat("truncating ", path_, ": ", std::strerror(errno)));
    }
    if (::fsync(fd_) != 0) return absl::InternalError(StrCat("fsync ", path_, ": ", std::strerror(errno)));
    ::close(fd_);
    fd_ = -1;
    if (sha_) *sha256_hex = sha_->FinishHex();
    if (std::rename(path_.c_str(), final_path.c_str()) != 0) {
      return absl::InternalError(StrCat("renaming ", path_, " to ", final_path, ": ", std::strerror(errno)));
    }
    return absl::OkStatus();
  }

 private:
  // Writes buf_[0, n) at flushed_ (n a multiple of kPage, or the padded tail).
  absl::Status Flush(size_t n) {
    size_t done = 0;
    while (done < n) {
      const ssize_t w = ::pwrite(fd_, buf_.data() + done, n - done, static_cast<off_t>(flushed_ + done));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        return absl::InternalError(StrCat("writing ", path_, " at byte offset ", flushed_ + done, ": ",
                                          w < 0 ? std::strerror(errno) : "no progress"));
      }
      done += static_cast<size_t>(w);
    }
    flushed_ += n;
    fill_ = 0;
    return absl::OkStatus();
  }

  std::string path_;
  int fd_ = -1;
  AlignedBuffer buf_;
  size_t fill_ = 0;
  uint64_t flushed_ = 0;
  std::optional<Sha256> sha_;
  uint64_t written_ = 0;
};

absl::Status WriteSmallFile(const std::string& path, const std::string& text) {
  const std::string tmp = StrCat(path, ".tmp.", ::getpid());
  ShardWriter w;
  CKPT_RETURN_IF_ERROR(w.Open(tmp, false));
  CKPT_RETURN_IF_ERROR(w.Write(0, reinterpret_cast<const std::byte*>(text.data()), text.size()));
  std::string unused;
  return w.Finish(path, &unused);
}

// What an export writes into its directory, and what readers take for one:
// shards, the index, SHA256SUMS, and the staging folder of an export that
// did not finish.
bool IsExportArtifact(const std::string& name) {
  return absl::EndsWith(name, ".safetensors") || name == "model.safetensors.index.json" || name == "SHA256SUMS" ||
         absl::StartsWith(name, ".ckpt-export.");
}

// The export artifacts in `dir` (none when it does not exist), sorted.
absl::StatusOr<std::vector<std::string>> ExportArtifactsIn(const std::string& dir) {
  std::vector<std::string> found;
  std::error_code ec;
  if (!std::filesystem::exists(dir, ec)) return found;
  if (!std::filesystem::is_directory(dir, ec)) return absl::InvalidArgumentError(StrCat(dir, " is not a directory"));
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (IsExportArtifact(name)) found.push_back(name);
  }
  if (ec) return absl::InternalError(StrCat("listing ", dir, ": ", ec.message()));
  std::sort(found.begin(), found.end());
  return found;
}

absl::Status SyncDirectory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return absl::InternalError(StrCat("opening ", dir, ": ", std::strerror(errno)));
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return absl::InternalError(StrCat("fsync ", dir, ": ", std::strerror(errno)));
  return absl::OkStatus();
}

// Replaces the export in `to` with the one finished in `stage` (a folder
// inside it): the old artifacts go first, the index before its shards, so
// that no reader ever finds the two exports mixed; then the new files move
// in, shards first and the index and SHA256SUMS last. Files that are no
// export's (config.json, a tokenizer) are left as they are.
absl::Status PublishExport(const std::string& to, const std::string& stage, const std::vector<std::string>& files,
                           const std::vector<std::string>& old) {
  std::vector<std::string> order = old;
  std::stable_sort(order.begin(), order.end(), [](const std::string& a, const std::string& b) {
    return !absl::EndsWith(a, ".safetensors") && absl::EndsWith(b, ".safetensors");
  });
  for (const std::string& name : order) {
    std::error_code ec;
    std::filesystem::remove_all(StrCat(to, "/", name), ec);
    if (ec) return absl::InternalError(StrCat("removing the earlier export's ", to, "/", name, ": ", ec.message()));
  }
  CKPT_RETURN_IF_ERROR(SyncDirectory(to));
  for (const std::string& name : files) {  // shards, then the index, then SHA256SUMS
    if (std::rename(StrCat(stage, "/", name).c_str(), StrCat(to, "/", name).c_str()) != 0) {
      return absl::InternalError(StrCat("moving ", name, " into ", to, ": ", std::strerror(errno)));
    }
  }
  CKPT_RETURN_IF_ERROR(SyncDirectory(to));
  std::error_code ec;
  std::filesystem::remove_all(stage, ec);
  return absl::OkStatus();
}

}  // namespace

namespace {

// What `ckpt export --format safetensors` writes: the tensors chosen,
// renamed, cast and placed in shards.
struct ExportPlan {
  std::vector<OutTensor> tensors;  // in the order of their new names
  std::vector<std::vector<OutTensor*>> shards;
  uint64_t total = 0;
};

// The tensors to export, renamed, in the order of their new names; an
// error (a usage error) when none is left or two would share a name.
absl::StatusOr<ExportPlan> ChooseTensors(const CheckpointSummary& summary, const std::vector<std::string>& only,
                                         const std::vector<std::string>& exclude, const Renamer& renamer,
                                         std::optional<DType> cast) {
  ExportPlan plan;
  std::set<std::string> names;
  for (const TensorSummary& t : summary.tensors) {
    auto matches = [&](const std::vector<std::string>& globs) {
      return std::any_of(globs.begin(), globs.end(), [&](const std::string& g) { return GlobMatch(g, t.fqn); });
    };
    if (!only.empty() && !matches(only)) continue;
    if (matches(exclude)) continue;
    OutTensor o;
    o.src = &t;
    o.name = renamer.Apply(t.fqn);
    if (o.name.empty() || o.name == "__metadata__" || !IsValidUtf8(o.name)) {
      return absl::InvalidArgumentError(StrCat("tensor '", t.fqn, "' would be named '", o.name,
                                               "', which safetensors cannot hold (empty, __metadata__ or not UTF-8); "
                                               "use --rename"));
    }
    if (!names.insert(o.name).second) {
      return absl::InvalidArgumentError(
          StrCat("two tensors would both be named '", o.name, "' (the second is '", t.fqn, "')"));
    }
    o.out_dtype = cast && IsFloatingPoint(t.dtype) ? *cast : t.dtype;
    o.bytes = static_cast<uint64_t>(TensorSpec{t.fqn, t.dtype, t.shape}.NumElements()) * DTypeSize(o.out_dtype);
    plan.tensors.push_back(std::move(o));
  }
  if (plan.tensors.empty()) return absl::InvalidArgumentError("no tensor is left to export (see --only and --exclude)");
  std::sort(plan.tensors.begin(), plan.tensors.end(),
            [](const OutTensor& a, const OutTensor& b) { return a.name < b.name; });
  return plan;
}

// Shards: tensors in order, a new shard when the next would pass the limit.
void PlaceInShards(ExportPlan& plan, uint64_t shard_limit) {
  plan.shards.assign(1, {});
  uint64_t in_shard = 0;
  for (OutTensor& t : plan.tensors) {
    if (!plan.shards.back().empty() && in_shard + t.bytes > shard_limit) {
      plan.shards.emplace_back();
      in_shard = 0;
    }
    t.shard = plan.shards.size() - 1;
    t.begin = in_shard;
    in_shard += t.bytes;
    plan.total += t.bytes;
    plan.shards.back().push_back(&t);
  }
}

// The first shard's __metadata__: the step, its metadata, its text blobs
// (the others are listed in `left_out`).
absl::StatusOr<std::map<std::string, std::string>> FirstShardMetadata(const StepToRead& opened,
                                                                      std::vector<std::string>* left_out) {
  std::map<std::string, std::string> meta = {{"format", "pt"}, {"ckpt.step", StrCat(opened.step)}};
  for (const auto& [k, v] : opened.reader->metadata()) {
    if (IsValidUtf8(k) && IsValidUtf8(v)) meta[StrCat("ckpt.meta.", k)] = v;
  }
  for (const BlobSummary& b : opened.summary.blobs) {
    const std::string label = b.rank < 0 ? b.name : StrCat("rank-", b.rank, ".", b.name);
    if (static_cast<uint64_t>(b.size) > kMaxMetadataBytes) {
      left_out->push_back(StrCat("blob '", label, "' (", b.size, " bytes: too large for __metadata__)"));
      continue;
    }
    std::string value;
    State target;
    (void)target.AddBlobOut(b.name, &value, b.rank < 0 ? BlobScope::kGlobal : BlobScope::kRank, b.rank);
    CKPT_RETURN_IF_ERROR(opened.reader->Load(target, std::max(0, b.rank)).status());
    if (!IsValidUtf8(value) || value.find('\0') != std::string::npos) {
      left_out->push_back(StrCat("blob '", label, "' (", b.size, " bytes, not UTF-8 text)"));
      continue;
    }
    meta[StrCat("ckpt.blob.", label)] = std::move(value);
  }
  return meta;
}

// Streams one shard's tensors into `w` after its header: this thread loads
// batches of consecutive slabs (their input at most a quarter of `budget`)
// while a writer thread converts and writes the batch before; two batches
// are in memory at most, with their casts.
class ShardStream {
 public:
  ShardStream(const StepToRead& opened, ShardWriter& w, uint64_t header_bytes, std::vector<Slab> slabs, int64_t budget,
              std::vector<std::byte> (&buffers)[2])
      : opened_(opened),
        w_(w),
        header_bytes_(header_bytes),
        slabs_(std::move(slabs)),
        budget_(budget),
        buffers_(buffers) {}

  // `on_written(bytes)` after each batch is written, on the writer thread.
  absl::Status Run(const std::function<void(uint64_t)>& on_written) {
    std::thread writer([&] { WriteBatches(on_written); });
    absl::Status load_status = LoadBatches();
    {
      std::lock_guard<std::mutex> lock(mu_);
      loading_done_ = true;
    }
    cv_.notify_all();
    writer.join();
    if (!load_status.ok()) return load_status;
    return write_status_;
  }

 private:
  struct Batch {
    std::vector<std::byte>* in = nullptr;  // one of the two buffers
    size_t a = 0, b = 0;                   // slabs [a, b)
  };

  absl::Status LoadBatches() {
    LoadOptions load_options;
    load_options.read_buffer_bytes = size_t{16} << 20;  // loads read a few MiB ahead
    size_t batches = 0;
    for (size_t a = 0; a < slabs_.size(); ++batches) {
      size_t b = a;
      uint64_t in_bytes = 0;
      while (b < slabs_.size()) {
        const uint64_t n = static_cast<uint64_t>(slabs_[b].count) * DTypeSize(slabs_[b].t->src->dtype);
        if (b > a && in_bytes + n > static_cast<uint64_t>(budget_ / 4)) break;
        in_bytes += n;
        ++b;
      }
      {
        // Batch i fills buffer i % 2 once batch i - 2 is written.
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return batches_written_ + 2 > batches || !write_status_.ok(); });
        if (!write_status_.ok()) return absl::OkStatus();
      }
      Batch batch{&buffers_[batches % 2], a, b};
      if (batch.in->size() < in_bytes) batch.in->resize(in_bytes);
      State target;
      uint64_t at = 0;
      for (size_t k = a; k < b; ++k) {
        const Slab& sl = slabs_[k];
        const TensorSpec spec{sl.t->src->fqn, sl.t->src->dtype, sl.t->src->shape};
        CKPT_RETURN_IF_ERROR(target.AddShard(spec, sl.box, batch.in->data() + at));
        at += static_cast<uint64_t>(sl.count) * DTypeSize(spec.dtype);
      }
      CKPT_RETURN_IF_ERROR(opened_.reader->Load(target, 0, load_options).status());
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return !pending_.has_value() || !write_status_.ok(); });
      if (!write_status_.ok()) return absl::OkStatus();
      pending_ = batch;
      cv_.notify_all();
      a = b;
    }
    return absl::OkStatus();
  }

  void WriteBatches(const std::function<void(uint64_t)>& on_written) {
    std::vector<std::byte> out_buf;
    while (true) {
      Batch batch;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return pending_.has_value() || loading_done_; });
        if (!pending_) return;
        batch = *pending_;
        pending_.reset();
      }
      cv_.notify_all();
      uint64_t at = 0, written = 0;
      absl::Status st;
      for (size_t k = batch.a; k < batch.b && st.ok(); ++k) {
        const Slab& sl = slabs_[k];
        const DType from = sl.t->src->dtype, to_type = sl.t->out_dtype;
        const std::byte* src = batch.in->data() + at;
        at += static_cast<uint64_t>(sl.count) * DTypeSize(from);
        const uint64_t out_n = static_cast<uint64_t>(sl.count) * DTypeSize(to_type);
        if (from != to_type) {
          out_buf.resize(out_n);
          Convert(from, src, to_type, out_buf.data(), sl.count);
          src = out_buf.data();
        }
        const uint64_t offset = header_bytes_ + sl.t->begin + static_cast<uint64_t>(sl.first) * DTypeSize(to_type);
        st = w_.Write(offset, src, out_n);
        written += out_n;
      }
      on_written(written);
      std::lock_guard<std::mutex> lock(mu_);
      ++batches_written_;
      cv_.notify_all();
      if (!st.ok()) {
        write_status_ = st;
        return;
      }
    }
  }

  const StepToRead& opened_;
  ShardWriter& w_;
  const uint64_t header_bytes_;
  const std::vector<Slab> slabs_;
  const int64_t budget_;
  std::vector<std::byte> (&buffers_)[2];
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<Batch> pending_;
  bool loading_done_ = false;
  size_t batches_written_ = 0;
  absl::Status write_status_;
};

// Writes shard `si` of `plan` into `stage` and returns its SHA-256 when
// `checksums` (else empty).
absl::StatusOr<std::string> WriteShard(const StepToRead& opened, const ExportPlan& plan, size_t si,
                                       const std::map<std::string, std::string>& meta, const std::string& stage,
                                       int64_t budget, bool checksums, std::vector<std::byte> (&buffers)[2],
                                       const std::function<void(uint64_t)>& on_written) {
  std::vector<SafetensorsTensor> header_tensors;
  for (const OutTensor* t : plan.shards[si]) {
    SafetensorsTensor h;
    h.name = t->name;
    h.dtype_name = std::string(SafetensorsDTypeName(t->out_dtype));
    h.shape = t->src->shape;
    h.begin = t->begin;
    h.end = t->begin + t->bytes;
    header_tensors.push_back(std::move(h));
  }
  const std::string header = EncodeSafetensorsHeader(header_tensors, meta);
  const std::string final_path = StrCat(stage, "/", ShardName(si, plan.shards.size()));
  ShardWriter w;
  CKPT_RETURN_IF_ERROR(w.Open(StrCat(final_path, ".tmp"), checksums));
  CKPT_RETURN_IF_ERROR(w.Write(0, reinterpret_cast<const std::byte*>(header.data()), header.size()));
  // Slabs of this shard's tensors, in file order, loaded a budget at a time.
  std::vector<Slab> slabs;
  for (const OutTensor* t : plan.shards[si]) {
    const size_t widest = std::max(DTypeSize(t->src->dtype), DTypeSize(t->out_dtype));
    const int64_t max_elems = std::max<int64_t>(1, budget / 4 / static_cast<int64_t>(widest));
    for (Slab& s : CutIntoSlabs(*t, max_elems)) slabs.push_back(std::move(s));
  }
  CKPT_RETURN_IF_ERROR(ShardStream(opened, w, header.size(), std::move(slabs), budget, buffers).Run(on_written));
  std::string sha;
  CKPT_RETURN_IF_ERROR(w.Finish(final_path, &sha));
  return sha;
}

// The shards, then the index (when there are several) and SHA256SUMS (when
// asked), into `stage`; returns the files written, in that order.
absl::StatusOr<std::vector<std::string>> WriteExport(const StepToRead& opened, const ExportPlan& plan,
                                                     const std::map<std::string, std::string>& first_meta,
                                                     const std::string& stage, int64_t budget, bool checksums) {
  ProgressBar progress("export");
  std::vector<std::byte> buffers[2];  // reused for every shard
  uint64_t done_bytes = 0;
  auto on_written = [&](uint64_t n) {
    done_bytes += n;
    progress.Update(static_cast<int64_t>(done_bytes), static_cast<int64_t>(plan.total));
  };
  std::vector<std::pair<std::string, std::string>> sums;  // file, sha256
  std::vector<std::string> files;
  for (size_t si = 0; si < plan.shards.size(); ++si) {
    const std::map<std::string, std::string> meta =
        si == 0 ? first_meta : std::map<std::string, std::string>{{"format", "pt"}};
    CKPT_ASSIGN_OR_RETURN(const std::string sha,
                          WriteShard(opened, plan, si, meta, stage, budget, checksums, buffers, on_written));
    files.push_back(ShardName(si, plan.shards.size()));
    if (checksums) sums.emplace_back(files.back(), sha);
  }
  progress.Finish();
  if (plan.shards.size() > 1) {
    SafetensorsIndex index;
    index.total_size = plan.total;
    for (const OutTensor& t : plan.tensors) index.weight_map[t.name] = ShardName(t.shard, plan.shards.size());
    CKPT_RETURN_IF_ERROR(WriteSmallFile(StrCat(stage, "/model.safetensors.index.json"), EncodeSafetensorsIndex(index)));
    files.push_back("model.safetensors.index.json");
  }
  if (checksums) {
    std::string text;
    for (const auto& [file, sha] : sums) StrAppend(&text, sha, "  ", file, "\n");
    CKPT_RETURN_IF_ERROR(WriteSmallFile(StrCat(stage, "/SHA256SUMS"), text));
    files.push_back("SHA256SUMS");
  }
  return files;
}

void PrintExport(bool json, const StepToRead& opened, const std::string& to, const ExportPlan& plan, int64_t budget,
                 const std::vector<std::string>& files, const std::vector<std::string>& left_out) {
  Render(
      json,
      [&](JsonWriter& w) {
        w.BeginObject();
        w.Field("step", opened.step).Field("to", to).Field("tensors", static_cast<int64_t>(plan.tensors.size()));
        w.Field("shards", static_cast<int64_t>(plan.shards.size()))
            .Field("total_size", static_cast<int64_t>(plan.total));
        w.Field("budget", budget).Field("peak_rss", static_cast<int64_t>(PeakRssBytes()));
        w.Key("files").BeginArray();
        for (const std::string& f : files) w.String(f);
        w.EndArray();
        w.Key("left_out").BeginArray();
        for (const std::string& l : left_out) w.String(l);
        w.EndArray();
        w.EndObject();
      },
      [&] {
        std::printf("exported step %lld: %zu tensors (%s) in %zu shard(s) to %s; peak memory %s (budget %s)\n",
                    static_cast<long long>(opened.step), plan.tensors.size(),
                    HumanBytes(static_cast<double>(plan.total)).c_str(), plan.shards.size(), to.c_str(),
                    HumanBytes(PeakRssBytes()).c_str(), HumanBytes(static_cast<double>(budget)).c_str());
      });
}

// What ExportSafetensorsMain's options say, checked.
struct ExportChoices {
  uint64_t shard_limit = 0;
  std::optional<DType> cast;
  Renamer renamer;
  std::vector<std::string> only, exclude;
  std::vector<std::string> earlier;  // the export OUTDIR holds now
};

absl::StatusOr<ExportChoices> CheckExportOptions(const std::string& to, bool overwrite, const std::string& max_shard,
                                                 int64_t budget, const std::string& dtype_name,
                                                 const std::string& rename_file, const std::string& only,
                                                 const std::string& exclude) {
  ExportChoices c;
  if (to.empty()) return absl::InvalidArgumentError("give --to DIR (see --help)");
  CKPT_ASSIGN_OR_RETURN(c.earlier, ExportArtifactsIn(to));
  if (!c.earlier.empty() && !overwrite) {
    std::string names;
    for (size_t i = 0; i < c.earlier.size() && i < 4; ++i) StrAppend(&names, i ? ", " : "", c.earlier[i]);
    if (c.earlier.size() > 4) StrAppend(&names, ", ...");
    return absl::InvalidArgumentError(StrCat(to, " already holds an export (", names,
                                             "): readers would mix the two; give --overwrite to replace it, or "
                                             "another --to"));
  }
  const std::optional<int64_t> shard_limit = ParseShardSize(max_shard);
  if (!shard_limit || *shard_limit <= 0) {
    return absl::InvalidArgumentError(StrCat("--max-shard-size: cannot read '", max_shard, "'"));
  }
  c.shard_limit = static_cast<uint64_t>(*shard_limit);
  if (budget < 4096) return absl::InvalidArgumentError("--budget must be at least 4K");
  if (!dtype_name.empty()) {
    c.cast = ParseDType(dtype_name);
    if (!c.cast || (*c.cast != DType::kBF16 && *c.cast != DType::kF16 && *c.cast != DType::kF32)) {
      return absl::InvalidArgumentError(StrCat("--dtype must be bf16, f16 or f32, not '", dtype_name, "'"));
    }
  }
  if (!rename_file.empty()) {
    CKPT_ASSIGN_OR_RETURN(c.renamer, ReadRenames(rename_file));
  }
  c.only = SplitGlobs(only);
  c.exclude = SplitGlobs(exclude);
  return c;
}

}  // namespace

int ExportSafetensorsMain(int argc, char** argv, int first) {
  int64_t step = kLatestStep;
  std::string dir, to, format, max_shard = "5GB", dtype_name, only, exclude, rename_file;
  int64_t budget = int64_t{256} << 20;
  bool checksums = false, json = false, overwrite = false;
  Args args("export", "DIR --format safetensors --to OUTDIR [options]",
            "Writes one committed step in the Hugging Face layout: model-0000K-of-0000N.safetensors\n"
            "shards and model.safetensors.index.json (or a single model.safetensors), every tensor\n"
            "whole, in the saved dtype or --dtype. Every block is verified on the way; tensors are\n"
            "streamed in slabs of at most --budget bytes, so memory stays bounded whatever the\n"
            "model size. The step's metadata and its text blobs go into the first shard's\n"
            "__metadata__ (\"ckpt.meta.KEY\", \"ckpt.blob.NAME\", \"ckpt.blob.rank-R.NAME\"); blobs that\n"
            "are not UTF-8 text are listed and left out. safetensors has no checksums: --checksums\n"
            "writes SHA256SUMS beside the shards (sha256sum -c reads it).\n"
            "OUTDIR is the export's own: one that already holds an export (safetensors files, an\n"
            "index or SHA256SUMS) is refused unless --overwrite, which replaces that export whole.\n"
            "The new files are written in a folder inside OUTDIR and moved in last, so no reader\n"
            "ever sees two exports mixed; other files there (config.json, a tokenizer) are kept.\n"
            "Exit: 0 written, 1 a block failed its checks or a write failed, 2 usage.");
  args.Positional("DIR", &dir, "checkpoint root (path or storage URI)");
  args.String("format", &format, "safetensors (hdf5 is `ckpt export --to FILE.h5`)");
  args.String("to", &to, "directory to write (created; existing shards of the same names are replaced)");
  args.Int("step", &step, "step to export (default: the latest committed)");
  args.String("max-shard-size", &max_shard,
              "largest shard, Hugging Face's syntax: 5GB (10^9), 500MB, 2GiB (2^30) (default 5GB); a tensor "
              "larger than this gets a shard of its own");
  args.String("dtype", &dtype_name, "cast floating-point tensors to bf16, f16 or f32 (round to nearest even)");
  args.String("only", &only, "export only tensors matching these globs (comma-separated, e.g. 'model.*')");
  args.String("exclude", &exclude, "leave out tensors matching these globs (e.g. 'optim.*')");
  args.String("rename", &rename_file,
              "file of renames, a rule a line: 'OLD NEW' or 're:PATTERN REPLACEMENT' (ECMAScript, $1 for groups)");
  args.Size("budget", &budget, "memory for tensor data in flight (default 256M)", true);
  args.Switch("checksums", &checksums, "write SHA256SUMS beside the shards");
  args.Switch("overwrite", &overwrite, "replace an earlier export in OUTDIR (its shards, index and SHA256SUMS)");
  args.Switch("json", &json, "print what was written as JSON");
  int exit = 0;
  if (!args.Parse(argc, argv, first, &exit)) return exit;
  auto fail = [](int code, const absl::Status& s) {
    std::fprintf(stderr, "ckpt export: %s\n", std::string(s.message()).c_str());
    return code;
  };
  auto choices = CheckExportOptions(to, overwrite, max_shard, budget, dtype_name, rename_file, only, exclude);
  if (!choices.ok()) return fail(kExitUsage, choices.status());
  auto opened = OpenStepToRead(dir, step, "export");
  if (!opened.ok()) return fail(kExitUsage, opened.status());
  auto plan = ChooseTensors(opened->summary, choices->only, choices->exclude, choices->renamer, choices->cast);
  if (!plan.ok()) return fail(kExitUsage, plan.status());
  PlaceInShards(*plan, choices->shard_limit);
  std::vector<std::string> left_out;
  auto first_meta = FirstShardMetadata(*opened, &left_out);
  if (!first_meta.ok()) return fail(kExitProblem, first_meta.status());

  // Everything is written in a folder of its own inside OUTDIR, then moved
  // in (PublishExport).
  const std::string stage = StrCat(to, "/.ckpt-export.", ::getpid());
  std::error_code ec;
  std::filesystem::create_directories(stage, ec);
  if (ec) return fail(kExitUsage, absl::InternalError(StrCat("cannot create ", stage, ": ", ec.message())));
  struct RemoveStage {
    const std::string& dir;
    ~RemoveStage() {
      std::error_code ignored;
      std::filesystem::remove_all(dir, ignored);
    }
  } remove_stage{stage};
  auto files = WriteExport(*opened, *plan, *first_meta, stage, budget, checksums);
  if (!files.ok()) return fail(kExitProblem, files.status());
  if (absl::Status s = PublishExport(to, stage, *files, choices->earlier); !s.ok()) return fail(kExitProblem, s);
  for (const std::string& l : left_out) std::fprintf(stderr, "ckpt export: left out %s\n", l.c_str());
  PrintExport(json, *opened, to, *plan, budget, *files, left_out);
  return kExitOk;
}

int ImportSafetensorsMain(int argc, char** argv, int first) {
  int64_t step = -1;
  std::string in, out;
  Codec codec_choice = Codec::kNone;
  Args args("import", "MODEL --out DIR [--step S] [--codec C]",
            "Saves a Hugging Face safetensors model (a directory with model.safetensors.index.json\n"
            "and its shards, a directory of *.safetensors files, or one file) as a ckpt checkpoint:\n"
            "one rank, whole tensors, with ckpt's checksums and, if asked, compression. The files\n"
            "are mapped, not read into memory: the save streams them through its staging arena.\n"
            "Metadata written by `ckpt export` comes back as it was (ckpt.meta.KEY as KEY, text\n"
            "blobs ckpt.blob.NAME as blobs); other __metadata__ entries are kept as metadata.\n"
            "Loading needs no import: every command reads a model in place.");
  args.Positional("MODEL", &in, "safetensors model (directory, file or safetensors:// URI)");
  args.String("out", &out, "checkpoint root to save into (path or storage URI)");
  args.Int("step", &step, "step to save as (default: the model's ckpt.step, else 0)");
  args.CodecFlag("codec", &codec_choice, "default none");
  int exit = 0;
  if (!args.Parse(argc, argv, first, &exit)) return exit;
  auto usage = [](const std::string& m) {
    std::fprintf(stderr, "ckpt import: %s\n", m.c_str());
    return kExitUsage;
  };
  if (out.empty()) return usage("give --out DIR (see --help)");
  const std::optional<Codec> codec = codec_choice;
  const std::string uri = in.rfind("safetensors://", 0) == 0 ? in : StorageUri("safetensors", in);
  auto storage = OpenStorage(uri);
  if (!storage.ok()) return usage(std::string(storage.status().message()));
  const SafetensorsModel* model = FindCapability<SafetensorsModel>(**storage);
  if (model == nullptr) return usage(StrCat(uri, " is not a safetensors model"));
  if (step < 0) step = model->step();

  // Each shard mapped read-only; a tensor points at its bytes there.
  struct Mapping {
    void* base = MAP_FAILED;
    size_t size = 0;
    ~Mapping() {
      if (base != MAP_FAILED) ::munmap(base, size);
    }
  };
  std::map<std::string, Mapping> maps;
  static const std::byte kEmpty[8] = {};
  State state;
  uint64_t logical = 0;
  for (const SafetensorsModel::Tensor& t : model->tensors()) {
    const std::byte* data = kEmpty;
    if (t.bytes > 0) {
      if (t.file.empty()) return usage(StrCat(in, ": its files are not local files, which import maps"));
      Mapping& m = maps[t.file];
      if (m.base == MAP_FAILED) {
        const int fd = ::open(t.file.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) return usage(StrCat("cannot open ", t.file, ": ", std::strerror(errno)));
        struct stat st {};
        if (::fstat(fd, &st) == 0) m.size = static_cast<size_t>(st.st_size);
        if (m.size == 0) {
          ::close(fd);
          return usage(StrCat(t.file, " is empty now: it changed underneath"));
        }
        m.base = ::mmap(nullptr, m.size, PROT_READ, MAP_PRIVATE, fd, 0);
        const int mmap_errno = errno;
        ::close(fd);
        if (m.base == MAP_FAILED) return usage(StrCat("cannot map ", t.file, ": ", std::strerror(mmap_errno)));
        ::madvise(m.base, m.size, MADV_SEQUENTIAL);
      }
      if (t.offset > m.size || t.bytes > m.size - t.offset) {
        return usage(StrCat(t.file, " changed underneath: tensor '", t.spec.fqn, "' ends past its ", m.size, " bytes"));
      }
      data = static_cast<const std::byte*>(m.base) + t.offset;
    }
    logical += t.bytes;
    if (absl::Status st = state.AddTensor(t.spec, const_cast<std::byte*>(data)); !st.ok()) {
      return usage(std::string(st.message()));
    }
  }
  // What `ckpt export` put into __metadata__ comes back as metadata and blobs.
  SaveOptions so;
  std::deque<std::string> blob_values;
  std::map<int, std::vector<std::pair<std::string, const std::string*>>> rank_blobs;
  const bool from_ckpt = model->metadata().count("ckpt.step") > 0;
  for (const auto& [k, v] : model->metadata()) {
    std::string_view key = k;
    if (ConsumePrefix(&key, "ckpt.blob.")) {
      blob_values.push_back(v);
      int64_t rank = -1;
      std::string_view name = key;
      if (ConsumePrefix(&name, "rank-")) {
        const size_t dot = name.find('.');
        if (dot != std::string_view::npos && ParseInt64(name.substr(0, dot), &rank) && rank >= 0 && rank < (1 << 20)) {
          rank_blobs[static_cast<int>(rank)].emplace_back(std::string(name.substr(dot + 1)), &blob_values.back());
          continue;
        }
        name = key;
      }
      (void)state.AddBlob(std::string(name), blob_values.back().data(), blob_values.back().size(), BlobScope::kGlobal);
      continue;
    }
    if (from_ckpt && (k == "ckpt.step" || k == "format")) continue;
    so.metadata[k] = v;
  }
  const int world = rank_blobs.empty() ? 1 : std::max(1, rank_blobs.rbegin()->first + 1);
  std::vector<State> states(static_cast<size_t>(world));
  states[0] = std::move(state);
  for (const auto& [r, blobs] : rank_blobs) {
    for (const auto& [name, value] : blobs) {
      (void)states[static_cast<size_t>(r)].AddBlob(name, value->data(), value->size(), BlobScope::kRank);
    }
  }
  const absl::Status st = SaveAsRanks(out, step, states, so, *codec);
  if (!st.ok()) {
    std::fprintf(stderr, "ckpt import: %s\n", std::string(st.message()).c_str());
    return kExitProblem;
  }
  std::printf("imported %zu tensors (%s) from %s as step %lld of %s (%d rank(s), codec %s)\n", model->tensors().size(),
              HumanBytes(static_cast<double>(logical)).c_str(), in.c_str(), static_cast<long long>(step), out.c_str(),
              world, std::string(CodecName(*codec)).c_str());
  return kExitOk;
}

}  // namespace ckpt::tools
