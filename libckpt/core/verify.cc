#include "ckpt/verify.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>

#include "codec/codec.h"
#include "core/root.h"
#include "format/frame_check.h"
#include "format/hdf5_container.h"
#include "format/root_files.h"
#include "format/safetensors.h"
#include "pipeline/frame_reader.h"
#include "plan/cover.h"
#include "util/clock.h"
#include "util/errors.h"
#include "util/hash.h"
#include "util/sha256.h"
#include "util/strings.h"

namespace ckpt {
namespace {

// What a block belongs to, for messages.
struct BlockOwner {
  const ManifestTensor* tensor = nullptr;
  const ManifestChunk* chunk = nullptr;
  const ManifestBlob* blob = nullptr;
  uint64_t rel_block = 0;
  uint64_t expect_raw = 0;
};

// Extracts "at byte offset N" from a message, or -1.
int64_t OffsetIn(absl::string_view msg) {
  size_t p = msg.rfind("at byte offset ");
  if (p == absl::string_view::npos) return -1;
  p += 15;
  int64_t v = 0;
  bool any = false;
  while (p < msg.size() && msg[p] >= '0' && msg[p] <= '9') {
    v = v * 10 + (msg[p] - '0');
    ++p;
    any = true;
  }
  return any ? v : -1;
}

class Verifier {
 public:
  Verifier(Storage& storage, int64_t step, const VerifyOptions& options)
      : storage_(storage), step_(step), options_(options), bases_(storage), chain_(storage, &bases_) {}

  absl::StatusOr<VerifyReport> Run() {
    const double t0 = NowSeconds();
    report_.step = step_;
    report_.deep = options_.deep;
    dir_ = StepDir(step_);
    auto ex = ExamineStep(storage_, step_);
    if (!ex.ok()) return ex.status();
    if (ex->info.state == StepState::kPartial) {
      return absl::NotFoundError(StrCat("step ", step_, " was never committed (", dir_,
                                        " has no MANIFEST; a save was interrupted or aborted)"));
    }
    // Nothing can be said of a step whose manifests the storage could not
    // read: that is no damage, and no verdict.
    if (ex->info.state == StepState::kUnreadable) {
      return absl::UnavailableError(StrCat("step ", step_, " is unreadable: ", ex->info.damage));
    }
    // Damage to either manifest file is a problem of its own, named by file;
    // the data is then checked against whichever of the two is intact.
    if (!ex->manifest_problem.empty()) {
      Problem(ex->manifest_problem, "", "", StrCat(dir_, "/", kManifestName), OffsetIn(ex->manifest_problem));
    }
    if (!ex->copy_problem.empty()) {
      Problem(ex->copy_problem, "", "", StrCat(dir_, "/", kManifestCopyName), OffsetIn(ex->copy_problem));
    }
    if (!ex->manifest) {
      report_.seconds = NowSeconds() - t0;
      return report_;
    }
    m_ = std::move(*ex->manifest);
    report_.files = static_cast<int64_t>(m_.files.size());
    report_.tensors = static_cast<int64_t>(m_.tensors.size());
    CheckClaim();
    CheckCover();
    CheckFiles();
    if (options_.deep) CheckBlocks();
    CheckUncheckedFiles();
    report_.seconds = NowSeconds() - t0;
    return report_;
  }

 private:
  void Problem(std::string message, std::string tensor, std::string chunk, std::string file, int64_t offset) {
    std::lock_guard<std::mutex> lock(mu_);
    if (report_.problems.size() >= 1000) return;
    report_.problems.push_back(
        VerifyProblem{std::move(message), std::move(tensor), std::move(chunk), std::move(file), offset});
  }

