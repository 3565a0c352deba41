// ckpt demo: a small synthetic training job on a local directory.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>
#include <tuple>
#include <vector>

#include "ckpt/coordinator.h"
#include "ckpt/verify.h"
#include "commands.h"
#include "common/cli.h"
#include "common/elastic_model.h"
#include "common/synth_job.h"
#include "util/clock.h"
#include "util/json.h"
#include "util/strings.h"

namespace ckpt::tools {
namespace {

// The demo owns its directory: it may reuse one that holds only a checkpoint
// root (LATEST, step-*) and what the elastic part writes, and refuses
// anything else.
bool PrepareDir(const std::string& dir, std::string* why) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(dir, ec)) return true;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (IsCheckpointRootEntry(name)) continue;
    // What the elastic part leaves.
    const bool log = name.size() > 4 && name.substr(name.size() - 4) == ".log";
    if (name == "elastic" || name == "coordinator" || name == "token" || name == "memory" ||
        name == "memory-coordinator" ||
        ((name.rfind("worker", 0) == 0 || name.rfind("memory-worker", 0) == 0) && log)) {
      continue;
    }
    *why = "it holds '" + name + "', which is not part of a checkpoint root";
    return false;
  }
  fs::remove_all(dir, ec);
  if (ec) {
    *why = ec.message();
    return false;
  }
  return true;
}

// With --json the story goes to stderr and stdout carries the JSON alone.
bool g_json = false;

void Print(const char* fmt, auto... args) {
  FILE* out = g_json ? stderr : stdout;
  if constexpr (sizeof...(args) == 0) {
    std::fputs(fmt, out);
  } else {
    std::fprintf(out, fmt, args...);
  }
  std::fflush(out);
}

// A restore a worker made, from the line it logs when a generation starts.
struct Restore {
  std::string story;
  int64_t generation = 0, rank = 0, world = 0, step = -1;
  std::string level;
  int64_t from_memory = 0, from_peers = 0, from_storage = 0, rebuilt = 0;
};

// The restores logged in the workers' files `prefix`0.log ... (n files).
std::vector<Restore> RestoresIn(const std::string& prefix, int n, const std::string& story) {
  std::vector<Restore> out;
  auto field = [](const std::string& line, const std::string& key, int64_t* v) {
    const size_t at = line.find(" " + key + "=");
    if (at == std::string::npos) return false;
    *v = std::strtoll(line.c_str() + at + key.size() + 2, nullptr, 10);
    return true;
  };
  for (int i = 0; i < n; ++i) {
    std::ifstream in(StrCat(prefix, i, ".log"));
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("generation=", 0) != 0 || line.find(" level=") == std::string::npos) continue;
      Restore r;
      r.story = story;
      r.generation = std::strtoll(line.c_str() + 11, nullptr, 10);
      field(line, "rank", &r.rank);
      field(line, "world", &r.world);
      field(line, "restore", &r.step);
      const size_t lv = line.find(" level=") + 7;
      r.level = line.substr(lv, line.find(' ', lv) - lv);
      field(line, "from_memory", &r.from_memory);
      field(line, "from_peers", &r.from_peers);
      field(line, "from_storage", &r.from_storage);
      field(line, "rebuilt", &r.rebuilt);
      out.push_back(std::move(r));
    }
  }
  std::sort(out.begin(), out.end(), [](const Restore& a, const Restore& b) {
    return std::tie(a.generation, a.rank) < std::tie(b.generation, b.rank);
  });
  return out;
}

// A fresh token in `file` (mode 0600); empty on failure.
std::string WriteTokenFile(const std::string& file) {
  std::string token;
  std::random_device rd;
  for (int i = 0; i < 32; ++i) token += "0123456789abcdef"[rd() % 16];
  std::remove(file.c_str());
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
  if (fd < 0 || ::write(fd, (token + "\n").data(), token.size() + 1) != static_cast<ssize_t>(token.size() + 1)) {
    Print("  cannot write the token file %s\n", file.c_str());
    if (fd >= 0) ::close(fd);
    return {};
  }
  ::close(fd);
  return token;
}

