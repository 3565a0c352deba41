// Codec::kAuto's measurements and choice alone, on a clock of its own.
#include "pipeline/auto_codec.h"

#include <gtest/gtest.h>

namespace ckpt {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

TEST(SinkMeter, MeasuresTheRateWhileItHasABacklog) {
  SinkMeter m;
  // Not known after one write of a millisecond.
  m.Submitted(kMiB, 1.0);
  m.Completed(kMiB, 1.001);
  EXPECT_EQ(m.drain_rate(), 0);
  SinkMeter s;
  // Two writes in flight together for a second: 8 MiB/s, not 4.
  s.Submitted(4 * kMiB, 10.0);
  s.Submitted(4 * kMiB, 10.0);
  EXPECT_EQ(s.backlog(), static_cast<int64_t>(8 * kMiB));
  s.Completed(4 * kMiB, 10.5);
  s.Completed(4 * kMiB, 11.0);
  EXPECT_EQ(s.backlog(), 0);
  EXPECT_DOUBLE_EQ(s.drain_rate(), 8.0 * kMiB);
  // Idle time does not count: nothing to write from 11 to 100.
  s.Submitted(8 * kMiB, 100.0);
  s.Completed(8 * kMiB, 101.0);
  EXPECT_DOUBLE_EQ(s.drain_rate(), 8.0 * kMiB);
  // Completions reaped in a burst after a wait: the wait is the first
  // one's, and the burst is measured with it, not as bytes in no time.
  for (int i = 0; i < 8; ++i) s.Submitted(kMiB, 200.0);
  for (int i = 0; i < 8; ++i) s.Completed(kMiB, 201.0);
  EXPECT_NEAR(s.drain_rate(), 8.0 * kMiB, 1.0);
  // A slower storage: the rate follows within a few horizons.
  s.Submitted(8 * kMiB, 300.0);
  s.Completed(8 * kMiB, 304.0);
  EXPECT_NEAR(s.drain_rate(), 2.0 * kMiB, 0.01 * kMiB);
}

TEST(SinkMeter, AStorageThatWritesInlineIsFast) {
  SinkMeter m;
  for (uint64_t i = 0; i < SinkMeter::kMinCompletions; ++i) {
    m.Submitted(kMiB, 5.0);
    m.Completed(kMiB, 5.0);
  }
  EXPECT_GT(m.drain_rate(), 1e12);
}

// A meter with `rate` bytes/s measured and `backlog` bytes queued.
void Fill(SinkMeter& m, double rate, uint64_t backlog) {
  m.Submitted(static_cast<uint64_t>(rate), 0);
  m.Completed(static_cast<uint64_t>(rate), 1.0);
  if (backlog > 0) m.Submitted(backlog, 1000);
}

TEST(AutoChooser, WithoutRatesTheBacklogDecides) {
  AutoChooser a(4 * kMiB);
  SinkMeter m;
  m.Submitted(4 * kMiB - 1, 0);
  EXPECT_EQ(a.Choose(DType::kBF16, kMiB, m), Codec::kNone);
  m.Submitted(1, 0);
  EXPECT_EQ(a.Choose(DType::kBF16, kMiB, m), Codec::kShuffleZstd);
  // A drain rate alone is not enough: the dtype's compression is not
  // measured yet.
  SinkMeter fast;
  Fill(fast, 1e9, 4 * kMiB);
  EXPECT_EQ(a.Choose(DType::kBF16, kMiB, fast), Codec::kShuffleZstd);
}

TEST(AutoChooser, CompressesWhatTheBacklogCovers) {
  AutoChooser a(4 * kMiB);
  // bf16 compresses at 100 MB/s a worker: a 1 MiB block takes ~10.5 ms, so
  // the backlog must last 21 ms.
  a.Record(DType::kBF16, kMiB, kMiB / 2, static_cast<double>(kMiB) / 100e6);
  EXPECT_NEAR(a.compress_rate(DType::kBF16), 100e6, 1);
  EXPECT_EQ(a.ratio_milli(DType::kBF16), 500u);
  {
    SinkMeter disk;  // 250 MB/s: 21 ms is 5 MiB
    Fill(disk, 250e6, 4 * kMiB);
    EXPECT_EQ(a.Choose(DType::kBF16, kMiB, disk), Codec::kNone);
    disk.Submitted(3 * kMiB / 2, 1000);
    EXPECT_EQ(a.Choose(DType::kBF16, kMiB, disk), Codec::kShuffleZstd);
  }
  {
    // A storage faster than the compressor: a backlog of 64 MiB that a
    // fixed threshold would call busy drains in 6.7 ms.
    SinkMeter nvme;
    Fill(nvme, 10e9, 64 * kMiB);
    EXPECT_EQ(a.Choose(DType::kBF16, kMiB, nvme), Codec::kNone);
    // A short block takes less: 64 KiB in 0.66 ms.
    EXPECT_EQ(a.Choose(DType::kBF16, 64 << 10, nvme), Codec::kShuffleZstd);
  }
  {
    SinkMeter slow;  // 10 MB/s: any backlog above 210 KB covers a block
    Fill(slow, 10e6, 256 << 10);
    EXPECT_EQ(a.Choose(DType::kBF16, kMiB, slow), Codec::kShuffleZstd);
  }
  // Other dtypes keep their own rates: f32 not measured, the fallback.
  SinkMeter nvme;
  Fill(nvme, 10e9, 64 * kMiB);
  EXPECT_EQ(a.Choose(DType::kF32, kMiB, nvme), Codec::kShuffleZstd);
}

TEST(AutoChooser, GivesUpOnBytesThatDoNotCompressButTriesAgain) {
  AutoChooser a(kMiB);
  a.Record(DType::kU8, kMiB, kMiB, 0.001);
  EXPECT_EQ(a.ratio_milli(DType::kU8), 1000u);
  SinkMeter slow;
  Fill(slow, 1e6, 64 * kMiB);
  int compressed = 0;
  for (int i = 0; i < 128; ++i) compressed += a.Choose(DType::kU8, kMiB, slow) != Codec::kNone;
  EXPECT_EQ(compressed, 2);
  // Compressible again: one retried block that compressed brings the
  // average below the limit after a few.
  for (int i = 0; i < 4; ++i) a.Record(DType::kU8, kMiB, kMiB / 4, 0.001);
  EXPECT_LT(a.ratio_milli(DType::kU8), AutoChooser::kIncompressibleMilli);
  EXPECT_EQ(a.Choose(DType::kU8, kMiB, slow), Codec::kShuffleZstd);
}

}  // namespace
}  // namespace ckpt
