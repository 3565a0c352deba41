// Flag parsing and output helpers shared by the ckpt subcommands.
#ifndef CKPT_TOOLS_CLI_H_
#define CKPT_TOOLS_CLI_H_

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ckpt/codec.h"
#include "ckpt/options.h"
#include "ckpt/state.h"
#include "ckpt/storage.h"
#include "ckpt/verify.h"
#include "util/json.h"

namespace ckpt::tools {

/// Exit codes of every subcommand (docs/cli.md).
enum ExitCode : int { kExitOk = 0, kExitProblem = 1, kExitUsage = 2 };

/// The exit code of a command that stopped on `s`: damage found in what was
/// read (DataLoss) is a problem (1); anything else, a root or step that is
/// missing or that the storage could not read, is unreadable input (2). One
/// answer for every command that reads a root.
inline int ExitCodeOf(const absl::Status& s) {
  if (s.ok()) return kExitOk;
  return absl::IsDataLoss(s) ? kExitProblem : kExitUsage;
}

/// Prints "ckpt CMD: <message>" on stderr and returns kExitUsage: what a
/// command was to read could not be read.
inline int FailUnreadable(const char* cmd, const absl::Status& s) {
  std::fprintf(stderr, "ckpt %s: %s\n", cmd, std::string(s.message()).c_str());
  return kExitUsage;
}

/// How every command prints its result: with `--json`, one JSON document on
/// stdout that `to_json` writes into the writer it is given; otherwise the
/// lines for a person that `to_text` prints. A command keeps its two
/// renderings apart (a lambda or a function each), and the choice is made
/// here, once.
template <typename ToJson, typename ToText>
void Render(bool json, ToJson&& to_json, ToText&& to_text) {
  if (json) {
    JsonWriter w;
    to_json(w);
    std::printf("%s\n", w.str().c_str());
  } else {
    to_text();
  }
}

/// A minimal flag parser: --name value, --name=value, --switch, positionals.
class Args {
 public:
  Args(std::string command, std::string synopsis, std::string description);
  /// The program that `command` belongs to in the usage and error lines
  /// ("ckpt" unless set; empty: `command` is the program itself).
  void Program(std::string program) { program_ = std::move(program); }

  void String(const std::string& name, std::string* out, const std::string& help);
  void Int(const std::string& name, int64_t* out, const std::string& help);
  void Double(const std::string& name, double* out, const std::string& help);
  /// Sizes with K/M/G/T suffixes; `binary` selects 1024-based units.
  void Size(const std::string& name, int64_t* out, const std::string& help, bool binary);
  void Switch(const std::string& name, bool* out, const std::string& help);
  /// A codec by name (ckpt/codec.h); the help line lists every one, then
  /// `help` (e.g. "default none").
  void CodecFlag(const std::string& name, Codec* out, const std::string& help);
  /// A required positional argument.
  void Positional(const std::string& name, std::string* out, const std::string& help);

  /// Parses argv[first..]. On --help prints usage and returns kExitOk via
  /// `exit`; on a mistake prints it and the usage to stderr and returns
  /// kExitUsage via `exit`. Returns true when the command should run.
  bool Parse(int argc, char** argv, int first, int* exit);
  /// True when the named flag appeared.
  bool Given(const std::string& name) const;
  std::string Usage() const;
  /// "ckpt verify", or the program alone.
  std::string Invocation() const { return program_.empty() ? command_ : program_ + " " + command_; }

 private:
  struct Flag {
    std::string name;
    std::string help;
    std::function<bool(const std::string&)> set;  // false: bad value
    bool is_switch = false;
    bool given = false;
    std::string choices;  // the values it takes, for the error on a bad one
  };
  struct Pos {
    std::string name;
    std::string help;
    std::string* out;
  };
  Flag* Find(const std::string& name);

  std::string command_, synopsis_, description_;
  std::string program_ = "ckpt";
  std::vector<Flag> flags_;
  std::vector<Pos> positionals_;
};

/// Says on stderr, as "ckpt COMMAND: ...", when the step a command reads is
/// damaged (its manifest then comes from the copy): a restore or an audit
/// never meets damage silently. Steps that cannot be examined say nothing
/// here; the command's own read reports them.
void WarnIfDamaged(Storage& storage, int64_t step, const char* command);

/// A committed step opened for reading whole (export): its storage, the
/// step (the latest when kLatestStep was asked for; a damaged one is said
/// on stderr as `command`), its summary and manifest.
struct StepToRead {
  std::shared_ptr<Storage> storage;
  int64_t step = 0;
  CheckpointSummary summary;
  std::unique_ptr<StepReader> reader;  ///< loads pieces of the step
};
absl::StatusOr<StepToRead> OpenStepToRead(const std::string& uri, int64_t step, const char* command);

/// Saves states[r] as rank r of a job of states.size() ranks into `uri`
/// (one Checkpointer per rank, every Save started before any is waited
/// for): what the importers write.
absl::Status SaveAsRanks(const std::string& uri, int64_t step, std::vector<State>& states, const SaveOptions& options,
                         Codec codec);

/// This process's peak resident memory, in bytes.
double PeakRssBytes();
/// This process's resident memory now (VmRSS), in bytes; -1 if unknown.
int64_t ResidentBytes();

/// True when stderr is a terminal (progress bars go there).
bool StderrIsTty();

/// Draws "[#####     ] 52% 1.2 GiB/2.3 GiB" on stderr, throttled; Finish()
/// clears it.
class ProgressBar {
 public:
  explicit ProgressBar(std::string label);
  void Update(int64_t done, int64_t total);
  void Finish();

 private:
  std::string label_;
  bool enabled_;
  double last_ = 0;
  bool drawn_ = false;
};

}  // namespace ckpt::tools

#endif  // CKPT_TOOLS_CLI_H_
