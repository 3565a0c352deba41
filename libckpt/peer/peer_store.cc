#include "peer/peer_store.h"

#include <algorithm>
#include <functional>
#include <set>

#include "absl/strings/match.h"
#include "format/root_files.h"
#include "peer/erasure.h"
#include "peer/peer_wire.h"
#include "util/aligned_buffer.h"
#include "util/strings.h"

namespace ckpt::peer {

namespace {
// Buffers smaller than this are not kept for reuse, nor taken from the spares.
constexpr size_t kSpareMinBytes = size_t{1} << 20;
}  // namespace

int64_t StepOfPath(std::string_view path) {
  const size_t slash = path.find('/');
  if (slash == std::string_view::npos) return -1;
  std::optional<int64_t> step = ParseStepDir(path.substr(0, slash));
  return step ? *step : -1;
}

int OwnerOfPath(std::string_view path) {
  std::string_view name = path.substr(path.rfind('/') == std::string_view::npos ? 0 : path.rfind('/') + 1);
  if (!ConsumePrefix(&name, "rank-")) return 0;
  int rank = 0;
  size_t i = 0;
  for (; i < name.size() && name[i] >= '0' && name[i] <= '9' && i < 9; ++i) rank = rank * 10 + (name[i] - '0');
  if (i == 0 || i >= name.size() || name[i] != '.') return 0;
  return rank;
}

absl::Status PeerStore::ExhaustedLocked(uint64_t n, std::string_view path) {
  ++refused_;
  return absl::ResourceExhaustedError(StrCat("peer memory budget of ", budget_, " bytes exhausted: ", path, " needs ",
                                             n, " bytes, ", held_, " held and ", reserved_,
                                             " arriving (raise the budget, or save less often at the memory level)"));
}

absl::Status PeerStore::Reserve(uint64_t n, std::string_view path) {
  std::lock_guard<std::mutex> lock(mu_);
  // Unsigned: a size a peer sends may be anything up to 2^64 - 1.
  const int64_t room = std::max<int64_t>(0, budget_ - held_ - reserved_);
  if (n > static_cast<uint64_t>(room)) return ExhaustedLocked(n, path);
  reserved_ += static_cast<int64_t>(n);
  TrimSpareLocked();
  peak_ = std::max(peak_, held_ + reserved_);
  return absl::OkStatus();
}

void PeerStore::Release(uint64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  reserved_ -= static_cast<int64_t>(n);
}

void PeerStore::CountStepLocked(std::string_view path, const Bytes& bytes, int sign) {
  const int64_t step = StepOfPath(path);
  int64_t& n = step_capacity_[step];
  n += sign * static_cast<int64_t>(bytes->capacity());
  step_capacity_high_ = std::max(step_capacity_high_, n);
  if (n <= 0) step_capacity_.erase(step);
}

void PeerStore::EraseLocked(std::map<std::string, File, std::less<>>::iterator it) {
  CountStepLocked(it->first, it->second.bytes, -1);
  held_ -= static_cast<int64_t>(it->second.bytes->size());
  // Nobody reads it any more: keep its memory for the next file.
  if (it->second.bytes.use_count() == 1 && it->second.bytes->capacity() >= kSpareMinBytes) {
    auto buffer = std::const_pointer_cast<std::string>(std::move(it->second.bytes));
    spare_bytes_ += static_cast<int64_t>(buffer->capacity());
    spare_.push_back(std::move(buffer));
    TrimSpareLocked();
  }
  files_.erase(it);
}

void PeerStore::TrimSpareLocked() {
  // The smallest go first. Beyond the budget, and beyond the most memory
  // one step's files have taken here: the next save's files need no more,
  // so more would be memory kept for nothing (a file placed before its
  // predecessor was dropped leaves that buffer over).
  while (!spare_.empty() &&
         (held_ + reserved_ + spare_bytes_ > budget_ || spare_bytes_ > std::max(held_, step_capacity_high_))) {
    auto smallest = std::min_element(spare_.begin(), spare_.end(),
                                     [](const auto& a, const auto& b) { return a->capacity() < b->capacity(); });
    spare_bytes_ -= static_cast<int64_t>((*smallest)->capacity());
    spare_.erase(smallest);
  }
}

bool PeerStore::OnHugePages(size_t n) { return n >= kHugePagesFrom && HugePagesAdvisable(); }

std::shared_ptr<std::string> PeerStore::Buffer(size_t n) {
  std::shared_ptr<std::string> out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // A spare buffer at most twice the size asked for: a small file (a
    // claim, a report) given a dropped data file's buffer left the next
    // data file to map a new one, and every process held a share more.
    auto best = spare_.end();
    for (auto it = spare_.begin(); n >= kSpareMinBytes && it != spare_.end(); ++it) {
      const size_t cap = (*it)->capacity();
      if (cap >= n && cap / 2 <= n && (best == spare_.end() || cap < (*best)->capacity())) best = it;
    }
    if (best != spare_.end()) {
      out = std::move(*best);
      spare_.erase(best);
      spare_bytes_ -= static_cast<int64_t>(out->capacity());
    }
  }
  if (out == nullptr) {
    out = std::make_shared<std::string>();
    out->reserve(n);
    // Held for a whole step, written once, then read by restores and sent
    // to peers: on huge pages, the copies and checksums over it skip most
    // page-table walks (docs/performance.md "Memory level").
    if (OnHugePages(n)) AdviseHugePages(out->data(), n);
    (void)PopulateForWrite(out->data(), n);  // the whole file is written: map it in one call
  }
  out->resize(n);
  return out;
}

