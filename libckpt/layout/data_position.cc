#include "ckpt/data_position.h"

#include <algorithm>
#include <cstdio>

#include "util/strings.h"

namespace ckpt {

namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// A bijection of [0, 2^(2*half_bits)): a 4-round Feistel network keyed by
// `key`; cycle-walking (applied again while the value is >= size) makes it
// one of [0, size).
uint64_t Feistel(uint64_t x, int half_bits, uint64_t key) {
  const uint64_t mask = (uint64_t{1} << half_bits) - 1;
  uint64_t left = x >> half_bits, right = x & mask;
  for (uint64_t round = 0; round < 4; ++round) {
    const uint64_t f = SplitMix64(key ^ SplitMix64(right + (round << 56))) & mask;
    const uint64_t next = left ^ f;
    left = right;
    right = next;
  }
  return (left << half_bits) | right;
}

}  // namespace

DataPosition::DataPosition(int64_t size, int64_t batch_size, uint64_t seed, bool shuffle)
    : size_(std::max<int64_t>(size, 1)),
      batch_size_(std::max<int64_t>(batch_size, 1)),
      seed_(seed),
      shuffle_(shuffle) {}

int64_t DataPosition::IndexAt(int64_t epoch, int64_t position) const {
  if (!shuffle_ || size_ == 1) return position;
  int bits = 2;
  while ((uint64_t{1} << bits) < static_cast<uint64_t>(size_)) bits += 2;  // an even count: two halves
  const uint64_t key = SplitMix64(seed_ ^ SplitMix64(static_cast<uint64_t>(epoch) + 0x5851f42d4c957f2dULL));
  uint64_t x = static_cast<uint64_t>(position);
  do {
    x = Feistel(x, bits / 2, key);
  } while (x >= static_cast<uint64_t>(size_));  // at most a few walks: the domain is < 4 x size
  return static_cast<int64_t>(x);
}

std::vector<int64_t> DataPosition::Slice(int64_t position, int64_t count) const {
  std::vector<int64_t> out;
  const int64_t end = std::min(size_, position + std::max<int64_t>(count, 0));
  for (int64_t p = std::max<int64_t>(position, 0); p < end; ++p) out.push_back(IndexAt(epoch_, p));
  return out;
}

void DataPosition::PartOf(int64_t size, int64_t batch_size, int64_t consumed, int rank, int world, int64_t* begin,
                          int64_t* end) {
  const int64_t n = std::min(static_cast<int64_t>(world) * batch_size, size - consumed);
  const int64_t base = n / world, extra = n % world;
  *begin = consumed + rank * base + std::min<int64_t>(rank, extra);
  *end = *begin + base + (rank < extra ? 1 : 0);
}

std::vector<int64_t> DataPosition::Batch(int rank, int world) const {
  if (world < 1 || rank < 0 || rank >= world) return {};
  int64_t begin = 0, end = 0;
  PartOf(size_, batch_size_, consumed_, rank, world, &begin, &end);
  return Slice(begin, end - begin);
}

void DataPosition::Advance(int world) {
  consumed_ += std::min(static_cast<int64_t>(std::max(world, 1)) * batch_size_, size_ - consumed_);
  if (consumed_ >= size_) {
    ++epoch_;
    consumed_ = 0;
  }
}

std::string DataPosition::Encode() const {
  return StrCat("ckpt-data-position 1 size ", size_, " batch ", batch_size_, " seed ", seed_, " shuffle ",
                shuffle_ ? 1 : 0, " epoch ", epoch_, " consumed ", consumed_, "\n");
}

absl::Status DataPosition::Restore(std::string_view encoded) {
  long long size = 0, batch = 0, epoch = 0, consumed = 0;
  unsigned long long seed = 0;
  int shuffle = 0, version = 0, used = 0;
  const std::string text(encoded.substr(0, 512));
  if (std::sscanf(text.c_str(),
                  "ckpt-data-position %d size %lld batch %lld seed %llu shuffle %d epoch %lld consumed %lld%n",
                  &version, &size, &batch, &seed, &shuffle, &epoch, &consumed, &used) != 7 ||
      version != 1 || epoch < 0 || consumed < 0 || consumed >= size || size < 1) {
    return absl::DataLossError(StrCat("not a data position record: '", text.substr(0, 80), "'"));
  }
  if (size != size_ || seed != seed_ || (shuffle != 0) != shuffle_) {
    return absl::InvalidArgumentError(StrCat("the saved data position is of a dataset of ", size, " (seed ", seed,
                                             ", shuffle ", shuffle, "), this one of ", size_, " (seed ", seed_,
                                             ", shuffle ", shuffle_ ? 1 : 0, ")"));
  }
  epoch_ = epoch;
  consumed_ = consumed;
  return absl::OkStatus();
}

}  // namespace ckpt
