// A connection to another process's peer memory: blocking calls with a time
// limit each, on one socket. Any error leaves the connection unusable (the
// caller drops it). Not thread-safe: one caller at a time.
#ifndef CKPT_PEER_PEER_CLIENT_H_
#define CKPT_PEER_PEER_CLIENT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "ckpt/storage.h"
#include "peer/peer_wire.h"
#include "util/background.h"
#include "util/hash.h"

namespace ckpt::peer {

class PeerConnection {
 public:
  /// Connects, reads the hello and authenticates. Unavailable when the peer
  /// cannot be reached, PermissionDenied when it refuses the token,
  /// DataLoss when it does not speak the protocol.
  static absl::StatusOr<std::unique_ptr<PeerConnection>> Open(const std::string& endpoint, std::string_view token,
                                                              double timeout_s);
  ~PeerConnection();

  /// Places a whole file (split into data frames) and waits until the peer
  /// has checked and stored it.
  /// With a pacer, each data frame's bytes are charged to it before they
  /// are sent.
  absl::Status Put(std::string_view path, absl::Span<const std::byte> data, int64_t generation,
                   RatePacer* pacer = nullptr);
  /// Reads dst.size() bytes at `offset`, each frame checked.
  absl::Status Get(std::string_view path, uint64_t offset, absl::Span<std::byte> dst);
  absl::StatusOr<uint64_t> Stat(std::string_view path);
  absl::StatusOr<std::vector<DirEntry>> List(std::string_view dir);
  absl::Status Remove(std::string_view path);
  absl::Status RemoveAll(std::string_view dir);
  absl::Status DropBefore(int64_t step);

  const std::string& endpoint() const { return endpoint_; }
  const std::string& domain() const { return domain_; }
  bool broken() const { return broken_; }

 private:
  PeerConnection(int fd, std::string endpoint, double timeout_s);
  absl::Status Send(std::string_view bytes);
  absl::Status SendFrame(Op op, std::string_view payload, uint64_t arg = 0);
  absl::Status RecvExact(void* dst, size_t n);
  /// Sends `bytes` through the bounce buffer, adding them to `*sum`.
  absl::Status SendBulk(std::string_view bytes, Xxh3Stream* sum);
  /// Receives n bytes into dst through the bounce buffer; their xxh3.
  absl::StatusOr<uint64_t> RecvBulk(std::byte* dst, size_t n);
  char* bounce();
  absl::StatusOr<Header> RecvHeader(uint64_t max_payload);
  /// Reads a reply to `what`: kOk's payload, or the peer's error.
  absl::StatusOr<std::string> Reply(std::string_view what);
  absl::Status Fail(absl::Status s);

  int fd_;
  std::string endpoint_, domain_;
  double timeout_s_;
  bool broken_ = false;
  std::unique_ptr<char[]> bounce_;  // kBounceBytes, at the first bulk transfer
};

}  // namespace ckpt::peer

#endif  // CKPT_PEER_PEER_CLIENT_H_
