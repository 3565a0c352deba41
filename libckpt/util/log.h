// The library's messages (ckpt/log.h): the sink of the work running on a
// thread. A Checkpointer installs its own (CheckpointerOptions::log) for the
// duration of each call and of each of its background tasks.
#ifndef CKPT_UTIL_LOG_H_
#define CKPT_UTIL_LOG_H_

#include <string_view>

#include "ckpt/log.h"

namespace ckpt {

/// While alive, LogMessage on this thread goes to `sink` (when not empty;
/// the sink must outlive the scope). Scopes nest.
class ScopedLogSink {
 public:
  explicit ScopedLogSink(const LogSink* sink);
  ~ScopedLogSink();
  ScopedLogSink(const ScopedLogSink&) = delete;
  ScopedLogSink& operator=(const ScopedLogSink&) = delete;

 private:
  const LogSink* previous_;
};

/// The sink a scope set on this thread, or null: what a thread started
/// for the current work captures and installs in turn.
const LogSink* ScopedLogSinkOfThisThread();

/// LogMessage through `sink` when it is set (one captured by
/// ScopedLogSinkOfThisThread on another thread), else as LogMessage.
void LogVia(const LogSink* sink, LogLevel level, std::string_view component, std::string_view message);

inline void LogInfo(std::string_view message) { LogMessage(LogLevel::kInfo, "", message); }
inline void LogWarning(std::string_view message) { LogMessage(LogLevel::kWarning, "", message); }

}  // namespace ckpt

#endif  // CKPT_UTIL_LOG_H_
