// Load time of a checkpoint onto the mesh it was saved from, and onto other
// meshes (tensor- and pipeline-parallel degree changes), in one run with the
// runs interleaved. Each load fills every rank of the target mesh in turn.
//
//   build/benchmarks/reshard_bench --dir /path --params 256M --from tp=4
//       --to 'tp=2;tp=8;tp=3;pp=2;tp=2/pp=2' --runs 3
//
// Meshes in --to are separated by ';'; within one mesh, dimensions are
// separated by '/': tp=2/pp=2.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "bench_util.h"
#include "ckpt/checkpointer.h"
#include "common/cli.h"
#include "common/synth_job.h"
#include "util/clock.h"
#include "util/json.h"

namespace ckpt::bench {
namespace {

struct LoadFigure {
  double seconds = 0;
  int64_t bytes_needed = 0;
  int64_t bytes_read = 0;
};

// Loads every rank of `mesh` (boxes from the synthetic model) one after the
// other into preallocated buffers.
absl::StatusOr<LoadFigure> LoadMesh(Storage& storage, const SyntheticModel& model, const Mesh& mesh) {
  LoadFigure fig;
  std::vector<std::vector<std::byte>> buffers;
  std::vector<State> states(mesh.NumRanks());
  for (int64_t r = 0; r < mesh.NumRanks(); ++r) {
    for (const TensorLayout& t : model.tensors) {
      auto box = RankBox(t, mesh, r);
      if (!box.ok()) return box.status();
      if (!box->has_value() || (*box)->Empty()) continue;
      buffers.emplace_back(static_cast<size_t>((*box)->Volume()) * DTypeSize(t.spec.dtype), std::byte{1});
      absl::Status s = states[r].AddShard(t.spec, **box, buffers.back().data());
      if (!s.ok()) return s;
    }
  }
  const double t0 = NowSeconds();
  for (int64_t r = 0; r < mesh.NumRanks(); ++r) {
    auto ls = LoadCheckpoint(storage, states[r], kLatestStep, static_cast<int>(r));
    if (!ls.ok()) return ls.status();
    fig.bytes_needed += ls->bytes_needed;
    fig.bytes_read += ls->bytes_read;
  }
  fig.seconds = NowSeconds() - t0;
  return fig;
}

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t next = s.find(sep, pos);
    if (next == std::string::npos) next = s.size();
    if (next > pos) out.push_back(s.substr(pos, next - pos));
    pos = next + 1;
  }
  return out;
}

int Main(int argc, char** argv) {
  std::string dir, from_text = "tp=4", to_text = "tp=2;tp=8;tp=3;pp=2;tp=2/pp=2", json_path;
  int64_t params = 256000000, runs = 3, block = 1 << 20, layers = 0;
  tools::Args args("reshard_bench", "--dir DIR [--params 256M] [--from MESH] [--to M1;M2]",
                   "Same-mesh versus resharded load time of one checkpoint.");
  args.String("dir", &dir, "directory on the storage to measure (required)");
  args.Size("params", &params, "bf16 parameters (default 256M)", false);
  args.String("from", &from_text, "mesh the state is saved from (default tp=4)");
  args.String("to", &to_text, "target meshes, ';'-separated, '/' between dimensions");
  args.Int("runs", &runs, "runs; medians are reported (default 3)");
  args.Size("block-size", &block, "raw bytes per block (default 1M)", true);
  args.Int("layers", &layers, "transformer layers (default: from --params)");
  args.String("json", &json_path, "also write the figures as JSON");
  int exit = 0;
  if (!ParseBenchArgs(args, argc, argv, dir, &exit)) return exit;
  auto from = Mesh::Parse(from_text);
  if (!from.ok()) return 2;
  std::vector<Mesh> targets = {*from};
  for (std::string t : Split(to_text, ';')) {
    std::replace(t.begin(), t.end(), '/', ',');
    auto m = Mesh::Parse(t);
    if (!m.ok()) return 2;
    targets.push_back(*m);
  }
  const std::string root = dir + "/reshard-root";
  std::filesystem::remove_all(root);
  tools::SynthJobOptions o;
  o.uri = root;
  o.mesh = *from;
  o.model.params = params;
  o.model.dtype = DType::kBF16;
  o.engine.block_size = static_cast<size_t>(block);
  o.model.layers = static_cast<int>(layers);
  auto job = tools::SyntheticJob::Create(o);
  if (!job.ok() || !(*job)->SaveAsync(1, 1).ok() || !(*job)->Finish().ok()) {
    std::fprintf(stderr, "could not write the checkpoint\n");
    return 1;
  }
  auto storage = OpenStorage(root);
  if (!storage.ok()) return 1;
  std::map<std::string, std::vector<LoadFigure>> figs;
  std::map<std::string, SyntheticModel> models;
  for (const Mesh& m : targets) {
    auto model = BuildSyntheticModel(o.model, m);
    if (!model.ok()) return 1;
    models[m.ToString()] = *model;
  }
  for (int64_t run = 0; run < runs; ++run) {
    for (size_t k = 0; k < targets.size(); ++k) {
      const Mesh& m = targets[(k + run) % targets.size()];
      auto f = LoadMesh(**storage, models[m.ToString()], m);
      if (!f.ok()) {
        std::fprintf(stderr, "load onto %s: %s\n", m.ToString().c_str(), std::string(f.status().message()).c_str());
        return 1;
      }
      figs[m.ToString()].push_back(*f);
    }
  }
  auto median = [](std::vector<LoadFigure> v) {
    std::sort(v.begin(), v.end(), [](auto& a, auto& b) { return a.seconds < b.seconds; });
    return v[v.size() / 2];
  };
  const LoadFigure same = median(figs[from->ToString()]);
  std::printf("%s of bf16 saved on %s; medians of %lld runs\n",
              tools::HumanBytes(static_cast<double>(same.bytes_needed)).c_str(), from->ToString().c_str(),
              static_cast<long long>(runs));
  std::printf("%-14s %9s %10s %12s %14s\n", "load onto", "seconds", "x same", "read/needed", "GB/s needed");
  JsonWriter j;
  j.BeginObject().Field("from", from->ToString()).Field("runs", runs);
  j.Key("targets").BeginArray();
  for (const Mesh& m : targets) {
    const LoadFigure f = median(figs[m.ToString()]);
    std::printf("%-14s %9.3f %10.3f %12.3f %14.3f\n", m.ToString().c_str(), f.seconds, f.seconds / same.seconds,
                static_cast<double>(f.bytes_read) / f.bytes_needed, f.bytes_needed / f.seconds / 1e9);
    j.BeginObject()
        .Field("mesh", m.ToString())
        .Field("seconds", f.seconds)
        .Field("vs_same_mesh", f.seconds / same.seconds)
        .Field("bytes_needed", f.bytes_needed)
        .Field("bytes_read", f.bytes_read)
        .EndObject();
  }
  j.EndArray().EndObject();
  WriteTextFile(json_path, j.str());
  std::filesystem::remove_all(root);
  return 0;
}

}  // namespace
}  // namespace ckpt::bench

int main(int argc, char** argv) { return ckpt::bench::Main(argc, argv); }
