// A Communicator over MPI, for jobs launched with mpirun. Link ckpt::ckpt_mpi.
#ifndef CKPT_MPI_H_
#define CKPT_MPI_H_

#include <mpi.h>

#include <memory>

#include "absl/status/statusor.h"
#include "ckpt/communicator.h"
#include "ckpt/export.h"

namespace ckpt {

/// Wraps a duplicate of `comm` (MPI_Comm_dup, a collective), so ckpt's
/// messages never mix with the application's. Collectives are non-blocking
/// MPI calls polled until done or until their timeout; after a timeout the
/// communicator must not be used again (MPI cannot cancel a collective).
/// ckpt calls MPI only from the thread that calls Save or Load; initialize
/// MPI with the thread level that usage needs.
CKPT_EXPORT absl::StatusOr<std::shared_ptr<Communicator>> CreateMpiCommunicator(MPI_Comm comm);

}  // namespace ckpt

#endif  // CKPT_MPI_H_