// Whether the root's step `steps` is exactly the uninterrupted run's.
bool FinalStateExact(const std::string& root, int64_t steps) {
  auto storage = OpenStorage(root);
  if (!storage.ok()) return false;
  std::vector<float> w(static_cast<size_t>(kElasticWeight.NumElements())), b(64);
  State target;
  (void)target.AddTensor(kElasticWeight, w.data());
  (void)target.AddTensor(kElasticBias, b.data());
  auto loaded = LoadCheckpoint(**storage, target, steps);
  if (!loaded.ok()) {
    Print("  loading the final step FAILED: %s\n", std::string(loaded.status().message()).c_str());
    return false;
  }
  const ElasticShard expected = ElasticShard::Expected(steps);
  const bool exact = std::memcmp(w.data(), expected.weight().data(), w.size() * 4) == 0 &&
                     std::memcmp(b.data(), expected.bias().data(), b.size() * 4) == 0;
  Print("  final step %lld: %s\n", static_cast<long long>(steps),
        exact ? "bit-identical to an uninterrupted run" : "DIFFERS from an uninterrupted run");
  return exact;
}

void PrintRestores(const std::vector<Restore>& restores) {
  for (const Restore& r : restores) {
    if (r.generation < 2) continue;
    Print(
        "  generation %lld rank %lld of %lld restored %s step %lld: %lld bytes from its memory, %lld from peers, "
        "%lld from storage%s\n",
        static_cast<long long>(r.generation), static_cast<long long>(r.rank), static_cast<long long>(r.world),
        r.level.c_str(), static_cast<long long>(r.step), static_cast<long long>(r.from_memory),
        static_cast<long long>(r.from_peers), static_cast<long long>(r.from_storage),
        r.rebuilt > 0 ? StrCat(" (", r.rebuilt, " rebuilt from parity)").c_str() : "");
  }
}

pid_t SpawnSelf(const std::vector<std::string>& args, const std::string& out) {
  const pid_t pid = fork();
  if (pid == 0) {
    const int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv("/proc/self/exe", argv.data());
    _exit(127);
  }
  return pid;
}

// The elastic part: a coordinator and `workers` worker processes train the
// small model of `ckpt worker`; one is SIGKILLed in the middle of a save.
// The coordinator notices, aborts that step, forms a smaller generation
// that restores the previous step (resharded), and the job finishes with
// the exact state of an uninterrupted run.
// The stories' coordinator: heartbeat 200 ms, dead after 5 missed (1 s), and
// a 2 s wait for late joiners: a machine busy with other work must not turn
// a slow start or a descheduled worker into a failure the story does not
// tell.
CoordinatorOptions StoryCoordinator(std::string state_dir, std::string token, int min_nodes, int max_nodes) {
  CoordinatorOptions co;
  co.state_dir = std::move(state_dir);
  co.token = std::move(token);
  co.min_nodes = min_nodes;
  co.max_nodes = max_nodes;
  co.heartbeat_s = 0.2;
  co.dead_after = 5;
  co.join_timeout_s = 2;
  co.log = [](const std::string& line) { Print("  coordinator: %s\n", line.c_str()); };
  return co;
}

