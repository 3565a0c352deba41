// One conformance suite that every backend passes: the built-ins, the
// decorators (tiered, faulty with no faults armed) and a plugin loaded
// through the C ABI.
#include "ckpt/storage.h"

#include <sys/mount.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <future>
#include <thread>

#include "ckpt/checkpointer.h"
#include "net/uri.h"
#include "storage/conformance.h"
#include "storage/roots/file/io_engine.h"
#include "storage/roots/mem/mem_storage.h"
#include "testutil/test_util.h"
#include "util/aligned_buffer.h"

#ifndef CKPT_TEST_PLUGIN_DIR
#error "CKPT_TEST_PLUGIN_DIR must name the directory of the built plugins"
#endif

namespace ckpt::testing {
namespace {

// Every case of the suite has its test (storage/conformance.h).
TEST(StorageConformanceSuite, EveryCaseIsRun) {
  std::vector<std::string> names;
  for (const ConformanceCase& c : StorageConformanceCases()) names.push_back(c.name);
  EXPECT_EQ(names, (std::vector<std::string>{"WriteThenRangedRead", "AlignedDirectWritesAndFinishTruncates",
                                             "UnalignedWritesFollowTheAlignmentRule", "PutAtomicReplacesWhole",
                                             "PutIfAbsentCreatesOnceAcrossRacingCallers", "ListRemoveAndMissing",
                                             "ConcurrentWritersToOneFile", "RejectsEscapingPaths"}));
  EXPECT_TRUE(absl::IsNotFound(RunStorageConformanceCase("NoSuchCase", [] { return OpenStorage("mem://x"); })));
}

INSTANTIATE_TEST_SUITE_P(Backends, StorageConformance,
                         ::testing::Values(BackendCase{"file_uring", "file", "?engine=io_uring"},
                                           BackendCase{"file_threads", "file", "?engine=threads"},
                                           BackendCase{"file_buffered", "file", "?direct=0"},
                                           BackendCase{"posix", "posix", ""}, BackendCase{"mem", "mem", ""},
                                           BackendCase{"mem_spare", "mem", "?spare=64M"},
                                           BackendCase{"tiered", "tiered", ""},
                                           BackendCase{"tiered_keep_local", "tiered", "&keep_local=1"},
                                           BackendCase{"faulty_file", "faulty", "?fault.latency=50us"},
                                           BackendCase{"faulty_mem", "faulty-mem", ""}, BackendCase{"hdf5", "hdf5", ""},
                                           BackendCase{"localfs_plugin", "localfs", ""}),
                         [](const ::testing::TestParamInfo<BackendCase>& info) { return info.param.name; });

TEST(StorageRegistry, UnknownSchemeListsKnownOnes) {
  auto s = OpenStorage("gs://bucket/x");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("file"), absl::string_view::npos) << s.status();
  EXPECT_NE(s.status().message().find("s3"), absl::string_view::npos) << s.status();
  EXPECT_NE(s.status().message().find("mem"), absl::string_view::npos) << s.status();
  auto schemes = RegisteredStorageSchemes();
  EXPECT_GE(schemes.size(), 3u);
}

// Every backend folder (libckpt/storage/backend.h) joins the registry by
// itself: its scheme is served, from "built-in", with no list naming it.
TEST(StorageRegistry, EveryBackendFolderRegistersItsScheme) {
  std::vector<std::string> folders;
  for (const char* kind : {"libckpt/storage/roots", "libckpt/storage/adapters", "libckpt/format_roots"}) {
    for (const auto& e : std::filesystem::directory_iterator(std::string(CKPT_SOURCE_DIR) + "/" + kind)) {
      if (e.is_directory()) folders.push_back(e.path().filename().string());
    }
  }
  ASSERT_GE(folders.size(), 8u);
  const std::vector<BackendInfo> backends = ListStorageBackends();
  for (const std::string& name : folders) {
    if (name == "plugin") continue;  // plugins register the schemes they serve when found
    const auto it =
        std::find_if(backends.begin(), backends.end(), [&](const BackendInfo& b) { return b.scheme == name; });
    ASSERT_NE(it, backends.end()) << "the backend folder " << name << " registered no scheme " << name;
    EXPECT_EQ(it->origin, "built-in") << name;
    EXPECT_FALSE(it->description.empty()) << name;
  }
}

// The scheme OpenStorage serves a URI or a plain path with: a safetensors
// model's directory or file is claimed by safetensors://, any other path is
// file://.
TEST(StorageRegistry, APlainPathIsClaimedByTheBackendThatServesIt) {
  TempDir dir;
  EXPECT_EQ(*StorageSchemeOf("s3://bucket/x"), "s3");
  EXPECT_EQ(*StorageSchemeOf("mem://x"), "mem");
  EXPECT_EQ(*StorageSchemeOf(dir.path()), "file");
  WriteFile(dir.Join("model.safetensors"), std::string("\x02\0\0\0\0\0\0\0{}", 10));
  EXPECT_EQ(*StorageSchemeOf(dir.path()), "safetensors");
  EXPECT_EQ(*StorageSchemeOf(dir.Join("model.safetensors")), "safetensors");
  // A ckpt root beside a model is a ckpt root.
  WriteFile(dir.Join("LATEST"), "1");
  EXPECT_EQ(*StorageSchemeOf(dir.path()), "file");
}

TEST(StorageRegistry, PlainPathIsFileAndParamsAreChecked) {
  TempDir dir;
  auto s = OpenStorage(dir.path() + "/plain");
  ASSERT_OK(s);
  EXPECT_EQ((*s)->caps().engine, "io_uring");
  EXPECT_FALSE(OpenStorage(dir.path() + "?qd=0").ok());
  EXPECT_FALSE(OpenStorage(dir.path() + "?engine=warp").ok());
  EXPECT_FALSE(OpenStorage(dir.path() + "?direct=maybe").ok());
  auto p = ParseUri("file:///a/b?x=1&y");
  ASSERT_OK(p);
  EXPECT_EQ(p->scheme, "file");
  EXPECT_EQ(p->location, "/a/b");
  EXPECT_EQ(p->params.at("x"), "1");
  EXPECT_TRUE(*p->Bool("y", false));
}

// A URI's location is percent-decoded ("file:///x/run%207" is the directory
// "run 7", UTF-8 names too), through every backend that opens files; a plain
// path is a path ("lit%41" stays "lit%41").
TEST(StorageRegistry, PercentEncodedLocationsAreDecodedPlainPathsAreNot) {
  TempDir dir;
  const std::string text = "payload";
  auto put = [&](const std::string& uri) {
    auto s = OpenStorage(uri);
    EXPECT_TRUE(s.ok()) << uri << ": " << s.status();
    if (!s.ok()) return;
    EXPECT_OK((*s)->PutAtomic(
        "f", absl::Span<const std::byte>(reinterpret_cast<const std::byte*>(text.data()), text.size())));
  };
  put("file://" + dir.path() + "/run%207%20%C3%A9t%C3%A9");
  EXPECT_TRUE(std::filesystem::exists(dir.path() + "/run 7 \xC3\xA9t\xC3\xA9/f"));
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/run%207%20%C3%A9t%C3%A9"));
  put(dir.path() + "/lit%41");
  EXPECT_TRUE(std::filesystem::exists(dir.path() + "/lit%41/f"));
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/litA"));
  // Wrappers hand the decoded path on: the same directory through hdf5://
  // and faulty://, and a path made into a URI comes back as itself.
  for (const std::string& uri : {"hdf5://" + dir.path() + "/run%207%20%C3%A9t%C3%A9",
                                 "faulty://file://" + dir.path() + "/run%207%20%C3%A9t%C3%A9?fault.latency=0"}) {
    auto s = OpenStorage(uri);
    ASSERT_OK(s);
    auto got = (*s)->GetAll("f");
    ASSERT_TRUE(got.ok()) << uri << ": " << got.status();
    EXPECT_EQ(*got, text) << uri;
  }
  for (const std::string path : {"/a b/100%/x?y#z", "/d/\xC3\xA9", "/plain"}) {
    auto p = ParseUri("file://" + EncodeUriPath(path));
    ASSERT_OK(p);
    EXPECT_EQ(p->Path(), path);
    EXPECT_TRUE(p->params.empty());
  }
  auto plain = ParseUri("/data/100%");
  ASSERT_OK(plain);
  EXPECT_EQ(plain->Path(), "/data/100%");
}

// ramfs refuses O_DIRECT (tmpfs accepts it since Linux 6.6): the file
// backend detects the refusal and writes buffered, with no alignment rule,
// instead of failing.
TEST(FileStorage, FallsBackToBufferedWhereODirectIsRefused) {
  TempDir dir;
  const std::string mnt = dir.Join("ramfs");
  std::filesystem::create_directories(mnt);
  if (mount("ramfs", mnt.c_str(), "ramfs", 0, nullptr) != 0) {
    GTEST_SKIP() << "cannot mount a ramfs here (" << std::strerror(errno) << "); this test needs root, as in CI";
  }
  {
    auto s = OpenStorage(mnt + "/root");
    ASSERT_OK(s);
    auto w = (*s)->OpenWritable("f.bin", WriteOptions{true});
    ASSERT_OK(w);
    EXPECT_EQ((*w)->alignment(), 1u);
    std::string data = "not aligned at all";
    absl::Status st = absl::UnknownError("not run");
    (*w)->WriteAsync(3, absl::Span<const std::byte>(reinterpret_cast<const std::byte*>(data.data()), data.size()),
                     [&](absl::Status x) { st = x; });
    ASSERT_OK((*w)->Finish(3 + data.size()));
    ASSERT_OK(st);
    auto all = (*s)->GetAll("f.bin");
    ASSERT_OK(all);
    EXPECT_EQ(all->substr(3), data);
    // A whole checkpoint round trip on it.
    CheckpointerOptions o;
    o.storage = *s;
    auto cp = Checkpointer::Open(o);
    ASSERT_OK(cp);
    const TensorSpec spec{"t", DType::kF32, {1000, 10}};
    std::vector<OwnedShard> in = {MakeShard(spec, Box::Whole(spec.shape), 3)};
    State state = StateOf(in);
    auto h = (*cp)->Save(1, state);
    ASSERT_OK(h);
    ASSERT_OK(h->Wait());
    std::vector<OwnedShard> out = {EmptyShard(spec, Box::Whole(spec.shape))};
    State target = StateOf(out);
    ASSERT_OK((*cp)->Load(target));
    EXPECT_EQ(Mismatches(out[0], 3), 0);
  }
  umount2(mnt.c_str(), MNT_DETACH);
}

// The file backend flushes behind its writes: each time flush_every more
// bytes have landed, an fdatasync goes to the engine, so the device's write
// cache drains while a save still produces and the final one has little
// left. flush_every=0 leaves it to Finish.
class FlushBehind : public ::testing::TestWithParam<std::string> {};

TEST_P(FlushBehind, WritesAreFlushedAsTheyLand) {
  TempDir dir;
  constexpr size_t kPiece = 256 << 10;
  constexpr int kPieces = 16;
  auto buf = AlignedBuffer::Allocate(kPiece * kPieces, true);
  ASSERT_OK(buf);
  for (size_t i = 0; i < buf->size(); ++i) buf->data()[i] = static_cast<std::byte>(i * 7 + i / 4096);
  for (const std::string every : {"256K", "0"}) {
    auto s = OpenStorage(dir.path() + "/r" + every + "?engine=" + GetParam() + "&flush_every=" + every);
    ASSERT_OK(s);
    auto w = (*s)->OpenWritable("f.bin", WriteOptions{true});
    ASSERT_OK(w);
    const uint64_t before = SyncRequestsCompleted();
    for (int i = 0; i < kPieces; ++i) {
      std::promise<absl::Status> done;
      (*w)->WriteAsync(i * kPiece, absl::Span<const std::byte>(buf->data() + i * kPiece, kPiece),
                       [&](absl::Status x) { done.set_value(x); });
      ASSERT_OK(done.get_future().get());
    }
    ASSERT_OK((*w)->Finish(kPiece * kPieces));
    const uint64_t flushes = SyncRequestsCompleted() - before;
    if (every == "0") {
      EXPECT_EQ(flushes, 0u) << "flushed with flush_every=0";
    } else {
      // One flush at a time: a write that finds one still running skips it,
      // so a slow first flush (ThreadSanitizer, a loaded host) can cover
      // every later write; at least it was sent.
      EXPECT_GE(flushes, 1u) << "16 writes of 256 KiB, one flush every 256 KiB landed";
      EXPECT_LE(flushes, 15u);
    }
    auto all = (*s)->GetAll("f.bin");
    ASSERT_OK(all);
    ASSERT_EQ(all->size(), buf->size());
    EXPECT_EQ(std::memcmp(all->data(), buf->data(), buf->size()), 0);
  }
  EXPECT_FALSE(OpenStorage(dir.path() + "?flush_every=-1").ok());
  EXPECT_FALSE(OpenStorage(dir.path() + "?flush_every=lots").ok());
}

// A failed flush is the request's error, naming the file: the kernel tells
// one fdatasync of a lost write, so the file backend keeps it as the file's
// error for Finish.
TEST_P(FlushBehind, AFailedSyncNamesItsFile) {
  std::unique_ptr<IoEngine> engine;
  if (GetParam() == "io_uring") {
    auto e = CreateUringEngine(8);
    ASSERT_OK(e);
    engine = std::move(*e);
  } else {
    engine = CreateThreadEngine(2, 8);
  }
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  auto req = std::make_unique<IoRequest>();
  req->kind = IoRequest::Kind::kSync;
  req->fd = fds[1];  // fdatasync of a pipe: EINVAL
  req->path = std::make_shared<const std::string>("/some/pipe");
  std::promise<absl::Status> done;
  req->callback = [&](absl::Status x) { done.set_value(x); };
  const uint64_t before = SyncRequestsCompleted();
  engine->Submit(std::move(req));
  absl::Status st = done.get_future().get();
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("fdatasync of /some/pipe"), absl::string_view::npos) << st;
  EXPECT_EQ(SyncRequestsCompleted() - before, 1u);
  close(fds[0]);
  close(fds[1]);
}

