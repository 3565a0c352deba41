#include "format_roots/safetensors/safetensors_storage.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "absl/strings/str_join.h"
#include "ckpt/limits.h"
#include "ckpt/safetensors.h"
#include "format/data_file.h"
#include "format/manifest.h"
#include "format/root_files.h"
#include "format/safetensors.h"
#include "net/uri.h"
#include "storage/backend.h"
#include "util/bytes.h"
#include "util/errors.h"
#include "util/hash.h"
#include "util/strings.h"

namespace ckpt {
namespace {

constexpr std::string_view kIndexName = "model.safetensors.index.json";
constexpr std::string_view kSumsName = "SHA256SUMS";

// A shard: its real size, and the index served past its end.
struct Shard {
  std::string name;
  uint64_t real_size = 0;
  std::string index;
};

// A file of the root: the first `real_size` bytes of `base` (a shard as
// stored; none for the small files made in memory), followed by `tail` (the
// shard's index, or the whole of a made file).
class RootFile : public ReadableFile {
 public:
  // `owner` keeps the storage, and so `tail`, alive as long as the file.
  RootFile(std::unique_ptr<ReadableFile> base, uint64_t real_size, const std::string& tail, std::string path,
           std::shared_ptr<const void> owner)
      : base_(std::move(base)), real_size_(real_size), tail_(tail), path_(std::move(path)), owner_(std::move(owner)) {}
  uint64_t size() const override { return real_size_ + tail_.size(); }
  absl::Status ReadAt(uint64_t offset, absl::Span<std::byte> dst) override {
    if (offset > size() || dst.size() > size() - offset) {
      return absl::OutOfRangeError(
          StrCat(path_, ": read of ", dst.size(), " bytes at byte offset ", offset, " is past the end (truncated?)"));
    }
    if (offset < real_size_) {
      const uint64_t n = std::min<uint64_t>(dst.size(), real_size_ - offset);
      CKPT_RETURN_IF_ERROR(base_->ReadAt(offset, dst.subspan(0, n)));
      dst = dst.subspan(n);
      offset += n;
    }
    if (!dst.empty()) std::memcpy(dst.data(), tail_.data() + (offset - real_size_), dst.size());
    return absl::OkStatus();
  }
  void ReadAsync(uint64_t offset, absl::Span<std::byte> dst, IoCallback done) override {
    if (offset + dst.size() <= real_size_) {
      base_->ReadAsync(offset, dst, std::move(done));
      return;
    }
    std::move(done)(ReadAt(offset, dst));
  }
  size_t direct_alignment() const override { return base_ ? base_->direct_alignment() : 0; }
  const std::string& path() const override { return path_; }