  // Version 3: the CLAIM on the storage is the one the manifest committed,
  // and every data file carries its save id.
  void CheckClaim() {
    if (m_.format_version < 3) return;
    const std::string path = StrCat(dir_, "/", kClaimName);
    auto committed = DecodeClaim(m_.claim, StrCat(dir_, "/", kManifestName, " (its record of ", kClaimName, ")"));
    if (!committed.ok()) {
      Problem(std::string(committed.status().message()), "", "", StrCat(dir_, "/", kManifestName), -1);
      return;
    }
    char a[19], b[19];
    for (const ManifestFile& mf : m_.files) {
      if (mf.save_id != committed->save_id) {
        Problem(StrCat(dir_, "/", mf.name, " is recorded as written by save ", HexHashTo(mf.save_id, a),
                       ", but the step was claimed by save ", HexHashTo(committed->save_id, b),
                       " (the files of two saves)"),
                "", "", StrCat(dir_, "/", mf.name), -1);
      }
    }
    auto text = storage_.GetAll(path);
    if (!text.ok()) {
      Problem(StrCat(path, absl::IsNotFound(text.status()) ? " is missing (`ckpt repair` rewrites it from the manifest)"
                                                           : StrCat(" is unreadable: ", text.status().message())),
              "", "", path, -1);
      return;
    }
    if (*text == m_.claim) return;
    size_t at = 0;
    while (at < text->size() && at < m_.claim.size() && (*text)[at] == m_.claim[at]) ++at;
    auto found = DecodeClaim(*text, path);
    Problem(found.ok() ? StrCat(path, " at byte offset ", at, ": names ", DescribeClaim(*found, UnixNanos()),
                                ", not the claim the manifest committed (`ckpt repair` rewrites it)")
                       : StrCat(found.status().message(), " (`ckpt repair` rewrites it from the manifest)"),
            "", "", path, found.ok() ? static_cast<int64_t>(at) : OffsetIn(found.status().message()));
  }

  void CheckCover() {
    for (const ManifestTensor& t : m_.tensors) {
      report_.chunks += static_cast<int64_t>(t.chunks.size());
      // A decoded grid's chunks are its cells: they tile the shape exactly.
      if (t.grid.has_value()) continue;
      std::vector<Box> boxes;
      for (const ManifestChunk& c : t.chunks) boxes.push_back(c.box);
      absl::Status s = CheckExactCover(t.spec, boxes);
      if (!s.ok()) Problem(std::string(s.message()), t.spec.fqn, "", "", -1);
    }
  }