bool RunElastic(const std::string& dir, int workers, int64_t steps, std::vector<Restore>* restores) {
  const std::string root = dir + "/elastic", token_file = dir + "/token";
  const std::string token = WriteTokenFile(token_file);
  if (token.empty()) return false;
  CoordinatorOptions co = StoryCoordinator(dir + "/coordinator", token, 2, workers);
  co.root = root;
  Print("elastic restart: a coordinator and %d worker processes (heartbeat 200 ms, dead after 5 missed)\n", workers);
  auto coord = Coordinator::Start(co);
  if (!coord.ok()) {
    Print("  coordinator FAILED to start: %s\n", std::string(coord.status().message()).c_str());
    return false;
  }
  const std::string address = StrCat("127.0.0.1:", (*coord)->port());
  const int64_t victim_step = std::max<int64_t>(5, (steps / 2) / 5 * 5);
  std::vector<pid_t> pids;
  for (int i = 0; i < workers; ++i) {
    std::vector<std::string> args = {"ckpt",         "worker", "--connect", address,   "--token-file",
                                     token_file,     "--root", root,        "--steps", std::to_string(steps),
                                     "--save-every", "5",      "--step-ms", "20"};
    if (i == workers - 1) args.insert(args.end(), {"--kill-during-save", std::to_string(victim_step)});
    pids.push_back(SpawnSelf(args, StrCat(dir, "/worker", i, ".log")));
  }
  Print("  worker %d will be SIGKILLed while its save of step %lld is in flight\n", workers - 1,
        static_cast<long long>(victim_step));
  bool ok = true;
  for (int i = 0; i < workers; ++i) {
    int status = 0;
    waitpid(pids[i], &status, 0);
    const bool killed = WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
    if (i == workers - 1 ? !killed : !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
      Print("  worker %d ended unexpectedly (see %s/worker%d.log)\n", i, dir.c_str(), i);
      ok = false;
    }
  }
  const std::vector<Restore> found = RestoresIn(dir + "/worker", workers, "elastic");
  PrintRestores(found);
  restores->insert(restores->end(), found.begin(), found.end());
  return FinalStateExact(root, steps) && ok;
}

// The memory level: 6 workers on 3 "nodes" (failure domains, 2 workers
// each) save into peers' memory every 2 steps and to the root every 10.
// Both workers of node-2 are SIGKILLed once memory step 14 is committed,
// newer than the last durable step (10): the 4 survivors restore step 14
// from memory (their own and their peers'), reading nothing from storage.
// With `erasure`, the same on 6 nodes of one worker each, every rank's
// files erasure coded RS(4+2) (a piece on each node): two nodes are lost,
// and the survivors rebuild the lost pieces from parity.
bool RunMemoryLevel(const std::string& dir, int64_t steps, bool erasure, std::vector<Restore>* restores) {
  const std::string name = erasure ? "memory-erasure" : "memory";
  const std::string root = dir + "/" + name, token_file = dir + "/token";
  const std::string token = WriteTokenFile(token_file);
  if (token.empty()) return false;
  const int per_node = erasure ? 1 : 2;
  CoordinatorOptions co = StoryCoordinator(dir + "/" + name + "-coordinator", token, 4, 6);
  if (erasure) {
    co.memory_erasure_k = 4;
    co.memory_erasure_m = 2;
    Print(
        "memory level, erasure coded: a coordinator and 6 worker processes on 6 nodes; a memory save every 2\n"
        "  steps (each rank's files cut into 4 data and 2 parity pieces, one on each node: 1.5x the state in\n"
        "  memory instead of 2x for one replica), a durable one every 10\n");
  } else {
    Print(
        "memory level: a coordinator and 6 worker processes on 3 nodes (2 each); a memory save every 2 steps\n"
        "  (each rank's files in its own memory and in a peer's on another node), a durable one every 10\n");
  }
  auto coord = Coordinator::Start(co);
  if (!coord.ok()) {
    Print("  coordinator FAILED to start: %s\n", std::string(coord.status().message()).c_str());
    return false;
  }
  const std::string address = StrCat("127.0.0.1:", (*coord)->port());
  std::vector<pid_t> pids;
  for (int i = 0; i < 6; ++i) {
    std::vector<std::string> args = {"ckpt",           "worker",
                                     "--connect",      address,
                                     "--token-file",   token_file,
                                     "--root",         root,
                                     "--steps",        std::to_string(steps),
                                     "--save-every",   "10",
                                     "--memory-every", "2",
                                     "--step-ms",      "20",
                                     "--domain",       StrCat("node-", i / per_node)};
    if (i >= 4) args.insert(args.end(), {"--kill-after-commit", "14"});
    pids.push_back(SpawnSelf(args, StrCat(dir, "/", name, "-worker", i, ".log")));
  }
  Print(erasure ? "  node-4 and node-5 (workers 4 and 5) will be lost once memory step 14 is committed\n"
                : "  node-2 (workers 4 and 5) will be lost once memory step 14 is committed\n");
  bool ok = true;
  for (int i = 0; i < 6; ++i) {
    int status = 0;
    waitpid(pids[i], &status, 0);
    const bool killed = WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
    if (i >= 4 ? !killed : !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
      Print("  worker %d ended unexpectedly (see %s/%s-worker%d.log)\n", i, dir.c_str(), name.c_str(), i);
      ok = false;
    }
  }
  const std::vector<Restore> found = RestoresIn(dir + "/" + name + "-worker", 6, name);
  PrintRestores(found);
  bool from_memory = false;
  int64_t rebuilt = 0;
  for (const Restore& r : found) {
    if (r.generation < 2) continue;
    from_memory = true;
    rebuilt += r.rebuilt;
    if (r.level != "memory" || r.step != 14 || r.from_storage != 0) from_memory = false;
  }
  if (!from_memory) Print("  the smaller generation did NOT restore memory step 14 from memory alone\n");
  if (erasure && rebuilt == 0) {
    Print("  the restore rebuilt nothing from parity, though two nodes' pieces were lost\n");
    from_memory = false;
  }
  restores->insert(restores->end(), found.begin(), found.end());
  return FinalStateExact(root, steps) && ok && from_memory;
}

