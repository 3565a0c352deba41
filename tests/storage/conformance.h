// The storage conformance suite: what every backend must do. Included by
// storage_test.cc (the built-ins, decorators and a plugin) and s3_test.cc
// (s3:// on the suite's S3 server), each instantiating it for its backends.
#ifndef CKPT_TESTS_STORAGE_CONFORMANCE_H_
#define CKPT_TESTS_STORAGE_CONFORMANCE_H_

#include <atomic>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ckpt/storage.h"
#include "testutil/test_util.h"
#include "util/aligned_buffer.h"

namespace ckpt::testing {

struct BackendCase {
  std::string name;
  std::string scheme;  // "file", "posix", "mem", "tiered", "faulty", "localfs", or "" with make_uri
  std::string query;
  /// Builds the root URI for a test (given a fresh number) where the scheme
  /// alone cannot (s3:// roots on the suite's server).
  std::function<std::string(int)> make_uri;
};

inline void PrintTo(const BackendCase& c, std::ostream* os) { *os << c.name; }

class StorageConformance : public ::testing::TestWithParam<BackendCase> {
 protected:
  void SetUp() override {
#ifdef CKPT_TEST_PLUGIN_DIR
    setenv("CKPT_PLUGIN_PATH", CKPT_TEST_PLUGIN_DIR, 1);
#endif
    std::string uri;
    if (GetParam().make_uri) {
      uri = GetParam().make_uri(++counter_);
    } else if (GetParam().scheme == "mem") {
      uri = "mem://conformance-" + std::to_string(++counter_) + GetParam().name + GetParam().query;
    } else if (GetParam().scheme == "tiered") {
      uri = "tiered://?local=" + dir_.path() + "/local&durable=" + dir_.path() + "/durable" + GetParam().query;
    } else if (GetParam().scheme == "faulty-mem") {
      uri = "faulty://mem://conformance-" + std::to_string(++counter_) + GetParam().name + GetParam().query;
    } else {
      uri = GetParam().scheme + "://" + dir_.path() + "/root" + GetParam().query;
    }
    auto s = OpenStorage(uri);
    ASSERT_OK(s);
    storage_ = *s;
  }

  void WriteWhole(const std::string& path, const std::string& data) {
    auto w = storage_->OpenWritable(path, WriteOptions{false});
    ASSERT_OK(w);
    const size_t align = (*w)->alignment();
    ASSERT_EQ(align, 1u);
    absl::Status st;
    (*w)->WriteAsync(0, AsSpan(data), [&](absl::Status s) { st = s; });
    ASSERT_OK((*w)->Finish(data.size()));
    ASSERT_OK(st);
  }

  static absl::Span<const std::byte> AsSpan(const std::string& s) {
    return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
  }