// The file backend keeps a failed flush as the file's error: a file that is
// /dev/null takes every write, but refuses fdatasync (EINVAL), and Drain
// reports that, naming the file; with flush_every=0 nothing is flushed
// before Finish and Drain is clean.
TEST_P(FlushBehind, AFailedFlushIsTheFilesError) {
  TempDir dir;
  constexpr size_t kPiece = 64 << 10;
  auto buf = AlignedBuffer::Allocate(kPiece, true);
  ASSERT_OK(buf);
  for (const std::string every : {"64K", "0"}) {
    const std::string root = dir.path() + "/r" + every;
    std::filesystem::create_directories(root);
    std::filesystem::create_symlink("/dev/null", root + "/f.bin");
    auto s = OpenStorage(root + "?engine=" + GetParam() + "&flush_every=" + every);
    ASSERT_OK(s);
    auto w = (*s)->OpenWritable("f.bin", WriteOptions{false});
    ASSERT_OK(w);
    for (int i = 0; i < 8; ++i) {
      std::promise<absl::Status> done;
      (*w)->WriteAsync(i * kPiece, absl::Span<const std::byte>(buf->data(), kPiece),
                       [&](absl::Status x) { done.set_value(x); });
      const absl::Status written = done.get_future().get();
      ASSERT_TRUE(written.ok()) << "a write to /dev/null: " << written;
    }
    absl::Status drained = (*w)->Drain();
    if (every == "0") {
      EXPECT_OK(drained);
    } else {
      EXPECT_FALSE(drained.ok()) << "the failed flush was not kept";
      EXPECT_NE(drained.message().find("fdatasync of " + root + "/f.bin"), absl::string_view::npos) << drained;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Engines, FlushBehind, ::testing::Values("io_uring", "threads"));

TEST(MemStorage, NamedStoresAreShared) {
  auto a = OpenStorage("mem://shared-name");
  auto b = OpenStorage("mem://shared-name");
  ASSERT_OK(a);
  ASSERT_OK(b);
  std::string v = "hello";
  ASSERT_OK((*a)->PutAtomic("k", absl::Span<const std::byte>(reinterpret_cast<const std::byte*>(v.data()), v.size())));
  auto got = (*b)->GetAll("k");
  ASSERT_OK(got);
  EXPECT_EQ(*got, v);
}

}  // namespace
}  // namespace ckpt::testing
