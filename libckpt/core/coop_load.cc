#include "core/coop_load.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "core/root.h"
#include "format/frame_check.h"
#include "pipeline/loader.h"
#include "plan/coop_reads.h"
#include "util/crypto.h"
#include "util/errors.h"
#include "util/hash.h"
#include "util/log.h"
#include "util/strings.h"
#include "util/task_pool.h"

namespace ckpt {
namespace {

// What every rank must share for their plans to agree: the mesh and every
// layout, in order.
uint64_t LayoutsHash(const State& target) {
  std::string s = target.mesh()->ToString();
  for (const TensorLayout& l : target.layouts()) {
    StrAppend(&s, "|", l.spec.fqn, ":", static_cast<int>(l.spec.dtype), ":");
    for (int64_t d : l.spec.shape) StrAppend(&s, d, ",");
    for (const Placement& p : l.placements) {
      StrAppend(&s, ";", static_cast<int>(p.kind), ".", p.dim);
      for (int64_t b : p.boundaries) StrAppend(&s, ".", b);
    }
    StrAppend(&s, ";o", l.owner_dim, ".", l.owner_index, ";s");
    for (int d : l.split_order) StrAppend(&s, d, ",");
  }
  return Xxh3(s);
}

// Whether some layout leaves a mesh dimension of more than one rank
// replicating the tensor: the only case where ranks share bytes to read.
bool Replicates(const State& target) {
  const Mesh& mesh = *target.mesh();
  for (const TensorLayout& l : target.layouts()) {
    for (int d = 0; d < mesh.ndim(); ++d) {
      if (mesh.sizes[static_cast<size_t>(d)] <= 1 || d == l.owner_dim) continue;
      if (static_cast<size_t>(d) >= l.placements.size() ||
          l.placements[static_cast<size_t>(d)].kind == Placement::Kind::kReplicate) {
        return true;
      }
    }
  }
  return false;
}

// One piece of a data file that several ranks need: the frames of blocks
// [first, first + entries.size()). Frames are placed in a file as they are
// encoded, not in block order, so a piece's frames may lie among other
// pieces' frames; its bytes are its frames in block order.
struct Piece {
  uint64_t first = 0;
  std::vector<IndexEntry> entries;
  std::vector<uint64_t> at;  // where each entry's frame starts in the piece's bytes
  uint64_t size = 0;         // the frames' bytes
  int reader = -1;
  std::string key;

  std::mutex mu;
  std::condition_variable cv;
  bool busy = false;      // being read or fetched
  bool obtained = false;  // read or fetched once (bytes dropped once consumed)
  std::shared_ptr<const std::string> bytes;
  uint64_t consumed = 0;
};

// A frame of a piece: where its bytes lie in the piece's.
struct FrameRef {
  Piece* piece = nullptr;
  uint64_t at = 0;
  uint64_t len = 0;
};

struct RoutedFile {
  std::unique_ptr<ReadableFile> stored;
  std::string name;  // the manifest's name of the file
  std::vector<std::unique_ptr<Piece>> pieces;
  std::map<uint64_t, FrameRef> frames;  // by offset in the file
};

class CoopRouter final : public ReadRouter {
 public:
  CoopRouter(const Manifest& m, CoopReadPlan plan, int me, const LoadOptions& options, LoadExchange& exchange,
             std::string load)
      : m_(m),
        plan_(std::move(plan)),
        me_(me),
        options_(options),
        exchange_(exchange),
        load_(std::move(load)),
        sink_(ScopedLogSinkOfThisThread()),
        pool_(8) {}

  ~CoopRouter() override { Finish(); }

  std::unique_ptr<ReadableFile> Route(uint32_t file, std::unique_ptr<ReadableFile> stored,
                                      const std::vector<IndexEntry>& index) override;
  void Start() override;
  // Waits for the pieces this rank reads for others to be offered (or
  // forgone).
  void Finish() {
    for (std::thread& t : prefetchers_) t.join();
    prefetchers_.clear();
  }

  absl::Status Read(RoutedFile& f, uint64_t offset, absl::Span<std::byte> dst);
  bool TouchesPieces(const RoutedFile& f, uint64_t offset, uint64_t n) const;
  TaskPool& pool() { return pool_; }
  void CountStorage(uint64_t n) { from_storage_ += static_cast<int64_t>(n); }

  void Fill(LoadStats& stats) const {
    stats.cooperative = true;
    stats.bytes_from_storage = from_storage_;
    stats.bytes_from_peers = from_peers_;
    stats.bytes_for_peers = for_peers_;
    stats.peer_failovers = failovers_;
  }