// The training loop: a step "computes" for `step_ms`, every `every` steps
// a save starts; each save is reported once it commits. False when a save
// failed or was refused.
bool TrainAndSave(SyntheticJob& job, int64_t steps, int64_t every, int64_t step_ms) {
  int64_t save_step = -1;
  int64_t steps_since = 0;
  auto report = [&](bool waited) -> bool {
    auto res = job.Finish();
    if (!res.ok()) {
      Print("  step %4lld  save FAILED: %s\n", static_cast<long long>(save_step),
            std::string(res.status().message()).c_str());
      return false;
    }
    Print("  step %4lld  committed %s: %s -> %s (ratio %.3f), durable after %.2f s\n",
          static_cast<long long>(res->step),
          waited ? "(training waited for it)" : StrCat("while training ran ", steps_since, " more step(s)").c_str(),
          HumanBytes(static_cast<double>(res->bytes_logical)).c_str(),
          HumanBytes(static_cast<double>(res->bytes_stored)).c_str(),
          static_cast<double>(res->bytes_stored) / static_cast<double>(res->bytes_logical), res->write_s);
    return true;
  };
  for (int64_t step = 1; step <= steps; ++step) {
    std::this_thread::sleep_for(std::chrono::milliseconds(step_ms));  // "compute"
    ++steps_since;
    if (job.InFlight() && job.Done() && !report(false)) return false;
    if (step % every != 0) continue;
    if (job.InFlight() && !report(true)) return false;
    absl::Status s = job.SaveAsync(step, static_cast<uint64_t>(step));
    if (!s.ok()) {
      Print("  step %4lld  save refused: %s\n", static_cast<long long>(step), std::string(s.message()).c_str());
      return false;
    }
    save_step = step;
    steps_since = 0;
    // The stall is what each simulated rank's Save call blocked for.
    const SynthSaveResult& p = job.pending();
    Print("  step %4lld  save started: each rank stalled <= %.1f ms to stage %s\n", static_cast<long long>(step),
          1000.0 * p.stall_max_s, HumanBytes(static_cast<double>(p.bytes_logical) / p.ranks).c_str());
  }
  return !job.InFlight() || report(true);
}

