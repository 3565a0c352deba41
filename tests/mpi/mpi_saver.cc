// Test helper, one process per rank under mpirun: saves steps 1, 2, 3, ...
// to ROOT until killed. Rank r holds rows [256r, 256r+256) of "model.w" and a
// copy of the replicated "model.bias"; the communicator decides which copy
// is written. Rank 0 prints "committed N" after each commit; every rank
// writes its pid to ROOT-pids/rank-R.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "ckpt/checkpointer.h"
#include "ckpt/mpi.h"
#include "ckpt/synthetic.h"

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  auto comm = ckpt::CreateMpiCommunicator(MPI_COMM_WORLD);
  if (!comm.ok()) return 1;
  const int rank = (*comm)->rank(), world = (*comm)->size();
  const std::string root = argv[1];
  std::filesystem::create_directories(root + "-pids");
  std::ofstream(root + "-pids/rank-" + std::to_string(rank)) << getpid() << "\n";

  ckpt::CheckpointerOptions o;
  o.uri = root;
  o.rank = rank;
  o.world_size = world;
  o.communicator = *comm;
  o.codec = ckpt::Codec::kZstd;
  o.engine_options.block_size = 256 << 10;
  o.engine_options.staging_bytes = 2 << 20;
  o.commit_timeout_s = 60;
  o.collective_timeout_s = 60;
  auto cp = ckpt::Checkpointer::Open(o);
  if (!cp.ok()) {
    std::fprintf(stderr, "open: %s\n", std::string(cp.status().message()).c_str());
    return 1;
  }
  const ckpt::TensorSpec w{"model.w", ckpt::DType::kF32, {256 * world, 1024}};
  const ckpt::TensorSpec b{"model.bias", ckpt::DType::kF32, {1024}};
  const ckpt::Box mine({256 * rank, 0}, {256, 1024});
  std::vector<std::byte> wd(256 * 1024 * 4), bd(1024 * 4);
  auto latest = (*cp)->LatestStep();
  for (int64_t step = latest.ok() ? *latest + 1 : 1;; ++step) {
    ckpt::FillSynthetic(w, mine, static_cast<uint64_t>(step), wd.data());
    ckpt::FillSynthetic(b, ckpt::Box::Whole(b.shape), static_cast<uint64_t>(step), bd.data());
    ckpt::State st;
    if (!st.AddShard(w, mine, wd.data()).ok() || !st.AddTensor(b, bd.data()).ok()) return 1;
    auto h = (*cp)->Save(step, st);
    absl::Status s = h.ok() ? h->Wait() : h.status();
    if (!s.ok()) {
      std::fprintf(stderr, "rank %d step %lld: %s\n", rank, static_cast<long long>(step),
                   std::string(s.message()).c_str());
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (rank == 0) {
      std::printf("committed %lld\n", static_cast<long long>(step));
      std::fflush(stdout);
    }
  }
}
