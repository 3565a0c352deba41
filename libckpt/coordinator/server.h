// Starting a coordinator on a state log of the caller's choosing.
#ifndef CKPT_COORDINATOR_SERVER_H_
#define CKPT_COORDINATOR_SERVER_H_

#include <memory>

#include "absl/status/statusor.h"
#include "ckpt/coordinator.h"
#include "coordinator/state_log.h"

namespace ckpt::coord {

/// As Coordinator::Start, with the state in `log` (null: the journal or
/// store that `options` names). A test wraps the real journal or etcd log
/// in one that holds Open at a chosen point, to see what a standby serves
/// while the state is replayed.
absl::StatusOr<std::unique_ptr<Coordinator>> StartCoordinator(const CoordinatorOptions& options,
                                                              std::unique_ptr<StateLog> log);

}  // namespace ckpt::coord

#endif  // CKPT_COORDINATOR_SERVER_H_