  void CheckFiles() {
    owners_.resize(m_.files.size());
    indexes_.resize(m_.files.size());
    indexed_.assign(m_.files.size(), false);
    for (size_t fi = 0; fi < m_.files.size(); ++fi) {
      const ManifestFile& mf = m_.files[fi];
      owners_[fi].assign(mf.block_count, BlockOwner{});
    }
    // Which chunk or blob owns each block.
    auto claim = [&](uint32_t file, uint64_t first, uint64_t count, uint64_t stream_bytes, const ManifestTensor* t,
                     const ManifestChunk* c, const ManifestBlob* b) {
      const ManifestFile& mf = m_.files[file];
      const std::string name = t ? t->spec.fqn : b->name;
      const std::string box = c ? c->box.ToString() : "";
      const uint64_t bs = mf.block_size;
      const uint64_t expect = bs ? (stream_bytes + bs - 1) / bs : 0;
      if (count != expect) {
        Problem(StrCat(t ? "tensor '" : "blob '", name, "' ", box, ": ", count, " blocks recorded, ", expect,
                       " expected for ", stream_bytes, " bytes"),
                name, box, StrCat(dir_, "/", mf.name), -1);
      }
      for (uint64_t k = 0; k < count; ++k) {
        BlockOwner& o = owners_[file][first + k];
        if (o.tensor != nullptr || o.blob != nullptr) {
          Problem(StrCat("block ", first + k, " of ", mf.name, " is claimed twice (by ",
                         o.tensor ? o.tensor->spec.fqn : o.blob->name, " and ", name, ")"),
                  name, box, StrCat(dir_, "/", mf.name), -1);
          continue;
        }
        o.tensor = t;
        o.chunk = c;
        o.blob = b;
        o.rel_block = k;
        o.expect_raw = std::min<uint64_t>(bs, stream_bytes - std::min(stream_bytes, k * bs));
      }
    };
    for (const ManifestTensor& t : m_.tensors) {
      for (const ManifestChunk& c : t.chunks) {
        claim(c.file, c.first_block, c.block_count, static_cast<uint64_t>(c.box.Volume()) * DTypeSize(t.spec.dtype), &t,
              &c, nullptr);
      }
    }
    for (const ManifestBlob& b : m_.blobs) {
      claim(b.file, b.first_block, b.block_count, b.size, nullptr, nullptr, &b);
    }
    for (size_t fi = 0; fi < m_.files.size(); ++fi) {
      const ManifestFile& mf = m_.files[fi];
      const std::string path = StrCat(dir_, "/", mf.name);
      for (uint64_t k = 0; k < mf.block_count; ++k) {
        const BlockOwner& o = owners_[fi][k];
        if (o.tensor == nullptr && o.blob == nullptr) {
          Problem(StrCat("block ", k, " of ", path, " belongs to no tensor or blob"), "", "", path, -1);
        }
      }
      auto f = storage_.OpenReadable(path);
      if (!f.ok()) {
        Problem(StrCat("data file ", path, " of rank ", mf.rank, " is missing or unreadable: ", f.status().message()),
                "", "", path, -1);
        continue;
      }
      if (!CheckHeaderAndFooter(**f, mf, path)) continue;
      auto index = ReadFileIndex(**f, mf, path);
      if (!index.ok()) {
        Problem(std::string(index.status().message()), "", "", path, OffsetIn(index.status().message()));
        continue;
      }
      for (uint64_t k = 0; k < index->size(); ++k) {
        const BlockOwner& o = owners_[fi][k];
        if ((o.tensor || o.blob) && (*index)[k].raw_len != o.expect_raw) {
          Problem(StrCat(Owner(o), ": block ", k, " of ", path, " at byte offset ", (*index)[k].offset, " holds ",
                         (*index)[k].raw_len, " bytes, expected ", o.expect_raw),
                  OwnerName(o), OwnerBox(o), path, static_cast<int64_t>((*index)[k].offset));
        }
      }
      if (IsHdf5DataFile(mf.name) && m_.format_version >= 2) CheckContainer(**f, mf, *index, path);
      indexes_[fi] = std::move(index).value();
      indexed_[fi] = true;  // the file is closed here: roots can have more files than fds
      report_.blocks += static_cast<int64_t>(mf.block_count);
    }
  }

  // safetensors files carry no checksums: say so, and check them against a
  // SHA256SUMS beside them when there is one (`ckpt export --checksums`).
  void CheckUncheckedFiles() {
    std::vector<const ManifestFile*> files;
    for (const ManifestFile& mf : m_.files) {
      if (IsSafetensorsDataFile(mf.name)) files.push_back(&mf);
    }
    if (files.empty()) return;
    auto text = storage_.GetAll("SHA256SUMS");
    if (!text.ok()) {
      report_.notes.push_back(StrCat(files.size(),
                                     " safetensors file(s) carry no checksums: their structure was "
                                     "checked, their values cannot be (no SHA256SUMS beside them)"));
      return;
    }
    std::map<std::string, std::string> sums;
    size_t line_no = 0;
    for (std::string_view rest = *text; !rest.empty();) {
      const size_t nl = rest.find('\n');
      const std::string_view line = rest.substr(0, nl);
      rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
      ++line_no;
      if (line.empty()) continue;
      std::string hex, name;
      if (!ParseSha256SumLine(line, &hex, &name)) {
        Problem(StrCat("SHA256SUMS line ", line_no, " is not '<sha256>  <file>'"), "", "", "SHA256SUMS", -1);
        continue;
      }
      sums[name] = hex;
    }
    size_t matched = 0;
    std::vector<std::byte> buf(size_t{4} << 20);
    for (const ManifestFile* mf : files) {
      const std::string path = StrCat(dir_, "/", mf->name);
      auto want = sums.find(mf->name);
      if (want == sums.end()) {
        Problem(StrCat(mf->name, " is not listed in SHA256SUMS"), "", "", path, -1);
        continue;
      }
      auto f = storage_.OpenReadable(path);
      if (!f.ok()) continue;  // reported by CheckFiles
      Sha256 sha;
      const uint64_t size = mf->index_offset;  // the file's own bytes; its index follows
      absl::Status s;
      for (uint64_t at = 0; at < size && s.ok(); at += buf.size()) {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(buf.size(), size - at));
        s = (*f)->ReadAt(at, absl::Span<std::byte>(buf.data(), n));
        if (s.ok()) sha.Update(buf.data(), n);
      }
      if (!s.ok()) {
        Problem(std::string(s.message()), "", "", path, OffsetIn(s.message()));
        continue;
      }
      report_.bytes_read += static_cast<int64_t>(size);
      const std::string got = sha.FinishHex();
      if (got != want->second) {
        Problem(StrCat(mf->name, ": SHA-256 ", got, " differs from SHA256SUMS (", want->second, ")"), "", "", path, -1);
        continue;
      }
      ++matched;
    }
    report_.notes.push_back(
        StrCat(files.size(), " safetensors file(s) carry no checksums of their own; ", matched, " matched SHA256SUMS"));
  }