 private:
  std::unique_ptr<ReadableFile> base_;
  uint64_t real_size_;
  const std::string& tail_;
  std::string path_;
  std::shared_ptr<const void> owner_;
};

class SafetensorsStorage : public Storage,
                           public LocalFiles,
                           public SafetensorsModel,
                           public std::enable_shared_from_this<SafetensorsStorage> {
 public:
  SafetensorsStorage(std::shared_ptr<Storage> base, std::string uri) : base_(std::move(base)), uri_(std::move(uri)) {}

  // Reads every header and builds the step.
  absl::Status Init(std::vector<std::string> files) {
    Manifest m;
    m.world_size = 1;
    m.codec = Codec::kNone;
    m.library_version = "safetensors";
    std::map<std::string, std::string> owner;  // tensor -> file
    uint64_t id_hash = 0;
    for (size_t fi = 0; fi < files.size(); ++fi) {
      const std::string& name = files[fi];
      CKPT_ASSIGN_OR_RETURN(std::unique_ptr<ReadableFile> f, base_->OpenReadable(name));
      const uint64_t size = f->size();
      std::byte prefix[8] = {};
      if (size >= 8) CKPT_RETURN_IF_ERROR(f->ReadAt(0, absl::Span<std::byte>(prefix, 8)));
      CKPT_ASSIGN_OR_RETURN(const uint64_t header_len, DecodeSafetensorsPrefix(prefix, size, Display(name)));
      std::string json(header_len, '\0');
      CKPT_RETURN_IF_ERROR(f->ReadAt(8, absl::Span<std::byte>(reinterpret_cast<std::byte*>(json.data()), json.size())));
      CKPT_ASSIGN_OR_RETURN(SafetensorsFile sf, DecodeSafetensorsHeader(json, size, Display(name)));
      id_hash = Xxh3(StrCat(id_hash, json));
      if (fi == 0) {
        if (auto it = sf.metadata.find("ckpt.step"); it != sf.metadata.end()) {
          int64_t step = 0;
          if (ParseInt64(it->second, &step) && step >= 0) m.step = step;
        }
      }
      // `ckpt export` wrote the step's metadata as "ckpt.meta.KEY": KEY again.
      for (const auto& [k, v] : sf.metadata) {
        std::string_view key = k;
        (void)ConsumePrefix(&key, "ckpt.meta.");
        if (key.size() <= kMaxMetadataBytes && v.size() <= kMaxMetadataBytes) m.metadata[std::string(key)] = v;
      }
      Shard shard;
      shard.name = name;
      shard.real_size = size;
      std::vector<IndexEntry> entries;
      for (const SafetensorsTensor& t : sf.tensors) {
        if (!t.dtype) {
          return absl::UnimplementedError(StrCat(Display(name), ": tensor '", t.name, "' is ", t.dtype_name,
                                                 ", which ckpt does not hold (it holds BOOL, U8, I8, I16, I32, I64, "
                                                 "F16, BF16, F32, F64, F8_E4M3 and F8_E5M2)"));
        }
        if (auto [it, fresh] = owner.emplace(t.name, name); !fresh) {
          return absl::DataLossError(
              StrCat("tensor '", t.name, "' is in both ", Display(it->second), " and ", Display(name)));
        }
        ManifestTensor mt;
        mt.spec = TensorSpec{t.name, *t.dtype, t.shape};
        located_.push_back(SafetensorsModel::Tensor{mt.spec, ::ckpt::LocalPath(*base_, name), sf.data_start + t.begin,
                                                    t.end - t.begin});
        ManifestChunk c;
        c.file = static_cast<uint32_t>(fi);
        c.box = Box::Whole(t.shape);
        c.first_block = entries.size();
        const uint64_t bytes = t.end - t.begin;
        for (uint64_t at = 0; at < bytes; at += kSafetensorsBlockBytes) {
          IndexEntry e;
          e.offset = sf.data_start + t.begin + at;
          e.raw_len = e.stored_len = e.frame_len = static_cast<uint32_t>(std::min(kSafetensorsBlockBytes, bytes - at));
          e.codec = 0;
          e.elem_width = static_cast<uint8_t>(DTypeSize(*t.dtype));
          e.flags = kFlagBareBlock | kFlagUnchecked;
          entries.push_back(e);
        }
        c.block_count = entries.size() - c.first_block;
        mt.chunks.push_back(c);
        m.tensors.push_back(std::move(mt));
      }
      shard.index = EncodeIndex(entries);
      ManifestFile mf;
      mf.name = name;
      mf.rank = 0;
      mf.size = size + shard.index.size();
      mf.index_offset = size;
      mf.index_len = shard.index.size();
      mf.index_hash = Xxh3(shard.index);
      mf.block_count = entries.size();
      mf.block_size = kSafetensorsBlockBytes;
      m.files.push_back(mf);
      shards_.push_back(std::move(shard));
    }
    if (!index_.weight_map.empty()) CKPT_RETURN_IF_ERROR(CheckIndex(owner));
    std::sort(m.tensors.begin(), m.tensors.end(),
              [](const ManifestTensor& a, const ManifestTensor& b) { return a.spec.fqn < b.spec.fqn; });
    std::sort(
        located_.begin(), located_.end(),
        [](const SafetensorsModel::Tensor& a, const SafetensorsModel::Tensor& b) { return a.spec.fqn < b.spec.fqn; });
    metadata_ = m.metadata;
    // The claim of a save that wrote this step: the headers' hash as its id.
    StepClaim claim;
    claim.save_id = id_hash == 0 ? 1 : id_hash;
    claim.world_size = 1;
    claim.host = "safetensors";
    claim_ = EncodeClaim(claim);
    m.claim = claim_;
    for (ManifestFile& mf : m.files) mf.save_id = claim.save_id;
    step_ = m.step;
    latest_ = EncodeLatest(step_);
    // Every virtual file is made here: the storage is then read-only and
    // safe to use from several threads at once.
    if (auto sums = base_->GetAll(kSumsName); sums.ok()) sums_ = std::move(sums).value();
    manifest_ = EncodeManifest(m);
    // The manifest must decode as any other (limits, references, boxes).
    CKPT_RETURN_IF_ERROR(DecodeManifest(manifest_, Display(std::string(kIndexName))).status());
    return absl::OkStatus();
  }

  absl::Status CheckIndex(const std::map<std::string, std::string>& owner) {
    for (const auto& [tensor, file] : index_.weight_map) {
      auto it = owner.find(tensor);
      if (it == owner.end()) {
        return absl::DataLossError(StrCat(Display(std::string(kIndexName)), ": weight_map places tensor '", tensor,
                                          "' in ", file, ", which does not hold it"));
      }
      if (it->second != file) {
        return absl::DataLossError(StrCat(Display(std::string(kIndexName)), ": weight_map places tensor '", tensor,
                                          "' in ", file, ", but it is in ", it->second));
      }
    }
    for (const auto& [tensor, file] : owner) {
      if (!index_.weight_map.count(tensor)) {
        return absl::DataLossError(
            StrCat(Display(file), ": tensor '", tensor, "' is not in ", kIndexName, "'s weight_map"));
      }
    }
    return absl::OkStatus();
  }

  void set_index(SafetensorsIndex index) { index_ = std::move(index); }

  std::string uri() const override { return uri_; }
  StorageCaps caps() const override {
    StorageCaps c = base_->caps();
    c.engine = StrCat("safetensors(", c.engine, ")");
    c.atomic_rename = false;
    return c;
  }
  absl::StatusOr<std::unique_ptr<WritableFile>> OpenWritable(std::string_view path, const WriteOptions&) override {
    return ReadOnly(path);
  }
  absl::StatusOr<std::unique_ptr<ReadableFile>> OpenReadable(std::string_view path) override {
    if (const Shard* s = FindShard(path)) {
      CKPT_ASSIGN_OR_RETURN(std::unique_ptr<ReadableFile> f, base_->OpenReadable(s->name));
      if (f->size() != s->real_size) {
        return absl::DataLossError(StrCat(Display(s->name), ": ", f->size(), " bytes now, ", s->real_size,
                                          " when it was opened (changed underneath)"));
      }
      return std::unique_ptr<ReadableFile>(
          new RootFile(std::move(f), s->real_size, s->index, std::string(path), shared_from_this()));
    }
    const std::string* text = Virtual(path);
    if (text == nullptr) return absl::NotFoundError(StrCat(uri_, ": no ", path));
    return std::unique_ptr<ReadableFile>(new RootFile(nullptr, 0, *text, std::string(path), shared_from_this()));
  }
  absl::Status PutAtomic(std::string_view path, absl::Span<const std::byte>) override { return ReadOnly(path); }
  absl::Status PutIfAbsent(std::string_view path, absl::Span<const std::byte>) override { return ReadOnly(path); }
  absl::StatusOr<std::string> GetAll(std::string_view path) override {
    if (const std::string* text = Virtual(path)) return *text;
    return Storage::GetAll(path);
  }
  absl::StatusOr<uint64_t> FileSize(std::string_view path) override {
    if (const Shard* s = FindShard(path)) return s->real_size + s->index.size();
    if (const std::string* text = Virtual(path)) return text->size();
    return absl::NotFoundError(StrCat(uri_, ": no ", path));
  }
  absl::StatusOr<std::vector<DirEntry>> List(std::string_view dir) override {
    if (dir.empty()) {
      std::vector<DirEntry> out = {{std::string(kLatestName), false}, {StepDir(step_), true}};
      if (Virtual(kSumsName) != nullptr) out.insert(out.begin(), DirEntry{std::string(kSumsName), false});
      return out;
    }
    if (dir != StepDir(step_)) return absl::NotFoundError(StrCat(uri_, ": no directory ", dir));
    std::vector<DirEntry> out = {
        {std::string(kClaimName), false}, {std::string(kManifestName), false}, {std::string(kManifestCopyName), false}};
    for (const Shard& s : shards_) out.push_back({s.name, false});
    std::sort(out.begin(), out.end(), [](const DirEntry& a, const DirEntry& b) { return a.name < b.name; });
    return out;
  }
  absl::Status Remove(std::string_view path) override { return ReadOnly(path); }
  absl::Status RemoveAll(std::string_view dir) override {
    if (dir == StepDir(step_) || dir.empty()) return ReadOnly(dir);
    return absl::OkStatus();  // nothing else exists
  }
  absl::Status SyncDir(std::string_view) override { return absl::OkStatus(); }
  // A shard's own file (its bytes are a prefix of what OpenReadable serves,
  // which appends the index).
  std::string LocalPath(std::string_view path) override {
    const Shard* s = FindShard(path);
    return s == nullptr ? std::string() : ::ckpt::LocalPath(*base_, s->name);
  }
  StorageCapability* Capability(std::string_view name) override {
    if (name == LocalFiles::kName) return static_cast<LocalFiles*>(this);
    if (name == SafetensorsModel::kName) return static_cast<SafetensorsModel*>(this);
    return nullptr;
  }
  // SafetensorsModel:
  const std::vector<SafetensorsModel::Tensor>& tensors() const override { return located_; }
  int64_t step() const override { return step_; }
  const std::map<std::string, std::string>& metadata() const override { return metadata_; }

 private:
  std::string Display(const std::string& name) const { return StrCat(base_->uri(), "/", name); }
  absl::Status ReadOnly(std::string_view path) const {
    return absl::FailedPreconditionError(StrCat(uri_, " is a safetensors model, read-only here (writing ", path,
                                                "); `ckpt import` converts it into a ckpt root"));
  }
  const Shard* FindShard(std::string_view path) const {
    const std::string dir = StepDir(step_) + "/";
    if (path.substr(0, dir.size()) != dir) return nullptr;
    const std::string_view name = path.substr(dir.size());
    for (const Shard& s : shards_) {
      if (s.name == name) return &s;
    }
    return nullptr;
  }
  const std::string* Virtual(std::string_view path) const {
    if (path == kSumsName) return sums_ ? &*sums_ : nullptr;
    if (path == kLatestName) return &latest_;
    const std::string dir = StepDir(step_) + "/";
    if (path.substr(0, dir.size()) != dir) return nullptr;
    const std::string_view name = path.substr(dir.size());
    if (name == kManifestName || name == kManifestCopyName) return &manifest_;
    if (name == kClaimName) return &claim_;
    return nullptr;
  }

  std::shared_ptr<Storage> base_;
  std::string uri_;
  SafetensorsIndex index_;
  std::vector<Shard> shards_;
  int64_t step_ = 0;
  std::string manifest_, claim_, latest_;
  std::optional<std::string> sums_;  // SHA256SUMS beside the shards, if any
  std::vector<SafetensorsModel::Tensor> located_;
  std::map<std::string, std::string> metadata_;
};

bool IsDir(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool IsFile(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

}  // namespace

bool IsSafetensorsModelPath(std::string_view path) {
  const std::string p(path);
  if (IsFile(p)) return IsSafetensorsDataFile(p);
  if (!IsDir(p) || IsFile(p + "/" + std::string(kLatestName))) return false;
  return IsFile(p + "/" + std::string(kIndexName)) || IsFile(p + "/model.safetensors");
}

absl::StatusOr<std::shared_ptr<Storage>> OpenSafetensorsStorage(std::string_view uri) {
  CKPT_ASSIGN_OR_RETURN(ParsedUri parsed, ParseUri(uri));
  std::string location = parsed.Path();
  std::vector<std::string> files;
  std::string dir = location;
  if (IsSafetensorsDataFile(location) && !IsDir(location)) {
    const size_t slash = location.rfind('/');
    dir = slash == std::string::npos ? "." : location.substr(0, slash);
    files.push_back(slash == std::string::npos ? location : location.substr(slash + 1));
  }
  std::string inner = StrCat("file://", EncodeUriPath(dir));
  for (const auto& [k, v] : parsed.params) {
    inner += StrCat(inner.find('?') == std::string::npos ? "?" : "&", EncodeUriValue(k), "=", EncodeUriValue(v));
  }
  CKPT_ASSIGN_OR_RETURN(std::shared_ptr<Storage> base, OpenStorage(inner));
  auto st = std::make_shared<SafetensorsStorage>(base, std::string(uri));
  if (files.empty()) {
    auto index_text = base->GetAll(kIndexName);
    if (index_text.ok()) {
      CKPT_ASSIGN_OR_RETURN(SafetensorsIndex index, DecodeSafetensorsIndex(*index_text, StrCat(dir, "/", kIndexName)));
      std::set<std::string> names;
      for (const auto& [t, f] : index.weight_map) names.insert(f);
      files.assign(names.begin(), names.end());
      for (const std::string& f : files) {
        if (auto size = base->FileSize(f); !size.ok()) {
          return absl::DataLossError(
              StrCat(dir, "/", kIndexName, ": names shard ", f, ", which ",
                     absl::IsNotFound(size.status()) ? "does not exist" : std::string(size.status().message())));
        }
      }
      st->set_index(std::move(index));
    } else if (!absl::IsNotFound(index_text.status())) {
      return index_text.status();
    } else {
      auto entries = base->List("");
      if (!entries.ok()) return Annotate(entries.status(), StrCat("listing ", dir));
      for (const DirEntry& e : *entries) {
        if (!e.is_dir && IsSafetensorsDataFile(e.name)) files.push_back(e.name);
      }
    }
    if (files.empty()) {
      return absl::NotFoundError(StrCat(dir, ": no ", kIndexName, " and no *.safetensors file"));
    }
  }
  CKPT_RETURN_IF_ERROR(st->Init(std::move(files)));
  return std::shared_ptr<Storage>(std::move(st));
}

CKPT_STORAGE_BACKEND(safetensors) {
  r.Add({"safetensors", "",
         "a Hugging Face safetensors model (directory or file) read in place as a read-only root of one step",
         BackendCaps("safetensors", false, false, true)},
        OpenSafetensorsStorage, IsSafetensorsModelPath);
}

}  // namespace ckpt
