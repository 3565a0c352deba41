// ckpt plugins: the storage backends this build can use, built in and loaded
// from the plugin path, with what each can do; `ckpt plugins check` runs the
// storage conformance suite against one plugin.
#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "ckpt/conformance.h"
#include "ckpt/plugin_abi.h"
#include "ckpt/storage.h"
#include "commands.h"
#include "common/cli.h"
#include "util/clock.h"
#include "util/json.h"
#include "util/strings.h"

namespace ckpt::tools {
namespace {

std::string CapsText(const StorageCaps& c) {
  std::string s;
  auto add = [&](bool on, const char* what) {
    if (!on) return;
    if (!s.empty()) s += ", ";
    s += what;
  };
  add(c.direct_io, "O_DIRECT");
  add(c.atomic_rename, "atomic rename");
  add(c.ranged_reads, "ranged reads");
  add(c.registered_buffers, "registered buffers");
  add(c.durable, "durable");
  return s.empty() ? "-" : s;
}

// `root` with "/NAME" added to its path (before a query).
std::string Under(const std::string& root, const std::string& name) {
  const size_t q = root.find('?');
  std::string path = root.substr(0, q);
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return StrCat(path, "/", name, q == std::string::npos ? "" : root.substr(q));
}

int CheckMain(int argc, char** argv, int first) {
  std::string file, root, only;
  bool json = false;
  Args args("plugins check", "FILE.so [--root URI] [--case NAME] [--json]",
            "Runs the storage conformance suite (include/ckpt/conformance.h) against the\n"
            "storage plugin FILE.so: every case on a fresh root of its own, then one line\n"
            "per case and a count. Without --root the roots are directories under a new\n"
            "temporary directory, removed afterwards (SCHEME:///tmp/...); a plugin whose\n"
            "roots are not paths takes --root, under which each case uses NAME-N.\n"
            "Exit status: 0 every case passed, 1 a case failed, 2 usage or the plugin\n"
            "does not load.");
  args.Positional("FILE.so", &file, "the plugin");
  args.String("root", &root, "a root URI of the plugin's scheme to run the cases under");
  args.String("case", &only, "run this case only");
  args.Switch("json", &json, "print a JSON object instead of text");
  int exit = 0;
  if (!args.Parse(argc, argv, first, &exit)) return exit;
  const PluginInfo plugin = LoadStoragePlugin(file);
  if (!plugin.error.empty()) {
    std::fprintf(stderr, "ckpt plugins check: cannot use %s\n", plugin.error.c_str());
    return kExitUsage;
  }
  std::vector<ConformanceCase> cases = StorageConformanceCases();
  if (!only.empty()) {
    std::erase_if(cases, [&](const ConformanceCase& c) { return c.name != only; });
    if (cases.empty()) {
      std::fprintf(stderr, "ckpt plugins check: no case is named '%s'\n", only.c_str());
      return kExitUsage;
    }
  }
  std::string temp;
  if (root.empty()) {
    std::string templ = (std::filesystem::temp_directory_path() / "ckpt-conformance-XXXXXX").string();
    if (mkdtemp(templ.data()) == nullptr) {
      std::fprintf(stderr, "ckpt plugins check: cannot make a temporary directory under %s\n",
                   std::filesystem::temp_directory_path().c_str());
      return kExitUsage;
    }
    temp = templ;
    root = StrCat(plugin.scheme, "://", temp);
  }
  struct Outcome {
    std::string name, what;
    absl::Status status;
    double seconds;
  };
  std::vector<Outcome> outcomes;
  int failed = 0, n = 0;
  if (!json)
    std::printf("%s (scheme %s, version %s):\n", plugin.file.c_str(), plugin.scheme.c_str(), plugin.version.c_str());
  for (const ConformanceCase& c : cases) {
    const std::string uri = Under(root, StrCat(c.name, "-", ++n));
    const double t0 = NowSeconds();
    absl::Status s = RunStorageConformanceCase(c.name, [&] { return OpenPluginStorage(plugin, uri); });
    outcomes.push_back(Outcome{c.name, c.what, s, NowSeconds() - t0});
    failed += s.ok() ? 0 : 1;
    if (!json) {
      std::printf("  %-4s %s (%.2f s)%s%s\n", s.ok() ? "ok" : "FAIL", c.name.c_str(), outcomes.back().seconds,
                  s.ok() ? "" : ": ", s.ok() ? "" : std::string(s.message()).c_str());
      std::fflush(stdout);
    }
  }
  if (!temp.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(temp, ec);  // made by this command, above
  }
  Render(
      json,
      [&](JsonWriter& w) {
        w.BeginObject().Field("file", plugin.file).Field("scheme", plugin.scheme).Field("version", plugin.version);
        w.Key("cases").BeginArray();
        for (const Outcome& o : outcomes) {
          w.BeginObject()
              .Field("name", o.name)
              .Field("what", o.what)
              .Field("ok", o.status.ok())
              .Field("seconds", o.seconds);
          if (!o.status.ok()) w.Field("error", std::string(o.status.message()));
          w.EndObject();
        }
        w.EndArray()
            .Field("passed", static_cast<int64_t>(outcomes.size()) - failed)
            .Field("failed", failed)
            .EndObject();
      },
      [&] { std::printf("%zu of %zu cases passed\n", outcomes.size() - failed, outcomes.size()); });
  return failed > 0 ? kExitProblem : kExitOk;
}

}  // namespace

int PluginsMain(int argc, char** argv, int first) {
  if (first < argc && std::string(argv[first]) == "check") return CheckMain(argc, argv, first + 1);
  bool json = false;
  std::string load;
  Args args("plugins", "[--load FILE] [--json]\n   or: ckpt plugins check FILE.so [--root URI] [--case NAME] [--json]",
            "Lists the storage backends: the built-in ones and every plugin found on the\n"
            "plugin path ($CKPT_PLUGIN_PATH, then the install directory), with the scheme\n"
            "each serves and what it can do. Plugins that cannot be used are listed with\n"
            "the reason (not loadable, no entry symbol, another ABI version, incomplete\n"
            "function table); the exit status is then 1. `ckpt plugins check FILE.so`\n"
            "runs the storage conformance suite against a plugin (see its --help).");
  args.String("load", &load, "also try this plugin file");
  args.Switch("json", &json, "print JSON");
  int exit = 0;
  if (!args.Parse(argc, argv, first, &exit)) return exit;

  std::vector<PluginInfo> plugins = DiscoverStoragePlugins();
  if (!load.empty()) plugins.push_back(LoadStoragePlugin(load));
  const std::vector<BackendInfo> backends = ListStorageBackends();
  int failed = 0;
  for (const PluginInfo& p : plugins) failed += !p.error.empty();

  Render(
      json,
      [&](JsonWriter& w) {
        w.BeginObject().Field("abi_version", static_cast<int64_t>(CKPT_PLUGIN_ABI_VERSION));
        w.Key("plugin_path").BeginArray();
        for (const std::string& d : StoragePluginPath()) w.String(d);
        w.EndArray();
        w.Key("backends").BeginArray();
        for (const BackendInfo& b : backends) {
          w.BeginObject()
              .Field("scheme", b.scheme)
              .Field("origin", b.origin)
              .Field("description", b.description)
              .Field("engine", b.caps.engine)
              .Field("direct_io", b.caps.direct_io)
              .Field("atomic_rename", b.caps.atomic_rename)
              .Field("ranged_reads", b.caps.ranged_reads)
              .Field("registered_buffers", b.caps.registered_buffers)
              .Field("durable", b.caps.durable)
              .EndObject();
        }
        w.EndArray();
        w.Key("plugins").BeginArray();
        for (const PluginInfo& p : plugins) {
          w.BeginObject().Field("file", p.file).Field("ok", p.error.empty());
          if (p.error.empty()) {
            w.Field("scheme", p.scheme)
                .Field("version", p.version)
                .Field("abi_version", static_cast<int64_t>(p.abi_version));
          } else {
            w.Field("error", p.error);
          }
          w.EndObject();
        }
        w.EndArray().EndObject();
      },
      [&] {
        std::printf("storage backends (plugin ABI version %u):\n", CKPT_PLUGIN_ABI_VERSION);
        for (const BackendInfo& b : backends) {
          std::printf("  %-9s %s\n", b.scheme.c_str(), b.description.c_str());
          std::printf("  %-9s from %s; %s\n", "", b.origin.c_str(), CapsText(b.caps).c_str());
        }
        std::printf("plugin path:");
        for (const std::string& d : StoragePluginPath()) std::printf(" %s", d.c_str());
        std::printf("\n");
        for (const PluginInfo& p : plugins) {
          if (!p.error.empty()) std::printf("  cannot use %s\n", p.error.c_str());
        }
      });
  return failed > 0 ? kExitProblem : kExitOk;
}

}  // namespace ckpt::tools