  // The bytes of an HDF5 container that libhdf5 wrote (outside the blocks
  // and the index) against the hash the manifest recorded.
  void CheckContainer(ReadableFile& f, const ManifestFile& mf, const std::vector<IndexEntry>& index,
                      const std::string& path) {
    std::vector<std::pair<uint64_t, uint64_t>> used = {{mf.index_offset, mf.index_len}};
    for (const IndexEntry& e : index) used.push_back({e.offset, e.frame_len});
    auto hash = Hdf5MetadataHash(
        Hdf5MetadataRanges(std::move(used), mf.size), [&](uint64_t offset, uint64_t length, char* out) {
          return f.ReadAt(offset, absl::Span<std::byte>(reinterpret_cast<std::byte*>(out), length));
        });
    if (!hash.ok()) {
      Problem(StrCat(path, ": ", hash.status().message()), "", "", path, -1);
    } else if (*hash != mf.container_hash) {
      char got[19], want[19];
      Problem(StrCat(path,
                     ": the HDF5 structures (the bytes outside the blocks and the index) fail their checksum "
                     "(xxh3 ",
                     HexHashTo(*hash, got), ", expected ", HexHashTo(mf.container_hash, want), ")"),
              "", "", path, -1);
    }
  }

  bool CheckHeaderAndFooter(ReadableFile& f, const ManifestFile& mf, const std::string& path) {
    if (IsHdf5DataFile(mf.name) || IsSafetensorsDataFile(mf.name)) {
      // An HDF5 container or a safetensors file has no ckpt header or
      // footer; its size must match.
      if (f.size() != mf.size) {
        Problem(StrCat(path, ": ", f.size() < mf.size ? "truncated to " : "grew to ", f.size(),
                       " bytes (manifest records ", mf.size, ")"),
                "", "", path, static_cast<int64_t>(std::min<uint64_t>(f.size(), mf.size)));
        return false;
      }
      return true;
    }
    if (f.size() < kDataHeaderSize + kFooterSize) {
      Problem(StrCat(path, ": truncated to ", f.size(), " bytes (manifest records ", mf.size, ")"), "", "", path,
              static_cast<int64_t>(f.size()));
      return false;
    }
    std::vector<std::byte> header(kDataHeaderSize);
    absl::Status s = f.ReadAt(0, absl::Span<std::byte>(header));
    if (s.ok()) {
      auto h = DecodeDataHeader(header.data(), path);
      if (!h.ok()) {
        s = h.status();
      } else if (h->step != step_ || static_cast<int32_t>(h->rank) != mf.rank || h->save_id != mf.save_id) {
        s = absl::DataLossError(StrCat(path, " at byte offset 16: header names step ", h->step, " rank ", h->rank,
                                       ", expected step ", step_, " rank ", mf.rank, " of this save"));
      }
    }
    if (!s.ok()) {
      Problem(std::string(s.message()), "", "", path, OffsetIn(s.message()));
      return false;
    }
    std::vector<std::byte> footer(kFooterSize);
    const uint64_t at = f.size() - kFooterSize;
    s = f.ReadAt(at, absl::Span<std::byte>(footer));
    if (s.ok()) {
      auto ft = DecodeFooter(footer.data(), path, at);
      if (!ft.ok()) {
        s = ft.status();
      } else if (ft->index_offset != mf.index_offset || ft->index_len != mf.index_len ||
                 ft->index_hash != mf.index_hash || ft->block_count != mf.block_count || ft->save_id != mf.save_id) {
        s = absl::DataLossError(StrCat(path, " at byte offset ", at, ": footer disagrees with the manifest"));
      }
    }
    if (!s.ok()) {
      Problem(std::string(s.message()), "", "", path, OffsetIn(s.message()));
      return false;
    }
    return true;
  }

