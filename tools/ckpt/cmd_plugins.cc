// ckpt plugins: the storage backends this build can use, built in and loaded
// from the plugin path, with what each can do.
#include <cstdio>

#include "ckpt/plugin_abi.h"
#include "ckpt/storage.h"
#include "commands.h"
#include "common/cli.h"
#include "util/json.h"

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

}  // namespace

int PluginsMain(int argc, char** argv, int first) {
  bool json = false;
  std::string load;
  Args args("plugins", "[--load FILE] [--json]",
            "Lists the storage backends: the built-in ones and every plugin found on the\n"
            "plugin path ($CKPT_PLUGIN_PATH, then the install directory), with the scheme\n"
            "each serves and what it can do. Plugins that cannot be used are listed with\n"
            "the reason (not loadable, no entry symbol, another ABI version, incomplete\n"
            "function table); the exit status is then 1.");
  args.String("load", &load, "also try this plugin file");
  args.Switch("json", &json, "print JSON");
  int exit = 0;
  if (!args.Parse(argc, argv, first, &exit)) return exit;

  std::vector<PluginInfo> plugins = DiscoverStoragePlugins();
  if (!load.empty()) plugins.push_back(LoadStoragePlugin(load));
  const std::vector<BackendInfo> backends = ListStorageBackends();
  int failed = 0;
  for (const PluginInfo& p : plugins) failed += !p.error.empty();

  if (json) {
    JsonWriter w;
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
    std::printf("%s\n", w.str().c_str());
    return failed > 0 ? kExitProblem : kExitOk;
  }

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
  return failed > 0 ? kExitProblem : kExitOk;
}

}  // namespace ckpt::tools
