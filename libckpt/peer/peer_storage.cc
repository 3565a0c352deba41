// The memory level as a Storage: this process's memory first, replicas on
// peers, reads failing over from one copy to the next.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "absl/strings/str_join.h"
#include "ckpt/peer.h"
#include "peer/connection_pool.h"
#include "peer/erasure.h"
#include "peer/peer_client.h"
#include "peer/peer_memory.h"
#include "peer/peer_store.h"
#include "util/background.h"
#include "util/errors.h"
#include "util/hash.h"
#include "util/strings.h"
#include "util/task_pool.h"

namespace ckpt {
namespace peer {
namespace {

struct Counters {
  std::atomic<int64_t> from_own{0}, from_peers{0}, failovers{0}, rebuilt{0}, pieces_lost{0};
};

// A piece of an erasure-coded file and where it is held: in this process's
// memory (`own`) or at `endpoint`.
struct PieceSource {
  int index = 0;
  std::string endpoint;
  PeerStore::Bytes own;
};

class PeerStorageImpl;

absl::Span<const std::byte> AsBytes(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

// A file in this process's memory (or rebuilt there from its pieces: then
// its bytes were counted as they arrived, and `count` is null).
class OwnReadable final : public ReadableFile {
 public:
  OwnReadable(PeerStore::Bytes bytes, std::string path, std::atomic<int64_t>* count)
      : bytes_(std::move(bytes)), path_(std::move(path)), count_(count) {}
  uint64_t size() const override { return bytes_->size(); }
  absl::Status ReadAt(uint64_t offset, absl::Span<std::byte> dst) override {
    if (offset > bytes_->size() || dst.size() > bytes_->size() - offset) {
      return absl::OutOfRangeError(StrCat("truncated: peer memory ", path_, " has ", bytes_->size(), " bytes, reading ",
                                          dst.size(), " at byte offset ", offset));
    }
    std::memcpy(dst.data(), bytes_->data() + offset, dst.size());
    if (count_ != nullptr) *count_ += static_cast<int64_t>(dst.size());
    return absl::OkStatus();
  }
  void ReadAsync(uint64_t offset, absl::Span<std::byte> dst, IoCallback done) override {
    std::move(done)(ReadAt(offset, dst));
  }
  size_t direct_alignment() const override { return 0; }
  const std::string& path() const override { return path_; }

 private:
  PeerStore::Bytes bytes_;
  std::string path_;
  std::atomic<int64_t>* count_;
};

// The counters of a peer storage, found through adapters.
class PeerCounters : public StorageCapability {
 public:
  static constexpr std::string_view kName = "peer-read-counters";
  virtual Counters& counters() = 0;
};

class PeerStorageImpl final : public Storage, public PeerCounters, public MemoryReadCounter {
 public:
  StorageCapability* Capability(std::string_view name) override {
    if (name == PeerCounters::kName) return static_cast<PeerCounters*>(this);
    if (name == MemoryReadCounter::kName) return static_cast<MemoryReadCounter*>(this);
    return nullptr;
  }

  PeerStorageImpl(std::shared_ptr<PeerMemory> memory, PeerRoute route)
      : memory_(std::move(memory)),
        store_(LocalStore(*memory_)),
        route_(std::move(route)),
        pool_(OptionsOf(*memory_).token, OptionsOf(*memory_).io_timeout_s) {
    if (route_.erasure_k > 0) coder_ = CoderFor(route_.erasure_k, route_.erasure_m).value();
  }

  std::string uri() const override { return StrCat("peer://", memory_->endpoint()); }
  StorageCaps caps() const override {
    StorageCaps c;
    c.engine = "peer-memory";
    c.atomic_rename = true;
    c.durable = false;
    return c;
  }

  absl::StatusOr<std::unique_ptr<WritableFile>> OpenWritable(std::string_view path, const WriteOptions&) override;
  absl::StatusOr<std::unique_ptr<ReadableFile>> OpenReadable(std::string_view path) override;

  absl::Status PutAtomic(std::string_view path, absl::Span<const std::byte> data) override {
    CKPT_RETURN_IF_ERROR(CheckPath(path));
    return Place(path, std::make_shared<const std::string>(reinterpret_cast<const char*>(data.data()), data.size()));
  }

  absl::Status PutIfAbsent(std::string_view path, absl::Span<const std::byte> data) override {
    CKPT_RETURN_IF_ERROR(CheckPath(path));
    return Place(path, std::make_shared<const std::string>(reinterpret_cast<const char*>(data.data()), data.size()),
                 /*if_absent=*/true);
  }

  // Stores a written file here and places its copies before returning:
  // whole in every replica holder's memory, or erasure coded, piece 0 here
  // and piece j in holder j's memory.
  absl::Status Place(std::string_view path, PeerStore::Bytes bytes, bool if_absent = false) {
    if (coder_ == nullptr) {
      CKPT_RETURN_IF_ERROR(store_->Put(std::string(path), bytes, route_.generation, if_absent));
      return Replicate(path, *bytes);
    }
    std::vector<std::string> pieces = coder_->Encode(AsBytes(*bytes));
    bytes.reset();  // what this memory holds is its piece
    auto own = std::make_shared<const std::string>(std::move(pieces[0]));
    CKPT_RETURN_IF_ERROR(store_->Put(PiecePath(path, 0), own, route_.generation, if_absent));
    std::vector<std::string> names;
    std::vector<const std::string*> sent;
    for (size_t j = 1; j < pieces.size(); ++j) {
      names.push_back(PiecePath(path, static_cast<int>(j)));
      sent.push_back(&pieces[j]);
    }
    return SendToHolders(names, sent);
  }

  absl::StatusOr<uint64_t> FileSize(std::string_view path) override {
    if (coder_ != nullptr) {
      absl::StatusOr<uint64_t> coded = CodedFileSize(path);
      if (!absl::IsNotFound(coded.status())) return coded;
    }
    absl::StatusOr<uint64_t> whole = WholeFileSize(path);
    if (coder_ != nullptr || !absl::IsNotFound(whole.status())) return whole;
    absl::StatusOr<uint64_t> coded = CodedFileSize(path);
    return absl::IsNotFound(coded.status()) ? whole : coded;
  }

  absl::StatusOr<uint64_t> WholeFileSize(std::string_view path) {
    if (PeerStore::Bytes b = OwnCopyCounts(path) ? store_->Get(path) : nullptr; b != nullptr) return b->size();
    std::string tried;
    for (const std::string& ep : Holders(path)) {
      auto size = pool_.With<uint64_t>(ep, [&](PeerConnection& c) { return c.Stat(path); });
      if (size.ok()) return size;
      StrAppend(&tried, tried.empty() ? "" : "; ", size.status().message());
    }
    return absl::NotFoundError(
        StrCat("peer memory: ", path, " is in no live memory", tried.empty() ? "" : StrCat(" (", tried, ")")));
  }

  // The pieces of an erasure-coded file are listed as the file.
  absl::StatusOr<std::vector<DirEntry>> List(std::string_view dir) override {
    absl::StatusOr<std::vector<DirEntry>> own = store_->List(dir);
    std::map<std::string, bool> merged;
    const auto add = [&merged](const DirEntry& e) {
      std::string_view name = e.name;
      if (!e.is_dir) PieceOfPath(name, &name);
      merged[std::string(name)] = e.is_dir;
    };
    if (own.ok()) {
      for (DirEntry& e : *own) add(e);
    }
    bool found = own.ok();
    for (const std::string& ep : route_.peers) {
      if (ep == memory_->endpoint()) continue;
      auto theirs = pool_.With<std::vector<DirEntry>>(ep, [&](PeerConnection& c) { return c.List(dir); });
      if (!theirs.ok()) continue;  // gone, or nothing there
      found = true;
      for (DirEntry& e : *theirs) add(e);
    }
    if (!found) return own.status();
    std::vector<DirEntry> out;
    for (auto& [name, is_dir] : merged) out.push_back(DirEntry{name, is_dir});
    return out;
  }

  // Removes the file here and at its copies' holders: this rank's replica
  // holders, or with erasure coding the holders of the owner's pieces as
  // this generation placed them (holder j, piece j), so that the leader
  // removing another rank's report removes every piece of it.
  absl::Status Remove(std::string_view path) override {
    bool had = store_->Remove(path);
    for (int j = 0; j < kMaxErasurePieces; ++j) had |= store_->Remove(PiecePath(path, j));
    std::vector<std::pair<std::string, std::string>> targets;  // (endpoint, name)
    if (coder_ == nullptr || !route_.holders) {
      for (const std::string& ep : route_.replicas) targets.emplace_back(ep, std::string(path));
    } else {
      const std::vector<std::string> all = route_.holders(StepOfPath(path), OwnerOfPath(path));
      for (size_t j = 0; j < all.size(); ++j) {
        if (all[j] != memory_->endpoint()) targets.emplace_back(all[j], PiecePath(path, static_cast<int>(j)));
      }
    }
    for (const auto& target : targets) {
      (void)pool_.With<bool>(target.first, [&](PeerConnection& c) -> absl::StatusOr<bool> {
        CKPT_RETURN_IF_ERROR(c.Remove(target.second));
        return true;
      });
    }
    if (!had) return absl::NotFoundError(StrCat("remove peer memory:", path, ": no such file"));
    return absl::OkStatus();
  }

  absl::Status RemoveAll(std::string_view dir) override {
    if (dir.empty()) return absl::InvalidArgumentError("refusing to remove the storage root");
    store_->RemoveAll(dir);
    for (const std::string& ep : route_.replicas) {
      (void)pool_.With<bool>(ep, [&](PeerConnection& c) -> absl::StatusOr<bool> {
        CKPT_RETURN_IF_ERROR(c.RemoveAll(dir));
        return true;
      });
    }
    return absl::OkStatus();
  }

  absl::Status SyncDir(std::string_view) override { return absl::OkStatus(); }

  MemoryReads memory_reads() const override {
    return MemoryReads{counters_.from_own, counters_.from_peers, counters_.rebuilt, counters_.pieces_lost};
  }

  // Places `bytes` (stored here already) in every replica holder's memory;
  // the first failure, naming the holder, when one cannot take it.
  absl::Status Replicate(std::string_view path, const std::string& bytes) {
    return SendToHolders(std::vector<std::string>(route_.replicas.size(), std::string(path)),
                         std::vector<const std::string*>(route_.replicas.size(), &bytes));
  }

  // Places file *bytes[i] as names[i] in the memory of route_.replicas[i],
  // all at once; the first failure, naming the holder.
  absl::Status SendToHolders(const std::vector<std::string>& names, const std::vector<const std::string*>& bytes) {
    const auto place = [&](size_t i) -> absl::Status {
      const std::string& ep = route_.replicas[i];
      auto r = pool_.With<bool>(ep, [&](PeerConnection& c) -> absl::StatusOr<bool> {
        CKPT_RETURN_IF_ERROR(c.Put(names[i], AsBytes(*bytes[i]), route_.generation, sender_.get()));
        return true;
      });
      if (r.ok()) return absl::OkStatus();
      return absl::Status(r.status().code(),
                          StrCat("could not place ", coder_ != nullptr ? "a piece " : "a copy ", names[i], " (",
                                 bytes[i]->size(), " bytes) in the memory of ", ep, ": ", r.status().message()));
    };
    if (route_.replicas.size() <= 1) {
      return route_.replicas.empty() ? absl::OkStatus() : place(0);
    }
    std::vector<absl::Status> results(route_.replicas.size());
    std::vector<std::thread> threads;
    for (size_t i = 0; i < route_.replicas.size(); ++i) {
      threads.emplace_back([&, i] { results[i] = place(i); });
    }
    for (auto& t : threads) t.join();
    for (absl::Status& s : results) {
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }

  // Whether this process's own copy of `path` is one to read: the route
  // names no holders for it, or names this process among them. A copy the
  // route leaves out is another save's of the same step and owner (a save
  // that was aborted while this process held its files), not the one being
  // read.
  bool OwnCopyCounts(std::string_view path) const {
    if (!route_.holders) return true;
    const std::vector<std::string> all = route_.holders(StepOfPath(path), OwnerOfPath(path));
    return all.empty() || std::find(all.begin(), all.end(), memory_->endpoint()) != all.end();
  }

  std::vector<std::string> Holders(std::string_view path) const {
    if (!route_.holders) return {};
    std::vector<std::string> out = route_.holders(StepOfPath(path), OwnerOfPath(path));
    out.erase(std::remove(out.begin(), out.end(), memory_->endpoint()), out.end());
    return out;
  }

  // The coder of a shape, made once.
  absl::StatusOr<const ErasureCoder*> CoderFor(int k, int m) {
    std::lock_guard<std::mutex> lock(coders_mu_);
    std::unique_ptr<ErasureCoder>& c = coders_[{k, m}];
    if (c == nullptr) {
      CKPT_ASSIGN_OR_RETURN(c, ErasureCoder::Create(k, m));
    }
    return c.get();
  }

  std::vector<PieceSource> FindPieces(std::string_view path);
  absl::StatusOr<PieceHeader> ReadPieceHeader(std::string_view path, const PieceSource& source);
  absl::StatusOr<uint64_t> CodedFileSize(std::string_view path);
  absl::StatusOr<std::unique_ptr<ReadableFile>> OpenCoded(std::string_view path);
  absl::StatusOr<std::unique_ptr<ReadableFile>> OpenWhole(std::string_view path);

  ConnectionPool& pool() { return pool_; }
  TaskPool& readers() { return readers_; }
  int64_t generation() const { return route_.generation; }
  Counters& counters() override { return counters_; }
  PeerStore& store() { return *store_; }
  PeerMemory& memory() { return *memory_; }

 private:
  static absl::Status CheckPath(std::string_view path) {
    if (path.empty() || path.front() == '/' || path.find("..") != std::string_view::npos) {
      return absl::InvalidArgumentError(StrCat("bad peer memory path '", path, "'"));
    }
    return absl::OkStatus();
  }

  std::shared_ptr<PeerMemory> memory_;
  std::shared_ptr<PeerStore> store_;
  PeerRoute route_;
  // Paces the copies sent (PeerRoute::send_bytes_per_s): 10 ms of slack.
  std::unique_ptr<RatePacer> sender_ = route_.send_bytes_per_s > 0
                                           ? std::make_unique<RatePacer>(route_.send_bytes_per_s,
                                                                         route_.send_bytes_per_s / 100)
                                           : nullptr;
  ConnectionPool pool_;
  Counters counters_;
  std::mutex coders_mu_;
  std::map<std::pair<int, int>, std::unique_ptr<ErasureCoder>> coders_;
  const ErasureCoder* coder_ = nullptr;  // this rank's writes, when erasure coded
  // Threads that run remote reads, so that a loader's reads of several
  // buffers are in flight at once (each on its own connection) while it
  // decodes the ones that arrived; started on first use. One stream per
  // core, 2 to 8: more streams than cores left the readers and the serving
  // peer's threads taking turns. Last: its threads end before the members
  // they use.
  TaskPool readers_{static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 2u, 8u))};
};

// A file being written: gathered in memory, stored and replicated whole by
// Finish.
class PeerWritable final : public WritableFile {
 public:
  PeerWritable(PeerStorageImpl& storage, std::string path) : storage_(storage), path_(std::move(path)) {}
  void WriteAsync(uint64_t offset, absl::Span<const std::byte> data, IoCallback done) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (data_.capacity() < offset + data.size()) Grow(std::max<uint64_t>(offset + data.size(), reserve_));
      if (data_.size() < offset + data.size()) data_.resize(offset + data.size());
      std::memcpy(data_.data() + offset, data.data(), data.size());
    }
    std::move(done)(absl::OkStatus());
  }
  absl::Status Drain() override { return absl::OkStatus(); }
  // Sized at the first write, on the pipeline's thread: mapping the
  // memory (page faults) stays out of the trainer's stall.
  void Reserve(uint64_t bytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    reserve_ = std::max(reserve_, bytes);
  }
  absl::Status Finish(uint64_t final_size) override {
    std::shared_ptr<const std::string> bytes;
    {
      std::lock_guard<std::mutex> lock(mu_);
      data_.resize(final_size);
      bytes = std::make_shared<const std::string>(std::move(data_));
      data_.clear();
    }
    return storage_.Place(path_, std::move(bytes));
  }
  size_t alignment() const override { return 1; }
  const std::string& path() const override { return path_; }

