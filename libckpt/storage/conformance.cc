// The storage conformance suite (include/ckpt/conformance.h): each case
// drives a backend through the public Storage interface only and returns
// the first thing it did wrong.
#include "ckpt/conformance.h"

#include <atomic>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "util/aligned_buffer.h"
#include "util/errors.h"
#include "util/strings.h"

namespace ckpt {
namespace {

absl::Span<const std::byte> Bytes(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}
absl::Span<std::byte> Bytes(std::string& s) { return {reinterpret_cast<std::byte*>(s.data()), s.size()}; }

template <typename... Args>
absl::Status Wrong(const Args&... args) {
  return absl::InternalError(StrCat(args...));
}

// OK, or kInternal "`what` failed: <status>".
absl::Status Did(const absl::Status& s, std::string_view what) {
  return s.ok() ? absl::OkStatus() : Wrong(what, " failed: ", s.ToString());
}
template <typename T>
absl::Status Did(const absl::StatusOr<T>& r, std::string_view what) {
  return Did(r.status(), what);
}

#define CONFORM(cond, ...)                  \
  do {                                      \
    if (!(cond)) return Wrong(__VA_ARGS__); \
  } while (0)

absl::Status WriteWhole(Storage& s, const std::string& path, const std::string& data) {
  auto w = s.OpenWritable(path, WriteOptions{false});
  CKPT_RETURN_IF_ERROR(Did(w, StrCat("OpenWritable(", path, ", buffered)")));
  CONFORM((*w)->alignment() == 1, "a buffered file of ", path, " asks for alignment ", (*w)->alignment(), ", not 1");
  absl::Status written = absl::UnknownError("the write's callback did not run");
  (*w)->WriteAsync(0, Bytes(data), [&](absl::Status st) { written = st; });
  CKPT_RETURN_IF_ERROR(Did((*w)->Finish(data.size()), StrCat("Finish of ", path)));
  return Did(written, StrCat("WriteAsync to ", path));
}

absl::Status WriteThenRangedRead(Storage& s) {
  std::string data(100000, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7);
  CKPT_RETURN_IF_ERROR(WriteWhole(s, "a/b/c.bin", data));
  auto size = s.FileSize("a/b/c.bin");
  CKPT_RETURN_IF_ERROR(Did(size, "FileSize(a/b/c.bin)"));
  CONFORM(*size == data.size(), "FileSize says ", *size, " bytes; ", data.size(), " were written");
  auto r = s.OpenReadable("a/b/c.bin");
  CKPT_RETURN_IF_ERROR(Did(r, "OpenReadable(a/b/c.bin)"));
  CONFORM((*r)->size() == data.size(), "the readable file's size() is ", (*r)->size(), ", not ", data.size());
  std::string part(1000, '\0');
  CKPT_RETURN_IF_ERROR(Did((*r)->ReadAt(5000, Bytes(part)), "ReadAt(5000, 1000 bytes)"));
  CONFORM(part == data.substr(5000, 1000), "ReadAt(5000, 1000 bytes) returned other bytes than were written");
  std::string part2(777, '\0');
  absl::Status read = absl::UnknownError("not run");
  std::atomic<bool> done{false};
  (*r)->ReadAsync(99000, Bytes(part2), [&](absl::Status st) {
    read = st;
    done = true;
  });
  while (!done) std::this_thread::yield();
  CKPT_RETURN_IF_ERROR(Did(read, "ReadAsync(99000, 777 bytes)"));
  CONFORM(part2 == data.substr(99000, 777), "ReadAsync(99000, 777 bytes) returned other bytes than were written");
  std::string tail(10, '\0');
  const absl::Status past = (*r)->ReadAt(99995, Bytes(tail));
  CONFORM(absl::IsOutOfRange(past) && past.message().find("truncated") != std::string_view::npos,
          "a read past the end must fail with kOutOfRange saying \"truncated\"; it returned ", past.ToString());
  auto all = s.GetAll("a/b/c.bin");
  CKPT_RETURN_IF_ERROR(Did(all, "GetAll(a/b/c.bin)"));
  CONFORM(*all == data, "GetAll returned ", all->size(), " bytes other than the ", data.size(), " written");
  return absl::OkStatus();
}

absl::Status AlignedDirectWritesAndFinishTruncates(Storage& s) {
  auto w = s.OpenWritable("direct.bin", WriteOptions{true});
  CKPT_RETURN_IF_ERROR(Did(w, "OpenWritable(direct.bin, direct)"));
  (*w)->Reserve(1 << 20);  // more than is written: Finish sets the length
  auto buf = AlignedBuffer::Allocate(3 * 4096, false);
  CKPT_RETURN_IF_ERROR(buf.status());
  for (size_t i = 0; i < buf->size(); ++i) buf->data()[i] = static_cast<std::byte>(i % 251);
  std::atomic<int> completions{0};
  absl::Status first;
  std::mutex mu;
  for (int blk = 2; blk >= 0; --blk) {  // out of order on purpose
    (*w)->WriteAsync(blk * 4096, absl::Span<const std::byte>(buf->data() + blk * 4096, 4096), [&](absl::Status st) {
      std::lock_guard<std::mutex> l(mu);
      if (first.ok()) first = st;
      ++completions;
    });
  }
  CKPT_RETURN_IF_ERROR(Did((*w)->Finish(3 * 4096 - 100), "Finish(12188) after three 4 KiB writes"));
  CONFORM(completions.load() == 3, completions.load(), " of 3 write callbacks ran before Finish returned");
  CKPT_RETURN_IF_ERROR(Did(first, "an aligned WriteAsync"));
  auto all = s.GetAll("direct.bin");
  CKPT_RETURN_IF_ERROR(Did(all, "GetAll(direct.bin)"));
  CONFORM(all->size() == 3u * 4096 - 100, "Finish(12188) left ", all->size(), " bytes (Reserve was 1 MiB)");
  CONFORM(std::memcmp(all->data(), buf->data(), all->size()) == 0, "writes out of order left other bytes");
  return absl::OkStatus();
}

absl::Status UnalignedWritesFollowTheAlignmentRule(Storage& s) {
  auto w = s.OpenWritable("u.bin", WriteOptions{true});
  CKPT_RETURN_IF_ERROR(Did(w, "OpenWritable(u.bin, direct)"));
  const std::string data(100, 'x');
  absl::Status st = absl::UnknownError("callback not run");
  (*w)->WriteAsync(0, Bytes(data), [&](absl::Status done) { st = done; });
  (void)(*w)->Drain();
  if ((*w)->alignment() == 1) {
    CKPT_RETURN_IF_ERROR(Did(st, "a 100-byte write to a file of alignment 1"));
    CKPT_RETURN_IF_ERROR(Did((*w)->Finish(100), "Finish(100)"));
    auto all = s.GetAll("u.bin");
    CKPT_RETURN_IF_ERROR(Did(all, "GetAll(u.bin)"));
    CONFORM(*all == data, "a 100-byte write read back as other bytes");
  } else {
    // Refused with a clear error, never silently written wrong.
    CONFORM(absl::IsInvalidArgument(st) && st.message().find("unaligned") != std::string_view::npos,
            "an unaligned write to a file of alignment ", (*w)->alignment(),
            " must fail with kInvalidArgument saying \"unaligned\"; it returned ", st.ToString());
  }
  return absl::OkStatus();
}

absl::Status PutAtomicReplacesWhole(Storage& s) {
  CKPT_RETURN_IF_ERROR(Did(s.PutAtomic("x/current", Bytes(std::string("one"))), "PutAtomic(x/current)"));
  CKPT_RETURN_IF_ERROR(
      Did(s.PutAtomic("x/current", Bytes(std::string("second value"))), "PutAtomic(x/current) over an existing file"));
  auto v = s.GetAll("x/current");
  CKPT_RETURN_IF_ERROR(Did(v, "GetAll(x/current)"));
  CONFORM(*v == "second value", "after two PutAtomic the file holds '", *v, "'");
  auto entries = s.List("x");
  CKPT_RETURN_IF_ERROR(Did(entries, "List(x)"));
  CONFORM(entries->size() == 1 && (*entries)[0].name == "current", "PutAtomic left ", entries->size(),
          " entries in x (a temporary file behind?)");
  return absl::OkStatus();
}

// The claim a save makes on its step: created once; of racing creators
// exactly one wins and the file holds the winner's bytes.
absl::Status PutIfAbsentCreatesOnceAcrossRacingCallers(Storage& s) {
  CKPT_RETURN_IF_ERROR(Did(s.PutIfAbsent("c/once", Bytes(std::string("first"))), "PutIfAbsent(c/once)"));
  const absl::Status again = s.PutIfAbsent("c/once", Bytes(std::string("second")));
  CONFORM(absl::IsAlreadyExists(again), "PutIfAbsent on an existing file must fail with kAlreadyExists; it returned ",
          again.ToString());
  auto v = s.GetAll("c/once");
  CKPT_RETURN_IF_ERROR(Did(v, "GetAll(c/once)"));
  CONFORM(*v == "first", "a refused PutIfAbsent changed the file to '", *v, "'");
  constexpr int kRacers = 8;
  for (int round = 0; round < 5; ++round) {
    const std::string name = "race/once" + std::to_string(round);
    std::vector<std::thread> threads;
    std::vector<absl::Status> results(kRacers);
    std::vector<std::string> payloads(kRacers);
    for (int i = 0; i < kRacers; ++i) {
      payloads[i] = "writer " + std::to_string(i) + std::string(1000, 'x');
      threads.emplace_back([&, i] { results[i] = s.PutIfAbsent(name, Bytes(payloads[i])); });
    }
    for (auto& t : threads) t.join();
    int winners = 0, winner = -1;
    for (int i = 0; i < kRacers; ++i) {
      if (results[i].ok()) {
        ++winners;
        winner = i;
      } else {
        CONFORM(absl::IsAlreadyExists(results[i]), "a racing PutIfAbsent that lost must fail with kAlreadyExists; ",
                "it returned ", results[i].ToString());
      }
    }
    CONFORM(winners == 1, winners, " of ", kRacers, " racing PutIfAbsent(", name, ") succeeded; exactly one must");
    auto got = s.GetAll(name);
    CKPT_RETURN_IF_ERROR(Did(got, StrCat("GetAll(", name, ")")));
    CONFORM(*got == payloads[winner], name, " does not hold the winning caller's bytes");
  }
  auto entries = s.List("race");
  CKPT_RETURN_IF_ERROR(Did(entries, "List(race)"));
  CONFORM(entries->size() == 5u, "5 racing rounds left ", entries->size(), " entries (temporary files behind?)");
  return absl::OkStatus();
}

absl::Status ListRemoveAndMissing(Storage& s) {
  CKPT_RETURN_IF_ERROR(WriteWhole(s, "d/b", "2"));
  CKPT_RETURN_IF_ERROR(WriteWhole(s, "d/a", "1"));
  CKPT_RETURN_IF_ERROR(WriteWhole(s, "d/sub/c", "3"));
  auto entries = s.List("d");
  CKPT_RETURN_IF_ERROR(Did(entries, "List(d)"));
  CONFORM(entries->size() == 3u, "List(d) of a, b and sub/c returned ", entries->size(), " entries, not 3");
  CONFORM((*entries)[0].name == "a" && (*entries)[1].name == "b" && (*entries)[2].name == "sub",
          "List(d) is not sorted by name, or names other entries: ", (*entries)[0].name, ", ", (*entries)[1].name, ", ",
          (*entries)[2].name);
  CONFORM((*entries)[2].is_dir && !(*entries)[0].is_dir, "List(d) must mark sub, and only sub, as a directory");
  CKPT_RETURN_IF_ERROR(Did(s.Remove("d/a"), "Remove(d/a)"));
  const absl::Status removed_again = s.Remove("d/a");
  CONFORM(absl::IsNotFound(removed_again), "Remove of a removed file must be kNotFound; it returned ",
          removed_again.ToString());
  CONFORM(absl::IsNotFound(s.OpenReadable("d/a").status()), "OpenReadable of a removed file must be kNotFound");
  CONFORM(absl::IsNotFound(s.FileSize("nope").status()), "FileSize of a missing file must be kNotFound");
  CONFORM(absl::IsNotFound(s.List("nodir").status()), "List of a missing directory must be kNotFound");
  CKPT_RETURN_IF_ERROR(Did(s.RemoveAll("d"), "RemoveAll(d)"));
  CONFORM(absl::IsNotFound(s.List("d").status()), "List of a directory RemoveAll removed must be kNotFound");
  CKPT_RETURN_IF_ERROR(Did(s.RemoveAll("d"), "RemoveAll of a missing directory (absent is fine)"));
  CONFORM(!s.RemoveAll("").ok(), "RemoveAll(\"\") must refuse to remove the whole root");
  return Did(s.SyncDir(""), "SyncDir(\"\")");
}

absl::Status ConcurrentWritersToOneFile(Storage& s) {
  auto w = s.OpenWritable("par.bin", WriteOptions{false});
  CKPT_RETURN_IF_ERROR(Did(w, "OpenWritable(par.bin)"));
  constexpr int kThreads = 4, kPerThread = 64, kBlock = 4096;
  std::vector<std::string> blocks(kThreads * kPerThread);
  for (size_t i = 0; i < blocks.size(); ++i) blocks[i].assign(kBlock, static_cast<char>('a' + i % 26));
  std::atomic<int> done{0};
  std::mutex mu;
  absl::Status first;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        const int b = t * kPerThread + i;
        (*w)->WriteAsync(static_cast<uint64_t>(b) * kBlock, Bytes(blocks[b]), [&](absl::Status st) {
          std::lock_guard<std::mutex> l(mu);
          if (first.ok()) first = st;
          ++done;
        });
      }
    });
  }
  for (auto& t : threads) t.join();
  CKPT_RETURN_IF_ERROR(Did((*w)->Finish(blocks.size() * kBlock), "Finish after writes from 4 threads"));
  CONFORM(done.load() == kThreads * kPerThread, done.load(), " of ", kThreads * kPerThread,
          " write callbacks ran before Finish returned");
  CKPT_RETURN_IF_ERROR(Did(first, "a WriteAsync from one of 4 threads"));
  auto all = s.GetAll("par.bin");
  CKPT_RETURN_IF_ERROR(Did(all, "GetAll(par.bin)"));
  CONFORM(all->size() == blocks.size() * kBlock, "writes from 4 threads left ", all->size(), " bytes");
  for (size_t b = 0; b < blocks.size(); ++b) {
    CONFORM(all->compare(b * kBlock, kBlock, blocks[b]) == 0, "block ", b,
            " of writes from 4 threads reads back wrong");
  }
  return absl::OkStatus();
}