// What retention kept, the latest step restored onto another mesh and
// compared element by element, and every kept step verified. False when
// anything differs or fails.
bool RestoreAndVerify(Storage& storage, const Mesh& restore_mesh, int64_t keep) {
  auto list = ListCheckpointSteps(storage);
  std::string kept;
  if (list.ok()) {
    for (const StepInfo& s : *list) {
      if (s.committed) kept += (kept.empty() ? "" : ", ") + std::to_string(s.step);
    }
  }
  Print("  retention keeps the newest %lld: steps %s\n", static_cast<long long>(keep), kept.c_str());
  Print("  node lost: restoring the latest step onto %s (%lld ranks)...\n", restore_mesh.ToString().c_str(),
        static_cast<long long>(restore_mesh.NumRanks()));
  auto rc = RestoreCheck(storage, kLatestStep, restore_mesh);
  if (!rc.ok()) {
    Print("  restore FAILED: %s\n", std::string(rc.status().message()).c_str());
    return false;
  }
  Print("  restored step %lld: %lld elements, %s, read amplification %.3f\n", static_cast<long long>(rc->step),
        static_cast<long long>(rc->elements),
        rc->mismatches == 0 ? "all identical to what was saved"
                            : StrCat(rc->mismatches, " DIFFER; first ", rc->first_mismatch).c_str(),
        rc->bytes_needed ? static_cast<double>(rc->bytes_decoded) / rc->bytes_needed : 1.0);
  bool ok = rc->mismatches == 0;
  if (!list.ok()) return ok;
  for (const StepInfo& s : *list) {
    if (!s.committed) continue;
    auto v = VerifyStep(storage, s.step);
    if (!v.ok() || !v->ok()) {
      Print("  verify step %lld: %s\n", static_cast<long long>(s.step),
            !v.ok() ? std::string(v.status().message()).c_str() : v->problems.front().message.c_str());
      ok = false;
    } else {
      Print("  verify step %lld: ok, %lld blocks, both checksums of each\n", static_cast<long long>(s.step),
            static_cast<long long>(v->blocks));
    }
  }
  return ok;
}

void WriteDemoJson(JsonWriter& w, bool ok, double seconds, const std::vector<Restore>& restores) {
  w.BeginObject().Field("ok", ok).Field("seconds", seconds).Key("restores").BeginArray();
  for (const Restore& r : restores) {
    w.BeginObject()
        .Field("story", r.story)
        .Field("generation", r.generation)
        .Field("rank", r.rank)
        .Field("world", r.world)
        .Field("step", r.step)
        .Field("level", r.level)
        .Field("bytes_from_memory", r.from_memory)
        .Field("bytes_from_peers", r.from_peers)
        .Field("bytes_from_storage", r.from_storage)
        .Field("bytes_rebuilt_from_parity", r.rebuilt)
        .EndObject();
  }
  w.EndArray().EndObject();
}

}  // namespace