 private:
  // REQUIRES: mu_. Moves to a buffer of at least `bytes` (twice what is
  // needed when growing, as a string would), preferring a dropped file's.
  void Grow(uint64_t bytes) {
    const size_t want = std::max<size_t>(bytes, data_.capacity() * 2);
    std::shared_ptr<std::string> b = storage_.store().Buffer(want);
    const size_t keep = data_.size();
    std::memcpy(b->data(), data_.data(), keep);
    b->resize(keep);
    data_ = std::move(*b);
  }

  PeerStorageImpl& storage_;
  std::string path_;
  std::mutex mu_;
  std::string data_;
  uint64_t reserve_ = 0;  // the size announced by Reserve
};

// A file in other processes' memory: each read goes to the copy that
// answered last, and on failure to the next one.
class RemoteFile {
 public:
  RemoteFile(PeerStorageImpl& storage, std::string path, std::vector<std::string> holders, size_t first, uint64_t size)
      : storage_(storage), path_(std::move(path)), holders_(std::move(holders)), current_(first), size_(size) {}
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }
  absl::Status ReadAt(uint64_t offset, absl::Span<std::byte> dst) {
    if (offset > size_ || dst.size() > size_ - offset) {
      return absl::OutOfRangeError(StrCat("truncated: peer memory ", path_, " has ", size_, " bytes, reading ",
                                          dst.size(), " at byte offset ", offset));
    }
    std::string tried;
    const size_t start = current_.load();
    for (size_t k = 0; k < holders_.size(); ++k) {
      const size_t i = (start + k) % holders_.size();
      const std::string& ep = holders_[i];
      auto r = storage_.pool().With<bool>(ep, [&](PeerConnection& c) -> absl::StatusOr<bool> {
        CKPT_RETURN_IF_ERROR(c.Get(path_, offset, dst));
        return true;
      });
      if (r.ok()) {
        storage_.counters().from_peers += static_cast<int64_t>(dst.size());
        if (k > 0) {
          current_ = i;
          storage_.counters().failovers += 1;
          LogTo(storage_.memory(),
                StrCat("read of ", path_, " at byte offset ", offset, " moved to ", ep, " (", tried, ")"));
        }
        return absl::OkStatus();
      }
      StrAppend(&tried, tried.empty() ? "" : "; ", r.status().message());
    }
    return absl::UnavailableError(
        StrCat("no live copy of ", path_, " bytes [", offset, ", ", offset + dst.size(), ") in peer memory: ", tried));
  }

