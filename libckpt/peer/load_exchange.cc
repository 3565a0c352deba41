// The cooperative load's exchange on the memory level's transport: a piece
// offered is a file of this process's peer memory, fetched by the other
// ranks with the authenticated, checksummed reads of the peer protocol.
#include "ckpt/load_exchange.h"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>

#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "ckpt/communicator.h"
#include "ckpt/peer.h"
#include "peer/connection_pool.h"
#include "peer/peer_memory.h"
#include "util/clock.h"
#include "util/errors.h"
#include "util/strings.h"

namespace ckpt {
namespace peer {
namespace {

// Where a piece's refusal is kept, beside the piece.
std::string ForgoneKey(const std::string& key) { return StrCat(key, ".forgone"); }

class PeerLoadExchange final : public LoadExchange {
 public:
  PeerLoadExchange(std::shared_ptr<PeerMemory> memory, int rank, std::vector<std::string> endpoints,
                   std::vector<std::string> hosts)
      : memory_(std::move(memory)),
        store_(LocalStore(*memory_)),
        rank_(rank),
        endpoints_(std::move(endpoints)),
        hosts_(std::move(hosts)),
        pool_(OptionsOf(*memory_).token, OptionsOf(*memory_).io_timeout_s) {}

  int rank() const override { return rank_; }
  const std::vector<std::string>& hosts() const override { return hosts_; }

  absl::Status Offer(const std::string& key, std::shared_ptr<const std::string> bytes) override {
    // Generation -1: no save's; Holdings passes paths outside steps over.
    return store_->Put(key, std::move(bytes), -1);
  }

  void Forgo(const std::string& key) override {
    // An empty file takes no budget.
    (void)store_->Put(ForgoneKey(key), std::make_shared<const std::string>(), -1);
  }

  absl::Status Fetch(int from, const std::string& key, absl::Span<std::byte> dst, double wait_s) override {
    if (from < 0 || from >= static_cast<int>(endpoints_.size())) {
      return absl::InvalidArgumentError(StrCat("cooperative load: no rank ", from, " among ", endpoints_.size()));
    }
    const std::string& ep = endpoints_[static_cast<size_t>(from)];
    const double deadline = NowSeconds() + wait_s;
    // Polled: a reader offers a piece within a fraction of a second of its
    // read, and a receiver asks for pieces in the order readers read them.
    double pause = 0.001;
    for (;;) {
      absl::StatusOr<uint64_t> size = pool_.With<uint64_t>(ep, [&](PeerConnection& c) { return c.Stat(key); });
      if (size.ok()) {
        if (*size != dst.size()) {
          return absl::DataLossError(StrCat("cooperative load: rank ", from, " (", ep, ") offers ", key, " as ", *size,
                                            " bytes, ", dst.size(), " expected"));
        }
        return pool_
            .With<bool>(ep,
                        [&](PeerConnection& c) -> absl::StatusOr<bool> {
                          CKPT_RETURN_IF_ERROR(c.Get(key, 0, dst));
                          return true;
                        })
            .status();
      }
      if (!absl::IsNotFound(size.status())) {
        return Annotate(size.status(), StrCat("cooperative load: rank ", from, " (", ep, ")"));
      }
      absl::StatusOr<uint64_t> refused =
          pool_.With<uint64_t>(ep, [&](PeerConnection& c) { return c.Stat(ForgoneKey(key)); });
      if (refused.ok()) {
        return absl::NotFoundError(StrCat("cooperative load: rank ", from, " (", ep, ") forwent ", key));
      }
      if (NowSeconds() >= deadline) {
        return absl::DeadlineExceededError(
            StrCat("cooperative load: rank ", from, " (", ep, ") did not offer ", key, " within ", wait_s, " s"));
      }
      std::this_thread::sleep_for(std::chrono::duration<double>(pause));
      pause = std::min(pause * 2, 0.02);
    }
  }

  void Withdraw(const std::string& load) override { store_->RemoveAll(load); }

 private:
  std::shared_ptr<PeerMemory> memory_;
  std::shared_ptr<PeerStore> store_;
  const int rank_;
  const std::vector<std::string> endpoints_;
  const std::vector<std::string> hosts_;
  ConnectionPool pool_;
};

}  // namespace
}  // namespace peer

absl::StatusOr<std::shared_ptr<LoadExchange>> OpenLoadExchange(std::shared_ptr<PeerMemory> memory, Communicator& comm,
                                                               double timeout_s) {
  if (memory == nullptr) return absl::InvalidArgumentError("OpenLoadExchange: no peer memory");
  const std::string ep = memory->endpoint(), domain = memory->domain();
  // Every rank calls the collectives, also one whose own line is refused,
  // so that none waits for it.
  const bool plain = ep.find_first_of("\t\n") == std::string::npos && domain.find_first_of("\t\n") == std::string::npos;
  CKPT_ASSIGN_OR_RETURN(std::vector<std::string> lines,
                        comm.Gather(plain ? StrCat(ep, "\t", domain) : std::string("-"), timeout_s));
  std::string table;
  if (comm.rank() == 0) {
    const bool all_plain = std::all_of(lines.begin(), lines.end(), [](const std::string& l) { return l != "-"; });
    table = all_plain ? absl::StrJoin(lines, "\n") : std::string("-");
  }
  CKPT_ASSIGN_OR_RETURN(table, comm.Broadcast(table, timeout_s));
  if (table == "-") {
    return absl::InvalidArgumentError("OpenLoadExchange: a rank's endpoint or domain holds a tab or a line break");
  }
  std::vector<std::string> endpoints, hosts;
  for (absl::string_view line : absl::StrSplit(table, '\n')) {
    std::vector<std::string> f = absl::StrSplit(line, absl::MaxSplits('\t', 1));
    if (f.size() != 2) return absl::InternalError(StrCat("OpenLoadExchange: garbled table line '", line, "'"));
    endpoints.push_back(f[0]);
    hosts.push_back(f[1]);
  }
  if (static_cast<int>(endpoints.size()) != comm.size()) {
    return absl::InternalError(
        StrCat("OpenLoadExchange: ", endpoints.size(), " ranks in the table, ", comm.size(), " in the communicator"));
  }
  return std::shared_ptr<LoadExchange>(
      std::make_shared<peer::PeerLoadExchange>(std::move(memory), comm.rank(), std::move(endpoints), std::move(hosts)));
}

}  // namespace ckpt