  static std::string OwnerName(const BlockOwner& o) {
    return o.tensor ? o.tensor->spec.fqn : (o.blob ? o.blob->name : "");
  }
  static std::string OwnerBox(const BlockOwner& o) { return o.chunk ? o.chunk->box.ToString() : ""; }
  static std::string Owner(const BlockOwner& o) {
    if (o.tensor) return StrCat("tensor '", o.tensor->spec.fqn, "' chunk ", o.chunk->box.ToString());
    if (o.blob) return StrCat("blob '", o.blob->name, "'");
    return "unowned block";
  }

  void CheckBlocks() {
    // A safetensors file's blocks have no checksums to check: reading them
    // would prove nothing (its SHA256SUMS, if any, is checked on its own).
    auto checkable = [&](size_t fi) { return indexed_[fi] && !IsSafetensorsDataFile(m_.files[fi].name); };
    int64_t total = 0;
    for (size_t fi = 0; fi < m_.files.size(); ++fi) {
      if (!checkable(fi)) continue;
      for (const IndexEntry& e : indexes_[fi]) total += e.frame_len;
    }
    FrameReaderOptions fo;
    fo.worker_threads = options_.worker_threads;
    fo.buffer_bytes = options_.read_buffer_bytes;
    fo.stop_on_error = false;
    std::atomic<int64_t> done{0};
    // At most 64 files (each with an O_DIRECT twin) open at a time.
    constexpr size_t kOpenFiles = 64;
    for (size_t first = 0; first < m_.files.size(); first += kOpenFiles) {
      const size_t last = std::min(m_.files.size(), first + kOpenFiles);
      std::vector<std::unique_ptr<ReadableFile>> readers(last - first);
      std::vector<FrameTask> tasks;
      for (size_t fi = first; fi < last; ++fi) {
        if (!checkable(fi)) continue;
        const std::string path = StrCat(dir_, "/", m_.files[fi].name);
        auto f = storage_.OpenReadable(path);
        if (!f.ok()) {
          Problem(StrCat("data file ", path, " became unreadable: ", f.status().message()), "", "", path, -1);
          continue;
        }
        readers[fi - first] = std::move(f).value();
        for (uint64_t k = 0; k < indexes_[fi].size(); ++k) {
          tasks.push_back(FrameTask{readers[fi - first].get(), &indexes_[fi][k], k, &owners_[fi][k]});
        }
      }
      std::sort(tasks.begin(), tasks.end(), [](const FrameTask& a, const FrameTask& b) {
        if (a.file != b.file) return a.file < b.file;
        return a.entry->offset < b.entry->offset;
      });
      (void)ReadFrames(
          tasks, fo,
          [&](const FrameTask& t, absl::Span<const std::byte> frame, BlockCodec& codec,
              std::vector<std::byte>& scratch) -> absl::Status {
            CKPT_RETURN_IF_ERROR(CheckFrame(frame, *t.entry, t.block_id, t.file->path()));
            // A delta is checked rebuilt, down its whole chain.
            const BlockOwner& o = *static_cast<const BlockOwner*>(t.tag);
            DeltaBaseFn base;
            if ((t.entry->flags & kFlagDelta) != 0 && o.tensor != nullptr) {
              base = chain_.For(m_, *o.tensor, *o.chunk, o.rel_block);
            }
            auto raw = DecodeFrame(codec, frame, *t.entry, scratch, t.file->path(), &base);
            return raw.status();
          },
          [&](const FrameTask& t, const absl::Status& s) {
            const BlockOwner& o = *static_cast<const BlockOwner*>(t.tag);
            int64_t off = OffsetIn(s.message());
            if (off < 0) off = static_cast<int64_t>(t.entry->offset);
            // Called under the reader's lock; Problem takes its own.
            Problem(StrCat(Owner(o), " block ", t.block_id, ": ", s.message()), OwnerName(o), OwnerBox(o),
                    t.file->path(), off);
          },
          [&](const FrameTask& t) {
            int64_t d = done.fetch_add(t.entry->frame_len) + t.entry->frame_len;
            if (options_.progress) options_.progress(d, total);
          });
    }
    report_.bytes_read = done;
  }