 private:
  PeerStorageImpl& storage_;
  std::string path_;
  std::vector<std::string> holders_;
  std::atomic<size_t> current_;
  uint64_t size_;
};

class RemoteReadable final : public ReadableFile {
 public:
  RemoteReadable(PeerStorageImpl& storage, std::shared_ptr<RemoteFile> file)
      : storage_(storage), file_(std::move(file)) {}
  uint64_t size() const override { return file_->size(); }
  absl::Status ReadAt(uint64_t offset, absl::Span<std::byte> dst) override { return file_->ReadAt(offset, dst); }
  void ReadAsync(uint64_t offset, absl::Span<std::byte> dst, IoCallback done) override {
    storage_.readers().Submit(
        [file = file_, offset, dst, done = std::make_shared<IoCallback>(std::move(done))]() mutable {
          std::move (*done)(file->ReadAt(offset, dst));
        });
  }
  size_t direct_alignment() const override { return 0; }
  const std::string& path() const override { return file_->path(); }

 private:
  PeerStorageImpl& storage_;
  std::shared_ptr<RemoteFile> file_;
};

absl::StatusOr<std::unique_ptr<WritableFile>> PeerStorageImpl::OpenWritable(std::string_view path,
                                                                            const WriteOptions&) {
  CKPT_RETURN_IF_ERROR(CheckPath(path));
  return std::unique_ptr<WritableFile>(std::make_unique<PeerWritable>(*this, std::string(path)));
}