 private:
  // The piece's bytes: read from storage (and offered) when this rank reads
  // it, fetched from its reader otherwise, read from storage when that
  // fails.
  absl::StatusOr<std::shared_ptr<const std::string>> Acquire(RoutedFile& f, Piece& p);
  absl::StatusOr<std::shared_ptr<const std::string>> Obtain(RoutedFile& f, Piece& p);
  absl::StatusOr<std::shared_ptr<const std::string>> ReadStored(RoutedFile& f, const Piece& p);
  absl::Status CheckPiece(const RoutedFile& f, const Piece& p, const std::string& bytes) const;
  void Consume(Piece& p, uint64_t n);
  void Prefetch();

  const Manifest& m_;
  CoopReadPlan plan_;
  const int me_;
  const LoadOptions options_;
  LoadExchange& exchange_;
  const std::string load_;
  const LogSink* const sink_;  // the load's, for the loader's and prefetchers' threads
  std::map<uint32_t, std::unique_ptr<RoutedFile>> files_;
  // The pieces this rank reads for others, in file order, for the
  // prefetchers.
  std::vector<std::pair<RoutedFile*, Piece*>> mine_;
  std::atomic<size_t> next_mine_{0};
  std::vector<std::thread> prefetchers_;
  std::mutex mu_;
  std::set<int> passed_over_;  // readers that died or were late
  std::set<int> reported_;     // readers whose failover was said
  std::atomic<int64_t> from_storage_{0}, from_peers_{0}, for_peers_{0}, failovers_{0};
  TaskPool pool_;  // reads that wait for pieces
};

class CoopFile final : public ReadableFile {
 public:
  CoopFile(CoopRouter& router, RoutedFile& f) : router_(router), f_(f) {}
  uint64_t size() const override { return f_.stored->size(); }
  absl::Status ReadAt(uint64_t offset, absl::Span<std::byte> dst) override { return router_.Read(f_, offset, dst); }
  void ReadAsync(uint64_t offset, absl::Span<std::byte> dst, IoCallback done) override {
    if (!router_.TouchesPieces(f_, offset, dst.size())) {
      f_.stored->ReadAsync(offset, dst, [this, n = dst.size(), done = std::move(done)](absl::Status s) mutable {
        if (s.ok()) router_.CountStorage(n);
        std::move(done)(std::move(s));
      });
      return;
    }
    router_.pool().Submit(
        [this, offset, dst, done = std::move(done)]() mutable { std::move(done)(router_.Read(f_, offset, dst)); });
  }
  size_t direct_alignment() const override { return f_.stored->direct_alignment(); }
  const std::string& path() const override { return f_.stored->path(); }

