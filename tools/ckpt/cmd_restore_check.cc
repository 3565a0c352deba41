// ckpt restore-check: load a synthetic checkpoint onto a mesh and compare.
#include <cstdio>

#include "absl/strings/escaping.h"
#include "ckpt/peer.h"
#include "commands.h"
#include "common/cli.h"
#include "common/mpi_support.h"
#include "common/synth_job.h"
#include "util/crypto.h"
#include "util/errors.h"
#include "util/json.h"

namespace ckpt::tools {
namespace {

// Each rank's peer memory and the exchange over them: the leader draws the
// job's token and hands it out through the communicator.
absl::StatusOr<std::shared_ptr<LoadExchange>> StartLoadExchange(Communicator& comm, const std::string& listen) {
  std::string token;
  if (comm.rank() == 0) token = absl::BytesToHexString(RandomBytes(16));
  CKPT_ASSIGN_OR_RETURN(token, comm.Broadcast(token, 60));
  PeerMemoryOptions o;
  o.listen = listen;
  o.token = token;
  CKPT_ASSIGN_OR_RETURN(std::shared_ptr<PeerMemory> memory, PeerMemory::Start(o));
  return OpenLoadExchange(std::move(memory), comm, 60);
}

}  // namespace

int RestoreCheckMain(int argc, char** argv, int first) {
  std::string dir, mesh_text, peer_listen = "127.0.0.1:0";
  int64_t step = kLatestStep, threads = 0;
  bool json = false, procs = false, fallback = false, solo = false;
  Args args("restore-check", "DIR --mesh MESH [--step S] [--json]",
            "Loads a checkpoint written by `ckpt synth` onto MESH, which may differ from the\n"
            "mesh it was saved from (splits need not be even: tp=3 over a dimension not\n"
            "divisible by 3 is cut torch.chunk-style), one simulated rank at a time, and\n"
            "compares every element with the generator. Exit 0 only if all are equal and no\n"
            "damage was met on the way (it is reported on stderr).");
  args.Positional("DIR", &dir, "checkpoint root (path or storage URI)");
  args.String("mesh", &mesh_text, "target mesh, e.g. dp=3,tp=4,pp=1");
  args.Int("step", &step, "step to load (default: latest committed)");
  args.Int("threads", &threads, "decode threads (default min(4, cores))");
  args.Switch("procs", &procs,
              "one process per rank under mpirun; ranks that need the same bytes load them cooperatively (each\n"
              "stored byte read once, passed between the ranks over their peer memories)");
  args.Switch("solo-reads", &solo, "with --procs: every rank reads what it needs from storage itself");
  args.String("peer-listen", &peer_listen,
              "with --procs: HOST:PORT each rank's peer memory listens on (default 127.0.0.1:0: one machine)");
  args.Switch("json", &json, "print a JSON object instead of text");
  args.Switch("fallback", &fallback,
              "if the latest committed step is damaged beyond its manifest's copy, restore the newest intact one");
  int exit = 0;
  if (!args.Parse(argc, argv, first, &exit)) return exit;
  if (mesh_text.empty()) {
    std::fprintf(stderr, "ckpt restore-check: --mesh is required\n");
    return kExitUsage;
  }
  auto mesh = Mesh::Parse(mesh_text);
  if (!mesh.ok()) {
    std::fprintf(stderr, "ckpt restore-check: %s\n", std::string(mesh.status().message()).c_str());
    return kExitUsage;
  }
  auto storage = OpenStorage(dir);
  if (!storage.ok()) {
    std::fprintf(stderr, "ckpt restore-check: %s\n", std::string(storage.status().message()).c_str());
    return kExitUsage;
  }
  LoadOptions lo;
  lo.worker_threads = static_cast<int>(threads);
  lo.allow_fallback = fallback;
  std::shared_ptr<Communicator> comm;
  if (procs) {
    if (!HaveMpi()) {
      std::fprintf(stderr, "ckpt restore-check: --procs needs a build with MPI\n");
      return kExitUsage;
    }
    if (!UnderMpirun()) return RelaunchUnderMpirun(mesh->NumRanks(), argc, argv);
    auto world = WorldCommunicator();
    if (!world.ok()) {
      std::fprintf(stderr, "ckpt restore-check: %s\n", std::string(world.status().message()).c_str());
      return kExitUsage;
    }
    comm = *world;
  }
  std::shared_ptr<LoadExchange> exchange;
  if (comm && !solo) {
    auto opened = StartLoadExchange(*comm, peer_listen);
    if (!opened.ok()) {
      std::fprintf(stderr, "ckpt restore-check: %s\n", std::string(opened.status().message()).c_str());
      return kExitUsage;
    }
    exchange = *opened;
  }
  lo.cooperative = !solo;
  auto res = comm ? RestoreCheckCollective(*storage, step, *mesh, comm, lo, exchange)
                  : RestoreCheck(**storage, step, *mesh, lo);
  if (comm && comm->rank() != 0) {
    // Only the leader reports; the others' status is in its sums.
    return res.ok() ? kExitOk : kExitProblem;
  }
  if (!res.ok()) {
    std::fprintf(stderr, "ckpt restore-check: %s\n", std::string(res.status().message()).c_str());
    // Corruption found while loading is a problem; a missing root or step,
    // or one the storage cannot read, is unreadable input.
    return ExitCodeOf(res.status());
  }
  if (!res->damage_note.empty()) std::fprintf(stderr, "ckpt restore-check: %s\n", res->damage_note.c_str());
  const double amp = res->bytes_needed ? static_cast<double>(res->bytes_decoded) / res->bytes_needed : 1.0;
  Render(
      json,
      [&](JsonWriter& w) {
        w.BeginObject()
            .Field("step", res->step)
            .Field("mesh", mesh->ToString())
            .Field("saved_mesh", res->saved_mesh)
            .Field("ranks", res->ranks)
            .Field("tensors", res->tensors)
            .Field("elements", res->elements)
            .Field("mismatches", res->mismatches)
            .Field("bytes_read", res->bytes_read)
            .Field("bytes_decoded", res->bytes_decoded)
            .Field("bytes_needed", res->bytes_needed)
            .Field("read_amplification", amp)
            .Field("cooperative", res->cooperative)
            .Field("bytes_from_storage", res->bytes_from_storage)
            .Field("bytes_from_peers", res->bytes_from_peers)
            .Field("bytes_for_peers", res->bytes_for_peers)
            .Field("peer_failovers", res->peer_failovers)
            .Field("seconds", res->seconds)
            .Field("load_seconds", res->load_seconds)
            .Field("ok", res->mismatches == 0);
        if (!res->first_mismatch.empty()) w.Field("first_mismatch", res->first_mismatch);
        if (!res->damage_note.empty()) w.Field("damage", res->damage_note);
        w.EndObject();
      },
      [&] {
        std::printf("step %lld (saved as %s) onto %s: %d ranks, %lld elements of %lld tensors\n",
                    static_cast<long long>(res->step), res->saved_mesh.c_str(), mesh->ToString().c_str(), res->ranks,
                    static_cast<long long>(res->elements), static_cast<long long>(res->tensors));
        std::printf("  read %s (decoded %s) for %s needed: amplification %.3f, %.2f s\n",
                    HumanBytes(static_cast<double>(res->bytes_read)).c_str(),
                    HumanBytes(static_cast<double>(res->bytes_decoded)).c_str(),
                    HumanBytes(static_cast<double>(res->bytes_needed)).c_str(), amp, res->seconds);
        if (res->cooperative) {
          std::printf("  cooperative: %s from storage, %s passed between ranks, %lld failovers\n",
                      HumanBytes(static_cast<double>(res->bytes_from_storage)).c_str(),
                      HumanBytes(static_cast<double>(res->bytes_from_peers)).c_str(),
                      static_cast<long long>(res->peer_failovers));
        }
        if (res->mismatches == 0) {
          std::printf("  all elements match\n");
        } else {
          std::printf("  %lld elements differ; first: %s\n", static_cast<long long>(res->mismatches),
                      res->first_mismatch.c_str());
        }
      });
  // Damage met on the way (a manifest read from its copy, a step passed
  // over) is a problem even when every element matched.
  return res->mismatches == 0 && res->damage_note.empty() ? kExitOk : kExitProblem;
}

}  // namespace ckpt::tools