// A file is looked for as the route writes files first (whole, or as
// pieces), then the other way: a step restored may have been saved by a
// generation placed otherwise.
absl::StatusOr<std::unique_ptr<ReadableFile>> PeerStorageImpl::OpenReadable(std::string_view path) {
  absl::StatusOr<std::unique_ptr<ReadableFile>> first = coder_ != nullptr ? OpenCoded(path) : OpenWhole(path);
  if (!absl::IsNotFound(first.status())) return first;
  absl::StatusOr<std::unique_ptr<ReadableFile>> second = coder_ != nullptr ? OpenWhole(path) : OpenCoded(path);
  return absl::IsNotFound(second.status()) ? std::move(first) : std::move(second);
}

std::vector<PieceSource> PeerStorageImpl::FindPieces(std::string_view path) {
  std::vector<PieceSource> out;
  if (OwnCopyCounts(path)) {
    for (int j = 0; j < kMaxErasurePieces; ++j) {
      if (PeerStore::Bytes b = store_->Get(PiecePath(path, j)); b != nullptr) out.push_back({j, "", std::move(b)});
    }
  }
  const size_t slash = path.rfind('/');
  const std::string dir(slash == std::string_view::npos ? std::string_view() : path.substr(0, slash));
  const std::string_view name = path.substr(slash == std::string_view::npos ? 0 : slash + 1);
  // Every holder's listing at once: one round trip, not one per holder.
  const std::vector<std::string> holders = Holders(path);
  std::vector<absl::StatusOr<std::vector<DirEntry>>> listed(holders.size(), absl::UnknownError(""));
  {
    const auto list = [&](size_t h) {
      listed[h] = pool_.With<std::vector<DirEntry>>(holders[h], [&](PeerConnection& c) { return c.List(dir); });
    };
    std::vector<std::thread> threads;
    for (size_t h = 1; h < holders.size(); ++h) threads.emplace_back(list, h);
    if (!holders.empty()) list(0);
    for (auto& t : threads) t.join();
  }
  for (size_t h = 0; h < holders.size(); ++h) {
    if (!listed[h].ok()) continue;  // gone, or holding nothing there
    for (const DirEntry& e : *listed[h]) {
      std::string_view base;
      const std::optional<int> j = e.is_dir ? std::nullopt : PieceOfPath(e.name, &base);
      if (j && base == name) out.push_back({*j, holders[h], nullptr});
    }
  }
  // Data pieces first, this memory's before a peer's.
  std::stable_sort(out.begin(), out.end(),
                   [](const PieceSource& a, const PieceSource& b) { return a.index < b.index; });
  return out;
}

absl::StatusOr<PieceHeader> PeerStorageImpl::ReadPieceHeader(std::string_view path, const PieceSource& s) {
  if (s.own != nullptr) return DecodePieceHeader(AsBytes(*s.own));
  const std::string name = PiecePath(path, s.index);
  return pool_.With<PieceHeader>(s.endpoint, [&](PeerConnection& c) -> absl::StatusOr<PieceHeader> {
    CKPT_ASSIGN_OR_RETURN(const uint64_t n, c.Stat(name));
    // Its fixed part, then the rest it announces.
    std::string head(std::min<uint64_t>(n, kPieceHeaderFixed), '\0');
    CKPT_RETURN_IF_ERROR(c.Get(name, 0, {reinterpret_cast<std::byte*>(head.data()), head.size()}));
    const size_t want = AnnouncedHeaderBytes(AsBytes(head));
    if (want > head.size() && want <= n) {
      head.resize(want);
      CKPT_RETURN_IF_ERROR(
          c.Get(name, kPieceHeaderFixed,
                {reinterpret_cast<std::byte*>(head.data()) + kPieceHeaderFixed, want - kPieceHeaderFixed}));
    }
    return DecodePieceHeader(AsBytes(head), n);
  });
}