int DemoMain(int argc, char** argv, int first) {
  std::string dir = "ckpt-demo", mesh_text = "dp=2,tp=2", restore_text = "tp=4";
  Codec codec_choice = Codec::kShuffleZstd;
  int64_t params = 8000000, steps = 12, every = 4, keep = 2, step_ms = 60, workers = 4;
  bool no_elastic = false, json = false;
  Args args("demo", "[--dir DIR] [options]",
            "Runs a small synthetic training job: each step 'computes' for a while, every few\n"
            "steps the state is saved asynchronously (training goes on while blocks are\n"
            "checksummed, compressed and written), old steps are retired by retention, then a\n"
            "node loss is simulated: the latest checkpoint is restored onto a different mesh\n"
            "and every element compared, and all kept steps are verified. Then the elastic\n"
            "story: a coordinator and worker processes train, one is SIGKILLed mid-save, the\n"
            "others are stopped, a smaller generation restores the last committed step\n"
            "(resharded) and finishes; the final state is checked bit for bit. Last, the\n"
            "memory level: workers on 3 nodes also save into each other's memory; a node is\n"
            "lost after a memory step newer than the last durable one, and the survivors\n"
            "restore it from memory, reading nothing from storage; and the same erasure coded\n"
            "RS(4+2) on 6 nodes, two of them lost.");
  args.String("dir", &dir, "checkpoint root (default ./ckpt-demo, recreated each run)");
  args.Size("params", &params, "parameter count (default 8M)", false);
  args.String("mesh", &mesh_text, "training mesh (default dp=2,tp=2)");
  args.String("restore-mesh", &restore_text, "mesh to restore onto (default tp=4)");
  args.CodecFlag("codec", &codec_choice, "default shuffle-zstd");
  args.Int("steps", &steps, "training steps (default 12)");
  args.Int("every", &every, "save every N steps (default 4)");
  args.Int("keep", &keep, "retention: keep the newest K steps (default 2)");
  args.Int("step-ms", &step_ms, "simulated compute per step in ms (default 60)");
  args.Int("workers", &workers, "worker processes of the elastic part (default 4)");
  args.Switch("no-elastic", &no_elastic, "skip the elastic part (coordinator and workers)");
  args.Switch("json", &json,
              "print the story on stderr and, on stdout, JSON: ok, seconds, and every restore of the elastic\n"
              "parts (story, generation, rank, world, step, level, bytes_from_memory, bytes_from_peers,\n"
              "bytes_from_storage)");
  int exit = 0;
  if (!args.Parse(argc, argv, first, &exit)) return exit;
  g_json = json;
  auto mesh = Mesh::Parse(mesh_text);
  auto restore_mesh = Mesh::Parse(restore_text);
  const std::optional<Codec> codec = codec_choice;
  if (!mesh.ok() || !restore_mesh.ok() || !codec || steps < 1 || every < 1) {
    std::fprintf(stderr, "ckpt demo: bad --mesh, --restore-mesh, --codec, --steps or --every\n");
    return kExitUsage;
  }
  std::string why;
  if (!PrepareDir(dir, &why)) {
    std::fprintf(stderr, "ckpt demo: refusing to use %s: %s\n", dir.c_str(), why.c_str());
    return kExitUsage;
  }
  const double t0 = NowSeconds();
  SynthJobOptions o;
  o.uri = dir;
  o.mesh = *mesh;
  o.model.params = params;
  o.model.dtype = DType::kBF16;
  o.model.adam = true;
  o.model.zero = mesh->SizeOf("dp") > 1;
  o.codec = *codec;
  o.retention.keep_last = static_cast<int>(keep);
  o.engine.staging_bytes = 64 << 20;
  auto job = SyntheticJob::Create(o);
  if (!job.ok()) {
    std::fprintf(stderr, "ckpt demo: %s\n", std::string(job.status().message()).c_str());
    return kExitProblem;
  }
  auto storage = OpenStorage(dir);
  if (!storage.ok()) {
    std::fprintf(stderr, "ckpt demo: %s\n", std::string(storage.status().message()).c_str());
    return kExitProblem;
  }
  const StorageCaps caps = (*storage)->caps();
  Print("ckpt demo: %lld simulated ranks (%s), %.1fM params bf16 + Adam%s, codec %s\n",
        static_cast<long long>(mesh->NumRanks()), mesh->ToString().c_str(),
        static_cast<double>((*job)->model().params) / 1e6, o.model.zero ? " (ZeRO-1)" : "",
        std::string(CodecName(*codec)).c_str());
  Print("  root %s (%s, %s)\n", dir.c_str(), caps.engine.c_str(),
        caps.direct_io ? "O_DIRECT where the filesystem allows" : "buffered");

  if (!TrainAndSave(**job, steps, every, step_ms)) return kExitProblem;
  bool ok = RestoreAndVerify(**storage, *restore_mesh, keep);
  std::vector<Restore> restores;
  if (!no_elastic) {
    ok = RunElastic(dir, static_cast<int>(std::max<int64_t>(workers, 2)), 40, &restores) && ok;
    ok = RunMemoryLevel(dir, 30, false, &restores) && ok;
    ok = RunMemoryLevel(dir, 30, true, &restores) && ok;
  }
  Print("%s in %.1f s\n", ok ? "done" : "FAILED", NowSeconds() - t0);
  // The text was printed as the demo went (on stderr under --json).
  Render(
      json, [&](JsonWriter& w) { WriteDemoJson(w, ok, NowSeconds() - t0, restores); }, [] {});
  return ok ? kExitOk : kExitProblem;
}

}  // namespace ckpt::tools
