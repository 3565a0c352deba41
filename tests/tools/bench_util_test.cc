// The benchmarks' memcpy ceiling: passes copy their sources, laid end to end,
// into the destination they were given, and nothing past it.
#include "bench_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <span>
#include <vector>

namespace ckpt::bench {
namespace {

std::vector<std::byte> Pattern(size_t n, int seed) {
  std::vector<std::byte> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<std::byte>((i * 31 + seed) & 0xff);
  return v;
}

TEST(MemcpyPasses, IntoCopiesTheSourcesEndToEndIntoTheGivenMemoryOnly) {
  // Uneven sizes, so that the threads' equal parts cross a source's end.
  const std::vector<std::byte> a = Pattern(100003, 1), b = Pattern(7, 2), c = Pattern(65536, 3);
  const size_t total = a.size() + b.size() + c.size();
  std::vector<std::byte> dst(total + 4096, std::byte{0xee});
  auto m = MemcpyPasses::Into({std::span(a), std::span(b), std::span(c)}, std::span(dst.data(), total + 1));
  ASSERT_TRUE(m.ok()) << m.status();
  for (int threads : {1, 3}) {
    std::fill(dst.begin(), dst.begin() + static_cast<std::ptrdiff_t>(total), std::byte{0});
    EXPECT_GT((*m)->Pass(threads), 0);
    std::vector<std::byte> want(a);
    want.insert(want.end(), b.begin(), b.end());
    want.insert(want.end(), c.begin(), c.end());
    EXPECT_TRUE(std::equal(want.begin(), want.end(), dst.begin())) << threads << " threads";
    for (size_t i = total; i < dst.size(); ++i) ASSERT_EQ(dst[i], std::byte{0xee}) << "byte " << i << " written";
  }
  EXPECT_LT((*m)->Pass(0), 0) << "no threads: no pass";
}

TEST(MemcpyPasses, IntoRefusesADestinationShorterThanTheSources) {
  const std::vector<std::byte> a = Pattern(4096, 1);
  std::vector<std::byte> dst(4095);
  auto m = MemcpyPasses::Into({std::span(a)}, std::span(dst));
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("4096 bytes into 4095"), std::string::npos) << m.status();
}

TEST(MemcpyPasses, OverCopiesIntoADestinationOfItsOwn) {
  const std::vector<std::byte> a = Pattern(3 << 20, 5), b = Pattern(5, 6);
  auto m = MemcpyPasses::Over({std::span(a), std::span(b)});
  ASSERT_TRUE(m.ok()) << m.status();
  const std::span<const std::byte> dst = (*m)->destination();
  ASSERT_EQ(dst.size(), a.size() + b.size());
  EXPECT_TRUE(dst.data() < a.data() || dst.data() >= a.data() + a.size()) << "not the source itself";
  EXPECT_GT((*m)->Pass(2), 0);
  EXPECT_TRUE(std::equal(a.begin(), a.end(), dst.begin()));
  EXPECT_TRUE(std::equal(b.begin(), b.end(), dst.begin() + static_cast<std::ptrdiff_t>(a.size())));
}

}  // namespace
}  // namespace ckpt::bench
