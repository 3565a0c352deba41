// What the coordinator shows of itself: the status document (JSON, for
// `ckpt coordinator-status --json` and GET /status), its text form, and the
// Prometheus metrics (GET /metrics), all rendered from one snapshot taken on
// the io thread. Rendering reads nothing else.
#ifndef CKPT_COORDINATOR_STATUS_H_
#define CKPT_COORDINATOR_STATUS_H_

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "coordinator/commit_book.h"
#include "coordinator/state_log.h"

namespace ckpt::coord {

/// Durations of one kind of operation: count, sum, worst, last, and a
/// cumulative histogram for Prometheus.
struct LatencyStats {
  static constexpr double kBounds[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5};
  static constexpr size_t kBuckets = sizeof(kBounds) / sizeof(kBounds[0]);
  uint64_t count = 0;
  double sum_s = 0, max_s = 0, last_s = 0;
  std::array<uint64_t, kBuckets> le{};  ///< how many took at most kBounds[i]
  void Add(double s) {
    ++count;
    sum_s += s;
    max_s = std::max(max_s, s);
    last_s = s;
    for (size_t i = 0; i < kBuckets; ++i) le[i] += s <= kBounds[i] ? 1 : 0;
  }
};

struct StatusView {
  /// False on a standby replica: only `store` and `appends` mean anything.
  bool serving = true;
  StoreView store;       ///< where the state lives, the leader, the standbys
  LatencyStats appends;  ///< records made durable (journal fsync or etcd txn)
  int64_t generation = 0;
  bool running = false;
  bool forming = false;  ///< the restore step of a new generation is being verified
  int world_size = 0;
  int64_t restore_step = -1;
  int64_t last_committed_step = -1;
  uint64_t commits = 0, aborts = 0, deaths = 0, heartbeat_misses = 0, refused_joins = 0, bad_frames = 0;
  uint64_t grows = 0;                                     ///< generations ended to grow back
  std::vector<std::pair<std::string, uint64_t>> dropped;  ///< by reason, every reason listed
  size_t unauthenticated_connections = 0;
  size_t joined_connections = 0;
  struct Member {
    uint64_t id = 0;
    std::string host;
    int first_rank = 0;
    int local_ranks = 0;
    double last_heartbeat_s_ago = 0;
    bool connected = false;
  };
  std::vector<Member> members;  ///< of the current generation, in rank order (empty when none runs)
  struct Waiting {
    uint64_t id = 0;
    std::string host;
  };
  std::vector<Waiting> waiting;  ///< in join order
  std::vector<std::pair<std::string, std::vector<double>>>
      last_save;  ///< "stall"/"write" by rank; empty before a commit
  int64_t straggler_step = -1;
  std::vector<std::pair<int, double>> stragglers;  ///< rank, write seconds
  std::vector<SdcAlert> sdc_alerts;
};

std::string StatusJson(const StatusView& v);
std::string StatusText(const StatusView& v);
/// Prometheus text format 0.0.4: HELP and TYPE before every family.
std::string PrometheusMetrics(const StatusView& v);

}  // namespace ckpt::coord

#endif  // CKPT_COORDINATOR_STATUS_H_
