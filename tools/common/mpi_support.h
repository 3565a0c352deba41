// Running a subcommand as one process per rank under mpirun (--procs).
#ifndef CKPT_TOOLS_MPI_SUPPORT_H_
#define CKPT_TOOLS_MPI_SUPPORT_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "ckpt/communicator.h"

namespace ckpt::tools {

/// True when this build can run ranks as MPI processes.
bool HaveMpi();
/// True when this process was started by mpirun.
bool UnderMpirun();
/// Runs this same command line again under `mpirun -np n` and returns its
/// exit status (2 when mpirun cannot be started).
int RelaunchUnderMpirun(int64_t n, int argc, char** argv);
/// Initializes MPI (once; finalized at exit) and wraps MPI_COMM_WORLD.
absl::StatusOr<std::shared_ptr<Communicator>> WorldCommunicator();

}  // namespace ckpt::tools

#endif  // CKPT_TOOLS_MPI_SUPPORT_H_
