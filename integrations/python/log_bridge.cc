// The library's messages in Python's `logging` (ckpt/log.h): the package
// installs a handler at import; messages then reach logging.getLogger("ckpt")
// (or "ckpt.<component>") on a Python thread. A message from a thread that
// holds the GIL is delivered at once; one from ckpt's own threads is queued
// and delivered by a thread of this module when the GIL is free, so that no
// thread of the library ever waits for Python (a trainer blocked in a call
// that keeps the GIL while it waits for a save would otherwise deadlock).
#include "log_bridge.h"

#include <pybind11/pybind11.h>

#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>
#include <thread>

#include "ckpt/log.h"

namespace py = pybind11;

namespace {

struct Record {
  int level;
  std::string component, message;
};

class LogBridge {
 public:
  // Takes the handler (called as handler(level, component, message)) and
  // becomes the process's sink. Call with the GIL held.
  void Start(py::object handler) {
    Stop();
    {
      std::lock_guard<std::mutex> lock(mu_);
      handler_ = std::move(handler);
      stop_ = false;
    }
    thread_ = std::thread([this] { Run(); });
    ckpt::SetLogSink([this](ckpt::LogLevel level, std::string_view component, std::string_view message) {
      Push(Record{static_cast<int>(level), std::string(component), std::string(message)});
    });
  }

  // Delivers what is queued and hands the messages back to stderr (at
  // interpreter exit). Call with the GIL held.
  void Stop() {
    ckpt::SetLogSink(nullptr);
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) {
      py::gil_scoped_release release;
      thread_.join();
    }
    Drain();
    std::lock_guard<std::mutex> lock(mu_);
    handler_ = py::object();
  }

  // Delivers what is queued now. Call with the GIL held.
  void Drain() {
    std::deque<Record> batch;
    py::object handler;
    {
      std::lock_guard<std::mutex> lock(mu_);
      batch.swap(queue_);
      handler = handler_;
    }
    if (handler) Deliver(handler, batch);
  }

 private:
  void Push(Record r) {
    if (PyGILState_Check()) {
      // A Python thread in a call into ckpt: in order, after what waits.
      Drain();
      py::object handler;
      {
        std::lock_guard<std::mutex> lock(mu_);
        handler = handler_;
      }
      if (handler) Deliver(handler, std::deque<Record>{std::move(r)});
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(r));
    }
    cv_.notify_all();
  }

  void Run() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (stop_) return;  // Stop drains on its own thread
      lock.unlock();
      {
        py::gil_scoped_acquire gil;
        Drain();
      }
      lock.lock();
    }
  }

  static void Deliver(const py::object& handler, const std::deque<Record>& batch) {
    for (const Record& r : batch) {
      try {
        handler(r.level, r.component, py::bytes(r.message).attr("decode")("utf-8", "replace"));
      } catch (py::error_already_set& e) {
        e.discard_as_unraisable("ckpt's log handler");
      }
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Record> queue_;
  py::object handler_;  // REQUIRES: mu_ to read or swap; released with the GIL held
  bool stop_ = true;
  std::thread thread_;
};

LogBridge& Bridge() {
  static auto* bridge = new LogBridge;  // outlives the interpreter's teardown
  return *bridge;
}

}  // namespace

void BindLogBridge(py::module_& m) {
  m.def(
      "_set_log_handler", [](py::object handler) { Bridge().Start(std::move(handler)); }, py::arg("handler"),
      "Routes the library's messages to handler(level, component, message): 0 debug, 1 info, 2 warning, 3 error.");
  m.def(
      "_stop_logging", [] { Bridge().Stop(); },
      "Delivers the messages still queued and sends later ones to stderr (at exit).");
  m.def(
      "_flush_log", [] { Bridge().Drain(); }, "Delivers the messages ckpt's threads queued so far.");
}