absl::StatusOr<uint64_t> PeerStorageImpl::CodedFileSize(std::string_view path) {
  std::string tried;
  for (const PieceSource& s : FindPieces(path)) {
    absl::StatusOr<PieceHeader> h = ReadPieceHeader(path, s);
    if (h.ok()) return h->file_bytes;
    StrAppend(&tried, tried.empty() ? "" : "; ", "piece ", s.index, ": ", h.status().message());
  }
  if (tried.empty()) return absl::NotFoundError(StrCat("peer memory: no piece of ", path, " in any live memory"));
  return absl::UnavailableError(StrCat("peer memory: no readable piece of ", path, " (", tried, ")"));
}

// An erasure-coded file read as it is read: each check block of the pieces
// (kCheckRows rows of the striped file) is fetched from k pieces' holders
// at once, data pieces first, each piece's block checked against its
// checksum as it arrives; the data rows go to their places in the block's
// part of the file and the rows of data pieces missing or refused are
// rebuilt from parity and checked. The file is never whole in memory: a
// few blocks' parts are held in reused buffers (slots), each dropped once
// all its bytes were read. A read waits for the blocks it covers; a driver
// thread fetches them in order of need, and up to kReadAhead blocks beyond
// the furthest asked for.
class CodedFile {
 public:
  CodedFile(PeerStorageImpl& storage, std::string path, PieceHeader shape, const ErasureCoder* coder,
            std::vector<std::vector<PieceSource>> sources, std::string tried)
      : storage_(storage),
        path_(std::move(path)),
        shape_(std::move(shape)),
        coder_(coder),
        sources_(std::move(sources)),
        current_(sources_.size(), 0),
        tried_(std::move(tried)),
        stripe_(StripeBytes(shape_.file_bytes, shape_.k)),
        header_(PieceHeaderBytes(shape_.k, shape_.m, shape_.file_bytes)),
        span_(kCheckRows * stripe_ * static_cast<uint64_t>(shape_.k)),
        blocks_(shape_.blocks()),
        slots_(std::min<uint64_t>(kSlots, std::max<uint64_t>(blocks_, 1))) {
    for (std::thread& t : drivers_) t = std::thread([this] { Drive(); });
  }
  ~CodedFile() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : drivers_) t.join();
  }
  uint64_t size() const { return shape_.file_bytes; }
  const std::string& path() const { return path_; }

  absl::Status ReadAt(uint64_t offset, absl::Span<std::byte> dst) {
    if (offset > size() || dst.size() > size() - offset) {
      return absl::OutOfRangeError(StrCat("truncated: peer memory ", path_, " has ", size(), " bytes, reading ",
                                          dst.size(), " at byte offset ", offset));
    }
    uint64_t at = offset;
    while (at < offset + dst.size()) {
      const uint64_t b = at / span_;
      const uint64_t end = std::min(offset + dst.size(), (b + 1) * span_);
      Slot* slot = nullptr;
      {
        std::unique_lock<std::mutex> lock(mu_);
        furthest_ = std::max(furthest_, b);
        asked_ = true;
        slot = Ready(b);
        if (slot == nullptr) {
          wanted_.insert(b);
          cv_.notify_all();
          cv_.wait(lock, [&] { return !error_.ok() || (slot = Ready(b)) != nullptr; });
          if (slot == nullptr) return error_;
        }
        ++slot->pins;
      }
      std::memcpy(dst.data() + (at - offset), slot->bytes.data() + (at - b * span_), end - at);
      {
        std::lock_guard<std::mutex> lock(mu_);
        --slot->pins;
        slot->served += end - at;
        // Every byte of it read: its buffer takes the next block.
        if (slot->served >= BlockFileBytes(b)) slot->block = kNone;
      }
      cv_.notify_all();
      at = end;
    }
    return absl::OkStatus();
  }

 private:
  static constexpr uint64_t kNone = ~uint64_t{0};
  static constexpr uint64_t kReadAhead = 2;
  static constexpr uint64_t kSlots = 4;
  // A block's part of the file, held for reads.
  struct Slot {
    std::string bytes;
    uint64_t block = kNone;
    uint64_t served = 0;   // bytes read from it
    int pins = 0;          // reads copying from it now
    uint64_t used = 0;     // when it was filled, for the choice of the next to refill
    bool filling = false;  // a driver fills it now
  };

  // The file bytes block `b` covers.
  uint64_t BlockFileBytes(uint64_t b) const { return std::min(span_, size() - b * span_); }
  // REQUIRES: mu_. The slot holding block `b`, or null.
  Slot* Ready(uint64_t b) {
    for (Slot& s : slots_) {
      if (s.block == b) return &s;
    }
    return nullptr;
  }
  // REQUIRES: mu_. A slot to fill: an empty one, else the one filled
  // longest ago that no read is copying from and no read waits for; null
  // when there is none.
  Slot* Free() {
    Slot* best = nullptr;
    for (Slot& s : slots_) {
      if (s.filling) continue;
      if (s.block == kNone) return &s;
      if (s.pins > 0 || wanted_.count(s.block) != 0 || s.block > furthest_) continue;
      if (best == nullptr || s.used < best->used) best = &s;
    }
    return best;
  }

  // The buffers of one driver thread: blocks fetched and rebuilt.
  struct Scratch {
    std::vector<std::string> fetched, rebuilt;
  };

  void Drive() {
    Scratch scratch;
    scratch.fetched.resize(sources_.size());
    for (;;) {
      uint64_t b = 0;
      Slot* slot = nullptr;
      {
        std::unique_lock<std::mutex> lock(mu_);
        // What a read waits for first, else up to kReadAhead blocks beyond
        // the furthest asked for (reads are mostly in order); not a block
        // another driver fills.
        const auto next = [&]() -> std::optional<uint64_t> {
          for (auto it = wanted_.begin(); it != wanted_.end();) {
            if (Ready(*it) != nullptr) {
              it = wanted_.erase(it);
            } else if (running_.count(*it) != 0) {
              ++it;
            } else {
              return *it;
            }
          }
          if (!asked_) return std::nullopt;
          for (uint64_t x = furthest_ + 1; x <= furthest_ + kReadAhead && x < blocks_; ++x) {
            if (Ready(x) == nullptr && done_ahead_.count(x) == 0 && running_.count(x) == 0) return x;
          }
          return std::nullopt;
        };
        cv_.wait(lock, [&] { return stop_ || !error_.ok() || (next().has_value() && Free() != nullptr); });
        if (stop_ || !error_.ok()) return;
        b = *next();
        slot = Free();
        slot->block = kNone;
        slot->served = 0;
        slot->filling = true;
        running_.insert(b);
      }
      if (slot->bytes.size() < span_) slot->bytes.resize(span_);
      absl::Status s = RunBlock(b, slot->bytes.data(), scratch);
      std::lock_guard<std::mutex> lock(mu_);
      running_.erase(b);
      slot->filling = false;
      if (s.ok()) {
        slot->block = b;
        slot->used = ++filled_;
        wanted_.erase(b);
        if (b > furthest_) done_ahead_.insert(b);
      } else {
        error_ = s;
      }
      cv_.notify_all();
    }
  }

  // Fetches block `b` of piece `index` from `source` into `buf` (or points
  // at this memory's copy), checked.
  absl::Status Fetch(uint64_t b, int index, const PieceSource& source, std::string& buf, const char** data) {
    const uint64_t at = b * shape_.block_bytes(), len = std::min(shape_.block_bytes(), shape_.piece_bytes - at);
    if (source.own != nullptr) {
      if (source.own->size() != header_ + shape_.piece_bytes) return absl::DataLossError("its size changed");
      *data = source.own->data() + header_ + at;
      storage_.counters().from_own += static_cast<int64_t>(len);
    } else {
      if (buf.size() < len) buf.resize(shape_.block_bytes());
      auto got = storage_.pool().With<bool>(source.endpoint, [&](PeerConnection& c) -> absl::StatusOr<bool> {
        CKPT_RETURN_IF_ERROR(
            c.Get(PiecePath(path_, index), header_ + at, {reinterpret_cast<std::byte*>(buf.data()), len}));
        return true;
      });
      if (!got.ok()) return got.status();
      *data = buf.data();
      storage_.counters().from_peers += static_cast<int64_t>(len);
    }
    if (Xxh3(*data, len) != shape_.Sum(index, b)) {
      return absl::DataLossError(StrCat("block ", b, " does not match its checksum"));
    }
    return absl::OkStatus();
  }

  // Fills `out` (block b's part of the file, from its first byte).
  absl::Status RunBlock(uint64_t b, char* out, Scratch& scratch) {
    const int k = shape_.k, n = shape_.k + shape_.m;
    const uint64_t len = std::min(shape_.block_bytes(), shape_.piece_bytes - b * shape_.block_bytes());
    const uint64_t rows = len / stripe_;
    std::vector<const char*> data(static_cast<size_t>(n), nullptr);
    for (;;) {
      // The first k pieces with a live source, data pieces first.
      std::vector<int> use, fetch;
      std::vector<const PieceSource*> from;
      {
        std::lock_guard<std::mutex> lock(mu_);
        for (int i = 0; i < n && static_cast<int>(use.size()) < k; ++i) {
          const size_t at = current_[static_cast<size_t>(i)];
          if (at >= sources_[static_cast<size_t>(i)].size()) continue;
          use.push_back(i);
          if (data[static_cast<size_t>(i)] == nullptr) {
            fetch.push_back(i);
            from.push_back(&sources_[static_cast<size_t>(i)][at]);
          }
        }
        if (static_cast<int>(use.size()) < k) {
          return absl::UnavailableError(StrCat("open peer memory:", path_, ": erasure coded ", k, "+", n - k, ", ",
                                               use.size(), " of its ", n, " pieces can be read (", k, " are needed; ",
                                               damaged_, " damaged)", tried_.empty() ? "" : StrCat(": ", tried_)));
        }
      }
      std::vector<absl::Status> results(fetch.size());
      {
        const auto one = [&](size_t f) {
          const size_t i = static_cast<size_t>(fetch[f]);
          results[f] = Fetch(b, fetch[f], *from[f], scratch.fetched[i], &data[i]);
        };
        std::vector<std::thread> threads;
        for (size_t f = 1; f < fetch.size(); ++f) threads.emplace_back(one, f);
        if (!fetch.empty()) one(0);
        for (auto& t : threads) t.join();
      }
      bool all = true;
      for (size_t f = 0; f < fetch.size(); ++f) {
        if (results[f].ok()) continue;
        all = false;
        const size_t i = static_cast<size_t>(fetch[f]);
        data[i] = nullptr;
        std::lock_guard<std::mutex> lock(mu_);
        // That source is passed over from now on (unless another driver
        // passed it over already).
        if (current_[i] < sources_[i].size() && &sources_[i][current_[i]] == from[f]) {
          StrAppend(&tried_, tried_.empty() ? "" : "; ", "piece ", fetch[f], " at ",
                    from[f]->endpoint.empty() ? storage_.memory().endpoint() : from[f]->endpoint, ": ",
                    results[f].message());
          if (absl::IsDataLoss(results[f])) ++damaged_;
          ++current_[i];
        }
      }
      if (!all) continue;
      // Data rows to their places; the rows of lost data pieces rebuilt
      // from the k in hand and checked.
      const uint64_t file_bytes = BlockFileBytes(b);
      std::vector<int> lost;
      for (int i = 0; i < k; ++i) {
        if (std::find(use.begin(), use.end(), i) == use.end()) {
          lost.push_back(i);
        } else {
          PieceRowsToFile(data[static_cast<size_t>(i)], i, 0, rows, stripe_, k, out, file_bytes);
        }
      }
      if (lost.empty()) return absl::OkStatus();
      scratch.rebuilt.resize(lost.size());
      std::vector<const unsigned char*> src;
      std::vector<unsigned char*> dst;
      for (int i : use) src.push_back(reinterpret_cast<const unsigned char*>(data[static_cast<size_t>(i)]));
      for (std::string& r : scratch.rebuilt) {
        if (r.size() < len) r.resize(shape_.block_bytes());
        dst.push_back(reinterpret_cast<unsigned char*>(r.data()));
      }
      CKPT_RETURN_IF_ERROR(coder_->Rebuild(use, lost, len, src, dst));
      for (size_t r = 0; r < lost.size(); ++r) {
        if (Xxh3(scratch.rebuilt[r].data(), len) != shape_.Sum(lost[r], b)) {
          return absl::DataLossError(StrCat("open peer memory:", path_, ": data piece ", lost[r], " rebuilt from ",
                                            "parity does not match its checksum (block ", b, ")"));
        }
        PieceRowsToFile(scratch.rebuilt[r].data(), lost[r], 0, rows, stripe_, k, out, file_bytes);
        std::lock_guard<std::mutex> lock(mu_);
        if (rebuilt_pieces_.insert(lost[r]).second) storage_.counters().pieces_lost += 1;
      }
      storage_.counters().rebuilt += static_cast<int64_t>(len * lost.size());
      return absl::OkStatus();
    }
  }

  PeerStorageImpl& storage_;
  const std::string path_;
  const PieceHeader shape_;
  const ErasureCoder* coder_;
  // Per piece index where it can be read (fixed), and the source in use
  // (past the end: none left; under mu_), what was tried.
  const std::vector<std::vector<PieceSource>> sources_;
  std::vector<size_t> current_;
  std::string tried_;
  int damaged_ = 0;
  std::set<int> rebuilt_pieces_;
  const uint64_t stripe_;
  const size_t header_;
  const uint64_t span_;    // file bytes of a block: kCheckRows rows
  const uint64_t blocks_;  // of each piece
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Slot> slots_;
  std::set<uint64_t> wanted_;      // blocks reads wait for
  std::set<uint64_t> done_ahead_;  // blocks read ahead (not read again ahead)
  std::set<uint64_t> running_;     // blocks a driver fills now
  uint64_t filled_ = 0;
  uint64_t furthest_ = 0;  // the furthest block a read asked for
  bool asked_ = false;
  bool stop_ = false;
  absl::Status error_;
  // Last: started once the members above are. Two, so that one fetches a
  // block while the other checks, rebuilds and places the one before.
  std::thread drivers_[2];
};