PeerStore::PieceSums::PieceSums(uint64_t file_size)
    : file_size_(file_size), sums_(file_size / kPieceBytes + (file_size % kPieceBytes != 0)) {}

std::optional<size_t> PeerStore::PieceSums::Piece(uint64_t offset, uint64_t length) const {
  // Not an empty range (an empty file, or the end of one): no piece.
  if (length == 0 || offset % kPieceBytes != 0 || offset >= file_size_ ||
      length != std::min<uint64_t>(kPieceBytes, file_size_ - offset)) {
    return std::nullopt;
  }
  return static_cast<size_t>(offset / kPieceBytes);
}

void PeerStore::PieceSums::Record(uint64_t offset, uint64_t length, uint64_t sum) {
  if (std::optional<size_t> i = Piece(offset, length)) sums_[*i] = sum;
}

std::optional<uint64_t> PeerStore::PieceSums::Of(uint64_t offset, uint64_t length) const {
  std::optional<size_t> i = Piece(offset, length);
  return i ? sums_[*i] : std::nullopt;
}

void PeerStore::Insert(const std::string& path, Bytes bytes, int64_t generation, Sums sums) {
  std::lock_guard<std::mutex> lock(mu_);
  reserved_ -= static_cast<int64_t>(bytes->size());
  if (auto it = files_.find(path); it != files_.end()) EraseLocked(it);
  held_ += static_cast<int64_t>(bytes->size());
  CountStepLocked(path, bytes, +1);
  files_.emplace(path, File{std::move(bytes), generation, std::move(sums)});
}

absl::Status PeerStore::Put(const std::string& path, Bytes bytes, int64_t generation, bool if_absent) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = files_.find(path);
  if (it != files_.end() && if_absent) return absl::AlreadyExistsError(StrCat("peer memory: ", path, " exists"));
  const int64_t old = it == files_.end() ? 0 : static_cast<int64_t>(it->second.bytes->size());
  const int64_t size = static_cast<int64_t>(bytes->size());
  if (size - old > budget_ - held_ - reserved_) return ExhaustedLocked(bytes->size(), path);
  if (it != files_.end()) EraseLocked(it);
  held_ += size;
  CountStepLocked(path, bytes, +1);
  TrimSpareLocked();
  peak_ = std::max(peak_, held_ + reserved_);
  files_.emplace(path, File{std::move(bytes), generation});
  return absl::OkStatus();
}

PeerStore::Bytes PeerStore::Get(std::string_view path) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = files_.find(path);
  return it == files_.end() ? nullptr : it->second.bytes;
}

std::pair<PeerStore::Bytes, PeerStore::Sums> PeerStore::GetWithSums(std::string_view path) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = files_.find(path);
  if (it == files_.end()) return {nullptr, nullptr};
  return {it->second.bytes, it->second.sums};
}

