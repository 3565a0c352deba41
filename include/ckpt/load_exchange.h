// Cooperative loads: when several ranks need the same stored bytes (the
// replicas of a data-parallel job restarting), one of them reads each piece
// from storage and the others take it from that rank over the job's network
// (docs/resharding.md, "Cooperative loads"). The load plans who reads what
// from the manifest and the ranks' layouts; a LoadExchange carries the
// pieces. OpenLoadExchange (ckpt/peer.h) builds one on the memory level's
// authenticated peer transport.
#ifndef CKPT_LOAD_EXCHANGE_H_
#define CKPT_LOAD_EXCHANGE_H_

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "ckpt/export.h"

namespace ckpt {

/// Passes the stored bytes of a load's pieces between the ranks of one
/// communicator. Thread-safe.
class CKPT_EXPORT LoadExchange {
 public:
  virtual ~LoadExchange() = default;
  /// This process's rank in the communicator the exchange was built over.
  virtual int rank() const = 0;
  /// The failure domain (host) of each rank, in rank order: the load
  /// spreads its readers over hosts, whose links to storage are shared.
  virtual const std::vector<std::string>& hosts() const = 0;
  /// Makes `bytes` available to every rank under `key` until Withdraw.
  /// ResourceExhausted when they do not fit this process's budget.
  virtual absl::Status Offer(const std::string& key, std::shared_ptr<const std::string> bytes) = 0;
  /// Says `key` will not be offered (its read failed, it did not fit):
  /// ranks waiting for it stop waiting and read it themselves.
  virtual void Forgo(const std::string& key) = 0;
  /// Copies piece `key` from rank `from` into `dst` (dst.size() bytes),
  /// waiting up to `wait_s` for it to be offered. NotFound when the rank
  /// forwent it, Unavailable when the rank cannot be reached (it died),
  /// DeadlineExceeded when it was not offered in time, DataLoss when its
  /// size differs or a frame of the transfer fails its checksum.
  virtual absl::Status Fetch(int from, const std::string& key, absl::Span<std::byte> dst, double wait_s) = 0;
  /// Removes every piece this process offered whose key starts with
  /// `load` + "/", and its refusals. A load names its pieces
  /// "LOAD/FILE/BLOCK", LOAD new for every load.
  virtual void Withdraw(const std::string& load) = 0;
};

}  // namespace ckpt

#endif  // CKPT_LOAD_EXCHANGE_H_
