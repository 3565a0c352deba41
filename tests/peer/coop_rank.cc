// Test helper: one rank of a cooperative load as a process of its own, for
// the test that SIGKILLs a reader mid-restore.
//
//   coop_rank COORDINATOR TOKEN ROOT OUT PIECE_BYTES
//
// Joins the job at COORDINATOR, starts its peer memory in its rank's host
// (tests/peer/coop_model.h), and loads step 10 of ROOT cooperatively over
// the coordinator's communicator. Appends to OUT, as it goes:
//   joined RANK PID
//   loading
//   loaded RANK MISMATCHES FROM_STORAGE FROM_PEERS FOR_PEERS FAILOVERS
// or "failed MESSAGE". Exit 0 once loaded, 1 otherwise.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "ckpt/checkpointer.h"
#include "ckpt/coordinator.h"
#include "ckpt/peer.h"
#include "coop_model.h"

namespace ckpt::testing {
namespace {

absl::Status Run(const std::string& coordinator, const std::string& token, const std::string& root, FILE* out,
                 uint64_t piece_bytes) {
  CoordinatorClientOptions co;
  co.address = coordinator;
  co.token = token;
  co.host = StrCat("coop-rank-", getpid());
  co.heartbeat_s = 0.2;
  CKPT_ASSIGN_OR_RETURN(std::unique_ptr<CoordinatorClient> client, CoordinatorClient::Connect(co));
  CKPT_ASSIGN_OR_RETURN(Assignment a, client->Join(60));
  const int rank = a.first_rank;
  std::fprintf(out, "joined %d %d\n", rank, static_cast<int>(getpid()));
  std::fflush(out);
  PeerMemoryOptions mo;
  mo.token = token;
  mo.domain = CoopHostOf(rank);
  mo.io_timeout_s = 5;
  CKPT_ASSIGN_OR_RETURN(std::shared_ptr<PeerMemory> memory, PeerMemory::Start(mo));
  std::shared_ptr<Communicator> comm = client->communicator(0);
  CKPT_ASSIGN_OR_RETURN(std::shared_ptr<LoadExchange> exchange, OpenLoadExchange(memory, *comm, 60));
  CheckpointerOptions o;
  CKPT_ASSIGN_OR_RETURN(o.storage, OpenStorage(root));
  o.rank = rank;
  o.world_size = a.world_size;
  o.communicator = comm;
  o.load_exchange = exchange;
  o.collective_timeout_s = 30;
  o.gc_on_open = false;
  o.engine_options.staging_bytes = 1;  // loads only
  CKPT_ASSIGN_OR_RETURN(std::unique_ptr<Checkpointer> cp, Checkpointer::Open(o));
  std::vector<OwnedShard> shards;
  State st;
  CKPT_RETURN_IF_ERROR(CoopState(rank, false, shards, &st));
  LoadOptions lo;
  lo.cooperative_piece_bytes = piece_bytes;
  lo.cooperative_wait_s = 20;
  std::fprintf(out, "loading\n");
  std::fflush(out);
  CKPT_ASSIGN_OR_RETURN(LoadStats stats, cp->Load(st, 10, lo));
  int64_t bad = 0;
  for (const OwnedShard& s : shards) bad += Mismatches(s, kCoopSeed);
  std::fprintf(out, "loaded %d %lld %lld %lld %lld %lld\n", rank, static_cast<long long>(bad),
               static_cast<long long>(stats.bytes_from_storage), static_cast<long long>(stats.bytes_from_peers),
               static_cast<long long>(stats.bytes_for_peers), static_cast<long long>(stats.peer_failovers));
  std::fflush(out);
  return absl::OkStatus();
}

}  // namespace
}  // namespace ckpt::testing

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: coop_rank COORDINATOR TOKEN ROOT OUT PIECE_BYTES\n");
    return 2;
  }
  FILE* out = std::fopen(argv[4], "a");
  if (out == nullptr) return 2;
  const absl::Status s = ckpt::testing::Run(argv[1], argv[2], argv[3], out, static_cast<uint64_t>(std::atoll(argv[5])));
  if (!s.ok()) {
    std::fprintf(out, "failed %s\n", std::string(s.message()).c_str());
    std::fflush(out);
    return 1;
  }
  return 0;
}
