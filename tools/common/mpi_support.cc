#include "common/mpi_support.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#ifdef CKPT_HAVE_MPI
#include "ckpt/mpi.h"
#endif

extern char** environ;

namespace ckpt::tools {

bool HaveMpi() {
#ifdef CKPT_HAVE_MPI
  return true;
#else
  return false;
#endif
}

bool UnderMpirun() { return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMI_SIZE") != nullptr; }

int RelaunchUnderMpirun(int64_t n, int argc, char** argv) {
  char self[4096];
  const ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (len <= 0) {
    std::fprintf(stderr, "ckpt: cannot find my own executable to start under mpirun\n");
    return 2;
  }
  self[len] = '\0';
  std::vector<std::string> args = {"mpirun"};
  if (geteuid() == 0) args.push_back("--allow-run-as-root");
  for (const char* a : {"--oversubscribe", "--bind-to", "none", "-np"}) args.push_back(a);
  args.push_back(std::to_string(n));
  args.push_back(self);
  for (int i = 1; i < argc; ++i) args.push_back(argv[i]);
  std::vector<char*> cargs;
  for (std::string& a : args) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  pid_t pid;
  if (posix_spawnp(&pid, "mpirun", nullptr, nullptr, cargs.data(), environ) != 0) {
    std::fprintf(stderr, "ckpt: cannot start mpirun (is openmpi-bin installed?)\n");
    return 2;
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

absl::StatusOr<std::shared_ptr<Communicator>> WorldCommunicator() {
#ifdef CKPT_HAVE_MPI
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
    std::atexit([] {
      int finalized = 0;
      MPI_Finalized(&finalized);
      if (!finalized) MPI_Finalize();
    });
  }
  return CreateMpiCommunicator(MPI_COMM_WORLD);
#else
  return absl::UnimplementedError("this ckpt was built without MPI (libopenmpi-dev)");
#endif
}

}  // namespace ckpt::tools
