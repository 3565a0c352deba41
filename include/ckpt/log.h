// Where ckpt's messages go. The library writes nothing to stdout or stderr
// on its own once a sink is set: what it does unasked (healing a manifest
// copy, collecting a partial step, retrying, falling back, failing over to
// storage) and what fails in the background (a save that did not commit)
// reach the trainer's own logger through a sink.
//
//   ckpt::SetLogSink([&](ckpt::LogLevel level, std::string_view component,
//                        std::string_view message) {
//     my_logger.Log(level >= ckpt::LogLevel::kWarning ? WARN : INFO,
//                   "ckpt", component, message);
//   });
//
// Three places set one, the narrowest winning:
//   - CheckpointerOptions::log: what one Checkpointer's saves, loads and
//     cleanup log, on the caller's thread and on ckpt's background threads;
//   - CoordinatorOptions::log / PeerMemoryOptions::log: one server's lines;
//   - SetLogSink: the process's sink, for everything else.
// Until SetLogSink is called, messages go to stderr as "ckpt: ..." lines
// (StderrLogSink). The C API has ckpt_set_log_sink; the Python package routes
// them to the `logging` logger "ckpt" (children "ckpt.coordinator", ...).
#ifndef CKPT_LOG_H_
#define CKPT_LOG_H_

#include <functional>
#include <string_view>

#include "ckpt/export.h"

namespace ckpt {

enum class LogLevel : int {
  kDebug = 0,
  kInfo = 1,     ///< what the library did on its own, and why
  kWarning = 2,  ///< something failed and was handled (a save failed, a fallback)
  kError = 3,    ///< something failed that nothing handled
};

CKPT_EXPORT const char* LogLevelName(LogLevel level);

/// Receives one message: no trailing newline, no "ckpt" prefix. `component`
/// is "" for the checkpointer's own messages, or names a part: "coordinator",
/// "peer", "s3", "storage". Called from any thread, possibly from several at
/// once, and must not call back into what logged (a Checkpointer, a
/// coordinator) nor block on it.
using LogSink = std::function<void(LogLevel level, std::string_view component, std::string_view message)>;

/// Sets the process's sink; an empty one restores the stderr default.
CKPT_EXPORT void SetLogSink(LogSink sink);

/// Writes "ckpt: message" or "ckpt COMPONENT: message" lines to stderr, one
/// write each, for messages at `min_level` and above (the CLI's sink).
CKPT_EXPORT LogSink StderrLogSink(LogLevel min_level = LogLevel::kInfo);

/// Sends a message to the sink in effect on this thread: the Checkpointer's
/// whose work runs on it, else the process's.
CKPT_EXPORT void LogMessage(LogLevel level, std::string_view component, std::string_view message);

}  // namespace ckpt

#endif  // CKPT_LOG_H_
