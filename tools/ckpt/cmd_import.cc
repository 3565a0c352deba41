// ckpt import: an HDF5 file's datasets (cmd_hdf5.cc), or a safetensors
// model, a directory or a file (cmd_safetensors.cc), saved as a step.
#include <string>

#include "ckpt/storage.h"
#include "commands.h"

namespace ckpt::tools {

int ImportMain(int argc, char** argv, int first) {
  // The first argument that is not an option says which.
  for (int i = first; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--", 0) == 0) {
      if (a == "--out" || a == "--step" || a == "--codec") ++i;
      continue;
    }
    const absl::StatusOr<std::string> scheme = StorageSchemeOf(a);
    if (scheme.ok() && *scheme == "safetensors") return ImportSafetensorsMain(argc, argv, first);
    break;
  }
  return ImportHdf5Main(argc, argv, first);
}

}  // namespace ckpt::tools
