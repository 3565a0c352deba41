#include "util/log.h"

#include <unistd.h>

#include <memory>
#include <mutex>
#include <string>

namespace ckpt {

namespace {

thread_local const LogSink* scoped_sink = nullptr;

std::mutex& SinkMutex() {
  static std::mutex* mu = new std::mutex;
  return *mu;
}

// Replaced whole, read by copy: a sink may be swapped while another thread
// is in the middle of calling the old one.
std::shared_ptr<const LogSink>& ProcessSink() {
  static auto* sink = new std::shared_ptr<const LogSink>;
  return *sink;
}

void WriteStderr(LogLevel level, LogLevel min_level, std::string_view component, std::string_view message) {
  if (level < min_level) return;
  std::string line = "ckpt";
  if (!component.empty()) line.append(" ").append(component);
  line.append(": ").append(message).append("\n");
  const char* p = line.data();
  size_t left = line.size();
  while (left > 0) {
    const ssize_t n = ::write(2, p, left);
    if (n <= 0) return;
    p += n;
    left -= static_cast<size_t>(n);
  }
}

}  // namespace

const char* LogLevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarning:
      return "warning";
    case LogLevel::kError:
      return "error";
  }
  return "?";
}

void SetLogSink(LogSink sink) {
  auto next = sink ? std::make_shared<const LogSink>(std::move(sink)) : nullptr;
  std::lock_guard<std::mutex> lock(SinkMutex());
  ProcessSink() = std::move(next);
}

LogSink StderrLogSink(LogLevel min_level) {
  return [min_level](LogLevel level, std::string_view component, std::string_view message) {
    WriteStderr(level, min_level, component, message);
  };
}

void LogMessage(LogLevel level, std::string_view component, std::string_view message) {
  if (scoped_sink != nullptr) {
    (*scoped_sink)(level, component, message);
    return;
  }
  std::shared_ptr<const LogSink> sink;
  {
    std::lock_guard<std::mutex> lock(SinkMutex());
    sink = ProcessSink();
  }
  if (sink) {
    (*sink)(level, component, message);
  } else {
    WriteStderr(level, LogLevel::kInfo, component, message);
  }
}

ScopedLogSink::ScopedLogSink(const LogSink* sink) : previous_(scoped_sink) {
  if (sink != nullptr && *sink) scoped_sink = sink;
}

ScopedLogSink::~ScopedLogSink() { scoped_sink = previous_; }

const LogSink* ScopedLogSinkOfThisThread() { return scoped_sink; }

void LogVia(const LogSink* sink, LogLevel level, std::string_view component, std::string_view message) {
  if (sink != nullptr && *sink) {
    (*sink)(level, component, message);
  } else {
    LogMessage(level, component, message);
  }
}

}  // namespace ckpt
