// Idle authenticated connections to other processes' peer memory, by
// endpoint: the memory level's storage and the cooperative load's exchange
// each keep one. Thread-safe.
#ifndef CKPT_PEER_CONNECTION_POOL_H_
#define CKPT_PEER_CONNECTION_POOL_H_

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "peer/peer_client.h"

namespace ckpt::peer {

class ConnectionPool {
 public:
  ConnectionPool(std::string token, double timeout_s) : token_(std::move(token)), timeout_s_(timeout_s) {}

  absl::StatusOr<std::unique_ptr<PeerConnection>> Take(const std::string& endpoint) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto& idle = idle_[endpoint];
      if (!idle.empty()) {
        auto c = std::move(idle.back());
        idle.pop_back();
        return c;
      }
    }
    return PeerConnection::Open(endpoint, token_, timeout_s_);
  }

  void Give(std::unique_ptr<PeerConnection> c) {
    if (c == nullptr || c->broken()) return;
    std::lock_guard<std::mutex> lock(mu_);
    auto& idle = idle_[c->endpoint()];
    if (idle.size() < 16) idle.push_back(std::move(c));
  }

  // Runs `op` on a connection to `endpoint`; a pooled connection that fails
  // to be usable (the peer restarted, closed it) is retried once afresh.
  template <typename T, typename Op>
  absl::StatusOr<T> With(const std::string& endpoint, Op op) {
    for (int attempt = 0;; ++attempt) {
      bool fresh;
      {
        std::lock_guard<std::mutex> lock(mu_);
        fresh = idle_[endpoint].empty();
      }
      auto c = Take(endpoint);
      if (!c.ok()) return c.status();
      absl::StatusOr<T> r = op(**c);
      const bool broken = (*c)->broken();
      Give(std::move(*c));
      if (r.ok() || !broken || fresh || attempt > 0 || !absl::IsUnavailable(r.status())) return r;
    }
  }

 private:
  std::string token_;
  double timeout_s_;
  std::mutex mu_;
  std::map<std::string, std::vector<std::unique_ptr<PeerConnection>>> idle_;
};

}  // namespace ckpt::peer

#endif  // CKPT_PEER_CONNECTION_POOL_H_