 private:
  CoopRouter& router_;
  RoutedFile& f_;
};

std::unique_ptr<ReadableFile> CoopRouter::Route(uint32_t file, std::unique_ptr<ReadableFile> stored,
                                                const std::vector<IndexEntry>& index) {
  auto f = std::make_unique<RoutedFile>();
  f->stored = std::move(stored);
  f->name = m_.files[file].name;
  for (const CoopSegment& s : plan_.segments) {
    if (s.file != file || s.needers.size() < 2) continue;
    if (!std::binary_search(s.needers.begin(), s.needers.end(), me_)) continue;
    if (s.last_block >= index.size()) continue;  // the loader says what is wrong
    auto p = std::make_unique<Piece>();
    p->first = s.first_block;
    p->entries.assign(index.begin() + static_cast<int64_t>(s.first_block),
                      index.begin() + static_cast<int64_t>(s.last_block) + 1);
    bool checked = true;
    for (const IndexEntry& e : p->entries) {
      checked = checked && (e.flags & kFlagUnchecked) == 0 && e.frame_len > 0;
      p->at.push_back(p->size);
      p->size += e.frame_len;
    }
    // Bytes no checksum covers are read where they lie (every needer sees
    // the same index, so every needer passes the piece over).
    if (!checked) continue;
    p->reader = s.reader;
    p->key = StrCat(load_, "/", f->name, "/", s.first_block);
    for (size_t i = 0; i < p->entries.size(); ++i) {
      f->frames[p->entries[i].offset] = FrameRef{p.get(), p->at[i], p->entries[i].frame_len};
    }
    f->pieces.push_back(std::move(p));
  }
  RoutedFile& routed = *f;
  files_[file] = std::move(f);
  return std::make_unique<CoopFile>(*this, routed);
}

void CoopRouter::Start() {
  for (auto& [index, f] : files_) {
    for (auto& p : f->pieces) {
      if (p->reader == me_) mine_.emplace_back(f.get(), p.get());
    }
  }
  if (mine_.empty()) return;
  // Two streams: one request's latency (an object store's first byte)
  // overlaps the other's transfer.
  const int n = std::min<int>(2, static_cast<int>(mine_.size()));
  for (int i = 0; i < n; ++i) prefetchers_.emplace_back([this] { Prefetch(); });
}

void CoopRouter::Prefetch() {
  for (size_t i = next_mine_++; i < mine_.size(); i = next_mine_++) {
    auto [f, p] = mine_[i];
    {
      std::lock_guard<std::mutex> lock(p->mu);
      if (p->busy || p->obtained) continue;  // the load got there first
    }
    // Errors reach the needers as a refusal (Obtain forwent the piece) and
    // this rank's load when it reads the piece.
    (void)Acquire(*f, *p);
  }
}

bool CoopRouter::TouchesPieces(const RoutedFile& f, uint64_t offset, uint64_t n) const {
  auto it = f.frames.upper_bound(offset);
  if (it != f.frames.begin() && std::prev(it)->first + std::prev(it)->second.len > offset) return true;
  return it != f.frames.end() && it->first < offset + n;
}

absl::Status CoopRouter::Read(RoutedFile& f, uint64_t offset, absl::Span<std::byte> dst) {
  uint64_t at = offset;
  const uint64_t end = offset + dst.size();
  while (at < end) {
    auto it = f.frames.upper_bound(at);
    if (it != f.frames.begin() && std::prev(it)->first + std::prev(it)->second.len > at) {
      // Within a frame of a piece.
      const uint64_t start = std::prev(it)->first;
      const FrameRef& fr = std::prev(it)->second;
      const uint64_t stop = std::min(end, start + fr.len);
      CKPT_ASSIGN_OR_RETURN(std::shared_ptr<const std::string> bytes, Acquire(f, *fr.piece));
      std::memcpy(dst.data() + (at - offset), bytes->data() + fr.at + (at - start), stop - at);
      Consume(*fr.piece, stop - at);
      at = stop;
      continue;
    }
    // Bytes outside every shared piece: from storage.
    const uint64_t stop = it == f.frames.end() ? end : std::min(end, it->first);
    CKPT_RETURN_IF_ERROR(f.stored->ReadAt(at, dst.subspan(at - offset, stop - at)));
    from_storage_ += static_cast<int64_t>(stop - at);
    at = stop;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const std::string>> CoopRouter::Acquire(RoutedFile& f, Piece& p) {
  std::unique_lock<std::mutex> lock(p.mu);
  p.cv.wait(lock, [&] { return !p.busy; });
  if (p.bytes != nullptr) return p.bytes;
  if (p.obtained) {
    // Consumed and dropped, or its reading failed: read again.
    lock.unlock();
    return ReadStored(f, p);
  }
  p.busy = true;
  lock.unlock();
  absl::StatusOr<std::shared_ptr<const std::string>> got = Obtain(f, p);
  lock.lock();
  p.busy = false;
  p.obtained = true;
  if (got.ok()) p.bytes = *got;
  p.cv.notify_all();
  return got;
}

absl::StatusOr<std::shared_ptr<const std::string>> CoopRouter::ReadStored(RoutedFile& f, const Piece& p) {
  auto buf = std::make_shared<std::string>(p.size, '\0');
  // One request for each run of the piece's frames that lie end to end.
  std::vector<size_t> order(p.entries.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return p.entries[a].offset < p.entries[b].offset; });
  std::string run;
  for (size_t i = 0; i < order.size();) {
    size_t j = i + 1;
    uint64_t len = p.entries[order[i]].frame_len;
    while (j < order.size() && p.entries[order[j]].offset == p.entries[order[i]].offset + len) {
      len += p.entries[order[j]].frame_len;
      ++j;
    }
    run.resize(len);
    CKPT_RETURN_IF_ERROR(f.stored->ReadAt(p.entries[order[i]].offset,
                                          absl::Span<std::byte>(reinterpret_cast<std::byte*>(run.data()), len)));
    for (size_t k = i; k < j; ++k) {
      const IndexEntry& e = p.entries[order[k]];
      std::memcpy(buf->data() + p.at[order[k]], run.data() + (e.offset - p.entries[order[i]].offset), e.frame_len);
    }
    i = j;
  }
  from_storage_ += static_cast<int64_t>(buf->size());
  return std::shared_ptr<const std::string>(std::move(buf));
}

absl::Status CoopRouter::CheckPiece(const RoutedFile& f, const Piece& p, const std::string& bytes) const {
  for (size_t i = 0; i < p.entries.size(); ++i) {
    const IndexEntry& e = p.entries[i];
    const auto* frame = reinterpret_cast<const std::byte*>(bytes.data()) + p.at[i];
    CKPT_RETURN_IF_ERROR(CheckFrame({frame, e.frame_len}, e, p.first + i, f.stored->path()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const std::string>> CoopRouter::Obtain(RoutedFile& f, Piece& p) {
  if (p.reader == me_) {
    absl::StatusOr<std::shared_ptr<const std::string>> bytes = ReadStored(f, p);
    if (!bytes.ok()) {
      exchange_.Forgo(p.key);
      return bytes;
    }
    for_peers_ += static_cast<int64_t>((*bytes)->size());
    if (absl::Status offered = exchange_.Offer(p.key, *bytes); !offered.ok()) {
      exchange_.Forgo(p.key);
      LogVia(sink_, LogLevel::kWarning, "",
             StrCat("cooperative load: rank ", me_, " reads ", p.key, " for itself alone: ", offered.message()));
    }
    return bytes;
  }
  bool skip;
  {
    std::lock_guard<std::mutex> lock(mu_);
    skip = passed_over_.count(p.reader) != 0;
  }
  absl::Status why;
  if (!skip) {
    auto buf = std::make_shared<std::string>(p.size, '\0');
    why =
        exchange_.Fetch(p.reader, p.key, absl::Span<std::byte>(reinterpret_cast<std::byte*>(buf->data()), buf->size()),
                        options_.cooperative_wait_s);
    if (why.ok()) why = CheckPiece(f, p, *buf);
    if (why.ok()) {
      from_peers_ += static_cast<int64_t>(buf->size());
      return std::shared_ptr<const std::string>(std::move(buf));
    }
  }
  ++failovers_;
  if (!skip) {
    // A reader that is gone or late is passed over for the rest of the
    // load; one that forwent a piece or sent a bad one is asked again for
    // the next. Each reader's first failover is said, not every piece's.
    const bool gone = absl::IsUnavailable(why) || absl::IsDeadlineExceeded(why);
    bool first;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (gone) passed_over_.insert(p.reader);
      first = reported_.insert(p.reader).second;
    }
    if (first) {
      LogVia(sink_, LogLevel::kWarning, "",
             StrCat("cooperative load: rank ", me_, " reads ", p.key, " from storage, not from rank ", p.reader, ": ",
                    why.message(),
                    gone ? " (the rank's other pieces too)" : " (the rank's next failovers are counted, not said)"));
    }
  }
  return ReadStored(f, p);
}

void CoopRouter::Consume(Piece& p, uint64_t n) {
  std::lock_guard<std::mutex> lock(p.mu);
  p.consumed += n;
  // Every frame read once: the exchange keeps what others may still fetch.
  if (p.consumed >= p.size) p.bytes.reset();
}

}  // namespace

absl::StatusOr<std::string> AgreeOnCooperation(Communicator& comm, const State& target, const LoadOptions& options,
                                               LoadExchange* exchange, double timeout_s) {
  const bool able = options.cooperative && options.level == SaveLevel::kDurable && exchange != nullptr &&
                    target.LaidOut() && target.mesh().has_value() && target.mesh()->NumRanks() == comm.size() &&
                    exchange->rank() == comm.rank() && static_cast<int>(exchange->hosts().size()) == comm.size() &&
                    Replicates(target);
  const std::string vote = able ? StrCat(LayoutsHash(target)) : std::string("-");
  CKPT_ASSIGN_OR_RETURN(std::vector<std::string> votes, comm.Gather(vote, timeout_s));
  std::string load;
  if (comm.rank() == 0) {
    bool all = true;
    for (const std::string& v : votes) all = all && v != "-" && v == votes.front();
    if (all) load = StrCat("coop-load-", absl::BytesToHexString(RandomBytes(8)));
  }
  return comm.Broadcast(load, timeout_s);
}

absl::StatusOr<LoadStats> LoadCooperatively(Storage& storage, const Manifest& mine, const State& target, int rank,
                                            const LoadOptions& options, LoadExchange& exchange,
                                            const std::string& load) {
  CoopReadOptions co;
  co.manifest_is_part = true;
  co.max_segment_bytes = std::max<uint64_t>(options.cooperative_piece_bytes, 1);
  CKPT_ASSIGN_OR_RETURN(CoopReadPlan plan,
                        PlanCooperativeReads(mine, target.layouts(), *target.mesh(), exchange.hosts(), co));
  CoopRouter router(mine, std::move(plan), exchange.rank(), options, exchange, load);
  RootBaseManifests bases(storage);
  absl::StatusOr<LoadStats> stats = LoadFromManifest(storage, mine, target, rank, options, &router, &bases);
  router.Finish();
  if (stats.ok()) router.Fill(*stats);
  return stats;
}

void FinishCooperation(Communicator& comm, LoadExchange& exchange, const std::string& load, double timeout_s) {
  // The others may still fetch what this rank read for them.
  if (absl::Status all = comm.Barrier(timeout_s); !all.ok()) {
    LogWarning(StrCat("cooperative load ", load, ": waiting for every rank to finish: ", all.message()));
  }
  exchange.Withdraw(load);
}

}  // namespace ckpt