class CodedReadable final : public ReadableFile {
 public:
  explicit CodedReadable(std::shared_ptr<CodedFile> file) : file_(std::move(file)) {}
  uint64_t size() const override { return file_->size(); }
  absl::Status ReadAt(uint64_t offset, absl::Span<std::byte> dst) override { return file_->ReadAt(offset, dst); }
  void ReadAsync(uint64_t offset, absl::Span<std::byte> dst, IoCallback done) override {
    std::move(done)(file_->ReadAt(offset, dst));
  }
  size_t direct_alignment() const override { return 0; }
  const std::string& path() const override { return file_->path(); }

 private:
  std::shared_ptr<CodedFile> file_;
};

// Finds where the pieces of `path` are, reads their headers (all at once)
// and opens the file as the most of them describe it: a piece of another
// save of the same path is passed over, not mixed in.
absl::StatusOr<std::unique_ptr<ReadableFile>> PeerStorageImpl::OpenCoded(std::string_view path) {
  std::vector<PieceSource> sources = FindPieces(path);
  if (sources.empty()) {
    return absl::NotFoundError(StrCat("open peer memory:", path, ": no piece of it in any live memory"));
  }
  std::vector<absl::StatusOr<PieceHeader>> headers(sources.size(), absl::UnknownError(""));
  {
    std::vector<std::thread> threads;
    for (size_t i = 1; i < sources.size(); ++i) {
      threads.emplace_back([&, i] { headers[i] = ReadPieceHeader(path, sources[i]); });
    }
    headers[0] = ReadPieceHeader(path, sources[0]);
    for (auto& t : threads) t.join();
  }
  std::string tried;
  const PieceHeader* shape = nullptr;
  int votes = 0;
  for (size_t i = 0; i < sources.size(); ++i) {
    if (headers[i].ok() && headers[i]->index != sources[i].index) {
      headers[i] = absl::DataLossError(StrCat("its header says it is piece ", headers[i]->index));
    }
    if (!headers[i].ok()) {
      StrAppend(&tried, tried.empty() ? "" : "; ", "piece ", sources[i].index, ": ", headers[i].status().message());
      continue;
    }
    int same = 0;
    for (const auto& o : headers) same += o.ok() && o->SameFile(*headers[i]);
    if (same > votes) {
      votes = same;
      shape = &*headers[i];
    }
  }
  if (shape == nullptr) {
    return absl::UnavailableError(StrCat("open peer memory:", path, ": no readable piece (", tried, ")"));
  }
  CKPT_ASSIGN_OR_RETURN(const ErasureCoder* coder, CoderFor(shape->k, shape->m));
  std::vector<std::vector<PieceSource>> by_index(static_cast<size_t>(shape->k + shape->m));
  for (size_t i = 0; i < sources.size(); ++i) {
    if (!headers[i].ok()) continue;
    if (!headers[i]->SameFile(*shape)) {
      StrAppend(&tried, tried.empty() ? "" : "; ", "piece ", sources[i].index, ": another save's");
      continue;
    }
    by_index[static_cast<size_t>(sources[i].index)].push_back(std::move(sources[i]));
  }
  auto file = std::make_shared<CodedFile>(*this, std::string(path), *shape, coder, std::move(by_index), tried);
  return std::unique_ptr<ReadableFile>(std::make_unique<CodedReadable>(std::move(file)));
}

