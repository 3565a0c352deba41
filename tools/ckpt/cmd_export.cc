// ckpt export: a step written as one HDF5 file (cmd_hdf5.cc), or as Hugging
// Face safetensors shards with --format safetensors (cmd_safetensors.cc).
#include <string>

#include "commands.h"

namespace ckpt::tools {

int ExportMain(int argc, char** argv, int first) {
  for (int i = first; i < argc; ++i) {
    const std::string a = argv[i];
    if ((a == "--format" && i + 1 < argc && std::string(argv[i + 1]) == "safetensors") || a == "--format=safetensors") {
      return ExportSafetensorsMain(argc, argv, first);
    }
  }
  return ExportHdf5Main(argc, argv, first);
}

}  // namespace ckpt::tools