absl::Status RejectsEscapingPaths(Storage& s) {
  CONFORM(!s.OpenWritable("../x").ok(), "OpenWritable(\"../x\") must be refused: it leaves the root");
  CONFORM(!s.OpenWritable("/etc/x").ok(), "OpenWritable(\"/etc/x\") must be refused: it leaves the root");
  return absl::OkStatus();
}

#undef CONFORM

struct Entry {
  const char* name;
  const char* what;
  absl::Status (*run)(Storage&);
};

constexpr Entry kCases[] = {
    {"WriteThenRangedRead", "bytes written read back whole, by range and asynchronously; a read past the end fails",
     WriteThenRangedRead},
    {"AlignedDirectWritesAndFinishTruncates",
     "aligned writes out of order all complete; Finish sets the length below Reserve",
     AlignedDirectWritesAndFinishTruncates},
    {"UnalignedWritesFollowTheAlignmentRule",
     "an unaligned write is written (alignment 1) or refused as unaligned, never written wrong",
     UnalignedWritesFollowTheAlignmentRule},
    {"PutAtomicReplacesWhole", "PutAtomic replaces a file whole and leaves no temporary file", PutAtomicReplacesWhole},
    {"PutIfAbsentCreatesOnceAcrossRacingCallers",
     "of 8 racing PutIfAbsent exactly one wins, the others get kAlreadyExists",
     PutIfAbsentCreatesOnceAcrossRacingCallers},
    {"ListRemoveAndMissing", "List is sorted and marks directories; missing files and directories are kNotFound",
     ListRemoveAndMissing},
    {"ConcurrentWritersToOneFile", "writes to one file from 4 threads all land", ConcurrentWritersToOneFile},
    {"RejectsEscapingPaths", "paths that leave the root are refused", RejectsEscapingPaths},
};

}  // namespace

std::vector<ConformanceCase> StorageConformanceCases() {
  std::vector<ConformanceCase> out;
  for (const Entry& e : kCases) out.push_back(ConformanceCase{e.name, e.what});
  return out;
}

absl::Status RunStorageConformanceCase(std::string_view name, const StorageOpener& open) {
  for (const Entry& e : kCases) {
    if (name != e.name) continue;
    auto storage = open();
    if (!storage.ok()) return storage.status();
    if (*storage == nullptr) return absl::InvalidArgumentError("the opener returned no storage");
    return e.run(**storage);
  }
  return absl::NotFoundError(StrCat("no storage conformance case is named '", name, "'"));
}

}  // namespace ckpt
