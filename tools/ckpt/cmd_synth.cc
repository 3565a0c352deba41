// ckpt synth: save a synthetic transformer-like state over a mesh.
#include <cstdio>

#include "commands.h"
#include "common/cli.h"
#include "common/mpi_support.h"
#include "common/synth_job.h"
#include "util/json.h"
#include "util/strings.h"

namespace ckpt::tools {

int SynthMain(int argc, char** argv, int first) {
  std::string out, dtype = "bf16", mesh_text = "dp=1", optimizer;
  Codec codec_choice = Codec::kNone;
  int64_t params = 1000000, step = 0, seed = 0, zstd_level = 1, keep_last = 0;
  int64_t block = 1 << 20, staging = 256 << 20, workers = 0, layers = 0, experts = 0, delta_chain = 0;
  bool zero = false, json = false, no_direct = false, procs = false, allow_older = false;
  Args args("synth", "--out DIR [options]",
            "Builds a deterministic transformer-like state (embedding, attention and MLP\n"
            "matrices per layer, norms), shards it over the mesh the way TP/PP/DP would, and\n"
            "saves it with one simulated rank per mesh position. Every element is a pure\n"
            "function of (seed, tensor name, global index), so `ckpt restore-check` can verify\n"
            "a restore onto any mesh.");
  args.String("out", &out, "checkpoint root (path or storage URI)");
  args.Size("params", &params, "parameter count, e.g. 125M or 1G (default 1M)", false);
  args.String("dtype", &dtype, "parameter dtype: bf16, f32, f16 (default bf16)");
  args.String("mesh", &mesh_text, "mesh, e.g. dp=2,tp=4,pp=2 (default dp=1)");
  args.Int("step", &step, "step number to save (default 0)");
  args.CodecFlag("codec", &codec_choice, "default none");
  args.Int("zstd-level", &zstd_level, "zstd level (default 1)");
  args.String("optimizer", &optimizer, "'adam' adds fp32 exp_avg/exp_avg_sq and a step");
  args.Switch("zero", &zero, "shard optimizer state over dp (ZeRO-1)");
  args.Int("layers", &layers, "transformer layers (default: from --params)");
  args.Int("experts", &experts, "experts per layer: a mixture-of-experts MLP split over ep");
  args.Int("seed", &seed, "value seed (default 0)");
  args.Size("block-size", &block, "raw bytes per block (default 1M)", true);
  args.Size("staging", &staging, "staging arena budget (default 256M)", true);
  args.Int("threads", &workers, "codec worker threads (default min(4, cores))");
  args.Int("keep-last", &keep_last, "retention: keep the newest K steps (default all)");
  args.Int("delta-chain", &delta_chain,
           "save --step whole, then the K steps after it as deltas against it (the same values:\n"
           "a frozen model, so each restore-checks exactly); per step figures in --json");
  args.Switch("no-direct", &no_direct, "do not use O_DIRECT");
  args.Switch("allow-older", &allow_older, "save a step at or below the latest committed one (refused otherwise)");
  args.Switch("procs", &procs, "one process per rank under mpirun instead of threads");
  args.Switch("json", &json, "print a JSON object instead of text");
  int exit = 0;
  if (!args.Parse(argc, argv, first, &exit)) return exit;
  auto usage = [&](const std::string& msg) {
    std::fprintf(stderr, "ckpt synth: %s\n", msg.c_str());
    return kExitUsage;
  };
  if (out.empty()) return usage("--out is required");
  SynthJobOptions o;
  o.uri = out;
  auto mesh = Mesh::Parse(mesh_text);
  if (!mesh.ok()) return usage(std::string(mesh.status().message()));
  o.mesh = *mesh;
  auto dt = ParseDType(dtype);
  if (!dt) return usage("unknown dtype '" + dtype + "'");
  const std::optional<Codec> codec = codec_choice;
  if (!optimizer.empty() && optimizer != "adam") return usage("--optimizer must be adam");
  if (step < 0) return usage("--step must be >= 0");
  if (delta_chain < 0 || delta_chain > 4096) return usage("--delta-chain must be between 0 and 4096");
  o.model.params = params;
  o.model.dtype = *dt;
  o.model.adam = optimizer == "adam";
  o.model.zero = zero;
  o.model.layers = static_cast<int>(layers);
  o.model.experts = static_cast<int>(experts);
  o.codec = *codec;
  o.zstd_level = static_cast<int>(zstd_level);
  o.engine.block_size = static_cast<size_t>(block);
  o.engine.staging_bytes = static_cast<size_t>(staging);
  o.engine.worker_threads = static_cast<int>(workers);
  o.retention.keep_last = static_cast<int>(keep_last);
  o.delta.chain = static_cast<int>(delta_chain);
  o.direct_io = !no_direct;
  o.allow_older_step = allow_older;

  if (procs) {
    if (!HaveMpi()) return usage("--procs needs a build with MPI (libopenmpi-dev)");
    if (!UnderMpirun()) return RelaunchUnderMpirun(o.mesh.NumRanks(), argc, argv);
    auto comm = WorldCommunicator();
    if (!comm.ok()) return usage(std::string(comm.status().message()));
    if ((*comm)->size() != o.mesh.NumRanks()) {
      return usage("mpirun started " + std::to_string((*comm)->size()) + " processes for a mesh of " +
                   std::to_string(o.mesh.NumRanks()) + " ranks");
    }
    o.only_rank = (*comm)->rank();
    o.communicator = *comm;
  }
  auto job = SyntheticJob::Create(o);
  if (!job.ok()) {
    std::fprintf(stderr, "ckpt synth: %s\n", std::string(job.status().message()).c_str());
    return absl::IsInvalidArgument(job.status()) ? kExitUsage : kExitProblem;
  }
  absl::Status s = (*job)->SaveAsync(step, static_cast<uint64_t>(seed));
  if (absl::IsFailedPrecondition(s) || absl::IsAlreadyExists(s)) {
    // The step given does not fit the root (committed, or not newer than
    // the latest): a usage error, refused before anything was written.
    std::fprintf(stderr, "ckpt synth: %s\n", std::string(s.message()).c_str());
    return kExitUsage;
  }
  auto res = s.ok() ? (*job)->Finish() : absl::StatusOr<SynthSaveResult>(s);
  // The chain: the same values again, each save a delta against the first.
  std::vector<SynthSaveResult> chain;
  for (int64_t i = 1; res.ok() && i <= delta_chain; ++i) {
    chain.push_back(*res);
    absl::Status next = (*job)->SaveAsync(step + i, static_cast<uint64_t>(seed));
    res = next.ok() ? (*job)->Finish() : absl::StatusOr<SynthSaveResult>(next);
  }
  if (!res.ok()) {
    std::fprintf(stderr, "ckpt synth: save failed: %s\n", std::string(res.status().message()).c_str());
    return kExitProblem;
  }
  if (delta_chain > 0) chain.push_back(*res);
  if (o.communicator) {
    res = CombineSaveResults(*o.communicator, *res);
    if (!res.ok()) {
      std::fprintf(stderr, "ckpt synth: %s\n", std::string(res.status().message()).c_str());
      return kExitProblem;
    }
    if (o.communicator->rank() != 0) return kExitOk;  // the leader reports
  }
  const double ratio =
      res->bytes_logical ? static_cast<double>(res->bytes_stored) / static_cast<double>(res->bytes_logical) : 1.0;
  Render(
      json,
      [&](JsonWriter& w) {
        w.BeginObject()
            .Field("step", res->step)
            .Field("ranks", res->ranks)
            .Field("mesh", o.mesh.ToString())
            .Field("params", (*job)->model().params)
            .Field("dtype", DTypeName(*dt))
            .Field("codec", CodecName(*codec))
            .Field("bytes_logical", res->bytes_logical)
            .Field("bytes_stored", res->bytes_stored)
            .Field("bytes_written", res->bytes_written)
            .Field("ratio", ratio)
            .Field("stall_s", res->stall_max_s)
            .Field("stall_total_s", res->stall_total_s)
            .Field("write_s", res->write_s)
            .Field("commit_s", res->commit_s)
            .Field("generate_s", res->generate_s);
        if (delta_chain > 0) {
          // Each step of the chain: the first whole, the others deltas.
          w.Key("chain").BeginArray();
          for (const SynthSaveResult& c : chain) {
            w.BeginObject()
                .Field("step", c.step)
                .Field("bytes_stored", c.bytes_stored)
                .Field("commit_s", c.commit_s)
                .EndObject();
          }
          w.EndArray();
        }
        w.EndObject();
      },
      [&] {
        std::printf("saved step %lld to %s: %d ranks (%s), %.3g params %s%s\n", static_cast<long long>(res->step),
                    out.c_str(), res->ranks, o.mesh.ToString().c_str(), static_cast<double>((*job)->model().params),
                    std::string(DTypeName(*dt)).c_str(), o.model.adam ? (zero ? " + Adam (ZeRO-1)" : " + Adam") : "");
        std::printf(
            "  %s logical -> %s stored (ratio %.3f, %s)\n", HumanBytes(static_cast<double>(res->bytes_logical)).c_str(),
            HumanBytes(static_cast<double>(res->bytes_stored)).c_str(), ratio, std::string(CodecName(*codec)).c_str());
        std::printf("  stall %.3f s (longest rank), durable after %.2f s, committed after %.2f s\n", res->stall_max_s,
                    res->write_s, res->commit_s);
        if (delta_chain > 0) {
          std::printf("  steps %lld to %lld: deltas of step %lld, %s stored each (%s the first)\n",
                      static_cast<long long>(step + 1), static_cast<long long>(step + delta_chain),
                      static_cast<long long>(step), HumanBytes(static_cast<double>(res->bytes_stored)).c_str(),
                      HumanBytes(static_cast<double>(chain.front().bytes_stored)).c_str());
        }
      });
  // Flushed now: with a tiered:// root the process may still be draining
  // to the durable tier when a caller reads this.
  std::fflush(stdout);
  return kExitOk;
}

}  // namespace ckpt::tools
