#include "pipeline/auto_codec.h"

#include <algorithm>
#include <cmath>

namespace ckpt {

void SinkMeter::Submitted(uint64_t bytes, double now) {
  std::lock_guard<std::mutex> lock(mu_);
  if (backlog_.load(std::memory_order_relaxed) == 0) busy_since_ = now;
  backlog_.fetch_add(static_cast<int64_t>(bytes), std::memory_order_relaxed);
}

void SinkMeter::Completed(uint64_t bytes, double now) {
  std::lock_guard<std::mutex> lock(mu_);
  backlog_.fetch_sub(static_cast<int64_t>(bytes), std::memory_order_relaxed);
  // Completions come in bursts when their thread was kept off the CPU, the
  // whole wait in the first one's interval: bytes and busy time are summed
  // (older ones fading over kHorizonSeconds of busy time), so a burst is
  // measured together with the wait before it.
  const double dt = std::max(0.0, now - busy_since_);
  busy_since_ = now;
  const double fade = std::exp(-dt / kHorizonSeconds);
  bytes_sum_ = bytes_sum_ * fade + static_cast<double>(bytes);
  busy_sum_ = busy_sum_ * fade + dt;
  busy_total_ += dt;
  ++completions_;
  if (busy_total_ >= kMinSeconds || completions_ >= kMinCompletions) {
    // A storage that writes inline takes no measurable time: a microsecond.
    rate_.store(bytes_sum_ / std::max(busy_sum_, 1e-6), std::memory_order_relaxed);
  }
}

Codec AutoChooser::Choose(DType dtype, uint64_t raw_len, const SinkMeter& sink) {
  PerDType& c = Class(dtype);
  if (c.ratio_milli.load(std::memory_order_relaxed) >= kIncompressibleMilli &&
      c.skipped.fetch_add(1, std::memory_order_relaxed) % 64 != 63) {
    return Codec::kNone;
  }
  const double backlog = static_cast<double>(sink.backlog());
  const double drain = sink.drain_rate();
  const double compress = c.rate.load(std::memory_order_relaxed);
  const bool worth = drain > 0 && compress > 0
                         ? backlog / drain >= kAutoMargin * static_cast<double>(raw_len) / compress
                         : backlog >= static_cast<double>(fallback_backlog_);
  // zstd for one-byte types: BlockCodec decides.
  return worth ? Codec::kShuffleZstd : Codec::kNone;
}

void AutoChooser::Record(DType dtype, uint64_t raw_len, uint64_t stored_len, double seconds) {
  if (raw_len == 0) return;
  PerDType& c = Class(dtype);
  const uint32_t r =
      static_cast<uint32_t>(std::max<uint64_t>(1, std::min<uint64_t>(1000, stored_len * 1000 / raw_len)));
  const uint32_t old = c.ratio_milli.load(std::memory_order_relaxed);
  c.ratio_milli.store(old == 0 ? r : (3 * old + r) / 4, std::memory_order_relaxed);
  const double rate = static_cast<double>(raw_len) / std::max(seconds, 1e-7);
  const double old_rate = c.rate.load(std::memory_order_relaxed);
  c.rate.store(old_rate == 0 ? rate : (3 * old_rate + rate) / 4, std::memory_order_relaxed);
}

}  // namespace ckpt