  TempDir dir_;
  std::shared_ptr<Storage> storage_;
  static inline int counter_ = 0;
};

TEST_P(StorageConformance, WriteThenRangedRead) {
  std::string data(100000, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7);
  WriteWhole("a/b/c.bin", data);
  auto size = storage_->FileSize("a/b/c.bin");
  ASSERT_OK(size);
  EXPECT_EQ(*size, data.size());
  auto r = storage_->OpenReadable("a/b/c.bin");
  ASSERT_OK(r);
  EXPECT_EQ((*r)->size(), data.size());
  std::string part(1000, '\0');
  ASSERT_OK((*r)->ReadAt(5000, absl::Span<std::byte>(reinterpret_cast<std::byte*>(part.data()), 1000)));
  EXPECT_EQ(part, data.substr(5000, 1000));
  // Async read.
  std::string part2(777, '\0');
  absl::Status st = absl::UnknownError("not run");
  std::atomic<bool> done{false};
  (*r)->ReadAsync(99000, absl::Span<std::byte>(reinterpret_cast<std::byte*>(part2.data()), 777), [&](absl::Status s) {
    st = s;
    done = true;
  });
  while (!done) std::this_thread::yield();
  ASSERT_OK(st);
  EXPECT_EQ(part2, data.substr(99000, 777));
  // Past the end: truncated, with the offset.
  std::string tail(10, '\0');
  absl::Status past = (*r)->ReadAt(99995, absl::Span<std::byte>(reinterpret_cast<std::byte*>(tail.data()), 10));
  EXPECT_TRUE(absl::IsOutOfRange(past)) << past;
  EXPECT_NE(past.message().find("truncated"), absl::string_view::npos) << past;
  auto all = storage_->GetAll("a/b/c.bin");
  ASSERT_OK(all);
  EXPECT_EQ(*all, data);
}

TEST_P(StorageConformance, AlignedDirectWritesAndFinishTruncates) {
  auto w = storage_->OpenWritable("direct.bin", WriteOptions{true});
  ASSERT_OK(w);
  (*w)->Reserve(1 << 20);  // more than is written: Finish sets the length
  auto buf = AlignedBuffer::Allocate(3 * 4096, false);
  ASSERT_OK(buf);
  for (size_t i = 0; i < buf->size(); ++i) buf->data()[i] = static_cast<std::byte>(i % 251);
  std::atomic<int> completions{0};
  absl::Status first;
  std::mutex mu;
  for (int blk = 2; blk >= 0; --blk) {  // out of order on purpose
    (*w)->WriteAsync(blk * 4096, absl::Span<const std::byte>(buf->data() + blk * 4096, 4096), [&](absl::Status s) {
      std::lock_guard<std::mutex> l(mu);
      if (first.ok()) first = s;
      ++completions;
    });
  }
  ASSERT_OK((*w)->Finish(3 * 4096 - 100));
  EXPECT_EQ(completions.load(), 3);
  ASSERT_OK(first);
  auto all = storage_->GetAll("direct.bin");
  ASSERT_OK(all);
  ASSERT_EQ(all->size(), 3u * 4096 - 100);
  EXPECT_EQ(std::memcmp(all->data(), buf->data(), all->size()), 0);
}

TEST_P(StorageConformance, UnalignedWritesFollowTheAlignmentRule) {
  auto w = storage_->OpenWritable("u.bin", WriteOptions{true});
  ASSERT_OK(w);
  std::string data(100, 'x');
  absl::Status st = absl::UnknownError("callback not run");
  (*w)->WriteAsync(0, AsSpan(data), [&](absl::Status s) { st = s; });
  absl::Status drained = (*w)->Drain();
  if ((*w)->alignment() == 1) {
    EXPECT_OK(st);
    EXPECT_OK((*w)->Finish(100));
    auto all = storage_->GetAll("u.bin");
    ASSERT_OK(all);
    EXPECT_EQ(*all, data);
  } else {
    // Refused with a clear error, never silently written wrong.
    EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
    EXPECT_NE(st.message().find("unaligned"), absl::string_view::npos) << st;
  }
}

TEST_P(StorageConformance, PutAtomicReplacesWhole) {
  ASSERT_OK(storage_->PutAtomic("x/LATEST", AsSpan("one")));
  ASSERT_OK(storage_->PutAtomic("x/LATEST", AsSpan("second value")));
  auto v = storage_->GetAll("x/LATEST");
  ASSERT_OK(v);
  EXPECT_EQ(*v, "second value");
  auto entries = storage_->List("x");
  ASSERT_OK(entries);
  ASSERT_EQ(entries->size(), 1u) << "no temporary file left behind";
  EXPECT_EQ((*entries)[0].name, "LATEST");
}

// The claim a save makes on its step: created once; of racing creators
// exactly one wins and the file holds the winner's bytes.
TEST_P(StorageConformance, PutIfAbsentCreatesOnceAcrossRacingCallers) {
  ASSERT_OK(storage_->PutIfAbsent("c/CLAIM", AsSpan("first")));
  absl::Status again = storage_->PutIfAbsent("c/CLAIM", AsSpan("second"));
  EXPECT_TRUE(absl::IsAlreadyExists(again)) << again;
  auto v = storage_->GetAll("c/CLAIM");
  ASSERT_OK(v);
  EXPECT_EQ(*v, "first");
  constexpr int kRacers = 8;
  for (int round = 0; round < 5; ++round) {
    const std::string name = "race/CLAIM" + std::to_string(round);
    std::vector<std::thread> threads;
    std::vector<absl::Status> results(kRacers);
    std::vector<std::string> payloads(kRacers);
    for (int i = 0; i < kRacers; ++i) {
      payloads[i] = "writer " + std::to_string(i) + std::string(1000, 'x');
      threads.emplace_back([&, i] { results[i] = storage_->PutIfAbsent(name, AsSpan(payloads[i])); });
    }
    for (auto& t : threads) t.join();
    int winners = 0, winner = -1;
    for (int i = 0; i < kRacers; ++i) {
      if (results[i].ok()) {
        ++winners;
        winner = i;
      } else {
        EXPECT_TRUE(absl::IsAlreadyExists(results[i])) << results[i];
      }
    }
    ASSERT_EQ(winners, 1) << name;
    auto got = storage_->GetAll(name);
    ASSERT_OK(got);
    EXPECT_EQ(*got, payloads[winner]);
  }
  auto entries = storage_->List("race");
  ASSERT_OK(entries);
  EXPECT_EQ(entries->size(), 5u) << "no temporary file left behind";
}

TEST_P(StorageConformance, ListRemoveAndMissing) {
  WriteWhole("d/b", "2");
  WriteWhole("d/a", "1");
  WriteWhole("d/sub/c", "3");
  auto entries = storage_->List("d");
  ASSERT_OK(entries);
  ASSERT_EQ(entries->size(), 3u);
  EXPECT_EQ((*entries)[0].name, "a");
  EXPECT_EQ((*entries)[1].name, "b");
  EXPECT_EQ((*entries)[2].name, "sub");
  EXPECT_TRUE((*entries)[2].is_dir);
  EXPECT_FALSE((*entries)[0].is_dir);
  ASSERT_OK(storage_->Remove("d/a"));
  EXPECT_TRUE(absl::IsNotFound(storage_->Remove("d/a")));
  EXPECT_TRUE(absl::IsNotFound(storage_->OpenReadable("d/a").status()));
  EXPECT_TRUE(absl::IsNotFound(storage_->FileSize("nope").status()));
  EXPECT_TRUE(absl::IsNotFound(storage_->List("nodir").status()));
  ASSERT_OK(storage_->RemoveAll("d"));
  EXPECT_TRUE(absl::IsNotFound(storage_->List("d").status()));
  EXPECT_OK(storage_->RemoveAll("d"));  // absent is fine
  EXPECT_FALSE(storage_->RemoveAll("").ok());
  EXPECT_OK(storage_->SyncDir(""));
}

TEST_P(StorageConformance, ConcurrentWritersToOneFile) {
  auto w = storage_->OpenWritable("par.bin", WriteOptions{false});
  ASSERT_OK(w);
  constexpr int kThreads = 4, kPerThread = 64, kBlock = 4096;
  std::vector<std::string> blocks(kThreads * kPerThread);
  for (size_t i = 0; i < blocks.size(); ++i) blocks[i].assign(kBlock, static_cast<char>('a' + i % 26));
  std::atomic<int> done{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        const int b = t * kPerThread + i;
        (*w)->WriteAsync(static_cast<uint64_t>(b) * kBlock, AsSpan(blocks[b]), [&](absl::Status s) {
          EXPECT_TRUE(s.ok()) << s;
          ++done;
        });
      }
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_OK((*w)->Finish(blocks.size() * kBlock));
  EXPECT_EQ(done.load(), kThreads * kPerThread);
  auto all = storage_->GetAll("par.bin");
  ASSERT_OK(all);
  for (size_t b = 0; b < blocks.size(); ++b) {
    ASSERT_EQ(all->substr(b * kBlock, kBlock), blocks[b]) << "block " << b;
  }
}

TEST_P(StorageConformance, RejectsEscapingPaths) {
  EXPECT_FALSE(storage_->OpenWritable("../x").ok());
  EXPECT_FALSE(storage_->OpenWritable("/etc/x").ok());
}

}  // namespace ckpt::testing

#endif  // CKPT_TESTS_STORAGE_CONFORMANCE_H_