  Storage& storage_;
  const int64_t step_;
  VerifyOptions options_;
  std::string dir_;
  Manifest m_;
  VerifyReport report_;
  std::mutex mu_;
  std::vector<std::vector<BlockOwner>> owners_;
  std::vector<std::vector<IndexEntry>> indexes_;
  std::vector<bool> indexed_;  ///< per file: its index was read and checked
  RootBaseManifests bases_;
  DeltaChain chain_;
};

}  // namespace

absl::StatusOr<VerifyReport> VerifyStep(Storage& storage, int64_t step, const VerifyOptions& options) {
  Verifier v(storage, step, options);
  return v.Run();
}

int64_t NewestRestorableStep(Storage& storage, int64_t at_most, const std::function<void(const std::string&)>& log) {
  auto steps = ListStepsIn(storage);
  if (!steps.ok()) return -1;
  std::vector<int64_t> candidates;
  for (const StepInfo& st : *steps) {
    if (st.committed && (at_most < 0 || st.step <= at_most)) candidates.push_back(st.step);
  }
  std::sort(candidates.rbegin(), candidates.rend());
  VerifyOptions vo;
  vo.deep = false;
  for (int64_t step : candidates) {
    auto report = VerifyStep(storage, step, vo);
    std::vector<const VerifyProblem*> blocking;
    std::string metadata_only;
    if (report.ok()) {
      for (const VerifyProblem& p : report->problems) {
        const bool manifest_file = p.file.ends_with("/MANIFEST") || p.file.ends_with("/MANIFEST.copy");
        if (manifest_file && report->files > 0) {
          metadata_only = p.message;
        } else {
          blocking.push_back(&p);
        }
      }
    }
    if (report.ok() && blocking.empty()) {
      if (!metadata_only.empty()) log(StrCat("restoring step ", step, " from its intact manifest: ", metadata_only));
      return step;
    }
    log(StrCat("step ", step, " fails verification; not restoring it: ",
               report.ok() ? blocking.front()->message : std::string(report.status().message())));
  }
  return -1;
}

