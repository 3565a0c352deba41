// ckpt: one command-line tool with git-style subcommands.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>

#include "ckpt/log.h"
#include "ckpt/version.h"
#include "commands.h"

namespace {

struct Command {
  const char* name;
  int (*main)(int, char**, int);
  const char* summary;
};

constexpr Command kCommands[] = {
    {"demo", ckpt::tools::DemoMain,
     "run a small synthetic training job: async saves, restore onto another mesh, verify"},
    {"synth", ckpt::tools::SynthMain, "save a deterministic synthetic transformer state sharded over a mesh"},
    {"restore-check", ckpt::tools::RestoreCheckMain,
     "load a synthetic checkpoint onto any mesh and compare every element"},
    {"verify", ckpt::tools::VerifyMain, "check every block's checksums, the file indexes and exact cover"},
    {"inspect", ckpt::tools::InspectMain, "show steps, tensors, blobs and the mesh of a checkpoint"},
    {"stats", ckpt::tools::StatsMain, "per-tensor NaN/Inf counts, range, mean and norm; --gate fails on bad ones"},
    {"diff", ckpt::tools::DiffMain, "compare two checkpoints tensor by tensor, across meshes"},
    {"list", ckpt::tools::ListMain, "steps of a root: state, size, age, tiers; with --state-dir the memory level"},
    {"repair", ckpt::tools::RepairMain, "rewrite damaged files of a step from another tier or replica"},
    {"gc", ckpt::tools::GcMain, "apply retention and remove leftovers (dry run unless --yes)"},
    {"plan", ckpt::tools::PlanMain, "plan a save and a resharded load at any scale, without tensor data"},
    {"bench", ckpt::tools::BenchMain, "measure save, load and verify costs on a storage; write costs for interval"},
    {"interval", ckpt::tools::IntervalMain, "how often to checkpoint, from a failure rate and save costs"},
    {"export", ckpt::tools::ExportMain, "write a step as one HDF5 file, or as Hugging Face safetensors shards"},
    {"import", ckpt::tools::ImportMain, "save the datasets of an HDF5 file as a checkpoint"},
    {"coordinator", ckpt::tools::CoordinatorMain, "run the elastic-restart coordinator (or: coordinator status)"},
    {"worker", ckpt::tools::WorkerMain, "one process of an elastic training job driven by the coordinator"},
    {"plugins", ckpt::tools::PluginsMain, "list the storage backends and plugins, with their capabilities"},
};

void PrintHelp(FILE* out) {
  std::fprintf(out,
               "usage: ckpt <command> [options]   (ckpt <command> --help for details)\n\n"
               "commands:\n");
  for (const Command& c : kCommands) std::fprintf(out, "  %-15s %s\n", c.name, c.summary);
  std::fprintf(out, "\nexit status: 0 ok, 1 a problem was found, 2 usage error or unreadable input\n");
}

// The library's messages go to stderr, at CKPT_LOG_LEVEL (debug, info,
// warning, error; default info) and above.
void InstallStderrSink() {
  ckpt::LogLevel level = ckpt::LogLevel::kInfo;
  if (const char* env = std::getenv("CKPT_LOG_LEVEL"); env != nullptr) {
    for (ckpt::LogLevel l :
         {ckpt::LogLevel::kDebug, ckpt::LogLevel::kInfo, ckpt::LogLevel::kWarning, ckpt::LogLevel::kError}) {
      if (std::strcmp(env, ckpt::LogLevelName(l)) == 0) level = l;
    }
  }
  ckpt::SetLogSink(ckpt::StderrLogSink(level));
}

}  // namespace

int main(int argc, char** argv) {
  InstallStderrSink();
  if (argc < 2) {
    PrintHelp(stderr);
    return 2;
  }
  const std::string cmd = argv[1];
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    if (argc > 2) {
      for (const Command& c : kCommands) {
        if (std::strcmp(c.name, argv[2]) == 0) {
          char help[] = "--help";
          char* args[] = {argv[0], argv[2], help};
          return c.main(3, args, 2);
        }
      }
    }
    PrintHelp(stdout);
    return 0;
  }
  if (cmd == "--version" || cmd == "version") {
    std::printf("ckpt %s\n", ckpt::LibraryVersion());
    return 0;
  }
  for (const Command& c : kCommands) {
    if (cmd != c.name) continue;
    // Sizes from files are checked before they are allocated; this is the
    // last line for any that a check missed: a message and exit 2, never
    // an abort.
    try {
      return c.main(argc, argv, 2);
    } catch (const std::bad_alloc&) {
      std::fprintf(stderr, "ckpt %s: out of memory: the input declares more than can be allocated\n", c.name);
      return 2;
    } catch (const std::length_error& e) {
      std::fprintf(stderr, "ckpt %s: a size in the input is too large (%s)\n", c.name, e.what());
      return 2;
    }
  }
  std::fprintf(stderr, "ckpt: unknown command '%s'\n\n", cmd.c_str());
  PrintHelp(stderr);
  return 2;
}