absl::StatusOr<std::unique_ptr<ReadableFile>> PeerStorageImpl::OpenWhole(std::string_view path) {
  if (PeerStore::Bytes b = OwnCopyCounts(path) ? store_->Get(path) : nullptr; b != nullptr) {
    return std::unique_ptr<ReadableFile>(
        std::make_unique<OwnReadable>(std::move(b), std::string(path), &counters_.from_own));
  }
  std::vector<std::string> holders = Holders(path);
  std::string tried;
  for (size_t i = 0; i < holders.size(); ++i) {
    auto size = pool_.With<uint64_t>(holders[i], [&](PeerConnection& c) { return c.Stat(path); });
    if (size.ok()) {
      return std::unique_ptr<ReadableFile>(std::make_unique<RemoteReadable>(
          *this, std::make_shared<RemoteFile>(*this, std::string(path), std::move(holders), i, *size)));
    }
    StrAppend(&tried, tried.empty() ? "" : "; ", size.status().message());
  }
  return absl::NotFoundError(StrCat("open peer memory:", path, ": in no live memory",
                                    tried.empty() ? " (no holder named)" : StrCat(" (", tried, ")")));
}

}  // namespace
}  // namespace peer

absl::StatusOr<std::shared_ptr<Storage>> OpenPeerStorage(std::shared_ptr<PeerMemory> memory, PeerRoute route) {
  if (memory == nullptr) return absl::InvalidArgumentError("OpenPeerStorage: no peer memory");
  if (route.erasure_k != 0 || route.erasure_m != 0) {
    if (absl::Status s = peer::CheckErasureShape(route.erasure_k, route.erasure_m); !s.ok()) {
      return absl::InvalidArgumentError(StrCat("OpenPeerStorage: ", s.message()));
    }
    if (static_cast<int>(route.replicas.size()) != route.erasure_k + route.erasure_m - 1) {
      return absl::InvalidArgumentError(StrCat(
          "OpenPeerStorage: erasure coding ", route.erasure_k, "+", route.erasure_m, " places pieces 1 to ",
          route.erasure_k + route.erasure_m - 1, " at as many holders; the route names ", route.replicas.size()));
    }
  }
  if (route.send_bytes_per_s != 0 && !(route.send_bytes_per_s >= (1 << 20))) {
    return absl::InvalidArgumentError(StrCat("OpenPeerStorage: a send rate of ", route.send_bytes_per_s,
                                             " bytes/s; 0 (unpaced) or at least 1 MiB/s"));
  }
  return std::shared_ptr<Storage>(std::make_shared<peer::PeerStorageImpl>(std::move(memory), std::move(route)));
}