absl::StatusOr<std::vector<DirEntry>> PeerStore::List(std::string_view dir) const {
  const std::string prefix = dir.empty() ? "" : StrCat(dir, "/");
  std::map<std::string, bool> entries;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = files_.lower_bound(prefix); it != files_.end() && absl::StartsWith(it->first, prefix); ++it) {
      std::string_view rest = std::string_view(it->first).substr(prefix.size());
      const size_t slash = rest.find('/');
      if (slash == std::string_view::npos) {
        entries[std::string(rest)] = false;
      } else {
        entries[std::string(rest.substr(0, slash))] = true;
      }
    }
  }
  if (entries.empty() && !dir.empty())
    return absl::NotFoundError(StrCat("list peer memory:", dir, ": no such directory"));
  std::vector<DirEntry> out;
  for (auto& [name, is_dir] : entries) out.push_back(DirEntry{name, is_dir});
  return out;
}

bool PeerStore::Remove(std::string_view path) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = files_.find(path);
  if (it == files_.end()) return false;
  EraseLocked(it);
  return true;
}

void PeerStore::RemoveAll(std::string_view dir) {
  const std::string prefix = StrCat(dir, "/");
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = files_.find(dir); it != files_.end()) EraseLocked(it);
  for (auto it = files_.lower_bound(prefix); it != files_.end() && absl::StartsWith(it->first, prefix);) {
    auto next = std::next(it);
    EraseLocked(it);
    it = next;
  }
}

void PeerStore::DropIfLocked(const std::function<bool(int64_t)>& drop) {
  for (auto it = files_.begin(); it != files_.end();) {
    auto next = std::next(it);
    const int64_t step = StepOfPath(it->first);
    if (step >= 0 && drop(step)) EraseLocked(it);
    it = next;
  }
}

void PeerStore::DropStepsBefore(int64_t step) {
  std::lock_guard<std::mutex> lock(mu_);
  DropIfLocked([step](int64_t s) { return s < step; });
}

void PeerStore::DropStepsExcept(int64_t step) {
  std::lock_guard<std::mutex> lock(mu_);
  // Files outside any step (LATEST) go too: they speak of the steps dropped.
  for (auto it = files_.begin(); it != files_.end();) {
    auto next = std::next(it);
    if (StepOfPath(it->first) != step || step < 0) EraseLocked(it);
    it = next;
  }
}

std::vector<PeerHolding> PeerStore::Holdings() const {
  std::map<std::pair<int64_t, int64_t>, std::set<int>> data;  // (step, generation) -> owners
  std::set<std::pair<int64_t, int64_t>> manifests;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [path, file] : files_) {
      const int64_t step = StepOfPath(path);
      if (step < 0) continue;
      const std::pair<int64_t, int64_t> key{step, file.generation};
      std::string_view name = std::string_view(path).substr(path.find('/') + 1);
      PieceOfPath(name, &name);  // a piece of an erasure-coded file counts as the file
      if (name == kManifestName) manifests.insert(key);
      if (name.substr(0, 5) != "rank-" || name.ends_with(".report") || name.ends_with(".failed")) {
        continue;
      }
      data[key].insert(OwnerOfPath(name));
    }
  }
  std::vector<PeerHolding> out;
  for (auto& [key, owners] : data) {
    PeerHolding h;
    h.step = key.first;
    h.generation = key.second;
    for (int o : owners) {
      if (o != 0 || manifests.count(key) != 0) h.owners.push_back(o);
    }
    if (!h.owners.empty()) out.push_back(std::move(h));
  }
  return out;
}

PeerMemoryStats PeerStore::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  PeerMemoryStats s;
  s.budget_bytes = budget_;
  s.held_bytes = held_;
  s.peak_bytes = peak_;
  s.files = static_cast<int64_t>(files_.size());
  s.refused = refused_;
  s.bytes_received = received_;
  s.bytes_served = served_;
  s.spare_bytes = spare_bytes_;
  return s;
}

void PeerStore::CountReceived(uint64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  received_ += static_cast<int64_t>(n);
}

void PeerStore::CountServed(uint64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  served_ += static_cast<int64_t>(n);
}

}  // namespace ckpt::peer