std::optional<VerifyProblem> CheckLatestPointer(Storage& storage) {
  const std::string latest_name(kLatestName);
  // Committed steps, newest first (damaged ones count: they are committed);
  // which exist is enough, no manifest is read.
  std::vector<int64_t> committed;
  if (auto steps = CommittedStepsNewestFirst(storage); steps.ok()) committed = std::move(steps).value();
  auto text = storage.GetAll(kLatestName);
  if (!text.ok()) {
    if (!absl::IsNotFound(text.status())) {
      return VerifyProblem{StrCat("LATEST unreadable: ", text.status().message()), "", "", latest_name, -1};
    }
    // Before the first commit's pointer is written LATEST may be missing;
    // once two steps are committed it must exist.
    if (committed.size() >= 2) {
      return VerifyProblem{
          StrCat("LATEST is missing although ", committed.size(), " steps are committed (`ckpt repair` rewrites it)"),
          "", "", latest_name, -1};
    }
    return std::nullopt;
  }
  auto step = DecodeLatest(*text);
  if (!step.ok()) {
    return VerifyProblem{std::string(step.status().message()), "", "", latest_name, OffsetIn(step.status().message())};
  }
  if (std::find(committed.begin(), committed.end(), *step) == committed.end()) {
    return VerifyProblem{StrCat("LATEST names step ", *step, ", which is not committed"), "", "", latest_name, -1};
  }
  // After a crash between a commit and the pointer's move, LATEST lags by
  // one committed step; further behind it was damaged or rewritten.
  if (committed.size() >= 3 && *step < committed[1]) {
    return VerifyProblem{StrCat("LATEST names step ", *step, " but steps ", committed[1], " and ", committed[0],
                                " are committed after it (`ckpt repair` rewrites it)"),
                         "", "", latest_name, -1};
  }
  return std::nullopt;
}

absl::StatusOr<CheckpointSummary> SummarizeStep(Storage& storage, int64_t step) {
  CKPT_ASSIGN_OR_RETURN(Manifest m, ReadManifest(storage, step));
  CheckpointSummary s;
  s.step = m.step;
  s.world_size = m.world_size;
  s.created_unix_ns = m.created_unix_ns;
  s.library_version = m.library_version;
  s.codec = std::string(CodecName(m.codec));
  s.mesh = m.mesh;
  s.metadata = m.metadata;
  s.files = static_cast<int64_t>(m.files.size());
  for (const ManifestFile& f : m.files) s.bytes_on_disk += static_cast<int64_t>(f.size);
  // Stored sizes per block come from the file indexes.
  const std::string dir = StepDir(step);
  std::vector<std::vector<IndexEntry>> indexes(m.files.size());
  for (size_t i = 0; i < m.files.size(); ++i) {
    const std::string path = StrCat(dir, "/", m.files[i].name);
    auto f = storage.OpenReadable(path);
    if (!f.ok()) continue;
    auto idx = ReadFileIndex(**f, m.files[i], path);
    if (idx.ok()) indexes[i] = std::move(idx).value();
    for (const IndexEntry& e : indexes[i]) ++s.blocks_by_codec[std::string(CodecName(static_cast<Codec>(e.codec)))];
  }
  auto stored = [&](uint32_t file, uint64_t first, uint64_t count) {
    int64_t total = 0;
    for (uint64_t k = first; k < first + count && k < indexes[file].size(); ++k) {
      total += indexes[file][k].stored_len;
    }
    return total;
  };
  for (const ManifestTensor& t : m.tensors) {
    TensorSummary ts;
    ts.fqn = t.spec.fqn;
    ts.dtype = t.spec.dtype;
    ts.shape = t.spec.shape;
    ts.chunks = static_cast<int64_t>(t.chunks.size());
    for (const ManifestChunk& c : t.chunks) {
      ts.bytes_logical += c.box.Volume() * static_cast<int64_t>(DTypeSize(t.spec.dtype));
      ts.bytes_stored += stored(c.file, c.first_block, c.block_count);
    }
    s.bytes_logical += ts.bytes_logical;
    s.bytes_stored += ts.bytes_stored;
    s.tensors.push_back(std::move(ts));
  }
  for (const ManifestBlob& b : m.blobs) {
    s.blobs.push_back(BlobSummary{b.name, b.rank, static_cast<int64_t>(b.size)});
    s.bytes_logical += static_cast<int64_t>(b.size);
    s.bytes_stored += stored(b.file, b.first_block, b.block_count);
  }
  return s;
}

}  // namespace ckpt
