#ifndef CKPT_TOOLS_COMMANDS_H_
#define CKPT_TOOLS_COMMANDS_H_

namespace ckpt::tools {

// Each returns the process exit status; argv[first] is the first argument
// after the subcommand name.
int SynthMain(int argc, char** argv, int first);
int RestoreCheckMain(int argc, char** argv, int first);
int VerifyMain(int argc, char** argv, int first);
int InspectMain(int argc, char** argv, int first);
int DemoMain(int argc, char** argv, int first);
int PlanMain(int argc, char** argv, int first);
int IntervalMain(int argc, char** argv, int first);
int PluginsMain(int argc, char** argv, int first);
// ckpt export and ckpt import (cmd_export.cc, cmd_import.cc) choose the
// format; each format's side is its own (cmd_hdf5.cc, cmd_safetensors.cc).
int ExportMain(int argc, char** argv, int first);
int ImportMain(int argc, char** argv, int first);
int ExportHdf5Main(int argc, char** argv, int first);
int ImportHdf5Main(int argc, char** argv, int first);
int ExportSafetensorsMain(int argc, char** argv, int first);
int ImportSafetensorsMain(int argc, char** argv, int first);
int StatsMain(int argc, char** argv, int first);
int DiffMain(int argc, char** argv, int first);
int ListMain(int argc, char** argv, int first);
int GcMain(int argc, char** argv, int first);
int RepairMain(int argc, char** argv, int first);
int CoordinatorMain(int argc, char** argv, int first);
int WorkerMain(int argc, char** argv, int first);
int BenchMain(int argc, char** argv, int first);

}  // namespace ckpt::tools

#endif  // CKPT_TOOLS_COMMANDS_H_
