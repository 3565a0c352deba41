// One process's memory of checkpoint files: its own and the copies peers
// placed in it, within a byte budget. No sockets: the server
// (peer_server.cc) and the local storage (peer_storage.cc) share it.
// Thread-safe.
#ifndef CKPT_PEER_PEER_STORE_H_
#define CKPT_PEER_PEER_STORE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ckpt/peer.h"
#include "ckpt/storage.h"

namespace ckpt::peer {

/// The step of a path ("step-<digits>/..."), or -1 for a path outside one.
int64_t StepOfPath(std::string_view path);
/// The rank of the save that wrote a path: N for "rank-N.<ext>", else the
/// leader (0).
int OwnerOfPath(std::string_view path);

class PeerStore {
 public:
  explicit PeerStore(int64_t budget_bytes) : budget_(budget_bytes) {}

  using Bytes = std::shared_ptr<const std::string>;
  /// The checksum of each kPieceBytes piece of a file of `file_size` bytes
  /// (the last piece may be shorter) as it was received, where known.
  class PieceSums {
   public:
    explicit PieceSums(uint64_t file_size);
    /// Keeps `sum` when bytes [offset, offset + length) are one whole piece.
    void Record(uint64_t offset, uint64_t length, uint64_t sum);
    /// The checksum of bytes [offset, offset + length) when they are one
    /// whole piece whose checksum is known.
    std::optional<uint64_t> Of(uint64_t offset, uint64_t length) const;

   private:
    // The piece that is exactly [offset, offset + length), if any.
    std::optional<size_t> Piece(uint64_t offset, uint64_t length) const;
    uint64_t file_size_;
    std::vector<std::optional<uint64_t>> sums_;
  };
  using Sums = std::shared_ptr<const PieceSums>;

  /// Sets aside `n` bytes for a file about to arrive; ResourceExhausted,
  /// naming the file and the budget, when they do not fit.
  absl::Status Reserve(uint64_t n, std::string_view path);
  void Release(uint64_t n);
  /// Stores a whole file whose size was reserved (the reservation becomes
  /// the file's), replacing one of the same path.
  void Insert(const std::string& path, Bytes bytes, int64_t generation, Sums sums = nullptr);
  /// Reserve + Insert; with `if_absent`, AlreadyExists when the path is held.
  absl::Status Put(const std::string& path, Bytes bytes, int64_t generation, bool if_absent = false);

  /// A buffer of `n` bytes (contents unspecified) for a file about to be
  /// written or received: the memory of a dropped file of 1 MiB or more
  /// that fits and is at most twice `n` (its pages are already mapped: a
  /// fresh gigabyte costs seconds of page faults on some hosts), else a new
  /// one.
  std::shared_ptr<std::string> Buffer(size_t n);
  /// Whether Buffer(n) is on transparent huge pages (where the kernel takes
  /// the advice): the server then sends from and receives into it directly,
  /// where smaller files and small pages go through a small buffer.
  static bool OnHugePages(size_t n);

  Bytes Get(std::string_view path) const;
  /// A file with its pieces' checksums (null where none were kept).
  std::pair<Bytes, Sums> GetWithSums(std::string_view path) const;
  absl::StatusOr<std::vector<DirEntry>> List(std::string_view dir) const;
  bool Remove(std::string_view path);
  void RemoveAll(std::string_view dir);
  void DropStepsBefore(int64_t step);
  void DropStepsExcept(int64_t step);

  std::vector<PeerHolding> Holdings() const;
  PeerMemoryStats Stats() const;
  void CountReceived(uint64_t n);
  void CountServed(uint64_t n);

 private:
  struct File {
    Bytes bytes;
    int64_t generation = 0;
    Sums sums;
  };
  void EraseLocked(std::map<std::string, File, std::less<>>::iterator it);
  // Adds (sign +1) or removes (-1) a file's memory from its step's total.
  void CountStepLocked(std::string_view path, const Bytes& bytes, int sign);
  absl::Status ExhaustedLocked(uint64_t n, std::string_view path);
  void DropIfLocked(const std::function<bool(int64_t)>& drop);

  mutable std::mutex mu_;
  const int64_t budget_;
  int64_t held_ = 0, reserved_ = 0, peak_ = 0, refused_ = 0, received_ = 0, served_ = 0;
  std::map<std::string, File, std::less<>> files_;
  // Memory of dropped files kept for Buffer(); its capacity counts against
  // the budget's free part (held + reserved + spare <= budget) and stays
  // within what one step's files have taken.
  std::vector<std::shared_ptr<std::string>> spare_;
  int64_t spare_bytes_ = 0;
  // Memory (capacity) of the files held, per step; the most one step took.
  std::map<int64_t, int64_t> step_capacity_;
  int64_t step_capacity_high_ = 0;
  void TrimSpareLocked();
};

}  // namespace ckpt::peer

#endif  // CKPT_PEER_PEER_STORE_H_