PeerReadCounters PeerStorageCounters(Storage& storage) {
  PeerReadCounters out;
  if (auto* p = FindCapability<peer::PeerCounters>(storage)) {
    out.from_own = p->counters().from_own;
    out.from_peers = p->counters().from_peers;
    out.failovers = p->counters().failovers;
    out.bytes_rebuilt = p->counters().rebuilt;
    out.pieces_lost = p->counters().pieces_lost;
  }
  return out;
}

namespace {

// The ranks' failure domains in order of first appearance: each rank's
// domain index and its position among that domain's ranks.
struct DomainTable {
  std::vector<std::string> names;
  std::map<std::string, int> index;
  std::vector<std::vector<int>> members;
  std::vector<int> position;

  explicit DomainTable(const std::vector<std::string>& domains) : position(domains.size()) {
    for (size_t i = 0; i < domains.size(); ++i) {
      auto [it, fresh] = index.emplace(domains[i], static_cast<int>(names.size()));
      if (fresh) {
        names.push_back(domains[i]);
        members.emplace_back();
      }
      position[i] = static_cast<int>(members[static_cast<size_t>(it->second)].size());
      members[static_cast<size_t>(it->second)].push_back(static_cast<int>(i));
    }
  }
  int size() const { return static_cast<int>(names.size()); }
  // The rank in the domain `k` after rank i's that takes rank i's copies:
  // the one at rank i's position there, so that every rank holds as many.
  int Holder(const std::vector<std::string>& domains, size_t i, int k) {
    const auto& target = members[static_cast<size_t>((index[domains[i]] + k) % size())];
    return target[static_cast<size_t>(position[i]) % target.size()];
  }
};

}  // namespace

absl::StatusOr<std::vector<std::vector<int>>> PlaceReplicas(const std::vector<std::string>& domains, int replicas) {
  if (replicas < 0) return absl::InvalidArgumentError("replicas must be 0 or more");
  DomainTable t(domains);
  const int n = t.size();
  if (replicas > 0 && n < replicas + 1) {
    return absl::FailedPreconditionError(StrCat(replicas, " replica(s) need ", replicas + 1,
                                                " failure domains; the ranks are in ", n, " (",
                                                absl::StrJoin(t.names, ", "), ")"));
  }
  std::vector<std::vector<int>> out(domains.size());
  for (size_t i = 0; i < domains.size(); ++i) {
    for (int k = 1; k <= replicas; ++k) out[i].push_back(t.Holder(domains, i, k));
  }
  return out;
}

absl::StatusOr<std::vector<std::vector<int>>> PlaceErasure(const std::vector<std::string>& domains, int k, int m) {
  if (absl::Status s = peer::CheckErasureShape(k, m); !s.ok()) return s;
  DomainTable t(domains);
  const int n = t.size();
  if (n < k + m) {
    return absl::FailedPreconditionError(StrCat("erasure coding ", k, "+", m, " needs ", k + m,
                                                " failure domains; the ranks are in ", n, " (",
                                                absl::StrJoin(t.names, ", "), ")"));
  }
  std::vector<std::vector<int>> out(domains.size());
  for (size_t i = 0; i < domains.size(); ++i) {
    // Piece j in the j-th domain from rank i's own (piece 0: rank i).
    for (int j = 0; j < k + m; ++j) out[i].push_back(t.Holder(domains, i, j));
  }
  return out;
}

}  // namespace ckpt
